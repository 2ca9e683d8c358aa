"""The action endpoint: the early checks, the body's signals, the rate limit, and running an action
(here, relayed or forwarded to the worker holding its tab)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import logging
import math
import time
import typing
from collections.abc import Awaitable, Callable
from typing import Any

from pyvia import forms, protocol
from pyvia.arguments import decode_arguments
from pyvia.context import Action, ActionLine, Context, Turn
from pyvia.errors import (
    ActionTimeout,
    ClientError,
    ContextNotFound,
    Forbidden,
    MethodNotAllowed,
    NotFound,
    RateLimited,
    TabGone,
)
from pyvia.forms import FORM_TYPES, UploadedFile, check_form, parse_form, request_signals
from pyvia.http import Request, Response
from pyvia.lifecycle import DISCONNECTED
from pyvia.runtime.common import KIND_ACTION, KIND_PASSED, PASSED, newest, settle, settled, then

if typing.TYPE_CHECKING:
    from pyvia.app import App
    from pyvia.runtime import Runtime

log = logging.getLogger("pyvia")


class Actions:
    """Checks, parses, relays, forwards and runs the actions of tabs."""

    def __init__(self, app: App, rt: Runtime) -> None:
        self.app = app
        self.rt = rt
        #: The threads big forms are parsed on, made with the first one (ended when the app stops).
        self.parsing: concurrent.futures.ThreadPoolExecutor | None = None

    def relay(self, request: Request) -> asyncio.Future[Response] | None:
        """An action for a tab another worker holds, when this one knows which: sent there without
        a task, to be checked and run there (a proxy's connection carries the actions of many
        browsers, whose tabs live anywhere). None: the dispatch takes it (a tab of this worker, an
        owner not known yet, a connection that moves there instead, a malformed request)."""
        if request.method != "POST" or request.relayed or not self.parses_here(request):
            return None
        try:
            ctx_id = self.signals_of(request).get(protocol.CONTEXT_SIGNAL)
        except ClientError:
            return None
        if not isinstance(ctx_id, str) or ctx_id in self.rt.registry.contexts:
            return None
        assert self.app.loop is not None  # called by handle() with several workers
        answer: asyncio.Future[Response] = self.app.loop.create_future()
        answered = functools.partial(self.relayed, request, answer)
        if not self.app.ownership.relay(ctx_id, request, self.app.config.action_timeout, answered):
            return None
        request.kind = KIND_ACTION
        return answer

    def relayed(self, request: Request, answer: asyncio.Future[Response], result: Response | Exception | None) -> None:
        """The owner's answer to a relayed action, given to its asker (None: the long way)."""
        if answer.done():
            return  # the client left
        if result is None:  # the tab moved, or its worker is gone: the long way
            request.relayed = True
            settle(answer, self.rt.dispatch.handle(request))
            return
        response = self.rt.dispatch.error_response(result, request) if isinstance(result, Exception) else result
        self.app.metrics.observe_request("action", response.status)
        answer.set_result(response)

    def action(self, request: Request, name: str) -> Any:
        if request.method != "POST":
            raise MethodNotAllowed(headers=[("allow", "POST")])
        session_id = self.refuse_early(request)
        big = len(request.body) > forms.INLINE_BYTES  # checked first: a small body costs no call here
        if big and request.signals is None and forms.parses_off_loop(request):
            return self.parse_off_loop(request, functools.partial(self.action, request, name))
        signals = self.signals_of(request)
        sent_id = signals.get(protocol.CONTEXT_SIGNAL)
        ctx_id = sent_id if isinstance(sent_id, str) else ""
        named = ctx_id != ""
        ctx = self.rt.registry.contexts.get(ctx_id) if named else None
        if ctx is None and named and self.app.ownership.shared:
            return self.forward(request, ctx_id, session_id, signals, name)  # checked where it runs
        self.limit(request)  # its early checks passed above
        if not named:
            raise ContextNotFound("action without via_ctx")
        if ctx is None:
            return then(
                self.revive(request, ctx_id, session_id, signals),
                functools.partial(self.run_revived, request, name, signals, session_id),
            )
        return self.run(request, ctx, name, signals, session_id)

    def revive(self, request: Request, ctx_id: str, session_id: str | None, signals: dict[str, Any]) -> Any:
        """An action for a tab this server does not hold: revived from what this server kept of it,
        or from the snapshot the page sends with its actions while its stream is down. Without
        either the action is refused (409) until the stream revives the tab: it never runs on
        values the tab never had."""
        grave = self.rt.revival.graveyard.get(ctx_id)
        restore = self.rt.revival.kept_snapshot(ctx_id, grave)
        if protocol.SNAPSHOT_SIGNAL in signals:
            sent = self.rt.revival.browser_snapshot(ctx_id, signals, grave, restore)
            if sent is False:
                raise ContextNotFound("a tab whose snapshot was refused")
            restore = newest(restore, sent)
        if restore is None:
            verified = self.rt.revival.verify_id(ctx_id, session_id)
            if verified is None:
                raise ContextNotFound("unknown tab")
            raise TabGone(
                f"an action for a tab of {verified[0]!r} this server does not hold, "
                "without its snapshot; its stream revives it"
            )
        return self.rt.revival.revive(request, ctx_id, session_id, signals, restore or None)

    def refuse_early(self, request: Request) -> str | None:
        """The checks an action passes before its body is parsed, each cheap (headers, one HMAC,
        a count of separators): a foreign Origin, no session of this app (403), a form over its
        counts (413). So a flood of forged or oversized posts costs no parsing (issue 21).
        Returns the request's session id."""
        if request.checked:
            return self.rt.sessions.of(request)
        self.rt.dispatch.check_origin(request)
        session_id = self.rt.sessions.of(request)
        if session_id is None:
            raise Forbidden("action without a session of this app")
        if request.content_type in FORM_TYPES:
            check_form(request, self.app.form_limits)
        request.checked = True
        return session_id

    def parses_here(self, request: Request) -> bool:
        """Whether the dispatch may parse this action's body on the loop now: it passed the
        early checks and is small (a big form is parsed on a thread, by ``_action``)."""
        try:
            self.refuse_early(request)
        except ClientError:
            return False  # answered by the dispatch
        return request.signals is not None or not forms.parses_off_loop(request)

    async def parse_off_loop(self, request: Request, then: Callable[[], Any]) -> Any:
        """Parse a big form on a worker thread, so the loop goes on serving the other tabs."""
        if self.parsing is None:
            self.parsing = forms.parsing_threads()
        await asyncio.get_running_loop().run_in_executor(self.parsing, self.signals_of, request)
        return await settled(then())

    def check(self, request: Request) -> None:
        """The early checks and the rate limit, on the worker that runs the action (one that
        passes or forwards it does not count it)."""
        self.refuse_early(request)
        self.limit(request)

    def limit(self, request: Request) -> None:
        """The action rate limit of the request's address (429 with ``Retry-After`` past it)."""
        limiter = self.app.limiter
        wait = limiter.check(self.app.proxies.client_address(request), self.app.now()) if limiter.rate > 0 else 0.0
        if wait:
            raise RateLimited(
                f"action rate limit for {self.app.client_address(request)}",
                headers=[("retry-after", str(max(1, math.ceil(wait))))],
            )

    def signals_of(self, request: Request) -> dict[str, Any]:
        """The signals an action carries, parsed once per request (kept in ``request.signals``)."""
        signals = request.signals
        if signals is None:
            form = parse_form(request, self.app.form_limits) if request.content_type in FORM_TYPES else None
            if form is not None:
                request.form = form
            signals = request.signals = request_signals(request, form)
        return signals

    async def forward(
        self, request: Request, ctx_id: str, session_id: str | None, signals: dict[str, Any], name: str
    ) -> Any:
        """An action for a tab held by another worker or node: its owner answers it; when the
        owner is gone the tab is revived here."""
        owner = await self.app.ownership.owner(ctx_id)
        if owner is not None and await self.app.ownership.pass_connection(owner, request):
            request.kind = KIND_PASSED  # answered by the owner, on the connection it now holds
            return PASSED
        response = await self.app.ownership.forward(ctx_id, request, self.app.config.action_timeout)
        if response is not None:
            return response
        self.check(request)  # it runs here
        await self.rt.dispatch.follow(session_id)  # the tab revives here
        if (
            ctx_id not in self.rt.revival.graveyard
            and self.rt.registry.contexts.get(ctx_id) is None
            and await self.app.ownership.owner(ctx_id, cached=False) is not None
        ):
            self.rt.revival.vouch(ctx_id, {})
        ctx = self.rt.registry.contexts.get(ctx_id) or await settled(self.revive(request, ctx_id, session_id, signals))
        return await settled(self.run_revived(request, name, signals, session_id, ctx))

    def run_revived(
        self, request: Request, name: str, signals: dict[str, Any], session_id: str | None, found: Any
    ) -> Any:
        """Run the action on the tab just revived, or answer what a middleware answered instead of
        reviving it (a login check's 403 after a restart lost the login: its words, not "unknown tab")."""
        if found is not None and not isinstance(found, Context):
            return found
        return self.run(request, found, name, signals, session_id)

    def run(
        self, request: Request, ctx: Context | None, name: str, signals: dict[str, Any], session_id: str | None = None
    ) -> Any:
        """Run action ``name`` on ``ctx`` (``session_id``: the request's, when the caller has it)."""
        if ctx is None:
            raise ContextNotFound("unknown tab")
        if session_id is None:
            session_id = self.rt.sessions.of(request)
        if ctx.session_id != session_id and not self.rt.sessions.same(ctx, session_id):  # same(): a rotated session
            raise Forbidden("action on another session's tab")
        request.kind = KIND_ACTION
        action = ctx.actions.get(name)
        if action is None:
            raise NotFound(f"unknown action {name!r}")
        arguments = decode_arguments(name, action.params, request.query) if action.params.arguments else None
        click = request.headers.get_lower("via-click")
        if click is not None and not first_time(ctx, click):
            return self.answered(ctx, click)  # posted again after its answer was lost: it ran already

        if self.app.middleware_stack or ctx.route.middleware:
            return self.run_behind_middleware(request, ctx, name, action, arguments, signals)
        return self.invoke(request, ctx, name, action, arguments, signals)

    def run_behind_middleware(
        self,
        request: Request,
        ctx: Context,
        name: str,
        action: Action,
        arguments: dict[str, Any] | None,
        signals: dict[str, Any],
    ) -> Any:
        """Run the action behind the app's and the route's middleware, which may answer it instead."""
        ran: list[bool] = []

        def endpoint(req: Request) -> Any:
            ran.append(True)
            return self.invoke(req, ctx, name, action, arguments, signals)

        return then(
            self.rt.dispatch.with_middleware(request, ctx.route, endpoint),
            lambda answer: answer if ran else self.refused_by_middleware(ctx, answer, signals),
        )

    def refused_by_middleware(self, ctx: Context, answer: Any, signals: dict[str, Any]) -> Any:
        """A middleware answered the action itself (a login check's 403): the tab is told, in the
        middleware's words when it wrote a short text, and gets back what the click cleared."""
        if isinstance(answer, Response) and answer.status >= 400:
            messages = ctx.route.messages
            text = messages.get(str(answer.status), messages["default"])
            if dict(answer.headers).get("content-type", "").startswith("text/plain") and 0 < len(answer.body) <= 300:
                text = answer.body.decode(errors="replace")
            ctx.show_error(text, ctx.posted_back(signals, refused=True))
        return answer

    def invoke(
        self,
        req: Request,
        ctx: Context,
        name: str,
        action: Action,
        arguments: dict[str, Any] | None,
        signals: dict[str, Any],
        line: ActionLine | None = None,
    ) -> Any:
        """Run the action's code on the tab with the browser's writable values, and answer.

        A tab's actions run one at a time, in the order they came: while an ``async`` one awaits,
        the next posts wait in the tab's line (their values are not written into the tab before
        their turn). ``line``: the tab's line, when this post waited in it and its turn came."""
        if line is None and ctx.acting is not None:  # its place in the line is taken now: the order of arrival
            line = ctx.acting
            run = functools.partial(self.invoke, req, ctx, name, action, arguments, signals, line)
            return self.in_turn(ctx, line, line.join(), run)
        now = self.app.now()
        started = time.perf_counter()
        writes = self.app.store.writing
        ctx.request = req
        ctx.last_action = now
        if ctx.state is DISCONNECTED:
            self.rt.registry.set_deadline(ctx, max(ctx.deadline, now + self.app.config.reconnect_timeout))
        ctx.apply_client_signals(signals)
        ctx.begin_batch()
        try:
            pending = ctx.run_action(action, arguments)
        except BaseException:
            ctx.end_batch()
            if line is not None:
                self.pass_turn(ctx, line)
            raise
        if pending is None:
            ctx.end_batch()
            if line is not None:
                self.pass_turn(ctx, line)
            self.app.metrics.observe_action(time.perf_counter() - started)
            if self.app.config.dev:
                self.app.dev_log.add("action", ctx.route.pattern, name, time.perf_counter() - started)
            if self.app.store.writing > writes:
                return self.after_writes(ctx, writes)
            return self.response(ctx)
        if line is None:
            line = ctx.acting = ActionLine()  # the tab's next posts wait for this one
        return self.await_action(ctx, pending, started, writes, line)

    async def in_turn(self, ctx: Context, line: ActionLine, turn: Turn, run: Callable[[], Any]) -> Any:
        """``run()``'s answer, in the post's turn."""
        try:
            await turn.wait(self.app.config.action_timeout)
        except TimeoutError:
            if turn.given:  # given as its time ran out: the next post has it
                self.pass_turn(ctx, line)
            raise ActionTimeout(
                f"an action of {ctx.route.pattern} waited past {self.app.config.action_timeout} s "
                "for the tab's earlier actions"
            ) from None
        except BaseException:
            if turn.given:
                self.pass_turn(ctx, line)
            raise
        return await settled(run())

    def pass_turn(self, ctx: Context, line: ActionLine) -> None:
        """The action whose turn it was has ended: the next post in the line runs, or the tab is free."""
        if not line.next() and ctx.acting is line:
            ctx.acting = None

    async def await_action(
        self, ctx: Context, pending: Awaitable[Any], started: float, writes: int, line: ActionLine
    ) -> Response:
        try:
            try:
                await asyncio.wait_for(pending, self.app.config.action_timeout)
            except TimeoutError:
                raise ActionTimeout(
                    f"an action of {ctx.route.pattern} ran past {self.app.config.action_timeout} s"
                ) from None
            finally:
                ctx.end_batch()
                self.app.metrics.observe_action(time.perf_counter() - started)
        finally:
            self.pass_turn(ctx, line)  # the next runs now, before this one's writes are confirmed
        if self.app.store.writing > writes:
            return await self.after_writes(ctx, writes)
        return self.response(ctx)

    async def after_writes(self, ctx: Context, writes: int) -> Response:
        """Answer once the shared-state writes the action made are in the engine, with the cookie
        that has the session's next page views read them there (another worker's copy may not
        have them yet: a redirect to the thing just made must find it)."""
        await self.app.store.written(writes)
        response = self.response(ctx)
        response.headers.append(("set-cookie", self.rt.sessions.wrote_cookie_header()))
        return response

    def answered(self, ctx: Context, click: str) -> Response:
        """The answer a click that ran already gets again: its own, when it said more than an empty 200."""
        kept = ctx.click_answer
        if kept is not None and kept[0] == click:
            return Response(kept[1].status, list(kept[1].headers), kept[1].body)
        return self.response(ctx)

    def remember_answer(self, request: Request, response: Response) -> None:
        """Keep the answer of a click that ran, when a retry of it must get it too (the dispatch
        calls this for every action answer but the usual empty 200)."""
        click = request.headers.get_lower("via-click")
        signals = request.signals  # parsed once by the action, until the answer settles
        if click is None or not signals:
            return
        ctx_id = signals.get(protocol.CONTEXT_SIGNAL)
        ctx = self.app.contexts.get(ctx_id) if type(ctx_id) is str else None
        if ctx is not None and click in ctx.recent_clicks:
            ctx.click_answer = (click, response)

    def response(self, ctx: Context) -> Response:
        if ctx.error_shown:  # checked here: most actions have no error to clear, nor cookies to set
            ctx.clear_error()
        response = Response(200, [])
        if ctx.cookies_out:
            self.rt.pages.take_cookies(ctx, response)
        if ctx.answer_events:  # a navigation that must follow the cookies and the writes (TabRequest.redirect)
            response = Response(200, [*protocol.SSE_HEADERS, *response.headers], ctx.answer_events)
            ctx.answer_events = b""
        return response

    def form_of(self, request: Request) -> dict[str, str]:
        return request.form.fields if request.form is not None else {}

    def files_of(self, request: Request) -> dict[str, UploadedFile]:
        return request.form.files if request.form is not None else {}


#: How many of a tab's latest clicks are remembered: Datastar re-posts a request whose answer was
#: lost about a second later, and a tab makes far fewer clicks than this in that time.
RECENT_CLICKS = 16
#: A ``via-click`` id longer than this is not one the page made (``Math.random()``): ignored.
_MAX_CLICK_ID = 32


def first_time(ctx: Context, click: str) -> bool:
    """Whether the click ``click`` (its ``via-click`` id) is new to ``ctx``; it is remembered.

    Datastar posts an action again when the network lost its answer, with the same headers, while
    the server may have run it: the page gives each click a random id, and a retry of a click the
    tab ran is answered without running it again. An id that is not one the page makes counts as
    new every time (the action runs, as it would without an id)."""
    if len(click) > _MAX_CLICK_ID:
        return True
    recent = ctx.recent_clicks
    if click in recent:
        return False
    ctx.recent_clicks = (click, *recent[: RECENT_CLICKS - 1])
    return True
