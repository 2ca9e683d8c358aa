"""``--gc-stats``: how much of the server's CPU the cyclic garbage collector takes, per window.

A profile showed ``gc_collect_main`` as the largest single cost of a page view while page
contexts wait for their stream (see RESULTS.md). To measure it without a sampler, the server is
started with a short prelude that times every collection with ``gc.callbacks`` (thread CPU time,
and the longest wall-clock pause: the loop serves nothing meanwhile) and prints the running
totals to its log on SIGUSR1; a window asks at its start and end.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

__all__ = ["PRELUDE", "snapshot"]

_TAG = "BENCH_GC "

PRELUDE = (
    "import gc as _gc, json as _json, signal as _signal, sys as _sys, time as _time\n"
    "_gcn = [0, 0, 0]; _gcs = [0.0, 0.0, 0.0]; _gcm = [0.0, 0.0, 0.0]; _gct = [0.0, 0.0]\n"
    "def _gccb(phase, info):\n"
    "    if phase == 'start':\n"
    "        _gct[0] = _time.thread_time(); _gct[1] = _time.perf_counter()\n"
    "    else:\n"
    "        g = info['generation']; _gcn[g] += 1; _gcs[g] += _time.thread_time() - _gct[0]\n"
    "        _gcm[g] = max(_gcm[g], _time.perf_counter() - _gct[1])\n"
    "_gc.callbacks.append(_gccb)\n"
    "def _gcdump(*_):\n"
    f"    print({_TAG!r} + _json.dumps({{'n': _gcn, 's': _gcs, 'max': _gcm}}),"
    " file=_sys.stderr, flush=True)\n"
    "_signal.signal(_signal.SIGUSR1, _gcdump)\n"
)


def _lines(log: Path) -> list[str]:
    return [line for line in log.read_text(errors="replace").splitlines() if line.startswith(_TAG)]


def snapshot(pid: int, log: Path, timeout: float = 5.0) -> dict[str, Any] | None:
    """Collections and CPU seconds per generation so far, or None if the server did not answer."""
    before = len(_lines(log))
    os.kill(pid, signal.SIGUSR1)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        lines = _lines(log)
        if len(lines) > before:
            value: dict[str, Any] = json.loads(lines[-1][len(_TAG) :])
            return value
        time.sleep(0.002)
    return None


def delta(start: dict[str, Any] | None, end: dict[str, Any] | None) -> dict[str, Any] | None:
    """Collections and seconds per generation between two snapshots."""
    if start is None or end is None:
        return None
    return {
        "collections": [b - a for a, b in zip(start["n"], end["n"], strict=True)],
        "seconds": [b - a for a, b in zip(start["s"], end["s"], strict=True)],
        "longest_pause_so_far_s": end["max"],
    }
