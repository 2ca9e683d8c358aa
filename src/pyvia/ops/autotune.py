"""Derive the runtime profile from the container's limits, and say so in one log line.

Rules this module keeps (``ephpm-lessons.md`` §2, lesson 1):

1. Limits come from the cgroup the process is in: v2 (``cpu.max``, ``memory.max``) when those
   files exist, else v1 (``cpu.cfs_quota_us`` / ``cpu.cfs_period_us``,
   ``memory.limit_in_bytes``), else the host (``os.cpu_count()``, ``/proc/meminfo``). The own
   cgroup is found through ``/proc/self/cgroup`` and the tightest limit up the hierarchy wins,
   so a systemd ``CPUQuota=``/``MemoryMax=`` counts as well as a container's.
2. Every derived value can be pinned by the operator (:meth:`pyvia.ops.settings.Settings.autotune_pins`);
   a pinned value is used as given and marked ``*`` in :meth:`Profile.log_line`.
3. Reading is separate from deriving: :func:`read_limits` takes the paths (tests use fake trees),
   :func:`derive_profile` is a pure function of the limits and the pins.
"""

from __future__ import annotations

import gc
import math
import os
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyvia.ops.settings import Settings

__all__ = [
    "BASELINE",
    "BUSY_SHARE",
    "BUSY_TAB",
    "IDLE_TAB",
    "MIN_WORKER_BUDGET",
    "RESERVE",
    "SLOW_SHARE",
    "UNSET",
    "Limits",
    "Profile",
    "apply_gc_policy",
    "derive_profile",
    "parse_cpu_max",
    "parse_memory_max",
    "parse_v1_cpu",
    "parse_v1_memory",
    "profile_for",
    "read_limits",
]

MiB = 1 << 20
#: Left to the kernel and the rest of the machine before the workers' split (ePHPm's 64 MB).
RESERVE = 64 * MiB
#: A worker is never budgeted less than this (ePHPm's per-request floor); it also caps how many
#: workers "auto" starts in a small container.
MIN_WORKER_BUDGET = 128 * MiB
#: RSS of a started worker before any tab, as measured for examples.counter (bench/RESULTS.md,
#: "Figures behind the code's defaults"), rounded up for app code.
BASELINE = 48 * MiB
#: One idle tab: context, signals, stream and socket state as measured for the counter (same
#: section of bench/RESULTS.md), plus the kernel socket memory outside RSS (machine-limits.md
#: "Memory budget per open tab"); rounded up.
IDLE_TAB = 10 * 1024
#: One tab busy streaming compressed frames: encoder hash tables and window for small patches
#: (zstd-3 / brotli-4 at a small window, machine-limits.md §3b) and its render buffers.
BUSY_TAB = 200 * 1024
#: The share of tabs assumed busy at once, and the share assumed to sit at their unsent-bytes
#: cap (``max_stream_buffer``) at once. A slow tab past the cap for ``slow_tab_timeout`` is
#: disconnected, and at four times it at once (pyvia.stream), so the share stays small.
BUSY_SHARE = 0.10
SLOW_SHARE = 0.01
#: Share of a worker's budget for stream encoders: the same quarter as pyvia.memory.default_budget.
ENCODER_SHARE = 0.25
_MIN_ENCODER_BUDGET = 16 * MiB  # pyvia.memory.default_budget's floor
_UNKNOWN_MEMORY = 512 * MiB  # assumed when nothing can be read (not Linux); logged as "unknown"
_MAX_AUTO_WORKERS = 32  # ePHPm's host-parallelism clamp
_V1_UNLIMITED = 1 << 62  # v1 reports "no limit" as a page-aligned 2**63 - 1
#: "Not given" where None means "Python's defaults" (``gc_thresholds``).
UNSET: Any = object()


def _default_gc_thresholds() -> tuple[int, int, int] | None:
    from pyvia.config import Config

    return Config().gc_thresholds


# --- parsing ---------------------------------------------------------------------------------------


def parse_cpu_max(text: str) -> float | None:
    """CPUs from a v2 ``cpu.max`` (``"25000 100000"`` → 0.25); None for ``max`` or nonsense."""
    words = text.split()
    if len(words) < 1 or words[0].lower() == "max":
        return None
    try:
        quota = int(words[0])
        period = int(words[1]) if len(words) > 1 else 100_000
    except ValueError:
        return None
    if quota <= 0 or period <= 0:
        return None
    return quota / period


