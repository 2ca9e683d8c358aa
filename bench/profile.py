"""Where the server's time goes: py-spy sampling of the server process, summarised by function.

``--profile`` starts ``py-spy record`` (pinned to the harness core, non-blocking so the server is
never paused) on the server right after its start gate and stops when the server exits. The raw
output is collapsed stacks, one ``frame;frame;… count`` per line; :func:`summarise` turns it into
self and inclusive shares per function, which is what a report needs. ``python -m bench profile
FILE`` prints the same for a saved file.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections import Counter
from pathlib import Path

__all__ = ["start_py_spy", "summarise"]

_LINE = re.compile(r":\d+\)$")
#: Stacks of threads parked on a lock (an idle executor thread): py-spy counts them as active
#: with --native, though they use no CPU.
_PARKED = ("PyThread_acquire_lock_timed", "_queue_SimpleQueue_get")


def start_py_spy(pid: int, output: Path, rate: int = 200, native: bool = False) -> subprocess.Popen[bytes] | None:
    """Start py-spy on ``pid``; None (with a note) when py-spy is not installed."""
    exe = shutil.which("py-spy") or str(Path(__import__("sys").executable).with_name("py-spy"))
    if not Path(exe).exists():
        print("# --profile: py-spy not found (pip install py-spy); running without a profile")
        return None
    command = [
        "taskset",
        "-c",
        "0",
        exe,
        "record",
        "--pid",
        str(pid),
        "--format",
        "raw",
        "--output",
        str(output),
        "--rate",
        str(rate),
        "--subprocesses",  # `pyvia run` supervises: the worker that serves is its child
    ]
    # C frames need the target paused while its stack is read (py-spy refuses --native with
    # --nonblocking), which slows the server: with --native read the shares, not the µs.
    command.append("--native" if native else "--nonblocking")
    return subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _frame(raw: str) -> str:
    """``handle (pyvia/app.py:295)`` → ``handle (pyvia/app.py)``, trimming site-packages paths."""
    name = _LINE.sub(")", raw.strip())
    for marker in ("site-packages/", "/src/", "/lib/python3"):
        head, sep, tail = name.partition(marker)
        if sep:
            name = head.split("(")[0] + "(" + tail if "(" in head else name
    return name


def summarise(path: Path, top: int = 25) -> str:
    """Self and inclusive sample shares per function in a py-spy collapsed-stack file."""
    self_counts: Counter[str] = Counter()
    incl_counts: Counter[str] = Counter()
    total = 0
    for line in path.read_text(errors="replace").splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        if any(marker in stack for marker in _PARKED):
            continue
        frames = [_frame(f) for f in stack.split(";") if f]
        if not frames:
            continue
        total += count
        self_counts[frames[-1]] += count
        for name in set(frames):
            incl_counts[name] += count
    if not total:
        return f"{path}: no samples"
    out = [f"{path}: {total:,} samples (non-idle; threads parked on a lock left out)", f"  top {top} by self time:"]
    out += [f"    {n / total:6.1%}  {name}" for name, n in self_counts.most_common(top)]
    out.append(f"  top {top} by inclusive time:")
    out += [f"    {n / total:6.1%}  {name}" for name, n in incl_counts.most_common(top)]
    return "\n".join(out)
