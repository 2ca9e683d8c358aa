"""The stream endpoint: a tab's SSE stream opens (or moves, or revives its tab) and closes."""

from __future__ import annotations

import functools
import logging
import typing
from typing import Any

from pyvia import protocol
from pyvia.alerts import LOST_SIGNAL
from pyvia.context import Context
from pyvia.errors import ContextNotFound, Forbidden, MethodNotAllowed
from pyvia.forms import request_signals
from pyvia.http import Request, SharedFields, StreamResponse, StreamSink
from pyvia.lifecycle import CONNECT, CREATED, DESTROYED, move
from pyvia.runtime.common import KIND_PASSED, PASSED, newest, settled, then
from pyvia.scopes import Scope
from pyvia.view_frame import ViewFrame

if typing.TYPE_CHECKING:
    from pyvia.app import App
    from pyvia.runtime import Runtime

log = logging.getLogger("pyvia")


class TabStream:
    """Connects one stream response to its tab, remembering which sink is its own."""

    __slots__ = ("coding", "ctx", "last_event_id", "sink", "streams")

    def __init__(self, streams: Streams, ctx: Context, coding: str, last_event_id: str | None = None) -> None:
        self.streams = streams
        self.ctx = ctx
        self.coding = coding
        #: The id of the last frame the page got (Datastar's retries send it), None on a first request.
        self.last_event_id = last_event_id
        self.sink: StreamSink | None = None

    def open(self, sink: StreamSink) -> None:
        self.sink = sink
        self.streams.on_open(self.ctx, sink, self.coding, self.last_event_id)

    def close(self) -> None:
        if self.sink is not None:
            self.streams.on_close(self.ctx, self.sink)
            self.sink = None


