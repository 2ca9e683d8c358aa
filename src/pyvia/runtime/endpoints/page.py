"""The page endpoint: a page view builds a tab, renders its document and registers it."""

from __future__ import annotations

import functools
import inspect
import logging
import secrets
import typing
from collections.abc import Awaitable, Callable
from typing import Any

from pyvia import protocol
from pyvia.context import Context
from pyvia.devtools import panel as devtools_panel
from pyvia.devtools import warn_misnamed_signals
from pyvia.errors import DeclarationError
from pyvia.http import Request, Response
from pyvia.render import bootstrap_head, build_document, is_document, page_shell, signals_attr
from pyvia.routing import Route
from pyvia.runtime.binding import bind
from pyvia.runtime.common import STREAM_DOWN, then

if typing.TYPE_CHECKING:
    from pyvia.app import App
    from pyvia.runtime import Runtime

log = logging.getLogger("pyvia")
SECURITY_HEADERS = (
    ("x-content-type-options", "nosniff"),
    ("referrer-policy", "same-origin"),
    ("x-frame-options", "SAMEORIGIN"),
)
# Datastar evaluates its attribute expressions with Function(), hence 'unsafe-eval'.
# 'strict-dynamic' lets scripts Datastar itself inserts (c.exec_script) run without a nonce of their own.
CSP = (
    "default-src 'self'; script-src 'nonce-{nonce}' 'strict-dynamic' 'unsafe-eval'; "
    "style-src 'self' 'unsafe-inline'; img-src 'self' data:; connect-src 'self'; object-src 'none'; "
    "base-uri 'self'; frame-ancestors 'self'"
)


class Pages:
    """Answers a page view: a new tab, its document, its session cookie."""

    def __init__(self, app: App, rt: Runtime) -> None:
        self.app = app
        self.rt = rt

    def page(self, request: Request, route: Route) -> Any:
        if self.app.config.content_security_policy:
            request.state["csp_nonce"] = secrets.token_urlsafe(16)  # templates: c.request.state
        session_id = self.rt.sessions.of(request)
        if session_id is None:
            session_id = self.app.session_ids.make()
            if self.app.store.new_session(session_id):
                request.new_session = True  # its session-scoped signals are new too
        params = request.path_params
        ctx_id = self.app.context_ids.make(route.pattern, params, session_id, int(self.app.wall_time()))
        ctx = Context(self.app, ctx_id, route, params, session_id, request)
        self.app.ownership.claim(ctx.id, wait=True)  # the page is answered once other workers can find the tab
        kwargs = bind(route, params, ctx, request)
        return then(route.handler(**kwargs), functools.partial(self.response_once_loaded, ctx))

    def response_once_loaded(self, ctx: Context, result: Any) -> Any:
        """The page, once the scoped signals just declared hold their shared values."""
        if not self.app.store.loading:
            return self.response(ctx, result)
        return self.after_loads(functools.partial(self.response, ctx, result))

    def after_loads(self, fn: Callable[[], Any]) -> Any:
        """``fn()`` once the scoped signals just declared hold their shared values (several workers)."""
        if not self.app.store.loading:
            return fn()
        return self.call_when_loaded(fn)

    async def call_when_loaded(self, fn: Callable[[], Any]) -> Any:
        await self.app.store.loaded()
        value = fn()  # an async view's render is awaitable too
        return await value if inspect.isawaitable(value) else value

    def response(self, ctx: Context, result: Any) -> Response | Awaitable[Response]:
        if result is not None:
            if isinstance(result, Response):
                return result
            raise DeclarationError(
                f"page handler for {ctx.route.pattern!r} returned {type(result).__name__}; "
                "a page declares a view with c.view() and returns None (or a Response)"
            )
        return then(ctx.render_view(False), functools.partial(self.document, ctx))  # type: ignore[no-any-return]  # Response or its awaitable

    def document(self, ctx: Context, content: str) -> Response:
        seed: dict[str, Any] = {protocol.CONTEXT_SIGNAL: ctx.id, **STREAM_DOWN}
        seed.update(ctx.seed_signals())
        config = self.app.config
        assets = self.rt.assets
        nonce = (
            typing.cast("str | None", ctx.request.state.get("csp_nonce")) if config.content_security_policy else None
        )
        title = ctx.route.title or config.title
        panel = ""
        if config.dev:
            panel = devtools_panel(self.app)
            warn_misnamed_signals(self.app, ctx.route.pattern, content, seed)
        if is_document(content):  # a whole document: the tags go into its own head and body
            head = bootstrap_head(
                seed, assets.bundle_url, assets.bundle.integrity, self.app.sse_url, self.app.close_url, nonce=nonce
            )
            if config.head or ctx.head_tags:
                head += "\n" + "\n".join([*config.head, *ctx.head_tags])
            doc = build_document(content, title=title, head=head, foot=ctx.document_foot(), lang=config.lang).encode()
        else:
            shell = page_shell(
                config.lang,
                title,
                tuple(config.head),
                (ctx.route.alert, *config.foot),
                panel,
                assets.bundle_url,
                assets.bundle.integrity,
                self.app.sse_url,
                self.app.close_url,
            )
            doc = shell.render(signals_attr(seed), nonce, ctx.head_tags, ctx.foot_tags, content)
        self.rt.registry.register(ctx)
        response = Response(200, [("content-type", "text/html; charset=utf-8")], doc)
        self.app.compression.encode_html(ctx.request, response)
        response.headers.append(("set-cookie", self.rt.sessions.cookie_header(ctx.session_id)))
        response.headers.append(("cache-control", "no-store"))
        if self.app.config.security_headers:
            response.headers.extend(SECURITY_HEADERS)
        if nonce:
            response.headers.append(("content-security-policy", CSP.format(nonce=nonce)))
        self.take_cookies(ctx, response)
        return response

    @staticmethod
    def take_cookies(ctx: Context, response: Response) -> None:
        if ctx.cookies_out:
            response.headers.extend(("set-cookie", c) for c in ctx.cookies_out)
            ctx.cookies_out = ()
