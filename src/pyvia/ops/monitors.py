"""What the process itself reports: its resident memory, its GC pauses and its event-loop lag.

Separate from :mod:`pyvia.ops.metrics` because these watch the interpreter and the loop, not
the App: each monitor is handed the metric it feeds and knows nothing else of pyvia's set.
"""

from __future__ import annotations

import gc
import os
import time
from typing import Any

from pyvia.clock import until_tick
from pyvia.ops.metric_types import Gauge, Histogram

__all__ = ["GC_GENERATIONS", "GcMonitor", "LoopLagMonitor", "process_rss"]

#: Cyclic-GC generations, the label values of ``pyvia_gc_pause_seconds``.
GC_GENERATIONS = ("0", "1", "2")
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def process_rss(statm: str = "/proc/self/statm") -> int | None:
    """Resident bytes of this process (second field of ``statm`` times the page size); None off Linux."""
    try:
        with open(statm) as f:
            return int(f.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return None


class GcMonitor:
    """Times every cyclic-GC collection through ``gc.callbacks`` into a histogram by generation."""

    def __init__(self, histogram: Histogram) -> None:
        self.histogram = histogram
        self._children = {g: histogram.labels(generation=g) for g in GC_GENERATIONS}
        self._started = 0.0
        self.installed = False

    def _callback(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        elif self._started:
            self._children.get(str(info.get("generation")), self._children["2"]).observe(
                time.perf_counter() - self._started
            )
            self._started = 0.0

    def install(self) -> None:
        if not self.installed:
            gc.callbacks.append(self._callback)
            self.installed = True

    def uninstall(self) -> None:
        if self.installed:
            gc.callbacks.remove(self._callback)
            self.installed = False


class LoopLagMonitor:
    """Schedules a callback every ``interval`` (250 ms) on a clock and records how late it ran.

    ``clock`` is a :class:`pyvia.clock.Clock` (the App's: the loop's own clock when serving, a
    manual one under the test client). The lag is how long the loop was busy elsewhere.
    """

    def __init__(self, histogram: Histogram, gauge: Gauge, interval: float = 0.25) -> None:
        self.histogram = histogram
        self.gauge = gauge
        self.interval = interval
        self._clock: Any = None
        self._handle: Any = None
        self._due = 0.0

    @property
    def running(self) -> bool:
        return self._handle is not None

    def start(self, clock: Any) -> None:
        self.stop()
        self._clock = clock
        self._arm()

    def _arm(self) -> None:
        now = self._clock.now()
        delay = until_tick(now, self.interval)
        self._due = now + delay
        self._handle = self._clock.call_later(delay, self._tick)

    def observe(self, lag: float) -> None:
        """Record one check that ran ``lag`` seconds late (the native server's loop probe calls
        this instead of the timer: :meth:`stop` it first)."""
        self.histogram.observe(lag)
        self.gauge.set(lag)

    def _tick(self) -> None:
        self.observe(max(0.0, self._clock.now() - self._due))
        self._arm()

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