class Streams:
    """Opens, resumes, moves and closes the streams of tabs."""

    def __init__(self, app: App, rt: Runtime) -> None:
        self.app = app
        self.rt = rt
        #: What open tabs' kept requests share of their headers (``Headers.pack``).
        self.shared_fields = SharedFields()

    def on_open(
        self, ctx: Context, sink: StreamSink, coding: str = "identity", last_event_id: str | None = None
    ) -> None:
        if ctx.state is DESTROYED:
            sink.write(protocol.execute_script("window.location.reload()"))
            sink.close()
            return
        now = self.app.now()
        # The first connect after the page view only needs what happened since (unless what
        # waited for it overflowed, or a broadcast's render was skipped meanwhile: ``stream.lost``).
        # A reconnect gets the frames after the last one its page got (``last_event_id``) from the
        # tab's replay buffer, and a full render when they are not all there any more, when a
        # render was skipped, or when the tab was revived.
        replay: list[bytes] | None = None
        if ctx.revived:
            full = True
        elif ctx.stream.lost:
            full = True
            if ctx.state is not CREATED:
                self.app.replays.full_renders += 1
        elif ctx.state is CREATED:
            full = False
        else:
            replay = ctx.stream.frames_after(last_event_id)
            full = replay is None
            replays = self.app.replays
            if full:
                replays.full_renders += 1
            else:
                replays.resumes += 1
                replays.replayed_frames += len(replay or ())
        if full:
            ctx.stream.held_view = None  # superseded by the full render below
        ctx.stream.attach(sink, now, self.app.compression.stream_encoder(coding, owner=ctx.stream), replay)
        ctx.request.headers.pack(self.shared_fields)  # the tab keeps its latest request, mostly unread
        self.rt.registry.waiting.pop(ctx.id, None)
        move(ctx, CONNECT)
        ctx.deadline = 0.0
        self.rt.registry.opened(ctx, now)
        signals: dict[str, Any] = {
            protocol.DISCONNECTED_SIGNAL: False,
            protocol.FILTER_SIGNAL: protocol.FILTER_OPEN,
            LOST_SIGNAL: False,
        }
        view = None
        if full:
            ctx.revived = False
            try:
                view = ctx.view_frame()
            except Exception as exc:  # the tab still connects; the next render may succeed
                self.rt.reporting.report(exc, ctx, "render", reraise=False)
            signals.update(ctx.full_signals())
        else:
            signals.update(ctx.changed_signals())
        if view is None or type(view) is ViewFrame:
            ctx.stream.send(protocol.patch_signals(signals), view, now, opening=True)
        else:  # an async view: it follows once rendered, before anything sent after it
            ctx.stream.send(protocol.patch_signals(signals), None, now, opening=True)
            ctx.deliver(b"", view)
        for fn in list(ctx.connect_hooks):
            self.rt.registry.run_hook(fn, ctx, "connect")
        for fn in self.app.connect_hooks:
            self.rt.registry.run_hook(fn, ctx, "connect")

    def on_close(self, ctx: Context, sink: StreamSink) -> None:
        if ctx.state is DESTROYED or not ctx.stream.detach(sink):
            return
        self.rt.registry.disconnected(ctx)

    def open(self, request: Request) -> Any:
        if request.method not in ("GET", "HEAD", "POST"):
            raise MethodNotAllowed(headers=[("allow", "GET, POST")])
        if request.method == "POST":
            self.rt.dispatch.check_origin(request)  # its body may write the tab's writable signals
        signals = request_signals(request, None)
        ctx_id = signals.get(protocol.CONTEXT_SIGNAL)
        if not isinstance(ctx_id, str) or not ctx_id:
            raise ContextNotFound("stream without via_ctx")
        session_id = self.rt.sessions.of(request)
        ctx = self.rt.registry.contexts.get(ctx_id)
        if ctx is None:
            if self.app.ownership.shared:
                return self.take_over(request, ctx_id, session_id, signals)
            return self.revive(request, ctx_id, session_id, signals)
        return self.stream_for(request, ctx)

    def revive(self, request: Request, ctx_id: str, session_id: str | None, signals: dict[str, Any]) -> Any:
        """A stream for a tab this server does not hold: revived from what this server kept of it,
        else from the browser's snapshot, which a stream request carries only when asked for."""
        grave = self.rt.revival.graveyard.get(ctx_id)
        restore = self.rt.revival.kept_snapshot(ctx_id, grave)
        if restore is None or (grave is not None and grave.ask_page):
            if self.rt.revival.verify_id(ctx_id, session_id) is None:
                return self.rt.revival.reload_stream(ctx_id)
            if request.method != "POST" or "last-event-id" in request.headers:
                return self.rt.revival.ask_for_snapshot()  # a GET, or a retry whose body was made before
            sent = self.rt.revival.browser_snapshot(ctx_id, signals, grave, restore)
            if sent is False:
                return self.rt.revival.reload_stream(ctx_id)
            restore = newest(restore, sent)
        return then(
            self.rt.revival.revive(request, ctx_id, session_id, signals, restore or None),
            lambda found: (
                # not revived, or a middleware answered instead: the tab reloads and gets that answer
                self.stream_for(request, found) if isinstance(found, Context) else self.rt.revival.reload_stream(ctx_id)
            ),
        )

    async def take_over(self, request: Request, ctx_id: str, session_id: str | None, signals: dict[str, Any]) -> Any:
        """A stream for a tab another worker holds: pass it the connection when it is a worker of
        this machine no busier than this one, else take the tab over (with its tab state and its
        signals); revive it here when that worker is gone. (The stream is the tab's long-lived
        connection, which the balanced accept spread: where it landed is a fine home for the tab too.)"""
        owner = await self.app.ownership.owner(ctx_id, cached=False)
        if owner is not None and await self.app.ownership.pass_connection(owner, request, balanced=True):
            request.kind = KIND_PASSED  # the stream opens there
            return PASSED
        await self.rt.dispatch.follow(session_id)  # the tab comes here
        if owner is not None and session_id is not None:
            handed = await self.app.ownership.take_over(owner, ctx_id, Scope.session(session_id))
            self.rt.revival.vouch(ctx_id, handed or {})
        found = self.rt.registry.contexts.get(ctx_id)
        if found is None:
            return await settled(self.revive(request, ctx_id, session_id, signals))
        return await settled(self.stream_for(request, found))

    def stream_for(self, request: Request, ctx: Context) -> Any:
        if not self.rt.sessions.same(ctx, self.rt.sessions.of(request)):
            raise Forbidden("stream for another session's tab")
        return self.rt.dispatch.with_middleware(request, ctx.route, functools.partial(self.response, ctx))

    def response(self, ctx: Context, request: Request) -> StreamResponse:
        """The stream of ``ctx``, in the coding ``request`` accepts (behind the route's middleware)."""
        coding = self.app.compression.coding_for(request)
        tab = TabStream(self, ctx, coding, request.headers.get_lower("last-event-id"))
        headers = [*protocol.SSE_HEADERS, *self.app.compression.stream_headers(coding)]
        return StreamResponse(headers, on_open=tab.open, on_close=tab.close)
