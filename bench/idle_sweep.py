"""``python -m bench.idle_sweep``: CPU of the periodic sweep per second, with N idle connected tabs.

In-process, through the test client and its manual clock (no sockets, no other timers): N tabs of
``examples/counter.py`` are opened, the clock is moved past the connect timeouts and the first
keep-alives, then 60 s of app time are run (60 sweeps, 12 passes over open streams) and the CPU
time (``time.process_time``) is divided by 60; the least of three such minutes is printed. With
``--no-keep-alive`` the app runs with ``keep_alive=0``: what is left is the sweep's own work, as the
keep-alive comments themselves (and the test client parsing each) are not counted.

::

    python -m bench.idle_sweep -n 1000,10000                 # this checkout
    python -m bench.idle_sweep -n 1000,10000 --src OTHER/src # another checkout's pyvia
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

_CHILD = """
import sys, time
from pyvia.testing import TestClient
from examples.counter import app
n = int(sys.argv[1])
with TestClient(app) as client:
    tabs = [client.open("/") for _ in range(n)]
    client.clock.advance(40)
    runs = []
    for _ in range(3):
        t0 = time.process_time()
        client.clock.advance(60)
        runs.append((time.process_time() - t0) / 60 * 1e3)
    print(f"{n:>6} tabs: sweep CPU {min(runs):.3f} ms per second of app time "
          f"(3 minutes: {', '.join(f'{r:.3f}' for r in runs)})")
"""


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.idle_sweep", description=__doc__.split("\n")[0])
    parser.add_argument("-n", "--tabs", default="1000,10000", help="comma-separated tab counts (1000,10000)")
    parser.add_argument("--src", default=str(ROOT / "src"), help="the src/ directory whose pyvia is measured")
    parser.add_argument("--no-keep-alive", action="store_true", help="run the app with keep_alive=0")
    args = parser.parse_args()
    src = Path(args.src).resolve()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(src), str(src.parent)])}
    if args.no_keep_alive:
        env["PYVIA_APP__KEEP_ALIVE"] = "0"
    print(f"# pyvia from {src}; keep_alive {'0' if args.no_keep_alive else 'default'}", flush=True)
    for n in (int(x) for x in args.tabs.split(",") if x.strip()):
        subprocess.run([sys.executable, "-c", _CHILD, str(n)], env=env, cwd=src.parent, check=True)


if __name__ == "__main__":
    main()
