"""Time and scheduling, injected so tests can step timeouts instead of sleeping.

The running app uses :class:`LoopClock` (the asyncio loop's monotonic clock and timers);
``pyvia.testing`` uses :class:`ManualClock`, which only moves when told to.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections.abc import Callable
from typing import Any, Protocol


def until_tick(now: float, period: float) -> float:
    """Seconds from ``now`` to the next multiple of ``period`` (half a period at least).

    Periodic timers that keep to one grid wake the loop together: an idle server then wakes once
    per tick, not once per timer (each wake is a loop turn and two ``epoll_wait`` calls)."""
    if period <= 0:
        return 0.0
    delay = period - now % period
    return delay + period if delay < period / 2 else delay


def next_due(due: float, period: float, now: float) -> float:
    """When a repeating timer that was due at ``due`` is due next: a period later, at a fixed rate
    (however long its callback took), skipping the periods already missed altogether."""
    due += period
    if due <= now:
        due += (int((now - due) / period) + 1) * period
    return due


class TimerHandle(Protocol):
    def cancel(self) -> None: ...


class Clock(Protocol):
    def now(self) -> float: ...

    def perf(self) -> float:
        """A precise reading for measuring how long work takes (seconds, any epoch)."""
        ...

    def call_later(self, delay: float, callback: Callable[..., Any], *args: Any) -> TimerHandle: ...

    def call_soon(self, callback: Callable[..., Any], *args: Any) -> TimerHandle: ...


class LoopClock:
    """The asyncio loop as a clock."""

    __slots__ = ("loop",)

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop

    def now(self) -> float:
        return self.loop.time()

    def perf(self) -> float:
        return time.perf_counter()  # the loop's own time has millisecond resolution under uvloop

    def call_later(self, delay: float, callback: Callable[..., Any], *args: Any) -> TimerHandle:
        return self.loop.call_later(delay, callback, *args)

    def call_soon(self, callback: Callable[..., Any], *args: Any) -> TimerHandle:
        return self.loop.call_soon(callback, *args)


class _ManualHandle:
    __slots__ = ("args", "callback", "cancelled", "when")

    def __init__(self, when: float, callback: Callable[..., Any], args: tuple[Any, ...]) -> None:
        self.when = when
        self.callback = callback
        self.args = args
        self.cancelled = False

    def cancel(self) -> None:
        """Cancel, and drop the callback at once, as asyncio's handles do."""
        self.cancelled = True
        self.callback = _noop
        self.args = ()


def _noop(*args: Any) -> None:
    return None


class ManualClock:
    """A clock that moves only on :meth:`advance`, running due callbacks in time order."""

    def __init__(self, start: float = 1000.0) -> None:
        self._now = start
        self._queue: list[tuple[float, int, _ManualHandle]] = []
        self._seq = itertools.count()

    def now(self) -> float:
        return self._now

    def perf(self) -> float:
        """Work takes no time on a manual clock: what tests see never depends on the machine's speed."""
        return self._now

    def call_later(self, delay: float, callback: Callable[..., Any], *args: Any) -> _ManualHandle:
        handle = _ManualHandle(self._now + max(0.0, delay), callback, args)
        heapq.heappush(self._queue, (handle.when, next(self._seq), handle))
        return handle

    def call_soon(self, callback: Callable[..., Any], *args: Any) -> _ManualHandle:
        return self.call_later(0.0, callback, *args)

    def run_due(self) -> None:
        """Run every callback due at the current time (including ones they schedule for now)."""
        while self._queue and self._queue[0][0] <= self._now:
            _, _, handle = heapq.heappop(self._queue)
            if not handle.cancelled:
                handle.callback(*handle.args)

    def step(self) -> bool:
        """Run the next callback due now, as one turn of a loop would; False when none is due."""
        while self._queue and self._queue[0][0] <= self._now:
            _, _, handle = heapq.heappop(self._queue)
            if not handle.cancelled:
                handle.callback(*handle.args)
                return True
        return False

    def advance(self, seconds: float) -> None:
        """Move time forward, firing timers in order as their moment passes."""
        target = self._now + seconds
        while self._queue and self._queue[0][0] <= target:
            when, _, handle = heapq.heappop(self._queue)
            self._now = max(self._now, when)
            if not handle.cancelled:
                handle.callback(*handle.args)
        self._now = target