def parse_v1_cpu(quota_text: str, period_text: str) -> float | None:
    """CPUs from v1 ``cpu.cfs_quota_us`` and ``cpu.cfs_period_us``; None when -1 (unlimited)."""
    try:
        quota, period = int(quota_text.strip()), int(period_text.strip())
    except ValueError:
        return None
    if quota <= 0 or period <= 0:
        return None
    return quota / period


def parse_memory_max(text: str) -> int | None:
    """Bytes from a v2 ``memory.max``; None for ``max``, 0 or nonsense."""
    text = text.strip()
    if text.lower() == "max":
        return None
    try:
        value = int(text)
    except ValueError:
        return None
    return value if value > 0 else None


def parse_v1_memory(text: str) -> int | None:
    """Bytes from v1 ``memory.limit_in_bytes``; None for the "unlimited" sentinel (>= 2**62) or 0."""
    try:
        value = int(text.strip())
    except ValueError:
        return None
    return value if 0 < value < _V1_UNLIMITED else None


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError):
        return None


def _meminfo_total(proc: Path) -> int | None:
    text = _read(proc / "meminfo")
    if text is None:
        return None
    for line in text.splitlines():
        if line.startswith("MemTotal:"):
            try:
                return int(line.split()[1]) * 1024
            except (IndexError, ValueError):
                return None
    return None


def _own_paths(proc: Path) -> tuple[str, dict[str, str]]:
    """The process's v2 cgroup path and its v1 path per controller, from ``/proc/self/cgroup``."""
    v2 = ""
    v1: dict[str, str] = {}
    text = _read(proc / "self" / "cgroup") or ""
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _hid, controllers, path = parts
        if controllers == "":
            v2 = path
        for controller in controllers.split(","):
            if controller:
                v1[controller] = path
    return v2, v1


def _up(base: Path, own: str) -> list[Path]:
    """``base/own`` and each parent folder up to ``base`` itself, deepest first."""
    out = []
    parts = [p for p in own.strip("/").split("/") if p and p != ".."]
    for depth in range(len(parts), -1, -1):
        out.append(base.joinpath(*parts[:depth]))
    return out


def _v1_dirs(root: Path, controller: str, own: str) -> list[Path]:
    for mount in (controller, f"{controller},cpuacct", f"cpuacct,{controller}"):
        if (root / mount).is_dir():
            return _up(root / mount, own)
    return []


# --- limits ------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Limits:
    """What this process may use, and where each figure came from.

    ``cpus`` is the quota in CPUs when there is one, else the host's count; ``cpu_source`` and
    ``memory_source`` are ``"cgroup v2"``, ``"cgroup v1"``, ``"host"`` or (memory only) ``"unknown"``.
    """

    cpus: float
    cpu_source: str
    memory: int | None
    memory_source: str
    host_cpus: int
    host_memory: int | None

    @property
    def has_cpu_quota(self) -> bool:
        return self.cpu_source.startswith("cgroup")


def read_limits(
    cgroup_root: str | os.PathLike[str] = "/sys/fs/cgroup",
    proc: str | os.PathLike[str] = "/proc",
    cpu_count: Callable[[], int | None] = os.cpu_count,
) -> Limits:
    """Read the CPU quota and memory limit of this process's cgroup, falling back to the host.

    v1 is consulted for a resource only when no v2 file for it exists. Never raises: unreadable
    files count as absent.
    """
    root, proc_dir = Path(cgroup_root), Path(proc)
    v2_own, v1_own = _own_paths(proc_dir)
    host_cpus = max(1, cpu_count() or 1)
    host_memory = _meminfo_total(proc_dir)

    cpus: float | None = None
    cpu_source = "host"
    v2_cpu = [t for d in _up(root, v2_own) if (t := _read(d / "cpu.max")) is not None]
    if v2_cpu:
        quotas = [q for t in v2_cpu if (q := parse_cpu_max(t)) is not None]
        if quotas:
            cpus, cpu_source = min(quotas), "cgroup v2"
    else:
        quotas = []
        for d in _v1_dirs(root, "cpu", v1_own.get("cpu", "")):
            quota, period = _read(d / "cpu.cfs_quota_us"), _read(d / "cpu.cfs_period_us")
            if quota is not None and period is not None and (q := parse_v1_cpu(quota, period)) is not None:
                quotas.append(q)
        if quotas:
            cpus, cpu_source = min(quotas), "cgroup v1"

    memory: int | None = None
    memory_source = "host" if host_memory is not None else "unknown"
    v2_mem = [t for d in _up(root, v2_own) if (t := _read(d / "memory.max")) is not None]
    if v2_mem:
        found = [m for t in v2_mem if (m := parse_memory_max(t)) is not None]
        label = "cgroup v2"
    else:
        found = []
        for d in _v1_dirs(root, "memory", v1_own.get("memory", "")):
            text = _read(d / "memory.limit_in_bytes")
            if text is not None and (m := parse_v1_memory(text)) is not None:
                found.append(m)
        label = "cgroup v1"
    if found and (host_memory is None or min(found) < host_memory):
        memory, memory_source = min(found), label
    else:
        memory = host_memory
    return Limits(
        cpus=cpus if cpus is not None else float(host_cpus),
        cpu_source=cpu_source,
        memory=memory,
        memory_source=memory_source,
        host_cpus=host_cpus,
        host_memory=host_memory,
    )


