"""Start and stop of an App's runtime: its timers armed on a clock, its stores opened and restored,
its hooks run; and, on a stop, its tabs told, its state saved and its streams ended in order.

``App.startup``/``App.start``/``App.shutdown`` are the front ends' calls; they come here. The
order of a stop is a rule: tabs are told their stream ends (actions then carry their snapshot)
before anything stops; the last broadcast goes out and the tabs' disconnect hooks run, so what
they keep is saved without the leaving tabs; the shared state is saved and the stop hooks run;
the streams end after ``saved``, so a replaced worker's tabs reconnect to a server that already
has what this one kept; the database closes last, once the async views still rendering are done
(``RENDERS_WAIT`` s at most).
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pyvia import protocol
from pyvia.clock import Clock, TimerHandle, next_due, until_tick

if TYPE_CHECKING:
    from pyvia.app import App
    from pyvia.runtime import Runtime

__all__ = ["Serving"]

#: Seconds a stop waits for the async views the last broadcasts started (they may read the database).
RENDERS_WAIT = 1.0


class Serving:
    """The app's timers, and the steps of its start and its stop."""

    def __init__(self, app: App, rt: Runtime) -> None:
        self.app = app
        self.rt = rt
        #: ``app.set_interval`` declarations: (fn, period, every_worker), armed at each start.
        self.intervals: list[tuple[Callable[..., Any], float, bool]] = []
        self.timers: list[TimerHandle] = []

    def add_interval(self, fn: Callable[..., Any], period: float, every_worker: bool) -> None:
        """Declare an app timer; armed now if the app runs, and at every start."""
        self.intervals.append((fn, period, every_worker))
        if self.app.clock is not None:
            self.arm(fn, period, every_worker)

    def arm(self, fn: Callable[..., Any], period: float, every_worker: bool = False) -> None:
        """Arm app timer ``fn`` every ``period`` s on the app's clock (on the timer-lease holder
        alone, unless ``every_worker``)."""
        app, rt = self.app, self.rt
        clock = app.clock
        assert clock is not None
        slot = len(self.timers)
        self.timers.append(clock.call_later(period, lambda: None))
        due = clock.now() + period

        def tick() -> None:
            # at a fixed rate (next_due): a busy loop does not slow a 10 Hz game to 9 Hz
            nonlocal due
            try:
                elsewhere = not every_worker and not app.ownership.is_timer_leader
                result = None if elsewhere else fn()  # elsewhere: another worker runs the app's timers
                if inspect.isawaitable(result):
                    app.spawn(result, None, "timer")
            except Exception as exc:
                rt.reporting.report(exc, None, "timer")
            if app.clock is not None and slot < len(self.timers):
                now = clock.now()
                due = next_due(due, period, now)
                self.timers[slot] = clock.call_later(due - now, tick)

        self.timers[slot].cancel()
        self.timers[slot] = clock.call_later(period, tick)

    def start(self, clock: Clock, loop: asyncio.AbstractEventLoop | None = None) -> None:
        """The steps of a start on ``clock``, ``loop`` running the tasks (``App.start``)."""
        app, rt = self.app, self.rt
        app.clock = clock
        if loop is not None:
            app.loop = loop
        app.started_at = clock.now()
        app.started_wall = time.time()
        rt.registry.left = False  # a stop's leave_all ran the disconnect hooks; a new start has tabs again
        app.limiter.reset()  # its times came from the previous clock
        app.broadcaster.reset()  # its times came from the previous clock
        for _, mounted in app.mounts:
            mounted.raise_server_exceptions = app.raise_server_exceptions
            mounted.start(clock)
        app.draining = False
        app.metrics.start_monitors(clock)
        rt.assets.start()  # a missing bundle fails at start, not on a page
        app.db.open()  # a SQLite file that cannot be opened fails at start
        if app.config.persist_path is not None:
            rt.persistence.restore_file()
        rt.registry.sweep_handle = clock.call_later(
            until_tick(clock.now(), app.config.sweep_interval), rt.registry.sweep
        )
        for fn, period, every_worker in self.intervals:
            self.arm(fn, period, every_worker)
        for fn in app.start_hooks:
            try:
                result = fn()
                if inspect.isawaitable(result):
                    app.spawn(result, None, "start")
            except Exception as exc:
                rt.reporting.report(exc, None, "start")

    async def renders_finished(self, timeout: float) -> None:
        """Wait, at most ``timeout`` s, for the async views still rendering (the last broadcasts')."""
        deadline = time.monotonic() + timeout
        contexts = self.rt.registry.contexts
        while time.monotonic() < deadline and any(ctx.pending_frames is not None for ctx in contexts.values()):
            await asyncio.sleep(0.005)

    async def tasks_finished(self, running: set[asyncio.Task[None]], timeout: float) -> None:
        """Wait, at most ``timeout`` s, for the background tasks started since ``running`` was taken:
        the stop's async hooks, which may still write to the database the stop closes next."""
        started = [task for task in self.app.background_tasks if task not in running]
        if started:
            await asyncio.wait(started, timeout=timeout)

    async def shutdown(
        self, budget: float = 1.5, *, spread: float = 0.0, saved: Callable[[], object] | None = None
    ) -> None:
        """The steps of a stop, in the module docstring's order (``App.shutdown`` says what
        ``spread`` and ``saved`` are)."""
        app, rt = self.app, self.rt
        app.draining = True
        app.ownership.stop_taking_connections()  # they would not be told to close after their answer
        app.metrics.stop_monitors()
        if app.clock is not None:
            moving = protocol.patch_signals({protocol.FILTER_SIGNAL: protocol.FILTER_DOWN})
            now = app.clock.now()
            # their streams end soon: meanwhile actions carry the snapshot
            for ctx in rt.registry.connected.values():
                ctx.stream.send(moving, None, now)
        for _, mounted in app.mounts:
            await mounted.shutdown(budget)
        if rt.registry.sweep_handle is not None:
            rt.registry.sweep_handle.cancel()
            rt.registry.sweep_handle = None
        app.broadcaster.flush(force=True)
        app.broadcaster.stop()
        running = set(app.background_tasks)
        rt.registry.leave_all()  # before the save: what the disconnect hooks keep is saved without them
        await self.tasks_finished(running, budget)  # async hooks (a "last seen" written to the database)
        if app.config.persist_path is not None:
            rt.persistence.save_file()
        for timer in self.timers:
            timer.cancel()
        self.timers = []
        for fn in app.stop_hooks:
            try:
                result = fn()
                if inspect.isawaitable(result):
                    await result
            except Exception as exc:
                rt.reporting.report(exc, None, "stop")
        if rt.persistence.in_db:
            try:
                await rt.persistence.save_to_db()
            except Exception as exc:  # the stop goes on: the previous saved state stays
                rt.reporting.report(exc, None, "stop", reraise=False)
        if saved is not None:
            saved()
        await rt.registry.end_streams(spread)
        await self.renders_finished(min(budget, RENDERS_WAIT))  # the last flush's async views may read it
        await self.tasks_finished(running, min(budget, RENDERS_WAIT))  # hooks run as the streams ended
        await app.db.close()
        for closable in (rt.assets.static, rt.assets.bundle_asset):
            if closable is not None:
                closable.close()
        # A cluster's store stays attached, stopped: a request still answered after this fails on
        # the closed engine (503) instead of changing shared state here alone and answering 200.
        await app.store.stop()
        if rt.actions.parsing is not None:
            rt.actions.parsing.shutdown(wait=False, cancel_futures=True)
            rt.actions.parsing = None
        if rt.assets.executor is not None:
            rt.assets.executor.shutdown(wait=False, cancel_futures=True)
            rt.assets.executor = None
        rt.assets.static = None
        rt.assets.bundle_asset = None
