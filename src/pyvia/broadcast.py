"""Coalesced broadcasting: ``broadcast(scope)`` only marks; a flush sends each marked scope once.

Rules (php-via 0.13/0.14 semantics, DESIGN.md flow 4, plus the settle rule below):

* A flush starts at most once per ``tick`` (25 ms): at once when the last one was longer ago,
  otherwise when the tick has passed. Under load flushes are spaced so that the gap after a
  flush is at least as long as the flush took: broadcasting never takes more than half the loop.
* A flush renders each tab of the marked scopes once, even when several of its scopes were
  marked; with ``share_render`` one render serves every tab of the same (primary scope, route)
  and the same bytes are written to each. Each scope's changed signals are formatted once.
* The writes happen here, from one callback per slice, straight into each tab's stream: no task
  per tab.
* A throttled scope (``broadcast_throttle``) renders at most once per interval; the mark stays
  until then, so the last state is always delivered.
* **Settle** (``settle`` > 0, 2 ms by default): the flush that starts at once on an idle loop is
  written in slices (the first ~0.3 ms of work, each next one twice as long), with a loop turn
  between them. If one of its scopes is marked again meanwhile, the mark was the start of a
  burst: the rest of that flush is dropped (its signal changes go back to the scopes) and the
  next one starts once no mark has come for ``settle``, at the latest a tick after the burst's
  first mark, and still no sooner than twice the cut flush's duration after it started. An
  isolated change therefore goes out as soon as before, while a burst costs one full flush
  instead of a wasted one plus one a tick later (bench/RESULTS-2.md 1b). The tabs of the slices
  already written get the burst's state too, so only they may render a scope twice within a
  tick. Throttled scopes are never cut short; ``settle=0`` keeps the plain tick policy.
"""

from __future__ import annotations

import asyncio
import fnmatch
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pyvia import protocol
from pyvia.compress import ZSTD
from pyvia.lifecycle import State
from pyvia.scopes import ScopeState
from pyvia.view_frame import ViewFrame

if TYPE_CHECKING:
    from pyvia.app import App
    from pyvia.clock import TimerHandle
    from pyvia.compress.shared_stream import SharedStream
    from pyvia.context import Context

log = logging.getLogger("pyvia")

__all__ = ["Broadcaster", "next_flush_time", "settled_flush_time"]

#: Work in the first slice of a flush that may be cut short: a few dozen tabs at the per-tab cost
#: of bench/RESULTS-2.md 1a, so a burst's first mark costs little. Each later slice is twice as
#: long, so a flush to thousands of tabs takes a handful of loop turns, not hundreds.
SLICE_SECONDS = 0.0003
DESTROYED = State.DESTROYED
#: Tabs written between two looks at the time (a perf_counter call is cheap next to a tab's write).
_CHECK_EVERY = 16


def next_flush_time(now: float, last_start: float, last_duration: float, tick: float) -> float:
    """When the next flush may start: a tick after the last start, and no sooner than the last
    flush's own duration after it ended (so flushes never take more than half the loop)."""
    return max(now, last_start + tick, last_start + 2 * last_duration)


def settled_flush_time(
    now: float, last_mark: float, first_mark: float, settle: float, tick: float, last_start: float, last_duration: float
) -> float:
    """When a burst's flush may start: ``settle`` after its latest mark, at the latest a tick after
    its first, never sooner than twice the last flush's duration after that flush started."""
    return max(now, min(last_mark + settle, first_mark + tick), last_start + 2 * last_duration)