# --- the profile ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Profile:
    """The derived runtime profile of one deployment; budgets are per worker process.

    ``pinned`` names the values the operator set (used as given); ``sources`` says for each
    value how it was obtained.
    """

    limits: Limits
    workers: int
    memory_budget: int
    encoder_budget: int
    max_tabs: int
    gc_thresholds: tuple[int, int, int] | None
    max_stream_buffer: int
    pinned: frozenset[str] = frozenset()
    sources: dict[str, str] = field(default_factory=dict)

    @property
    def gc_freeze(self) -> bool:
        """Whether start-up objects are frozen (the core does it with the thresholds, in ``App.startup``)."""
        return self.gc_thresholds is not None

    def as_dict(self) -> dict[str, Any]:
        return {
            "cpus": self.limits.cpus,
            "cpu_source": self.limits.cpu_source,
            "memory": self.limits.memory,
            "memory_source": self.limits.memory_source,
            "workers": self.workers,
            "memory_budget": self.memory_budget,
            "encoder_budget": self.encoder_budget,
            "max_tabs": self.max_tabs,
            "gc_thresholds": self.gc_thresholds,
            "pinned": sorted(self.pinned),
        }

    def log_line(self) -> str:
        """One line with the limits and every derived value; pinned values end with ``*``.

        ``autotune: cpu 2.00 (cgroup v2), memory 1024 MiB (cgroup v2); workers=2 [cgroup quota],
        memory_budget=480MiB, encoder_budget=120MiB, max_tabs=10993, gc=freeze+50000/5/100 (* = pinned)``
        """
        lim = self.limits
        memory = f"{lim.memory // MiB} MiB ({lim.memory_source})" if lim.memory is not None else "unknown"

        def mark(name: str, text: str) -> str:
            return text + ("*" if name in self.pinned else "")

        workers = mark("workers", str(self.workers)) + f" [{self.sources.get('workers', '')}]"
        return (
            f"autotune: cpu {lim.cpus:.2f} ({lim.cpu_source}), memory {memory}; workers={workers}, "
            f"memory_budget={mark('memory_budget', _mib(self.memory_budget))}, "
            f"encoder_budget={mark('encoder_budget', _mib(self.encoder_budget))}, "
            f"max_tabs={mark('max_tabs', str(self.max_tabs))}, "
            f"gc={mark('gc_thresholds', _gc_text(self.gc_thresholds))} (* = pinned)"
        )


def _gc_text(thresholds: tuple[int, int, int] | None) -> str:
    return "python-default" if thresholds is None else "freeze+" + "/".join(str(t) for t in thresholds)


def _mib(n: int) -> str:
    return f"{n // MiB}MiB" if n % MiB == 0 or n >= 16 * MiB else f"{n // 1024}KiB"


def tab_cost(max_stream_buffer: int) -> int:
    """Bytes to budget per tab: idle state, plus the busy and the slow shares (see the constants)."""
    return int(IDLE_TAB + BUSY_SHARE * BUSY_TAB + SLOW_SHARE * max_stream_buffer)


