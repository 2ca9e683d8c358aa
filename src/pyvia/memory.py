"""The process's memory as the operating system sees it: how much is left, and giving freed
memory back (glibc only; a no-op elsewhere).

How much is left (:func:`available_memory`, read from ``/proc`` and the cgroup) sets the default
cap on stream-encoder memory (:func:`default_budget`); the encoders themselves only keep the
account (:mod:`pyvia.compress`), so they do no I/O.

glibc keeps what a process frees for its next allocations, so the pages of what a burst built
stay in RSS after it is gone: dropped stream encoders (hundreds of KB each) and the contexts of a
crawler's page views (a few KB each, by the thousand). This module holds the two calls into the
allocator and when to make them; the tab registry's sweep says what was freed.
"""

from __future__ import annotations

import ctypes
import gc
import platform
from pathlib import Path
from typing import Any

__all__ = ["CONTEXTS_PER_TRIM", "MMAP_THRESHOLD", "FreedMemory", "available_memory", "default_budget"]

#: Allocations at least this big are mapped on their own (glibc ``M_MMAP_THRESHOLD``, its default
#: value): a zstd or brotli context (hundreds of KB in one block) is unmapped when freed.
MMAP_THRESHOLD = 128 * 1024
#: Destroyed contexts that are worth one trim (about as much memory as one dropped encoder's
#: worth of trims: a trim's cost grows with the heap, so a few contexts never pay for one).
CONTEXTS_PER_TRIM = 1024
_M_MMAP_THRESHOLD = -3  # glibc malloc.h


def available_memory(proc: str = "/proc", cgroup: str = "/sys/fs/cgroup") -> int | None:
    """Bytes this process could still use: the least of ``MemAvailable`` and the cgroup's
    headroom (v2 ``memory.max - memory.current`` or v1 ``limit_in_bytes - usage_in_bytes``).

    Returns None when none of them can be read.
    """
    found: list[int] = []
    try:
        for line in Path(proc, "meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                found.append(int(line.split()[1]) * 1024)
                break
    except (OSError, ValueError, IndexError):
        pass
    own = ""
    try:
        for line in Path(proc, "self", "cgroup").read_text().splitlines():
            _hid, controllers, path = line.split(":", 2)
            if controllers == "" or "memory" in controllers.split(","):
                own = own or path
    except (OSError, ValueError):
        pass
    candidates = []
    for base in {own.strip("/"), ""}:
        candidates.append((Path(cgroup, base, "memory.max"), Path(cgroup, base, "memory.current")))
        candidates.append(
            (
                Path(cgroup, "memory", base, "memory.limit_in_bytes"),
                Path(cgroup, "memory", base, "memory.usage_in_bytes"),
            )
        )
    for limit_path, usage_path in candidates:
        try:
            raw = limit_path.read_text().strip()
            if raw == "max":
                continue
            limit = int(raw)
            if limit >= 1 << 60:  # v1's "no limit"
                continue
            found.append(max(0, limit - int(usage_path.read_text().strip())))
        except (OSError, ValueError):
            continue
    return min(found) if found else None


def default_budget(fraction: float = 0.25, *, workers: int = 1, fallback: int = 512 << 20) -> int:
    """The default cap on stream-encoder memory for one process: ``fraction`` of
    :func:`available_memory`, shared by ``workers`` processes (``fallback`` when unknown).

    A quarter leaves the rest to contexts, sockets, renders and the kernel's socket buffers; how
    many streams that holds per coding is in ``bench/RESULTS.md``.
    """
    if not 0 < fraction <= 1:
        raise ValueError(f"fraction {fraction!r} must be in (0, 1]")
    free = available_memory()
    total = fallback if free is None else int(free * fraction)
    return max(16 << 20, total // max(1, workers))


def _glibc() -> Any:
    """The C library when it is glibc with ``mallopt`` and ``malloc_trim``; None otherwise."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return None
    try:
        libc = ctypes.CDLL(None)
        libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
        libc.malloc_trim.argtypes = [ctypes.c_size_t]
    except (OSError, AttributeError):
        return None
    return libc


class FreedMemory:
    """Hands freed heap pages back after something big went away.

    * :meth:`fix_mmap_threshold`, once per serving process: glibc maps blocks of 128 KB and more
      on their own and unmaps them when freed, but after the first such free it raises that
      threshold (up to 32 MB), so later encoder contexts come from the heap and stay resident.
      Setting the threshold explicitly turns that rise off.
    * :meth:`trim`, from the periodic sweep: ``malloc_trim(0)`` when the running count of what was
      freed moved since the last call, at most once per ``min_interval`` seconds (its cost grows
      with the heap; never per tab, never on the hot path).
    * :meth:`after_burst`, from the sweep too: once a burst of destroyed contexts is over, one full
      garbage collection, which empties the interpreter's free lists (tuples, lists, dicts and
      floats kept for reuse, by the thousand after a burst; their blocks keep whole arenas of the
      small-object allocator mapped), then a trim. Not during the burst: the collection walks
      every live object, a pause that grows with the open tabs (``bench/RESULTS.md``).
    """

    __slots__ = (
        "_burst_seen",
        "_libc",
        "_quiet_since",
        "_ready_at",
        "_seen",
        "collections",
        "min_interval",
        "quiet",
        "trims",
    )

    def __init__(self, *, enabled: bool = True, min_interval: float = 5.0, quiet: float = 10.0) -> None:
        self._libc = _glibc() if enabled else None
        self.min_interval = min_interval
        #: Seconds without another thousand destroyed contexts after which a burst is over.
        self.quiet = quiet
        self._seen = 0
        self._ready_at = 0.0
        self._burst_seen = 0
        self._quiet_since: float | None = None  # None: no burst to clean up after
        #: Trims made so far, and full collections after bursts.
        self.trims = 0
        self.collections = 0

    @property
    def is_active(self) -> bool:
        """Whether this process's allocator can be told anything (glibc)."""
        return self._libc is not None

    def fix_mmap_threshold(self, size: int = MMAP_THRESHOLD) -> bool:
        """Set glibc's mmap threshold to ``size`` for the whole process; returns whether it was set."""
        return self._libc is not None and self._libc.mallopt(_M_MMAP_THRESHOLD, size) == 1

    def trim(self, freed: int, now: float) -> bool:
        """Call ``malloc_trim(0)`` if ``freed`` (a running count of big frees: dropped encoders,
        thousands of destroyed contexts) moved since the last trim and ``min_interval`` seconds
        (of the caller's clock, ``now``) have passed; returns whether it ran."""
        if self._libc is None or freed == self._seen or now < self._ready_at:
            return False
        self._seen = freed
        self._ready_at = now + self.min_interval
        self._libc.malloc_trim(0)
        self.trims += 1
        return True

    def after_burst(self, contexts: int, now: float) -> bool:
        """``contexts``: a running count of thousands of destroyed contexts. Once it has not moved
        for ``quiet`` seconds after moving, collect and trim, once; returns whether that ran."""
        if self._libc is None:
            return False
        if contexts != self._burst_seen:
            self._burst_seen = contexts
            self._quiet_since = now
            return False
        if self._quiet_since is None or now - self._quiet_since < self.quiet:
            return False
        self._quiet_since = None
        gc.collect()
        self.collections += 1
        self._libc.malloc_trim(0)
        self.trims += 1
        return True
