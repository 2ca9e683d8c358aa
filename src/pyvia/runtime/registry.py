"""The tab registry: every live context, its deadline, the sweep that expires them, destroy."""

from __future__ import annotations

import asyncio
import heapq
import inspect
import logging
import time
import typing
from collections import deque
from collections.abc import Callable
from typing import Any

from pyvia import protocol
from pyvia.clock import TimerHandle
from pyvia.compress import Release
from pyvia.context import Context, call_hook
from pyvia.lifecycle import State
from pyvia.runtime.common import STREAM_DOWN
from pyvia.stream import Stream

if typing.TYPE_CHECKING:
    from pyvia.app import App
    from pyvia.runtime import Runtime

log = logging.getLogger("pyvia")
_DESTROY_SLICE = 0.005  # seconds of destroying per loop turn (php-via 0.14 uses 10 ms slices)


class Interval:
    """A context's repeating timer: re-armed after each run, dropped when the context dies."""

    __slots__ = ("app", "ctx", "fn", "handle", "period")

    def __init__(self, app: App, ctx: Context, fn: Callable[..., Any], period: float) -> None:
        self.app = app
        self.ctx = ctx
        self.fn = fn
        self.period = period
        self.handle: TimerHandle | None = None

    def arm(self) -> None:
        clock = self.app.clock
        assert clock is not None
        self.handle = clock.call_later(self.period, self.tick)

    def tick(self) -> None:
        ctx = self.ctx
        if ctx.state is State.DESTROYED:
            return
        ctx._begin_batch()
        try:
            result = call_hook(self.fn, ctx)
            if inspect.isawaitable(result):
                self.app._spawn(result, ctx, "timer")
        except Exception as exc:
            self.app.runtime.reporting.report(exc, ctx, "timer")
        finally:
            ctx._end_batch()
        if ctx.state is not State.DESTROYED:  # type: ignore[comparison-overlap]  # the timer may destroy it
            self.arm()

    def cancel(self) -> None:
        if self.handle is not None:
            self.handle.cancel()
            self.handle = None


