"""How long ``gc.collect()`` stops the world with 50,000 tabs alive, with and without ``gc.freeze()``.

Each tab-like object mimics what a pyvia Context holds: a dict of signals, a few closures (the
actions) that refer back to the tab, a list of scope names and a stream object pointing back at
the tab — reference cycles, as real tabs have. Start-up is mimicked by importing pyvia and
building an App with a page, which leaves the interpreter's long-lived objects behind.

Three cases, each in a fresh interpreter so they do not share a heap:

* ``none``    — no freeze: a full collection walks start-up objects and every tab;
* ``warmup``  — ``gc.freeze()`` after start-up, before the tabs are made (pyvia.ops.autotune's policy);
* ``all``     — ``gc.freeze()`` after the tabs are made too (the most freezing could ever save).

For each, ``--repeat`` full (generation 2) and young (generation 0) collections are timed with
``time.perf_counter`` and the medians printed, with the count of objects the collector tracks.

    python bench/gc_pauses.py [--tabs 50000] [--repeat 15] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

CASES = ("none", "warmup", "all")

_CHILD = r"""
import gc, json, statistics, sys, time
case, tabs, repeat = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])

import pyvia
from pyvia import App, Context

app = App(title="gc bench")

@app.page("/")
def page(c: Context) -> None:
    count = c.signal(0, "count")

    @c.action
    def inc() -> None:
        count.value += 1

    c.view(lambda: f"<div id='view'>{count.value}</div>")

gc.collect()
startup_objects = len(gc.get_objects())
if case == "warmup":
    gc.freeze()


class Stream:
    __slots__ = ("held", "owner", "pending")

    def __init__(self, owner):
        self.owner = owner
        self.pending = []
        self.held = None


class Tab:
    __slots__ = ("actions", "id", "scopes", "signals", "state", "stream")

    def __init__(self, i):
        self.id = f"ctx-{i:08d}"
        self.signals = {"count": [i, self], "step": [1, self], "name": [f"user {i}", self]}
        self.scopes = ["tab", f"route:/room/{i % 100}", f"session:{i % 5000}"]
        self.stream = Stream(self)
        self.state = {"seen": i, "tags": ["a", "b"]}

        def inc():
            self.signals["count"][0] += 1

        def reset():
            self.signals["count"][0] = 0

        self.actions = {"inc": inc, "reset": reset}


live = [Tab(i) for i in range(tabs)]
if case == "all":
    gc.freeze()
gc.disable()  # only the collections timed below run
full, young = [], []
for _ in range(repeat):
    t = time.perf_counter()
    gc.collect(2)
    full.append(time.perf_counter() - t)
    t = time.perf_counter()
    gc.collect(0)
    young.append(time.perf_counter() - t)
print(json.dumps({
    "case": case, "tabs": len(live), "startup_objects": startup_objects,
    "tracked": len(gc.get_objects()), "frozen": gc.get_freeze_count(),
    "full_median_ms": statistics.median(full) * 1000, "young_median_ms": statistics.median(young) * 1000,
    "full_ms": [round(x * 1000, 3) for x in full],
}))
"""


def run_case(case: str, tabs: int, repeat: int) -> dict[str, object]:
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, case, str(tabs), str(repeat)], check=True, capture_output=True, text=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]  # json gives Any


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tabs", type=int, default=50_000)
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--rounds", type=int, default=3, help="fresh interpreters per case (medians of medians)")
    parser.add_argument("--json", action="store_true", help="print one JSON line per case")
    args = parser.parse_args()
    print(f"python {sys.version.split()[0]}, {args.tabs} tabs, {args.repeat} collections x {args.rounds} rounds")
    for case in CASES:
        rounds = [run_case(case, args.tabs, args.repeat) for _ in range(args.rounds)]
        full = statistics.median(float(r["full_median_ms"]) for r in rounds)  # type: ignore[arg-type]
        young = statistics.median(float(r["young_median_ms"]) for r in rounds)  # type: ignore[arg-type]
        last = rounds[-1]
        if args.json:
            print(json.dumps({**last, "full_median_ms": full, "young_median_ms": young}))
        else:
            print(
                f"{case:>7}: full gc.collect() median {full:7.2f} ms, young {young:6.3f} ms; "
                f"tracked {last['tracked']}, frozen {last['frozen']}, start-up objects {last['startup_objects']}"
            )


if __name__ == "__main__":
    main()
