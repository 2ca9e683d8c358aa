"""Coalesced broadcasting: ``broadcast(scope)`` only marks; a flush sends each marked scope once.

Rules (php-via 0.13/0.14 semantics, DESIGN.md flow 4):

* A flush starts at most once per ``tick`` (25 ms): at once when the last one was longer ago,
  otherwise when the tick has passed. Under load flushes are spaced so that the gap after a
  flush is at least as long as the flush took: broadcasting never takes more than half the loop.
* A flush renders each tab of the marked scopes once, even when several of its scopes were
  marked; with ``share_render`` one render serves every tab of the same (primary scope, route)
  and the same bytes are written to each. Each scope's changed signals are formatted once.
* The writes happen here, from one callback, straight into each tab's stream: no task per tab.
* A throttled scope (``broadcast_throttle``) renders at most once per interval; the mark stays
  until then, so the last state is always delivered.
"""

from __future__ import annotations

import fnmatch
import logging
import time
from typing import TYPE_CHECKING, Any

from pyvia import protocol
from pyvia.scopes import ScopeState

if TYPE_CHECKING:
    from pyvia.app import App
    from pyvia.clock import TimerHandle
    from pyvia.context import Context

log = logging.getLogger("pyvia")

__all__ = ["Broadcaster", "next_flush_time"]


def next_flush_time(now: float, last_start: float, last_duration: float, tick: float) -> float:
    """When the next flush may start: a tick after the last start, and no sooner than the last
    flush's own duration after it ended (so flushes never take more than half the loop)."""
    return max(now, last_start + tick, last_start + 2 * last_duration)


class Broadcaster:
    """Marks scopes and flushes them on the app's clock."""

    __slots__ = (
        "_handle",
        "_last_duration",
        "_last_start",
        "_throttle_cache",
        "_throttles",
        "app",
        "flushes",
        "frames_sent",
        "pending",
        "tick",
    )

    def __init__(self, app: App, tick: float) -> None:
        self.app = app
        self.tick = tick
        self.pending: dict[str, ScopeState] = {}
        self._handle: TimerHandle | None = None
        self._last_start = -1e9
        self._last_duration = 0.0
        self._throttles: list[tuple[str, float]] = []
        self._throttle_cache: dict[str, float] = {}
        self.flushes = 0
        self.frames_sent = 0

    # --- marking ---------------------------------------------------------------------------------

    def mark(self, state: ScopeState) -> None:
        if state.name not in self.pending:
            self.pending[state.name] = state
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
        if clock is None or self._handle is not None:
            return
        now = clock.now()
        when = next_flush_time(now, self._last_start, self._last_duration, self.tick)
        if at is not None:
            when = max(when, at)
        self._handle = clock.call_later(when - now, self._on_timer) if when > now else clock.call_soon(self._on_timer)

    def _on_timer(self) -> None:
        self._handle = None
        self.flush()

    # --- flushing --------------------------------------------------------------------------------

    def flush(self, *, force: bool = False) -> int:
        """Send every marked scope that is due (all of them when ``force``); return tabs written."""
        clock = self.app.clock
        if not self.pending or clock is None:
            return 0
        started = time.perf_counter()
        now = clock.now()
        due: list[ScopeState] = []
        wait_until: float | None = None
        for name, state in list(self.pending.items()):
            interval = 0.0 if force or not self._throttles else self._interval_for(name)
            if interval and now - state.last_flush < interval:
                at = state.last_flush + interval
                wait_until = at if wait_until is None else min(wait_until, at)
                continue
            del self.pending[name]
            state.last_flush = now
            due.append(state)
        written = self._send(due, now) if due else 0
        self._last_start = now
        self._last_duration = time.perf_counter() - started
        self.flushes += 1
        self.app.metrics.observe_flush(self._last_duration)
        if self.pending:
            self._schedule(wait_until)
        return written

    def _send(self, states: list[ScopeState], now: float) -> int:
        # every tab of the marked scopes once, with the signal frames of each of its scopes
        targets: dict[str, tuple[Context, list[bytes]]] = {}
        for state in states:
            changes = state.take_changes()
            frame = protocol.patch_signals(changes) if changes else b""
            for ctx in state.members.values():
                entry = targets.get(ctx.id)
                if entry is None:
                    entry = targets[ctx.id] = (ctx, [])
                if frame:
                    entry[1].append(frame)
        shared: dict[tuple[str, str], bytes | None] = {}
        for ctx, frames in targets.values():
            view: bytes | None
            try:
                if ctx._share_render:
                    key = (ctx.primary_scope, ctx.route.pattern)
                    if key in shared:
                        view = shared[key]
                    else:
                        view = shared[key] = ctx._view_frame()
                else:
                    view = ctx._view_frame()
            except Exception as exc:
                self.app._report(exc, ctx, "render")
                view = None
            data = frames[0] if len(frames) == 1 else b"".join(frames)
            ctx.stream.send(data, view, now)
        self.frames_sent += len(targets)
        return len(targets)

    def reset(self) -> None:
        """Forget flush times (a new clock starts): marks and throttles stay."""
        self.cancel()
        self._last_start = -1e9
        self._last_duration = 0.0
        for state in self.pending.values():
            state.last_flush = 0.0

    def stats(self) -> dict[str, Any]:
        return {"flushes": self.flushes, "tab_frames": self.frames_sent, "pending": len(self.pending)}

    def cancel(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