class Registry:
    """Every live tab of an app by id, the deadlines of those without a stream, the periodic sweep."""

    def __init__(self, app: App, rt: Runtime) -> None:
        self.app = app
        self.rt = rt
        # every live tab, by context id
        self.contexts: dict[str, Context] = {}
        self.connected: dict[str, Context] = {}
        #: Page contexts waiting for their first stream, oldest first (``max_waiting_contexts``).
        self.waiting: dict[str, Context] = {}
        # (deadline, seq, ctx) for tabs without a stream; stale entries are skipped
        self.deadlines: list[tuple[float, int, Context]] = []
        self.seq = 0
        self.destroy_queue: deque[Context] = deque()
        self.destroying = False
        self.sweep_handle: TimerHandle | None = None
        self.next_keep_alive = 0.0
        #: Page contexts destroyed unconnected because more than ``max_waiting_contexts`` waited.
        self.evicted_waiting = 0

    async def end_streams(self, spread: float) -> None:
        import random

        tabs = list(self.connected.values())
        if spread > 0 and len(tabs) > 1:
            random.shuffle(tabs)
            steps = max(1, min(len(tabs), int(spread / 0.05)))  # a batch every 50 ms at most
            per_step = -(-len(tabs) // steps)
            for start in range(0, len(tabs), per_step):
                if start:
                    await asyncio.sleep(spread / steps)
                for ctx in tabs[start : start + per_step]:
                    if self.connected.get(ctx.id) is ctx:  # not gone on its own meanwhile
                        self.end_stream(ctx)
                        self.disconnected(ctx)
        for ctx in list(self.connected.values()):
            self.end_stream(ctx)
            self.disconnected(ctx)

    @staticmethod
    def end_stream(ctx: Context) -> None:
        """End a tab's stream on purpose: the page is told first, so its actions carry the tab's
        snapshot until its stream is back (wherever it lands, the tab can be revived)."""
        ctx.stream.send(protocol.patch_signals(STREAM_DOWN), None, ctx.app.now())
        ctx.stream.close()

    def register(self, ctx: Context) -> None:
        self.contexts[ctx.id] = ctx
        if ctx.revived:
            self.app.ownership.claim(ctx.id)  # a page view claimed it already
        for name in ctx._scopes:
            self.app.scopes.join(ctx, name)
        ctx.state = State.CREATED
        self.set_deadline(ctx, self.app.now() + self.app.config.connect_timeout)
        waiting = self.waiting
        waiting[ctx.id] = ctx
        if len(waiting) > self.app.config.max_waiting_contexts:
            oldest = waiting.pop(next(iter(waiting)))
            self.evicted_waiting += 1
            self.destroy(oldest)  # revived from its signed id if its stream comes after all

    def set_deadline(self, ctx: Context, deadline: float) -> None:
        ctx.deadline = deadline
        self.seq += 1
        heapq.heappush(self.deadlines, (deadline, self.seq, ctx))

    def disconnected(self, ctx: Context) -> None:
        """The tab has no stream any more (the peer left, or the server ended it)."""
        now = self.app.now()
        ctx.state = State.DISCONNECTED
        self.connected.pop(ctx.id, None)
        deadline = now + self.app.config.cleanup_delay
        if ctx.last_action:
            deadline = max(deadline, ctx.last_action + self.app.config.reconnect_timeout)
        self.set_deadline(ctx, deadline)
        for fn in list(ctx._on_disconnect):
            self.run_hook(fn, ctx, "disconnect")
        for fn in self.app._on_disconnect:
            self.run_hook(fn, ctx, "disconnect")

    def run_hook(self, fn: Callable[..., Any], ctx: Context, phase: str) -> None:
        try:
            result = call_hook(fn, ctx)
            if inspect.isawaitable(result):
                self.app._spawn(result, ctx, phase)
        except Exception as exc:
            self.rt.reporting.report(exc, ctx, phase)

    def sweep(self) -> None:
        """The one periodic pass: expire tabs whose deadline passed, keep idle streams alive."""
        clock = self.app.clock
        assert clock is not None
        now = clock.now()
        heap = self.deadlines
        while heap and heap[0][0] <= now:
            deadline, _, ctx = heapq.heappop(heap)
            if ctx.deadline == deadline and ctx.state in (State.CREATED, State.DISCONNECTED):
                self.destroy_queue.append(ctx)
        if self.destroy_queue and not self.destroying:
            self.destroying = True
            clock.call_soon(self.destroy_slice)
        if now >= self.next_keep_alive:  # the pass over open streams: a few times per keep-alive period
            interval = self.app.config.keep_alive
            ping = protocol.keep_alive()
            patience = self.app.config.slow_tab_timeout
            idle_release = self.app.config.encoder_idle_release
            for ctx in list(self.connected.values()):
                stream = ctx.stream
                if stream.over_since and stream.is_stalled(now, patience):
                    log.info("disconnecting a tab of %s that stopped reading", ctx.route.pattern)
                    stream.close(abort=True)  # what it has not read is dropped, not kept for the send deadline
                    continue
                if interval > 0 and now - stream.last_write >= interval:
                    stream.keep_alive(ping, now)
                encoder = stream.encoder
                if (
                    encoder is not None
                    and encoder.is_active
                    and now - stream.last_event > idle_release
                    and encoder.releases_in_place
                    and stream.sink is not None
                ):
                    stream.sink.write(encoder.release().data)  # zstd ends its frame; a new compressor starts later
            period = min(interval / 3 if interval > 0 else 5.0, max(idle_release / 2, self.app.config.sweep_interval))
            self.next_keep_alive = now + period
        if self.app._outflow.ended:  # streams the server ended (slow tab, encoder budget): tabs without one
            self.app._outflow.ended = 0
            for ctx in [c for c in self.connected.values() if c.stream.sink is None]:
                self.disconnected(ctx)
        if self.app.compression.budget.is_over:
            self.reclaim_encoders()
        self.app.compression.return_memory(now)
        self.app._replays.sweep(now)
        self.measure_unsent()
        self.rt.revival.prune(now)
        self.sweep_handle = clock.call_later(self.app.config.sweep_interval, self.sweep)

    def measure_unsent(self) -> None:
        """Add up what waits in every tab socket; past the cap, view frames are held everywhere
        and the readers furthest behind are cut off (:meth:`pyvia.stream.Outflow.measure`)."""
        self.app._outflow.measure([ctx.stream for ctx in self.connected.values()], self.app.config.max_unsent_bytes)

    def reclaim_encoders(self) -> None:
        """Over the encoder budget: release the least recently used encoders (zstd keeps its stream;
        brotli and gzip cannot restart mid-stream, so those tabs are asked to reconnect)."""
        for encoder, released in self.app.compression.reclaim():
            stream = encoder.owner
            if not isinstance(stream, Stream) or stream.sink is None:
                continue
            if released.data:
                stream.sink.write(released.data)
            if released.action is Release.RECONNECT:
                stream.encoder = None
                stream.close()

    def destroy_slice(self) -> None:
        """Destroy queued contexts for a few milliseconds, then yield the loop."""
        stop = time.perf_counter() + _DESTROY_SLICE
        queue = self.destroy_queue
        while queue:
            self.destroy(queue.popleft())
            if time.perf_counter() >= stop:
                break
        if queue and self.app.clock is not None:
            self.app.clock.call_soon(self.destroy_slice)
        else:
            self.destroying = False

    def destroy(self, ctx: Context) -> None:
        """Destroy a context now: timers stop, cleanup hooks run, its stream ends."""
        if ctx.state is State.DESTROYED:
            return
        ctx.state = State.DESTROYED
        if self.contexts.get(ctx.id) is ctx:
            del self.contexts[ctx.id]
        self.connected.pop(ctx.id, None)
        if self.waiting.get(ctx.id) is ctx:
            del self.waiting[ctx.id]
        ctx.cancel_timers()
        for fn in ctx._on_cleanup:
            self.run_hook(fn, ctx, "cleanup")
        ctx.stream.close()
        self.app._replays.forget(ctx.stream)
        for name in ctx._scopes:
            self.app.scopes.leave(ctx, name)
        self.app.ownership.release(ctx.id)
        if self.app.config.revival_window > 0:
            self.rt.revival.bury(ctx)
        ctx.forget()  # what closures hold: a destroyed context leaves no reference cycle

    def arm_interval(self, ctx: Context, fn: Callable[..., Any], period: float) -> Interval:
        if self.app.clock is None:
            raise RuntimeError("set_interval needs a started app")
        interval = Interval(self.app, ctx, fn, period)
        interval.arm()
        ctx._timers.append(interval)
        return interval
