"""Dispatch: a request -> its kind and its endpoint, the middleware around it, errors -> answers.

``handle(request)`` answers a page view, a stream connect, an action, the close beacon, the
Datastar bundle or a plain route, and returns a ``Response``, a ``StreamResponse`` or — only when
user code is asynchronous — an awaitable of one. Client faults become 4xx answers here; any other
exception is logged with its phase and answered with a bare 500, and the process keeps serving.
"""

from __future__ import annotations

import functools
import inspect
import logging
import typing
from collections.abc import Awaitable, Callable
from typing import Any

from pyvia import protocol
from pyvia.devtools import DEVTOOLS_PATH
from pyvia.devtools import error_events as dev_error_events
from pyvia.devtools import error_page as dev_error_page
from pyvia.devtools import server_page as devtools_page
from pyvia.downloads import DOWNLOAD_PREFIX
from pyvia.errors import ClientError, Forbidden, MalformedRequest, MethodNotAllowed, NotFound, ServiceError
from pyvia.forms import request_signals
from pyvia.http import HandleResult, Request, Response, StreamResponse
from pyvia.ops.health import health_response, metrics_response, ready_response
from pyvia.routing import Middleware, Route
from pyvia.runtime.binding import bind
from pyvia.runtime.common import (
    ACTION_PREFIX,
    BUNDLE_PATH,
    CLOSE_PATH,
    KIND_ACTION,
    KIND_ASSET,
    KIND_BEACON,
    KIND_DOWNLOAD,
    KIND_OPS,
    KIND_PAGE,
    KIND_REVIVAL,
    KIND_ROUTE,
    KIND_STREAM,
    SSE_PATH,
    then,
)
from pyvia.runtime.reporting import context_of
from pyvia.security import same_origin

if typing.TYPE_CHECKING:
    from pyvia.app import App
    from pyvia.runtime import Runtime

log = logging.getLogger("pyvia")


OPS_PATHS: dict[str, Callable[[Any], Response]] = {
    "/_health": health_response,
    "/_ready": ready_response,
    "/metrics": metrics_response,
}


