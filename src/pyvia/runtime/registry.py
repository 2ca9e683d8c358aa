"""The tab registry: every live context, its deadline, the sweep that expires them, destroy."""

from __future__ import annotations

import asyncio
import heapq
import inspect
import logging
import time
import typing
from collections import OrderedDict, deque
from collections.abc import Callable
from typing import Any

from pyvia import protocol
from pyvia.clock import TimerHandle, next_due, until_tick
from pyvia.compress import Release
from pyvia.context import Context, call_hook
from pyvia.lifecycle import CREATED, DESTROY, DESTROYED, DISCONNECT, EXPIRES, REGISTER, move
from pyvia.memory import CONTEXTS_PER_TRIM, FreedMemory
from pyvia.runtime.common import STREAM_DOWN
from pyvia.stream import Stream

if typing.TYPE_CHECKING:
    from pyvia.app import App
    from pyvia.runtime import Runtime

log = logging.getLogger("pyvia")
_DESTROY_SLICE = 0.005  # seconds of destroying per loop turn (php-via 0.14 uses 10 ms slices)
#: The keep-alive wheel's slot width, seconds: a stream waits in the slot of the second its
#: keep-alive falls due (a slot is visited once that second has begun).
_SLOT = 1.0


class Interval:
    """A context's repeating timer: re-armed after each run at a fixed rate, dropped when the context dies."""

    __slots__ = ("app", "ctx", "due", "fn", "handle", "period")

    def __init__(self, app: App, ctx: Context, fn: Callable[..., Any], period: float) -> None:
        self.app = app
        self.ctx = ctx
        self.fn = fn
        self.period = period
        self.handle: TimerHandle | None = None
        self.due = 0.0  # when the next call is due (the app clock)

    def arm(self) -> None:
        clock = self.app.clock
        assert clock is not None
        now = clock.now()
        self.due = now + self.period if not self.due else next_due(self.due, self.period, now)
        self.handle = clock.call_later(self.due - now, self.tick)

    def tick(self) -> None:
        ctx = self.ctx
        if ctx.state is DESTROYED:
            return
        ctx.begin_batch()
        try:
            result = call_hook(self.fn, ctx)
            if inspect.isawaitable(result):
                self.app.spawn(result, ctx, "timer")
        except Exception as exc:
            self.app.runtime.reporting.report(exc, ctx, "timer")
        finally:
            ctx.end_batch()
        if ctx.state is not DESTROYED:  # the timer may destroy it
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
        #: Ordered, not a dict: a dict that drops its oldest keys leaves holes at its front that
        #: each ``next(iter())`` walks again, so evicting got slower the longer a crawl went on.
        #: Each one's deadline is its registration's time plus the connect timeout, so the
        #: oldest is also the first due: the sweep expires them from the front, and a page view
        #: leaves no entry in ``deadlines`` (that the tab would keep for the connect timeout).
        self.waiting: OrderedDict[str, Context] = OrderedDict()
        # (deadline, seq, context id) for tabs whose stream went; stale entries are skipped, and
        # hold an id, not the context: a destroyed tab's memory goes when it does, not at its
        # old deadline (a crawler's evicted views were kept alive for the connect timeout)
        self.deadlines: list[tuple[float, int, str]] = []
        self.seq = 0
        self.destroy_queue: deque[Context] = deque()
        self.destroying = False
        self.sweep_handle: TimerHandle | None = None
        self.next_keep_alive = 0.0
        #: The keep-alive wheel: open streams by the slot (``int(due // _SLOT)``) in which their
        #: keep-alive falls due, so a pass visits only the streams due by then, not every open one.
        self.wheel: dict[int, list[Stream]] = {}
        #: Work the passes over open streams did, by kind (counted: what an idle tab costs).
        self.visits = {"stall": 0, "keep_alive": 0, "idle_release": 0, "unsent": 0}
        #: Page contexts destroyed unconnected because more than ``max_waiting_contexts`` waited.
        self.evicted_waiting = 0
        #: Contexts destroyed so far (a burst of them is worth giving their memory back).
        self.destroyed = 0
        self.freed_memory = FreedMemory()
        #: The app is stopping and its tabs' disconnect hooks ran (:meth:`leave_all`): their
        #: streams' ends do not run them again.
        self.left = False

    def leave_all(self) -> None:
        """At a stop, before the state is saved: every connected tab's disconnect hooks run, so what
        they keep (who is online) is saved without the tabs that are leaving; they count again
        where their streams reconnect."""
        self.left = True
        for ctx in list(self.connected.values()):
            self.run_disconnect_hooks(ctx)

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
        scopes = ctx.scope_names
        for i, name in enumerate(scopes):
            scopes[i] = self.app.scopes.join(ctx, name).name  # the scope's own string: no copy per tab
        move(ctx, REGISTER)
        ctx.deadline = self.app.now() + self.app.config.connect_timeout
        waiting = self.waiting
        waiting[ctx.id] = ctx
        if len(waiting) > self.app.config.max_waiting_contexts:
            _, oldest = waiting.popitem(last=False)
            self.evicted_waiting += 1
            self.destroy(oldest)  # revived from its signed id if its stream comes after all

    def opened(self, ctx: Context, now: float) -> None:
        """``ctx``'s stream is open: it is connected, and its keep-alive is on the wheel."""
        self.connected[ctx.id] = ctx
        interval = self.app.config.keep_alive
        stream = ctx.stream
        if interval > 0 and stream.keep_alive_due is None:
            self.wheel_put(stream, now + interval)

    def wheel_put(self, stream: Stream, due: float, after: int = 0) -> None:
        """Put ``stream`` in the wheel's slot of ``due`` (or later than slot ``after``)."""
        slot = max(int(due // _SLOT), after + 1)
        stream.keep_alive_due = slot
        bucket = self.wheel.get(slot)
        if bucket is None:
            self.wheel[slot] = [stream]
        else:
            bucket.append(stream)

    def set_deadline(self, ctx: Context, deadline: float) -> None:
        ctx.deadline = deadline
        self.seq += 1
        heap = self.deadlines
        heapq.heappush(heap, (deadline, self.seq, ctx.id))
        if len(heap) > 2 * len(self.contexts) + 1024:  # mostly stale: keep only the live entries
            contexts = self.contexts
            live = []
            for entry in heap:
                found = contexts.get(entry[2])
                if found is not None and found.deadline == entry[0]:
                    live.append(entry)
            heapq.heapify(live)
            self.deadlines = live

    def disconnected(self, ctx: Context) -> None:
        """The tab has no stream any more (the peer left, or the server ended it)."""
        now = self.app.now()
        move(ctx, DISCONNECT)
        self.connected.pop(ctx.id, None)
        deadline = now + self.app.config.cleanup_delay
        if ctx.last_action:
            deadline = max(deadline, ctx.last_action + self.app.config.reconnect_timeout)
        self.set_deadline(ctx, deadline)
        if not self.left:  # else they ran at the stop's start (leave_all)
            self.run_disconnect_hooks(ctx)

    def run_disconnect_hooks(self, ctx: Context) -> None:
        for fn in list(ctx.disconnect_hooks):
            self.run_hook(fn, ctx, "disconnect")
        for fn in self.app.disconnect_hooks:
            self.run_hook(fn, ctx, "disconnect")

    def run_hook(self, fn: Callable[..., Any], ctx: Context, phase: str) -> None:
        try:
            result = call_hook(fn, ctx)
            if inspect.isawaitable(result):
                self.app.spawn(result, ctx, phase)
        except Exception as exc:
            self.rt.reporting.report(exc, ctx, phase)

    def sweep(self) -> None:
        """The one periodic pass: expire tabs whose deadline passed, keep idle streams alive."""
        clock = self.app.clock
        assert clock is not None
        now = clock.now()
        heap = self.deadlines
        contexts = self.contexts
        while heap and heap[0][0] <= now:
            deadline, _, ctx_id = heapq.heappop(heap)
            ctx = contexts.get(ctx_id)
            if ctx is not None and ctx.deadline == deadline and ctx.state in EXPIRES:
                self.destroy_queue.append(ctx)
        waiting = self.waiting
        while waiting:
            ctx = waiting[next(iter(waiting))]
            if ctx.deadline > now:
                break  # the oldest is not due: none after it is
            waiting.popitem(last=False)
            self.destroy_queue.append(ctx)
        if self.destroy_queue and not self.destroying:
            self.destroying = True
            clock.call_soon(self.destroy_slice)
        if now >= self.next_keep_alive:  # the pass over open streams: a few times per keep-alive period
            interval = self.app.config.keep_alive
            idle_release = self.app.config.encoder_idle_release
            self.check_stalls(now)
            if interval > 0:
                self.keep_alive(now, interval)
            self.release_idle_encoders(now, idle_release)
            if self.app.compression.shared_streams:
                self.app.compression.drop_quiet_streams(now, idle_release)
            period = min(interval / 3 if interval > 0 else 5.0, max(idle_release / 2, self.app.config.sweep_interval))
            self.next_keep_alive = now + period
        if self.app.outflow.ended:  # streams the server ended (slow tab, encoder budget): tabs without one
            self.app.outflow.ended = 0
            for ctx in [c for c in self.connected.values() if c.stream.sink is None]:
                self.disconnected(ctx)
        if self.app.compression.budget.is_over:
            self.reclaim_encoders()
        # after encoders were dropped, or thousands of contexts (a crawler's burst) went
        bursts = self.destroyed // CONTEXTS_PER_TRIM
        self.freed_memory.trim(self.app.compression.budget.dropped + bursts, now)
        self.freed_memory.after_burst(bursts, now)
        self.app.replays.sweep(now)
        self.measure_unsent()
        self.rt.revival.prune(now)
        self.sweep_handle = clock.call_later(until_tick(now, self.app.config.sweep_interval), self.sweep)

    def check_stalls(self, now: float) -> None:
        """End the streams whose socket stayed over its limit too long: only those that went over
        (``Outflow.over``) are looked at."""
        over = self.app.outflow.over
        if not over:
            return
        patience = self.app.config.slow_tab_timeout
        for stream in list(over):
            self.visits["stall"] += 1
            if stream.sink is None or not stream.over_since:
                over.discard(stream)
            elif stream.is_stalled(now, patience):
                over.discard(stream)
                log.info("disconnecting a tab of %s that stopped reading", stream.label)
                stream.close(abort=True)  # what it has not read is dropped, not kept for the send deadline
            elif not stream.over_since:  # back under its limit
                over.discard(stream)

    def keep_alive(self, now: float, interval: float) -> None:
        """Write a keep-alive comment to every open stream with nothing written for ``interval``
        seconds. Only the wheel's slots up to now are visited: a stream not due waits in a later one."""
        wheel = self.wheel
        current = int(now // _SLOT)
        due = [slot for slot in wheel if slot <= current]
        if not due:
            return
        ping = protocol.keep_alive()
        for slot in sorted(due):
            for stream in wheel.pop(slot):
                if stream.keep_alive_due != slot:
                    continue  # moved to another slot meanwhile
                self.visits["keep_alive"] += 1
                if stream.sink is None:
                    stream.keep_alive_due = None  # put back on the wheel when a stream opens again
                    continue
                if now - stream.last_write >= interval:
                    stream.keep_alive(ping, now)
                self.wheel_put(stream, stream.last_write + interval, current)

    def release_idle_encoders(self, now: float, idle_release: float) -> None:
        """Release the compressors of open streams idle for ``idle_release`` seconds (zstd ends its
        frame; a new compressor starts with the next event). Only live encoders are looked at."""
        budget = self.app.compression.budget
        if not budget.count:
            return
        outflow = self.app.outflow
        for encoder in budget.live():
            stream = encoder.owner
            if not isinstance(stream, Stream) or stream.outflow is not outflow:
                continue
            self.visits["idle_release"] += 1
            if (
                stream.encoder is encoder
                and encoder.is_active
                and now - stream.last_event > idle_release
                and encoder.releases_in_place
                and stream.sink is not None
            ):
                stream.write_raw(encoder.release().data)

    def measure_unsent(self) -> None:
        """Add up what waits in the tab sockets; past the cap, view frames are held everywhere
        and the readers furthest behind are cut off (:meth:`pyvia.stream.Outflow.measure_written`).
        Only streams written since the last sweep or still holding bytes are visited."""
        outflow = self.app.outflow
        self.visits["unsent"] += len(outflow.written) + len(outflow.watch)
        outflow.measure_written(self.app.config.max_unsent_bytes)

    def reclaim_encoders(self) -> None:
        """Over the encoder budget: release the least recently used encoders (zstd keeps its stream;
        brotli and gzip cannot restart mid-stream, so those tabs are asked to reconnect)."""
        for encoder, released in self.app.compression.reclaim():
            stream = encoder.owner
            if not isinstance(stream, Stream) or stream.sink is None:
                continue
            if released.data:
                stream.write_raw(released.data)
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
        if ctx.state is DESTROYED:
            return
        never_connected = ctx.state is CREATED
        move(ctx, DESTROY)
        self.destroyed += 1
        if self.contexts.get(ctx.id) is ctx:
            del self.contexts[ctx.id]
        self.connected.pop(ctx.id, None)
        if self.waiting.get(ctx.id) is ctx:
            del self.waiting[ctx.id]
        ctx.cancel_timers()
        for fn in ctx.cleanup_hooks:
            self.run_hook(fn, ctx, "cleanup")
        ctx.stream.close()
        self.app.replays.forget(ctx.stream)
        for name in ctx.scope_names:
            self.app.scopes.leave(ctx, name)
        self.app.ownership.release(ctx.id)
        if self.app.config.revival_window > 0 and not (never_connected and ctx.is_pristine):
            self.rt.revival.bury(ctx)  # a pristine view leaves nothing: Revival.recently_issued
        ctx.forget()  # what closures hold: a destroyed context leaves no reference cycle

    def arm_interval(self, ctx: Context, fn: Callable[..., Any], period: float) -> Interval:
        if self.app.clock is None:
            raise RuntimeError("set_interval needs a started app")
        interval = Interval(self.app, ctx, fn, period)
        interval.arm()
        ctx.add_timer(interval)
        return interval
