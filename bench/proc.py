"""What the server costs, read from /proc: CPU time and resident memory of its process tree.

CPU is ``utime + stime`` from ``/proc/<pid>/stat`` (all threads of a process), in clock ticks of
``SC_CLK_TCK`` (10 ms here), summed over the server and its descendants, so a run of N seconds
at a full core has ~100·N ticks of resolution (machine-limits.md, "Method"). RSS is the ``Rss:``
line of ``/proc/<pid>/smaps_rollup``, also summed over the tree.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

__all__ = [
    "CLK_TCK",
    "affinity_of",
    "core_times",
    "cpu_seconds",
    "cpu_seconds_precise",
    "cpu_split",
    "rss_kb",
    "tree_pids",
    "usage",
]

CLK_TCK = os.sysconf("SC_CLK_TCK")
_PROC = Path("/proc")


def _stat_fields(pid: int) -> list[str]:
    """Fields of /proc/<pid>/stat after the ``(comm)`` field, which may itself hold spaces."""
    raw = (_PROC / str(pid) / "stat").read_text()
    return raw[raw.rindex(")") + 2 :].split()


def tree_pids(root: int) -> list[int]:
    """``root`` and its live descendants (no ``children`` file on this kernel: scan ppids)."""
    parents: dict[int, list[int]] = {}
    for entry in os.scandir(_PROC):
        if not entry.name.isdigit():
            continue
        try:
            ppid = int(_stat_fields(int(entry.name))[1])
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile
        parents.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(parents.get(pid, ()))
    return found


def usage(root: int) -> tuple[float, float, int]:
    """(user s, system s, minor page faults) used so far by ``root`` and its descendants.

    Minor faults are counted because a heap that keeps growing (page contexts waiting for
    their stream) pays one for every new page of memory, in system time.
    """
    user = system = faults = 0
    for pid in tree_pids(root):
        try:
            fields = _stat_fields(pid)
        except OSError:
            continue
        faults += int(fields[7])  # minflt, field 10 of stat
        user += int(fields[11])  # utime, field 14
        system += int(fields[12])  # stime, field 15
    return user / CLK_TCK, system / CLK_TCK, faults


def cpu_split(root: int) -> tuple[float, float]:
    """(user, system) CPU seconds used so far by ``root`` and its descendants."""
    user, system, _ = usage(root)
    return user, system


def cpu_seconds(root: int) -> float:
    """User + system CPU seconds used so far by ``root`` and its descendants."""
    user, system, _ = usage(root)
    return user + system


def cpu_seconds_precise(root: int) -> float:
    """The same total from each process's CPU-time clock (nanoseconds, not 10 ms ticks).

    Linux names the CPU clock of process ``pid`` ``(~pid << 3) | CPUCLOCK_SCHED`` and lets any
    process read it. Used next to the tick count where a window holds few ticks (opening 1,000
    tabs takes ~15 ticks, so ticks alone carry ±7%).
    """
    total = 0.0
    for pid in tree_pids(root):
        try:
            total += time.clock_gettime(((~pid) << 3) | 2)
        except OSError:
            continue
    return total


def rss_kb(root: int) -> int:
    """Resident set size in KiB of ``root`` and its descendants (``Rss:`` of smaps_rollup)."""
    total = 0
    for pid in tree_pids(root):
        try:
            text = (_PROC / str(pid) / "smaps_rollup").read_text()
        except OSError:
            continue
        for line in text.splitlines():
            if line.startswith("Rss:"):
                total += int(line.split()[1])
                break
    return total


def affinity_of(pid: int) -> str:
    """The ``Cpus_allowed_list`` of ``pid`` (a gate: the server must run on the core we gave it)."""
    for line in (_PROC / str(pid) / "status").read_text().splitlines():
        if line.startswith("Cpus_allowed_list:"):
            return line.split(":", 1)[1].strip()
    return "?"


def core_times(core: int) -> tuple[float, float]:
    """(busy, steal) seconds of one core since boot, from /proc/stat, whoever ran there.

    Busy minus the server's own CPU is what other processes took from the server's core: on a
    shared machine that is the noise a window's throughput and latency suffered.
    """
    prefix = f"cpu{core} "
    with open("/proc/stat") as f:
        for line in f:
            if line.startswith(prefix):
                user, nice, system, _idle, _iowait, irq, softirq, steal = (int(v) for v in line.split()[1:9])
                return (user + nice + system + irq + softirq) / CLK_TCK, steal / CLK_TCK
    return 0.0, 0.0
