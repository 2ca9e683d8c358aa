"""``calibrate``: the single-core speed check that scales published CPU figures between machines.

php-via's ``bench/capacity/calibrate.php`` (php-via.md §11.7): compress the same ~100 KB HTML
200 times with Brotli level 4, best of 5 rounds; its reference machine prints ``brotli 7 ms``.
Python's ``brotli`` is the same C library, so the ratio of the two figures is the ratio of the
two cores for this kind of work: a php-via CPU figure times ``ms / 7`` is what it would cost here.
It runs on the server's core (CPU 1), where the figures it scales were measured; no server.
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

import brotli  # type: ignore[import-untyped]

from bench.server import SERVER_CPU

__all__ = ["REFERENCE_MS", "add_arguments", "brotli_round_ms", "main", "measure"]

#: php-via's reference machine (two i5-13500 P-cores held at full clock) prints this.
REFERENCE_MS = 7.0
#: The input, exactly php-via's: one 85-byte line repeated 1,200 times (102,000 bytes).
HTML = ('<div class="doc"><p>php-via docs text with <code>$c->signal()</code> 12345</p></div>\n' * 1200).encode()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-r", "--repeat", type=int, default=5, help="rounds; the best one counts (default 5)")
    parser.add_argument("--count", type=int, default=200, help="compressions per round (default 200)")


def brotli_round_ms(count: int = 200) -> float:
    """Milliseconds for one round: ``count`` Brotli level-4 compressions of :data:`HTML`."""
    t0 = time.perf_counter()
    for _ in range(count):
        brotli.compress(HTML, quality=4)
    return (time.perf_counter() - t0) * 1000


def measure(repeat: int = 5, count: int = 200) -> dict[str, Any]:
    """The best of ``repeat`` rounds (the least disturbed one), as php-via prints it."""
    rounds = [brotli_round_ms(count) for _ in range(repeat)]
    best = min(rounds)
    return {
        "type": "calibrate",
        "brotli_ms": best,
        "rounds_ms": rounds,
        "reference_ms": REFERENCE_MS,
        "scale": best / REFERENCE_MS,
        "input_bytes": len(HTML),
        "count": count,
        "cpu": SERVER_CPU,
    }


async def main(args: argparse.Namespace, session: Any) -> dict[str, Any]:
    """Pin to the server's core, measure, record; no server is started."""
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {int(SERVER_CPU)})
    try:
        record = measure(args.repeat, args.count)
    finally:
        os.sched_setaffinity(0, before)
    session.recorder.write(record)
    print(
        f"brotli {record['brotli_ms']:.1f} ms (best of {args.repeat}; rounds "
        + ", ".join(f"{r:.1f}" for r in record["rounds_ms"])
        + f"); php-via's reference machine prints {REFERENCE_MS:.0f} ms: scale {record['scale']:.2f} "
        "(a php-via CPU figure x scale = the same work on this core)"
    )
    return record
