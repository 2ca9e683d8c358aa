"""The loop probe: one timer that measures how late the native server's loop runs.

Every ``shed_after / 20`` s (on the sweeps' grid) it records the lag, lets the overload rules
judge it (:class:`~pyvia.server.overload.Overload`) and sets the registry's ``shedding`` flag,
the one test a request pays. An idle server is probed once a second instead; the first
connection or request after such a probe brings the fast schedule back (:meth:`LoopProbe.wake`).
Separate from the registry, which counts what the connections hold: this only keeps time.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from pyvia.clock import until_tick

if TYPE_CHECKING:
    import asyncio

    from pyvia.server.registry import ConnectionRegistry

__all__ = ["LoopProbe"]

#: Seconds between probes while nothing comes (on the sweeps' grid: an idle server wakes once a
#: second); the first connection or request after such a probe brings the fast schedule back.
_IDLE_PROBE = 1.0


class LoopProbe:
    """The probe timer of one registry, its schedule, and what it last saw."""

    __slots__ = ("_accepted_seen", "_dispatched_seen", "_every", "_quiet_every", "_registry", "due", "handle", "on_lag")

    def __init__(self, registry: ConnectionRegistry, shed_after: float | None) -> None:
        self._registry = registry
        self._every = min(0.1, max(0.01, shed_after / 20)) if shed_after else 0.0
        self._quiet_every = max(self._every, shed_after or 0.0, _IDLE_PROBE)
        #: The pending probe's timer, and when it is due (its lag is measured against that).
        self.handle: asyncio.TimerHandle | None = None
        self.due = 0.0
        #: Told how late each probe ran (the app's loop-lag metric: one timer measures it, not two).
        self.on_lag: Callable[[float], None] | None = None
        self._accepted_seen = 0  # connections accepted when the last probe ran
        self._dispatched_seen = 0  # requests handed to the app when the last probe ran

    def start(self, now: float) -> None:
        if self.handle is None and self._every:
            self._schedule(now, self._every)

    def stop(self) -> None:
        if self.handle is not None:
            self.handle.cancel()
            self.handle = None

    def _schedule(self, now: float, every: float) -> None:
        delay = until_tick(now, every)
        self.due = now + delay
        self.handle = self._registry.loop.call_later(delay, self.run)

    def probe(self, now: float) -> None:
        """Record how late the probe due at :attr:`due` ran at ``now``; shed every new request
        while the loop stays late by twice ``shed_after``, and judge the long turns and the listen
        queue of the other rules (:meth:`Overload.judge_turns`, :meth:`BacklogDrain.drain`).

        A loop turn that runs long (CPU overload on open connections: every ready socket's handler
        runs in one turn) makes the next probe late. One late probe is a pause (a GC pass, one slow
        handler) and sheds nothing; two in a row are a loop that cannot keep up, and the turns that
        follow answer 503 until a probe runs on time again: those are short, so shedding lasts
        about one probe period at a time.
        """
        registry = self._registry
        overload = registry.overload
        registry.lag = lag = max(0.0, now - self.due)
        carried = registry.dispatched - self._dispatched_seen
        self._dispatched_seen = registry.dispatched
        registry.lagging = lagging = overload.judge_turns(now, lag, carried)
        registry.shedding = lagging or registry.in_flight >= registry.max_in_flight
        self.due = now + self._every
        if overload.measure_queue:
            overload.judge_backlog(now)
            if registry.backlog.listening:
                registry.backlog.drain()

    def run(self) -> None:
        """The timer's callback: probe, tell the lag, and schedule the next probe."""
        registry = self._registry
        now = registry.loop.time()
        dispatched, accepted = self._dispatched_seen, self._accepted_seen  # as the last probe saw them
        self.probe(now)
        if self.on_lag is not None:
            self.on_lag(registry.lag)
        registry.idle = self.is_quiet(dispatched, accepted)
        self._accepted_seen = registry.accepted
        self._schedule(now, self._quiet_every if registry.idle else self._every)

    def wake(self) -> None:
        """A connection or a request came while the probe waited its idle period: probe on the
        fast schedule from now on, so a load that starts is judged within one ``shed_after``."""
        self._registry.idle = False
        if self.handle is not None:
            self.handle.cancel()
            self._schedule(self._registry.loop.time(), self._every)

    def is_quiet(self, dispatched: int, accepted: int) -> bool:
        """Whether nothing came since the last probe saw ``dispatched`` requests and ``accepted``
        connections, nothing is owed and no overload rule is engaged: then the next probe may wait
        a second (``_IDLE_PROBE``, ``shed_after`` at least). An idle server wakes once a second
        instead of ``1 / _every`` times; what comes next wakes the probe (:meth:`wake`)."""
        registry = self._registry
        overload = registry.overload
        engaged = (
            overload.busy or overload.queue_late or registry.lagging or registry.shedding or overload.slow_turns > 0
        )
        return (
            registry.dispatched == dispatched
            and registry.accepted == accepted
            and not registry.in_flight
            and not engaged
        )