class _Slices:
    """A flush being written slice by slice; what is needed to finish it or to drop the rest."""

    __slots__ = (
        "budget",
        "changes",
        "duration",
        "first_mark",
        "frames",
        "index",
        "last_flush",
        "now",
        "shared",
        "states",
        "targets",
    )

    def __init__(
        self,
        states: list[ScopeState],
        changes: list[dict[str, Any]],
        last_flush: list[float],
        targets: list[tuple[Context, list[bytes]]],
        now: float,
        first_mark: float,
    ) -> None:
        self.first_mark = first_mark  # the burst, if one follows, started here
        self.states = states
        self.changes = changes  # the signal changes taken from each state, to give back if dropped
        self.last_flush = last_flush  # each state's previous flush time, for its throttle
        self.targets = targets
        self.index = 0
        self.shared: dict[tuple[str, str], ViewFrame | asyncio.Future[ViewFrame | None] | None] = {}
        self.frames: dict[tuple[str, str], SharedStream | None] = {}  # the zstd frames of each shared render
        self.now = now
        self.duration = 0.0
        self.budget = 0.0  # the time the next slice may take


class Broadcaster:
    """Marks scopes and flushes them on the app's clock."""

    __slots__ = (
        "_first_mark",
        "_handle",
        "_last_duration",
        "_last_mark",
        "_last_start",
        "_next_handle",
        "_settling",
        "_slices",
        "_throttle_cache",
        "_throttles",
        "_when",
        "app",
        "cut_short",
        "flushes",
        "frames_sent",
        "pending",
        "settle",
        "slice_seconds",
        "stopped",
        "tick",
    )

    def __init__(self, app: App, tick: float, settle: float = 0.0) -> None:
        self.app = app
        self.tick = tick
        self.settle = settle
        self.slice_seconds = SLICE_SECONDS
        self.pending: dict[str, ScopeState] = {}
        self._handle: TimerHandle | None = None
        self._when = 0.0  # when _handle fires; 0.0 for "at once" (a flush that may be cut short)
        self._last_start = -1e9
        self._last_duration = 0.0
        self._first_mark = 0.0  # the first mark not yet flushed
        self._last_mark = 0.0
        self._settling = False  # a burst is on: flush when its marks settle
        self._slices: _Slices | None = None
        self._next_handle: TimerHandle | None = None
        self._throttles: list[tuple[str, float]] = []
        self._throttle_cache: dict[str, float] = {}
        self.flushes = 0
        self.frames_sent = 0
        self.cut_short = 0
        #: The app is stopping: what changes now is not broadcast here (the tabs are leaving).
        self.stopped = False

    # --- marking ---------------------------------------------------------------------------------

    def mark(self, state: ScopeState) -> None:
        if self.settle:
            clock = self.app.clock
            if clock is not None:
                now = self._last_mark = clock.now()
                if not self.pending:
                    self._first_mark = now
        if state.name not in self.pending:
            self.pending[state.name] = state
            if self._slices is None:  # else the next slice looks at the marks
                self._schedule()

    def throttle(self, pattern: str, min_interval: float) -> None:
        self._throttles.append((pattern, min_interval))
        self._throttle_cache.clear()

    def _interval_for(self, name: str) -> float:
        cached = self._throttle_cache.get(name)
        if cached is None:
            cached = max((i for p, i in self._throttles if fnmatch.fnmatchcase(name, p)), default=0.0)
            self._throttle_cache[name] = cached
        return cached

    def _schedule(self, at: float | None = None) -> None:
        clock = self.app.clock
        if clock is None or self._handle is not None or self._slices is not None or self.stopped:
            return
        now = clock.now()
        if self._settling:
            when = settled_flush_time(
                now, self._last_mark, self._first_mark, self.settle, self.tick, self._last_start, self._last_duration
            )
        else:
            when = next_flush_time(now, self._last_start, self._last_duration, self.tick)
        if at is not None:
            when = max(when, at)
        if when > now:
            self._when = when
            self._handle = clock.call_later(when - now, self._on_timer)
        else:
            self._when = 0.0
            self._handle = clock.call_soon(self._on_timer)

    def _on_timer(self) -> None:
        self._handle = None
        clock = self.app.clock
        if self._settling and clock is not None:
            now = clock.now()
            if now < self._last_mark + self.settle and now < self._first_mark + self.tick:
                self._schedule()  # marks came after the timer was set: wait for them to settle
                return
        self._flush(force=False, may_cut=bool(self.settle) and not self._settling and self._when == 0.0)

    # --- flushing --------------------------------------------------------------------------------

    def flush(self, *, force: bool = False) -> int:
        """Send every marked scope that is due (all of them when ``force``); return tabs written."""
        return self._flush(force=force, may_cut=False)

    def _flush(self, *, force: bool, may_cut: bool) -> int:
        clock = self.app.clock
        written = 0
        if self._slices is not None:
            if not force:
                return 0  # its next slice runs soon and takes the new marks into account
            written = self._finish_slices()
        if not self.pending or clock is None:
            return written
        started = clock.perf()
        now = clock.now()
        due: list[ScopeState] = []
        last_flush: list[float] = []
        wait_until: float | None = None
        for name, state in list(self.pending.items()):
            interval = 0.0 if force or not self._throttles else self._interval_for(name)
            if interval:
                if now - state.last_flush < interval:
                    at = state.last_flush + interval
                    wait_until = at if wait_until is None else min(wait_until, at)
                    continue
                may_cut = False  # a throttled scope is written whole: its tabs get one frame per interval
            del self.pending[name]
            last_flush.append(state.last_flush)
            state.last_flush = now
            due.append(state)
        self._settling = False
        self._last_start = now
        if due:
            changes, targets = self._collect(due)
            if may_cut:
                slices = _Slices(due, changes, last_flush, targets, now, self._first_mark)
                slices.budget = self.slice_seconds
                written += self._write(slices, started + slices.budget, clock.perf)
                if slices.index < len(targets):
                    slices.duration = clock.perf() - started
                    self._slices = slices
                    self._next_handle = clock.call_soon(self._next_slice)
                    return written
            else:
                written += self._write(_Slices(due, changes, last_flush, targets, now, now), None)
        self._flushed(clock.perf() - started, wait_until)
        return written

    def _next_slice(self) -> None:
        """Write the next slice of a flush, or drop the rest when a burst has begun."""
        self._next_handle = None
        slices = self._slices
        if slices is None:
            return
        clock = self.app.clock
        if clock is None:
            self._finish_slices()
            return
        if any(state.name in self.pending for state in slices.states):
            self._cut_short(slices)
            return
        started = clock.perf()
        slices.budget *= 2
        self._write(slices, started + slices.budget, clock.perf)
        slices.duration += clock.perf() - started
        if slices.index < len(slices.targets):
            self._next_handle = clock.call_soon(self._next_slice)
            return
        self._slices = None
        self._flushed(slices.duration, None)

    def _finish_slices(self) -> int:
        slices = self._slices
        assert slices is not None
        if self._next_handle is not None:
            self._next_handle.cancel()
            self._next_handle = None
        perf = self.app.clock.perf if self.app.clock is not None else time.perf_counter
        started = perf()
        written = self._write(slices, None)
        self._slices = None
        self._flushed(slices.duration + perf() - started, None)
        return written

    def _cut_short(self, slices: _Slices) -> None:
        # Every scope of the flush goes back to the marks with the changes it had taken, so the
        # tabs not yet written get them from the next flush, which waits for the burst to settle.
        for state, changes, last_flush in zip(slices.states, slices.changes, slices.last_flush, strict=True):
            state.restore_changes(changes)
            state.last_flush = last_flush
            self.pending.setdefault(state.name, state)
        self._slices = None
        self._settling = True
        self._first_mark = slices.first_mark
        self._last_duration = slices.duration
        self.flushes += 1
        self.cut_short += 1
        self.app.metrics.observe_flush(slices.duration)
        self._schedule()

    def _flushed(self, duration: float, wait_until: float | None) -> None:
        self._last_duration = duration
        self.flushes += 1
        self.app.metrics.observe_flush(duration)
        if self.pending:
            self._schedule(wait_until)

    def _collect(self, states: list[ScopeState]) -> tuple[list[dict[str, Any]], list[tuple[Context, list[bytes]]]]:
        # every tab of the marked scopes once, with the signal frames of each of its scopes
        targets: dict[str, tuple[Context, list[bytes]]] = {}
        taken: list[dict[str, Any]] = []
        for state in states:
            changes = state.take_changes()
            taken.append(changes)
            frame = protocol.patch_signals(changes) if changes else b""
            for ctx in state.members.values():
                entry = targets.get(ctx.id)
                if entry is None:
                    entry = targets[ctx.id] = (ctx, [])
                if frame:
                    entry[1].append(frame)
        return taken, list(targets.values())

    def _write(self, slices: _Slices, deadline: float | None, perf: Callable[[], float] = time.perf_counter) -> int:
        """Render and write tabs from ``slices.index`` on, until done or ``perf()`` passes ``deadline``."""
        targets, shared, now, app = slices.targets, slices.shared, slices.now, self.app
        start = i = slices.index
        end = len(targets)
        sent = 0
        while i < end:
            ctx, frames = targets[i]
            i += 1
            if ctx.state is DESTROYED:  # between two slices of a flush
                continue
            view: ViewFrame | asyncio.Future[ViewFrame | None] | None
            frames_of: SharedStream | None = None
            sink = ctx.stream.sink
            try:
                if sink is None or sink.is_closed:  # between two streams (a reload, a hidden tab):
                    ctx.stream.forgo_view()  # no render for it; its next stream opens with one
                    view = None
                elif ctx.share_render:
                    key = (ctx.primary_scope, ctx.route.pattern)
                    if key in shared:
                        view = shared[key]
                    else:
                        view = shared[key] = ctx.view_frame()
                    encoder = ctx.stream.encoder
                    if encoder is not None and encoder.coding == ZSTD:
                        if key in slices.frames:
                            frames_of = slices.frames[key]
                        else:
                            frames_of = slices.frames[key] = self._shared_frames(key)
                else:
                    view = ctx.view_frame()
            except Exception as exc:
                app.report(exc, ctx, "render")
                view = None
            data = frames[0] if len(frames) == 1 else b"".join(frames)
            if ctx.pending_frames is None and (view is None or type(view) is ViewFrame):
                ctx.stream.send(data, view, now, shared=frames_of)
            else:  # an async view, or frames still waiting behind one: in order
                ctx.deliver(data, view)
            sent += 1
            if deadline is not None and not (i - start) % _CHECK_EVERY and perf() >= deadline:
                break
        slices.index = i
        self.frames_sent += sent
        return sent

    def _shared_frames(self, key: tuple[str, str]) -> SharedStream | None:
        """The shared zstd frames of a shared render, when its scope has tabs enough to gain."""
        compression = self.app.compression
        least = compression.shared_min_tabs
        if not least:
            return None
        state = self.app.scopes.get(key[0])
        if state is None or len(state.members) < least:
            return None
        return compression.shared_stream(key)

    def reset(self) -> None:
        """Forget flush times (a new clock starts): marks and throttles stay."""
        self.cancel()
        self.stopped = False
        self._last_start = -1e9
        self._last_duration = 0.0
        self._settling = False
        for state in self.pending.values():
            state.last_flush = 0.0

    def stats(self) -> dict[str, Any]:
        return {
            "flushes": self.flushes,
            "tab_frames": self.frames_sent,
            "pending": len(self.pending),
            "flushes_cut_short": self.cut_short,
        }

    def stop(self) -> None:
        """At an app's stop, after its last flush: the stop and disconnect hooks' writes render no
        views for tabs whose streams are ending (they are revived or resumed elsewhere)."""
        self.cancel()
        self.stopped = True

    def cancel(self) -> None:
        """Stop the timer; a flush being written in slices is finished first."""
        if self._slices is not None:
            self._finish_slices()
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
