"""The operating system's limits the native server meets at start: open files and the listen queue.

Each worker raises its soft ``RLIMIT_NOFILE`` to the hard limit (every connection is a file, and
the connection caps are derived from it), and checks ``net.core.somaxconn``, which silently
shortens the listen backlog asked for. When a limit caps what the configuration asks for, the
server says so in one WARNING line at start, with the fix. docs/deployment.md ("Kernel and file
limits") lists them, with the ephemeral ports a load generator on the same machine needs.
"""

from __future__ import annotations

import logging
import resource as _resource
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

__all__ = ["FEW_FILES", "OsLimits", "limit_warnings", "raise_open_files", "read_sysctl"]

logger = logging.getLogger("pyvia.server")

#: Where Linux publishes the cap on the listen backlog and the per-process cap on open files.
SOMAXCONN = Path("/proc/sys/net/core/somaxconn")
NR_OPEN = Path("/proc/sys/fs/nr_open")
#: An open-file limit under this (the default soft limit of many systems is 1,024) holds a
#: derived connection cap under ~3,700 tabs: worth a line at start.
FEW_FILES = 4096
#: The hard limit taken when the system reports no limit at all (``RLIM_INFINITY``) and no ``nr_open``.
_NO_LIMIT_FALLBACK = 1 << 20


class _Resource(Protocol):
    """What :func:`raise_open_files` needs of the ``resource`` module (a stand-in in tests)."""

    RLIMIT_NOFILE: int
    RLIM_INFINITY: int

    def getrlimit(self, which: int, /) -> tuple[int, int]: ...

    def setrlimit(self, which: int, limits: tuple[int, int], /) -> None: ...


@dataclass(frozen=True, slots=True)
class OsLimits:
    """The open-file limits before and after the start, and the kernel's cap on the listen backlog."""

    fd_soft_before: int
    fd_soft: int
    fd_hard: int
    somaxconn: int | None


def read_sysctl(path: Path) -> int | None:
    """An integer sysctl from /proc, or None where there is none (not Linux, a sandbox)."""
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def raise_open_files(
    resource: _Resource = _resource, nr_open: Callable[[], int | None] = lambda: read_sysctl(NR_OPEN)
) -> tuple[int, int, int]:
    """Raise the soft open-file limit to the hard one; ``(soft before, soft now, hard)``.

    An unlimited hard limit is taken as ``fs.nr_open`` (what the kernel allows a process), since
    setting the soft limit to infinity is refused. A refusal leaves the limit as it was.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard
    if hard == resource.RLIM_INFINITY or hard < 0:
        target = nr_open() or _NO_LIMIT_FALLBACK
    if soft != resource.RLIM_INFINITY and 0 <= soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError) as exc:
            logger.debug("could not raise the open-file limit from %d to %d: %s", soft, target, exc)
            return soft, soft, hard
        return soft, target, hard
    return soft, soft, hard


def limit_warnings(
    limits: OsLimits, *, backlog: int, max_connections: int | None, effective_connections: int
) -> list[str]:
    """What caps the configured capacity, each as a sentence with its fix (empty when nothing does).

    ``max_connections`` is the configured cap (None: derived from the open-file limit), and
    ``effective_connections`` the cap the server will use.
    """
    found = []
    if limits.somaxconn is not None and limits.somaxconn < backlog:
        found.append(
            f"the listen backlog of {backlog} is cut to net.core.somaxconn={limits.somaxconn} (bursts of "
            f"new connections past it are dropped; raise it with sysctl -w net.core.somaxconn={backlog})"
        )
    if max_connections is not None and effective_connections < max_connections:
        found.append(
            f"max_connections={max_connections} is cut to {effective_connections} by the open-file limit "
            f"{limits.fd_soft} (raise the hard limit: ulimit -Hn, LimitNOFILE= in a systemd unit)"
        )
    if max_connections is None and limits.fd_soft < FEW_FILES:
        found.append(
            f"the open-file limit is {limits.fd_soft} (hard {limits.fd_hard}), so at most "
            f"{effective_connections} connections (tabs) are served; raise the hard limit (ulimit -Hn, "
            "LimitNOFILE= in a systemd unit)"
        )
    return found