def derive_profile(
    limits: Limits,
    *,
    workers: int | None = None,
    memory_budget: int | None = None,
    encoder_budget: int | None = None,
    max_tabs: int | None = None,
    gc_thresholds: tuple[int, int, int] | None = UNSET,
    max_stream_buffer: int = 1 << 20,
    defaulted: Collection[str] = (),
) -> Profile:
    """Derive every value from ``limits``, except those given (pinned), which are used as given.

    ``defaulted`` names given values that are configuration defaults rather than the
    operator's choice: used as given, but not marked pinned (``server.workers`` is 1 unless
    set to ``"auto"``).

    * workers: ceil(CPU quota), else the host's CPUs within [1, 32]; never more than the memory
      holds at :data:`MIN_WORKER_BUDGET` each;
    * memory_budget: (memory - :data:`RESERVE`) / workers, at least :data:`MIN_WORKER_BUDGET`;
    * encoder_budget: a quarter of the worker's budget, at least 16 MiB;
    * max_tabs: (memory_budget - :data:`BASELINE`) / :func:`tab_cost`;
    * gc_thresholds: the App's default (:attr:`pyvia.config.Config.gc_thresholds`): freeze what
      start-up made, then collect young objects less often (None: Python's defaults, no freeze).
    """
    pinned: set[str] = set()
    sources: dict[str, str] = {}
    memory = limits.memory if limits.memory is not None else _UNKNOWN_MEMORY
    if workers is not None:
        if workers < 1:
            raise ValueError(f"workers={workers}: must be >= 1")
        sources["workers"] = "default" if "workers" in defaulted else "pinned"
    else:
        if limits.has_cpu_quota:
            workers, sources["workers"] = max(1, math.ceil(limits.cpus - 1e-9)), "cgroup quota"
        else:
            workers, sources["workers"] = min(max(1, limits.host_cpus), _MAX_AUTO_WORKERS), "host cpus"
        by_memory = max(1, (memory - RESERVE) // MIN_WORKER_BUDGET)
        if workers > by_memory:
            workers, sources["workers"] = by_memory, "memory"
    if memory_budget is not None:
        pinned.add("memory_budget")
    else:
        memory_budget = max(MIN_WORKER_BUDGET, (memory - RESERVE) // workers)
    if encoder_budget is not None:
        pinned.add("encoder_budget")
    else:
        encoder_budget = max(_MIN_ENCODER_BUDGET, int(memory_budget * ENCODER_SHARE))
    if max_tabs is not None:
        pinned.add("max_tabs")
    else:
        max_tabs = max(1, (memory_budget - BASELINE) // tab_cost(max_stream_buffer))
    if gc_thresholds is not UNSET:
        pinned.add("gc_thresholds")
    else:
        gc_thresholds = _default_gc_thresholds()
    if workers is not None and sources["workers"] == "pinned":
        pinned.add("workers")
    pinned -= set(defaulted)
    return Profile(
        limits=limits,
        workers=workers,
        memory_budget=memory_budget,
        encoder_budget=encoder_budget,
        max_tabs=max_tabs,
        gc_thresholds=gc_thresholds,
        max_stream_buffer=max_stream_buffer,
        pinned=frozenset(pinned),
        sources=sources,
    )


def profile_for(settings: Settings, limits: Limits | None = None, *, workers: int | None = None) -> Profile:
    """The profile for ``settings`` (its pins applied) on ``limits`` (read now when None).

    ``workers`` is the count the server really starts when it was chosen elsewhere than the
    settings (``pyvia run --workers 2``): it pins the profile, so the start-up line says what runs.
    """
    pins = settings.autotune_pins()
    if workers is not None and workers != pins.get("workers"):
        pins["workers"] = workers
        pins["defaulted"] = frozenset(pins["defaulted"]) - {"workers"}
    return derive_profile(limits if limits is not None else read_limits(), **pins)


def apply_gc_policy(profile: Profile) -> bool:
    """Freeze what exists now out of the cyclic collector's sight and set the thresholds.

    ``App.startup`` already does this in each worker (from ``Config.gc_thresholds``); call this
    where no App starts, such as a supervisor right before it forks workers, so the pages of
    start-up objects stay shared (no copy-on-write from the collector's bookkeeping). After a
    freeze, a full collection no longer walks start-up objects (``bench/gc_pauses.py``); objects
    made later, tabs included, are collected as usual. Returns whether it froze.
    """
    if profile.gc_thresholds is None:
        return False
    gc.collect()  # do not freeze garbage that is already unreachable
    gc.freeze()
    gc.set_threshold(*profile.gc_thresholds)
    return True
