"""Revival: what is kept of destroyed tabs (the graveyard), and rebuilding a tab from its signed id
and a verified snapshot when its stream or an action comes back."""

from __future__ import annotations

import asyncio
import inspect
import logging
import secrets
import typing
from collections import OrderedDict
from typing import Any

import orjson

from pyvia import protocol
from pyvia.alerts import ERROR_SIGNAL, LOST_SIGNAL
from pyvia.context import Context
from pyvia.http import Request, Response, StreamResponse, StreamSink
from pyvia.runtime.binding import bind
from pyvia.runtime.common import GRAVEYARD_CAP, KIND_REVIVAL, STREAM_DOWN, settled, then, when_done
from pyvia.scopes import Scope
from pyvia.session import ContextIds

if typing.TYPE_CHECKING:
    from pyvia.app import App
    from pyvia.runtime import Runtime

log = logging.getLogger("pyvia")
RELOAD_MEMORY = 300.0  # a tab told to reload is told to stop retrying for this long (php-via)


#: A signal the browser's revival request did not carry.
_NOT_POSTED = object()


class Grave:
    """What is kept of a destroyed tab for its revival window: its tab state and its last snapshot."""

    __slots__ = ("ask_page", "deadline", "seq", "snapshot", "tab_state")

    def __init__(
        self,
        deadline: float,
        tab_state: dict[str, Any] | None,
        seq: int = 0,
        snapshot: str | None = None,
        *,
        ask_page: bool = False,
    ) -> None:
        self.deadline = deadline
        self.tab_state = tab_state
        #: The page holds what this record lacks (its writable values; a newer snapshot after a
        #: restart): a stream that revives the tab is asked for them.
        self.ask_page = ask_page
        #: The number of the last snapshot the browser was sent: an older one is a replay.
        self.seq = seq
        #: The server's own snapshot of the tab's server-owned signals (dropped past the budget).
        self.snapshot = snapshot


class Revived:
    """What the revival endpoint hands back through the middleware chain."""

    __slots__ = ("ctx",)

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx


def json_or_empty(state: dict[str, Any] | None) -> dict[str, Any]:
    """Tab state that can travel to another worker (JSON), or nothing."""
    if not state:
        return {}
    try:
        import orjson

        orjson.dumps(state)
    except TypeError:
        log.warning("a tab's tab_state is not JSON: it does not move with the tab to another worker")
        return {}
    return state


