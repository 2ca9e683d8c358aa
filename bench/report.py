"""Raw results as JSON lines, and summaries as medians with their min-max spread.

ephpm-lessons §6.3 E: keep the raw output, report p50 and p99 of each repetition on its own
(never percentiles pooled across repetitions), and show the spread rather than averaging it away.
"""

from __future__ import annotations

import math
import statistics
import time
from pathlib import Path
from typing import Any

import orjson

__all__ = ["Recorder", "fmt", "percentile", "quiet_spread", "spread"]

RESULTS = Path(__file__).resolve().parent / "results"


def percentile(sorted_values: list[float], p: float) -> float:
    """Nearest-rank percentile of already sorted values (NaN when empty: the signature of a hang)."""
    if not sorted_values:
        return math.nan
    rank = max(1, math.ceil(p / 100 * len(sorted_values)))
    return sorted_values[rank - 1]


def spread(values: list[float]) -> dict[str, float]:
    """Median, min and max of one figure across repetitions."""
    clean = [v for v in values if not math.isnan(v)]
    if not clean:
        return {"median": math.nan, "min": math.nan, "max": math.nan}
    return {"median": statistics.median(clean), "min": min(clean), "max": max(clean)}


def quiet_spread(reps: list[dict[str, Any]], keys: tuple[str, ...]) -> dict[str, Any]:
    """The same spreads over the repetitions no other process disturbed (``noisy`` false)."""
    quiet = [r for r in reps if not r.get("noisy")]
    return {"n": len(quiet), **{key: spread([r[key] for r in quiet]) for key in keys}}


def fmt(s: dict[str, float], digits: int = 1) -> str:
    return f"{s['median']:,.{digits}f} ({s['min']:,.{digits}f}-{s['max']:,.{digits}f})"


class Recorder:
    """Appends records to ``bench/results/<command>-<timestamp>.jsonl`` as they are made."""

    def __init__(self, command: str) -> None:
        RESULTS.mkdir(exist_ok=True)
        self.path = RESULTS / f"{command}-{time.strftime('%Y%m%d-%H%M%S')}.jsonl"

    def write(self, record: dict[str, Any]) -> None:
        with self.path.open("ab") as f:
            f.write(orjson.dumps(record, option=orjson.OPT_NON_STR_KEYS) + b"\n")