class Dispatch:
    """Routes one request to its endpoint and turns what fails into an answer."""

    def __init__(self, app: App, rt: Runtime) -> None:
        self.app = app
        self.rt = rt

    def handle(self, request: Request) -> HandleResult:
        """Answer one request (see the module docstring)."""
        if self.app.ownership.shared:  # several workers: the session's data comes from the engine first
            if request.path.startswith(ACTION_PREFIX):
                relayed = self.rt.actions.relay(request)
                if relayed is not None:
                    return relayed
            session_id = self.rt.sessions.of(request)
            if self.unfollowed(session_id) and not self.for_a_tab_elsewhere(request):
                return self.handle_after(self.follow(session_id), request)
        try:
            result = self.dispatch(request)
        except BaseException as exc:  # every failure becomes an answer here
            result = self.error_response(exc, request)
        return self.answer(result, request)

    def for_a_tab_elsewhere(self, request: Request) -> bool:
        """A stream or an action for a tab this worker does not hold: most go to the tab's worker
        (passed or forwarded), so the session is read here only if the tab comes (``_follow``)."""
        path = request.path
        if path != SSE_PATH and not path.startswith(ACTION_PREFIX):
            return False
        if path != SSE_PATH and not self.rt.actions.parses_here(request):
            return False
        try:
            signals = request_signals(request, None) if path == SSE_PATH else self.rt.actions.signals_of(request)
        except ClientError:
            return False  # answered as a bad request by the dispatch
        ctx_id = signals.get(protocol.CONTEXT_SIGNAL)
        return isinstance(ctx_id, str) and ctx_id not in self.rt.registry.contexts

    def unfollowed(self, session_id: str | None) -> bool:
        """Several workers, and this one has not read the session's data from the engine yet."""
        return session_id is not None and not self.app.store.has_session(session_id)

    async def follow(self, session_id: str | None) -> None:
        """Read the session's data, if this worker does not follow it yet, before a tab of it comes here."""
        if self.unfollowed(session_id):
            assert session_id is not None  # checked by unfollowed
            await self.app.store.load_session(session_id)

    def handle_forwarded(self, request: Request, ctx_id: str) -> HandleResult:
        """An action for tab ``ctx_id`` of this worker that another worker received: checked
        (origin, rate limit) and run here without dispatching it again."""
        request.kind = KIND_ACTION
        session_id = self.rt.sessions.of(request)
        if self.unfollowed(session_id):
            return self.handle_after(self.follow(session_id), request)  # as handle() does
        try:
            self.rt.actions.check(request)
            result = self.rt.actions.run(
                request,
                self.rt.registry.contexts.get(ctx_id),
                request.path[len(ACTION_PREFIX) :],
                self.rt.actions.signals_of(request),
            )
        except BaseException as exc:
            result = self.error_response(exc, request)
        return self.answer(result, request)

    def answer(self, result: Any, request: Request) -> HandleResult:
        if type(result) is Response or isinstance(
            result, (Response, StreamResponse)
        ):  # type(): the usual answer, cheaper
            self.app.metrics.observe_request(request.kind or "other", result.status)
            if request.kind == KIND_ACTION and (result.status != 200 or result.headers):
                self.rt.actions.remember_answer(request, result)  # type: ignore[arg-type]  # an action's is a Response
            if request.form is not None or request.kind in _SETTLED:
                settle(request)
            return result
        return self.finish(result, request)

    async def handle_after(self, loading: Awaitable[None], request: Request) -> Response | StreamResponse:
        await loading
        result = self.handle(request)
        return await result if inspect.isawaitable(result) else result

    async def finish(self, pending: Awaitable[Any], request: Request) -> Response | StreamResponse:
        try:
            try:
                result = self.as_response(await pending)
            except BaseException as exc:
                result = self.error_response(exc, request)
            if request.kind == KIND_ACTION and type(result) is Response and (result.status != 200 or result.headers):
                self.rt.actions.remember_answer(request, result)  # before settle() lets go of its signals
        finally:
            settle(request)
        self.app.metrics.observe_request(request.kind or "other", result.status)
        return result

    def error_response(self, exc: BaseException, request: Request) -> Response:
        if request.kind == KIND_ACTION and not isinstance(exc, (KeyboardInterrupt, SystemExit)):
            self.rt.reporting.tell_the_tab(exc, request)
        if isinstance(exc, ClientError):
            self.rt.reporting.log_refusal(request, exc)
            if (
                (isinstance(exc, NotFound) or exc.status == 404)  # a page of no such item: the 404 page
                and self.app.not_found_handler is not None
                and request.kind in (KIND_PAGE, KIND_ROUTE)
            ):
                return self.not_found_response(request)
            return Response.text(exc.public_message, exc.status, list(exc.headers))
        if isinstance(exc, ServiceError):
            log.warning("%s %s -> %d %s", request.method, request.path, exc.status, exc)
            return Response.text(exc.public_message, exc.status, [("retry-after", str(exc.retry_after))])
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            raise exc
        phase = request.kind or "request"
        # logs, counts, tells on_error; may re-raise
        ctx = context_of(request, self.app)
        where = None if ctx is not None else f"{request.method} {request.path}"
        self.rt.reporting.report(exc, ctx, phase, where=where)
        if self.app.config.dev and request.kind in (KIND_PAGE, KIND_ROUTE):
            return dev_error_page(exc, request.kind)
        if self.app.config.dev and request.kind in (KIND_ACTION, KIND_STREAM):
            return dev_error_events(exc, request.kind)  # an overlay on the tab
        if request.kind == KIND_ACTION:
            return Response.text("Action failed", 500)
        if request.kind == KIND_PAGE and self.app.error_page_handler is not None:
            try:
                return self.as_response(self.app.error_page_handler(request, exc), 500)  # type: ignore[return-value]  # a page
            except Exception:
                log.exception("the error page failed too")
        return Response.text("Internal Server Error", 500)

    def dispatch(self, request: Request) -> Any:
        path = request.path
        if "\0" in path:  # decoded from %00: no route holds one; the native server refuses it first
            raise MalformedRequest("a NUL (%00) in the request path")
        if path in OPS_PATHS and request.method in ("GET", "HEAD"):
            request.kind = KIND_OPS  # before middleware: probes must not need a login
            return OPS_PATHS[path](self.app)
        if path == DEVTOOLS_PATH and self.app.config.dev:
            request.kind = KIND_OPS
            return devtools_page(self.app)
        if self.app.mounts:
            for prefix, mounted in self.app.mounts:
                if path.startswith(prefix) and (len(path) == len(prefix) or path[len(prefix)] == "/"):
                    request.path = path[len(prefix) :] or "/"
                    return mounted.handle(request)
        if path == SSE_PATH:
            request.kind = KIND_STREAM
            return self.rt.streams.open(request)
        if path.startswith(ACTION_PREFIX):
            request.kind = KIND_ACTION
            return self.rt.actions.action(request, path[len(ACTION_PREFIX) :])
        if path == BUNDLE_PATH:
            request.kind = KIND_ASSET
            return self.rt.assets.response(request)
        static = self.rt.assets.static
        if static is not None and "." in path.rsplit("/", 1)[-1]:
            request.kind = KIND_ASSET
            found = static.get(path, request)
            if found is not None:
                return found
        if path == CLOSE_PATH:
            request.kind = KIND_BEACON
            return self.rt.beacon.close(request)
        if path.startswith(DOWNLOAD_PREFIX):
            request.kind = KIND_DOWNLOAD
            found = self.app.downloads.take(path[len(DOWNLOAD_PREFIX) :], self.rt.sessions.of(request) or "")
            if found is None:
                raise NotFound("unknown or used download")
            return found
        routes, params = self.app.router.match(path)
        if not routes:
            return self.not_found_response(request)
        method = "GET" if request.method == "HEAD" else request.method
        route = None
        for candidate in routes:  # a loop: a generator over ``method`` would make it a cell
            if method in candidate.methods or "*" in candidate.methods:
                route = candidate
                break
        if route is None:
            allowed = sorted(
                {m for r in routes for m in r.methods}
                | ({"HEAD"} if any("GET" in r.methods for r in routes) else set())
            )
            raise MethodNotAllowed(headers=[("allow", ", ".join(allowed))])
        request.path_params = params
        if route.kind == "page":
            request.kind = KIND_PAGE
            if request.method == "HEAD":
                return Response(200, [("content-type", "text/html; charset=utf-8")])
            return self.with_middleware(request, route, functools.partial(self.rt.pages.page, route=route))
        request.kind = KIND_ROUTE
        return self.with_middleware(request, route, functools.partial(self.plain_route, route=route))

    def with_middleware(self, request: Request, route: Route | None, endpoint: Callable[[Request], Any]) -> Any:
        if not self.app.middleware_stack and (route is None or not route.middleware):
            return endpoint(request)  # no chain to build
        chain = [*self.app.middleware_stack, *(route.middleware if route is not None else ())]
        if not chain:
            return endpoint(request)
        call = endpoint
        for mw in reversed(chain):
            call = wrap_middleware(mw, call)
        return call(request)

    def not_found_response(self, request: Request) -> Response:
        if self.app.not_found_handler is None:
            raise NotFound()
        return then(self.app.not_found_handler(request), lambda r: self.as_response(r, 404))  # type: ignore[no-any-return]

    def as_response(self, result: Any, status: int = 200) -> Response | StreamResponse:
        if isinstance(result, (Response, StreamResponse)):
            return result
        if isinstance(result, str):
            return Response.html(result, status)
        if isinstance(result, (dict, list)):
            return Response.json(result, status)
        if isinstance(result, bytes):
            return Response(status, [("content-type", "application/octet-stream")], result)
        if inspect.iscoroutine(result):  # an async middleware's `return call_next(request)`
            result.close()
            raise TypeError(
                "a handler or a middleware returned a coroutine it did not await; an async middleware "
                "answers with `return await call_next(request)`"
            )
        raise TypeError(f"a handler returned {type(result).__name__}; expected a Response, str, dict or list")

    def plain_route(self, request: Request, route: Route) -> Any:
        kwargs = bind(route, request.path_params, None, request)
        return then(route.handler(**kwargs), self.as_response)

    def check_origin(self, request: Request) -> None:
        """A POST that changes state must come from a page of this site: one ``Origin`` naming
        this request's scheme, host and port, or listed in ``trusted_origins``. ``null``, two
        Origins, and a request without exactly one non-empty ``Host`` never pass."""
        origins = request.headers.get_all("origin")
        if not origins:
            if self.app.config.dev or self.app.config.allow_missing_origin:
                return
            raise Forbidden("missing Origin header")
        if len(origins) > 1:
            raise Forbidden(f"{len(origins)} Origin headers: {origins!r}")
        origin = origins[0]
        hosts = request.headers.get_all("host")
        if len(hosts) != 1 or not hosts[0].strip():
            raise Forbidden(f"Origin {origin!r} on a request without one non-empty Host")
        if origin in self.app.config.trusted_origins:
            return
        scheme = self.app.proxies.scheme(request)
        if not same_origin(origin, scheme, hosts[0]):
            hint = (
                (
                    "; behind a TLS proxy, list it in trusted_proxies (it sends X-Forwarded-Proto) or the "
                    "origin in trusted_origins"
                )
                if same_origin(origin, origin.partition("://")[0], hosts[0])
                else ""
            )
            raise Forbidden(f"untrusted origin {origin!r} for {scheme}://{hosts[0]}{hint}")


#: The kinds of request a tab keeps as ``c.request`` once answered, until its next one (a tuple:
#: looked up by identity, where a set would hash the enum member in Python code).
_SETTLED = (KIND_PAGE, KIND_ACTION, KIND_REVIVAL)


def settle(request: Request) -> None:
    """The request is answered: its uploaded files are closed (spooled ones deleted), and one its
    tab keeps (``c.request``, until its next one) lets go of its body, signals and form, and of
    what was worked out from its headers (cookies, query, session: worked out again if asked). A
    long message would otherwise stay in memory twice (the body and its parse) for every tab
    that sent one, and every idle tab would keep its page view's parsed cookies."""
    form = request.form
    if form is not None and form.all_files:
        form.close()
    if request.kind in _SETTLED:
        request.body = b""
        request.signals = None
        request.form = None
        request.forget_parsed()


def wrap_middleware(mw: Middleware, call_next: Callable[[Request], Any]) -> Callable[[Request], Any]:
    if inspect.iscoroutinefunction(mw):

        async def next_async(req: Request) -> Any:
            result = call_next(req)
            return await result if inspect.isawaitable(result) else result

        return lambda req: mw(req, next_async)
    return lambda req: mw(req, call_next)