class Revival:
    """The graveyard of destroyed tabs and the revival of a tab from its signed id."""

    def __init__(self, app: App, rt: Runtime) -> None:
        self.app = app
        self.rt = rt
        # destroyed ids -> what revives them; insertion order is expiry order
        self.graveyard: OrderedDict[str, Grave] = OrderedDict()
        self.graveyard_bytes = 0  # of the snapshots it holds
        self.reviving: dict[str, asyncio.Task[Any]] = {}  # revivals under way, by context id
        self.reload_sent: OrderedDict[str, float] = OrderedDict()

    def bury(self, ctx: Context) -> None:
        """Keep what revives ``ctx`` for the revival window: its tab state and a snapshot of its
        server-owned signals (the newest, which the browser may not have got), within a budget.
        (A pristine page view, whose page holds all of it, is not buried: :meth:`recently_issued`.)"""
        try:
            snapshot = ctx.final_snapshot()
        except TypeError:
            snapshot = None  # a value that is not JSON: the page could not show it either
        self.unbury(ctx.id)
        grave = Grave(
            self.app.now() + self.app.config.revival_window,
            ctx.held_tab_state,
            ctx.snapshot_seq,
            snapshot,
            ask_page=ctx.has_writable_signals,
        )
        self.graveyard[ctx.id] = grave
        if snapshot is not None:
            self.graveyard_bytes += len(snapshot)
            if self.graveyard_bytes > self.app.config.max_snapshot_bytes * 2048:  # 32 MiB at the default bound
                for old in self.graveyard.values():  # the oldest first
                    if old.snapshot is not None:
                        self.graveyard_bytes -= len(old.snapshot)
                        old.snapshot = None
                        if self.graveyard_bytes <= self.app.config.max_snapshot_bytes * 1024:
                            break

    def unbury(self, ctx_id: str) -> Grave | None:
        grave = self.graveyard.pop(ctx_id, None)
        if grave is not None and grave.snapshot is not None:
            self.graveyard_bytes -= len(grave.snapshot)
        return grave

    def prune(self, now: float) -> None:
        grave = self.graveyard
        while grave:
            first = next(iter(grave.values()))
            if first.deadline > now and len(grave) <= GRAVEYARD_CAP:
                break
            self.unbury(next(iter(grave)))
        sent = self.reload_sent
        while sent and (next(iter(sent.values())) <= now or len(sent) > GRAVEYARD_CAP):
            sent.popitem(last=False)

    def kept_snapshot(self, ctx_id: str, grave: Grave | None) -> tuple[int, dict[str, Any]] | None:
        """The snapshot this server kept of a tab (its own, handed over or restored), opened."""
        if grave is None or grave.snapshot is None:
            return None
        return self.app.snapshots.open(ctx_id, grave.snapshot)

    def browser_snapshot(
        self, ctx_id: str, signals: dict[str, Any], grave: Grave | None, kept: tuple[int, dict[str, Any]] | None
    ) -> tuple[int, dict[str, Any]] | typing.Literal[False] | None:
        """The snapshot the page sent: ``(seq, values)``; None if it sent none, or one older than
        what this server kept (the server's own newer values win: the page may have missed a
        frame); False if it is forged, made for another tab, or older than one this server sent
        while it kept no values to revive from (a replay)."""
        raw = signals.get(protocol.SNAPSHOT_SIGNAL)
        if raw is None:
            return None
        opened = self.app.snapshots.open(ctx_id, raw)
        if opened is None:
            log.warning("refused a forged snapshot for a tab (its page reloads)")
            return False
        if grave is not None and opened[0] < grave.seq:
            if kept is not None:
                return None
            log.warning("refused a replayed snapshot for a tab (its page reloads)")
            return False
        return opened

    def ask_for_snapshot(self) -> Response:
        """Tell the page to open its stream again with its writable signals and its snapshot."""
        body = orjson.dumps({protocol.REVIVE_SIGNAL: secrets.token_hex(4), **STREAM_DOWN})
        return Response(200, [("content-type", "application/json"), ("cache-control", "no-store")], body)

    def vouch(self, ctx_id: str, handed: dict[str, Any], *, restored: bool = False) -> None:
        """The directory names an owner (alive or dead) for this tab, so it lived recently: let
        ``_revive`` bring it back here, with what its owner handed over, as it would a tab
        destroyed here. ``restored``: the record comes from an earlier process, which may have
        sent the page a newer snapshot after it was made."""
        if ctx_id not in self.graveyard:
            tab_state = handed.get("tab_state")
            snapshot = handed.get("snapshot")
            seq = handed.get("seq")
            self.graveyard[ctx_id] = Grave(
                self.app.now() + self.app.config.revival_window,
                tab_state if isinstance(tab_state, dict) else {},
                seq if type(seq) is int else 0,
                snapshot if isinstance(snapshot, str) else None,
                ask_page=restored or handed.get("writable") is not False,
            )
            if isinstance(snapshot, str):
                self.graveyard_bytes += len(snapshot)

    def hand_over(self, ctx_id: str, session_hash: str) -> dict[str, Any] | None:
        """Another worker took this tab's stream: let the tab go, giving it its tab state and a
        snapshot of its server-owned signals."""
        ctx = self.rt.registry.contexts.get(ctx_id)
        if ctx is None:
            grave = self.unbury(ctx_id)
            if grave is None:
                return None
            return {
                "tab_state": json_or_empty(grave.tab_state),
                "snapshot": grave.snapshot,
                "seq": grave.seq,
                "writable": grave.ask_page,
            }
        if Scope.session(ctx.session_id) != session_hash:
            return None
        state = json_or_empty(ctx.held_tab_state)
        writable = ctx.has_writable_signals
        try:  # taken here, not from its grave: a pristine view leaves none
            snapshot = ctx.final_snapshot()
        except TypeError:
            snapshot = None  # a value that is not JSON: the page could not show it either
        seq = ctx.snapshot_seq
        self.rt.registry.destroy(ctx)
        self.unbury(ctx_id)
        return {"tab_state": state, "snapshot": snapshot, "seq": seq, "writable": writable}

    def reload_stream(self, ctx_id: str) -> Response | StreamResponse:
        """A stream for a tab that cannot be revived: reload once; then say so in the page's alert
        (a JSON answer, which also ends the page's retries)."""
        if ctx_id in self.reload_sent:
            body = orjson.dumps(  # no longer reconnecting: the alert says why
                {ERROR_SIGNAL: self.app.messages["gone"], protocol.DISCONNECTED_SIGNAL: True, LOST_SIGNAL: False}
            )
            return Response(200, [("content-type", "application/json"), ("cache-control", "no-store")], body)
        self.reload_sent[ctx_id] = self.app.now() + RELOAD_MEMORY

        def on_open(sink: StreamSink) -> None:
            sink.write(protocol.execute_script("window.location.reload()"))
            sink.close()

        return StreamResponse(list(protocol.SSE_HEADERS), on_open=on_open, on_close=lambda: None)

    def verify_id(self, ctx_id: str, session_id: str | None) -> tuple[str, dict[str, str]] | None:
        """The route and params of a context id this app signed for ``session_id``, if it may revive."""
        if session_id is None or self.app.config.revival_window <= 0:
            return None
        grave = self.graveyard.get(ctx_id)
        if grave is not None:
            if grave.deadline < self.app.now():
                return None
        elif not self.recently_issued(ctx_id) and self.app.now() - self.app.started_at > self.app.config.revival_window:
            # Unknown here and not recent: made by an earlier process (or its record expired). It
            # died at least as long ago as this process has run, so past the window it is too old.
            return None
        verified = self.app.context_ids.verify(ctx_id, session_id)
        if verified is None and session_id in self.rt.sessions.rotated_from:  # made before a regenerate_session
            verified = self.app.context_ids.verify(ctx_id, self.rt.sessions.rotated_from[session_id])
        if verified is None and (old := self.rt.sessions.rotation_of(session_id)) is not None:  # rotated elsewhere
            verified = self.app.context_ids.verify(ctx_id, self.rt.sessions.rotated_from.get(old, old))
            if verified is not None:
                self.rt.sessions.finish_rotation(old, session_id)
        if verified is None:
            log.info("refused to revive a context id not signed for this session")
        return verified

    def recently_issued(self, ctx_id: str) -> bool:
        """Whether the id was made within the revival window: a tab that recent may revive without
        a record here. A page view whose stream never came and that changed nothing leaves none
        (its page's id and snapshot rebuild it exactly), so a crawler's burst holds no memory once
        its contexts expire. No tab dies before its id is made, so none revives past the window
        this way. The date is the id's own, under its signature (checked next, by ``verify``)."""
        issued = ContextIds.issued(ctx_id)
        return issued > 0 and self.app.wall_time() - issued <= self.app.config.revival_window

    def revive(
        self,
        request: Request,
        ctx_id: str,
        session_id: str | None,
        signals: dict[str, Any],
        restore: tuple[int, dict[str, Any]] | None,
    ) -> Any:
        """Rebuild a destroyed or unknown tab from its signed id: its :class:`Context`, ``None``
        when it cannot be, or what a middleware answered instead (a login check's refusal).

        ``restore`` holds the values of its server-owned signals (a verified snapshot); the
        writable ones come from ``signals``, the browser's. A second revival of the same tab while
        one is under way (its stream and an action at once) waits for it: the handler runs once.
        """
        under_way = self.reviving.get(ctx_id)
        if under_way is not None:
            return when_done(under_way, lambda: self.rt.registry.contexts.get(ctx_id))
        verified = self.verify_id(ctx_id, session_id)
        if verified is None:
            return None
        assert session_id is not None  # checked by _verify_id
        pattern, params = verified
        route = self.app.router.page(pattern)
        if route is None:
            return None
        grave = self.graveyard.get(ctx_id)
        request.kind = KIND_REVIVAL
        request.path_params = params

        def endpoint(req: Request) -> Any:
            ctx = Context(self.app, ctx_id, route, params, session_id, req)
            if grave is not None and grave.tab_state is not None:
                ctx.tab_state = grave.tab_state
            kwargs = bind(route, params, ctx, req)
            return then(route.handler(**kwargs), lambda result: Revived(ctx))

        def finish(result: Any) -> Any:
            if not isinstance(result, Revived):
                return result  # middleware answered instead: the request gets that answer
            existing = self.rt.registry.contexts.get(ctx_id)
            if existing is not None:  # a concurrent revival of the same tab won
                return existing
            ctx = result.ctx
            if restore is not None:
                ctx.restore_snapshot(*restore)
            ctx.apply_client_signals(signals)
            for sig in ctx.signals.values():  # the first frame sends what the browser may lack, not
                # the values it posted itself: the user may have typed on since
                sig.changed = not sig.writable or signals.get(sig.id, _NOT_POSTED) != sig.value
            ctx.revived = True
            self.unbury(ctx_id)
            self.rt.registry.register(ctx)
            log.info("revived a tab of %s", route.pattern)
            return ctx

        result = then(
            self.rt.dispatch.with_middleware(request, route, endpoint),
            lambda result: self.rt.pages.after_loads(lambda: finish(result)),
        )
        if not inspect.isawaitable(result):
            return result
        task = self.app.create_task(settled(result))
        self.reviving[ctx_id] = task
        task.add_done_callback(lambda _: self.reviving.pop(ctx_id, None))
        return task
