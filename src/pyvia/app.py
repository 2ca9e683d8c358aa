"""App: routes, middleware, the tab registry and the dispatch every front end calls.

``App.handle(request)`` is the one entry point. It answers a page view, a stream connect, an
action, the close beacon, the Datastar bundle or a plain route, and returns a ``Response``, a
``StreamResponse`` or — only when user code is asynchronous — an awaitable of one. Client
faults become 4xx answers here; any other exception is logged with its phase and answered with
a bare 500, and the process keeps serving.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import heapq
import inspect
import logging
import math
import re
import secrets
import socket
import time
import typing
import warnings
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from typing import Any, TypeVar

import orjson

from pyvia import forms, protocol
from pyvia.alerts import ERROR_SIGNAL, LOST_SIGNAL, alert_markup, messages_for
from pyvia.arguments import decode_arguments
from pyvia.assets import Bundle, load_bundle
from pyvia.broadcast import Broadcaster
from pyvia.clock import Clock, LoopClock, TimerHandle
from pyvia.cluster.link import ClusterLink
from pyvia.compress import Compression, Release, default_budget
from pyvia.config import NO_EXTRA, Config, FilePath, keyword_options, seconds_of
from pyvia.context import Context, call_hook
from pyvia.db import Database, NoDatabase, connect
from pyvia.devtools import DEVTOOLS_PATH, DevLog
from pyvia.devtools import error_events as dev_error_events
from pyvia.devtools import error_page as dev_error_page
from pyvia.devtools import panel as devtools_panel
from pyvia.devtools import server_page as devtools_page
from pyvia.downloads import DOWNLOAD_PREFIX, Downloads
from pyvia.errors import (
    ActionTimeout,
    ClientError,
    ConfigError,
    ContextNotFound,
    DeclarationError,
    Forbidden,
    MalformedRequest,
    MethodNotAllowed,
    NotFound,
    PyviaDeprecationWarning,
    RateLimited,
    RouteError,
    ServiceError,
    TabGone,
)
from pyvia.forms import FORM_TYPES, Form, FormLimits, UploadedFile, check_form, parse_form, request_signals
from pyvia.http import HandleResult, Request, Response, StreamResponse, StreamSink
from pyvia.lifecycle import State
from pyvia.ops.health import health_response, metrics_response, ready_response
from pyvia.ops.metrics import PyviaMetrics
from pyvia.ops.settings import load_settings
from pyvia.persistence import load_state, load_state_from_db, save_state, save_state_to_db
from pyvia.render import Templates, bootstrap_head, document_bytes
from pyvia.replay import Replays
from pyvia.routing import Middleware, Route, Router, compile_route
from pyvia.scopes import (
    GLOBAL,
    ROUTE,
    SESSION,
    TAB,
    Scope,
    ScopeRegistry,
    SharedSignal,
    check_broadcast_target,
    check_custom,
)
from pyvia.security import RateLimiter, TrustedProxies, same_origin
from pyvia.session import (
    NEW_SESSION,
    SECURE_SESSION_COOKIE,
    SESSION_COOKIE,
    SESSION_MAX_AGE,
    ContextIds,
    SessionIds,
    load_secret,
)
from pyvia.signals import check_name
from pyvia.snapshot import Snapshots
from pyvia.state import GlobalState, SessionData, SessionStore
from pyvia.static import Asset, StaticFiles
from pyvia.stream import Outflow, Stream

log = logging.getLogger("pyvia")
T = TypeVar("T")

SSE_PATH = "/_sse"
ACTION_PREFIX = "/_action/"
CLOSE_PATH = "/_session/close"
BUNDLE_PATH = "/datastar.js"
_DESTROY_SLICE = 0.005  # seconds of destroying per loop turn (php-via 0.14 uses 10 ms slices)
_GRAVEYARD_CAP = 100_000
_RELOAD_MEMORY = 300.0  # a tab told to reload is told to stop retrying for this long (php-via)
_SECURITY_HEADERS = (
    ("x-content-type-options", "nosniff"),
    ("referrer-policy", "same-origin"),
    ("x-frame-options", "SAMEORIGIN"),
)
# Datastar evaluates its attribute expressions with Function(), hence 'unsafe-eval'.
# 'strict-dynamic' lets scripts Datastar itself inserts (c.exec_script) run without a nonce of their own.
_CSP = ("default-src 'self'; script-src 'nonce-{nonce}' 'strict-dynamic' 'unsafe-eval'; "
        "style-src 'self' 'unsafe-inline'; img-src 'self' data:; connect-src 'self'; object-src 'none'; "
        "base-uri 'self'; frame-ancestors 'self'")
#: A kind of error from user code is logged with its traceback at most once in this many seconds.
_ERROR_LOG_INTERVAL = 60.0
_ERRORS_REMEMBERED = 256
#: Requests a tab makes: a refusal of one is a user's page that did not get what it asked for.
_TAB_KINDS = frozenset({"action", "stream", "revival", "beacon", "passed"})

#: What an action answers once its connection went to the worker holding the tab (never written).
PASSED = Response(204)

_OPS_PATHS: dict[str, Callable[[Any], Response]] = {
    "/_health": health_response,
    "/_ready": ready_response,
    "/metrics": metrics_response,
}
#: What a page is told when its stream is down or about to end: actions carry its snapshot.
_STREAM_DOWN = {protocol.DISCONNECTED_SIGNAL: True, protocol.FILTER_SIGNAL: protocol.FILTER_DOWN}
_ROTATION_OVERLAP = 2.0  # seconds the old cookie still works after regenerate_session (php-via 0.14)

__all__ = ["App", "RouteGroup"]


class _Grave:
    """What is kept of a destroyed tab for its revival window: its tab state and its last snapshot."""

    __slots__ = ("ask_page", "deadline", "seq", "snapshot", "tab_state")

    def __init__(self, deadline: float, tab_state: dict[str, Any], seq: int = 0, snapshot: str | None = None,
                 *, ask_page: bool = False) -> None:
        self.deadline = deadline
        self.tab_state = tab_state
        #: The page holds what this record lacks (its writable values; a newer snapshot after a
        #: restart): a stream that revives the tab is asked for them.
        self.ask_page = ask_page
        #: The number of the last snapshot the browser was sent: an older one is a replay.
        self.seq = seq
        #: The server's own snapshot of the tab's server-owned signals (dropped past the budget).
        self.snapshot = snapshot


class _Revived:
    """What the revival endpoint hands back through the middleware chain."""

    __slots__ = ("ctx",)

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx


class _TabStream:
    """Connects one stream response to its tab, remembering which sink is its own."""

    __slots__ = ("app", "coding", "ctx", "last_event_id", "sink")

    def __init__(self, app: App, ctx: Context, coding: str, last_event_id: str | None = None) -> None:
        self.app = app
        self.ctx = ctx
        self.coding = coding
        #: The id of the last frame the page got (Datastar's retries send it), None on a first request.
        self.last_event_id = last_event_id
        self.sink: StreamSink | None = None

    def open(self, sink: StreamSink) -> None:
        self.sink = sink
        self.app._on_stream_open(self.ctx, sink, self.coding, self.last_event_id)

    def close(self) -> None:
        if self.sink is not None:
            self.app._on_stream_close(self.ctx, self.sink)
            self.sink = None


class _Interval:
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
            self.app._report(exc, ctx, "timer")
        finally:
            ctx._end_batch()
        if ctx.state is not State.DESTROYED:
            self.arm()

    def cancel(self) -> None:
        if self.handle is not None:
            self.handle.cancel()
            self.handle = None


#: What handlers return most, never awaitable: checked by type before ``inspect.isawaitable``
#: (whose ABC check costs more than the rest of ``_then``).
_PLAIN_RESULTS = frozenset({type(None), str, bytes, dict, list, Response})


def _then(result: Any, fn: Callable[[Any], Any]) -> Any:
    """Apply ``fn`` to ``result`` now, or after awaiting it if it is awaitable."""
    if type(result) not in _PLAIN_RESULTS and inspect.isawaitable(result):
        async def later() -> Any:
            value = fn(await result)
            return await value if inspect.isawaitable(value) else value
        return later()
    return fn(result)


def _settle(answer: asyncio.Future[Any], result: Any) -> None:
    """Give ``answer`` the value of ``result``, now or once it is done."""
    if type(result) in _PLAIN_RESULTS or not inspect.isawaitable(result):
        answer.set_result(result)
        return

    def done(task: asyncio.Future[Any]) -> None:
        if answer.done():
            return
        if task.cancelled():
            answer.cancel()
        elif task.exception() is not None:
            answer.set_exception(task.exception())  # type: ignore[arg-type]  # checked
        else:
            answer.set_result(task.result())

    asyncio.ensure_future(result).add_done_callback(done)


class RouteGroup:
    """Routes sharing a path prefix and middleware: ``with app.group("/admin", middleware=[auth]) as g``."""

    def __init__(self, app: App, prefix: str, middleware: Sequence[Middleware]) -> None:
        if prefix and (not prefix.startswith("/") or prefix.endswith("/")):
            raise DeclarationError(f"group prefix {prefix!r} must start with '/' and not end with one")
        self.app = app
        self.prefix = prefix
        self.middleware = tuple(middleware)

    def _path(self, path: str) -> str:
        return self.prefix + ("" if path == "/" else path) if self.prefix else path

    def page(self, path: str, *, middleware: Sequence[Middleware] = (), title: str | None = None,
             error_messages: Mapping[str | int, str] | None = None
             ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        return self.app.page(self._path(path), middleware=(*self.middleware, *middleware), title=title,
                             error_messages=error_messages)

    def route(self, methods: str | Sequence[str], path: str, *, middleware: Sequence[Middleware] = ()
              ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        return self.app.route(methods, self._path(path), middleware=(*self.middleware, *middleware))

    def group(self, prefix: str, *, middleware: Sequence[Middleware] = ()) -> RouteGroup:
        return RouteGroup(self.app, self._path(prefix), (*self.middleware, *middleware))

    def __enter__(self) -> RouteGroup:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


class App:
    """A pyvia application: ``app = App(title="Counter")``, then ``@app.page("/")``.

    Options are the fields of :class:`pyvia.config.Config` (each documented there) and the ``[db]``
    keys as ``db_url``, ``db_pool_size``, ``db_timeout``, ``db_busy_timeout``; an unknown one is a
    TypeError naming the closest known option.
    """

    _options: dict[str, Any]  # the options given, set by keyword_options before __init__ runs

    @keyword_options
    def __init__(self, *,
                 title: str = "pyvia", lang: str = "en", template_dir: FilePath | None = None,
                 secret: str | bytes | None = None, dev: bool = False, connect_timeout: float = 30.0,
                 max_waiting_contexts: int = 10_000, cleanup_delay: float = 5.0, reconnect_timeout: float = 60.0,
                 revival_window: float = 600.0, keep_alive: float = 15.0, sweep_interval: float = 1.0,
                 broadcast_tick: float = 0.025, broadcast_settle: float = 0.002, max_sessions: int = 10_000,
                 max_stream_buffer: int = 1 << 20, slow_tab_timeout: float = 30.0, trusted_origins: Sequence[str] = (),
                 action_rate: float = 1200.0, action_burst: float = 2400.0, trusted_proxies: Sequence[str] = (),
                 max_snapshot_bytes: int = 16 << 10, action_timeout: float = 60.0, security_headers: bool = True,
                 content_security_policy: bool = False, allow_missing_origin: bool = False,
                 secure_cookie: bool = False, head: Sequence[str] = (), foot: Sequence[str] = (), base_path: str = "/",
                 compression: bool = True, compression_preference: Sequence[str] = ("zstd", "br", "gzip"),
                 encoder_budget: int | None = None, encoder_idle_release: float = 60.0,
                 replay_tab_bytes: int = 64 << 10, replay_budget: int | None = None, replay_idle: float = 30.0,
                 static_dir: FilePath | None = None, static_cache_control: str | Callable[[str, str], str] = "no-cache",
                 gc_thresholds: tuple[int, int, int] | None = (50_000, 5, 100), persist_path: FilePath | None = None,
                 persist_in_db: bool = False, engine_prefix: str = "pyvia", cluster_direct: bool = True,
                 cluster_address: str | None = None, max_unsent_bytes: int = 256 << 20, max_form_fields: int = 1000,
                 max_form_files: int = 100, max_form_bytes: int = 1 << 20, max_file_bytes: int | None = None,
                 upload_spool_bytes: int = 1 << 20, upload_dir: FilePath | None = None,
                 error_messages: Mapping[str | int, str] | None = None, error_view: Callable[..., str] | None = None,
                 datastar_js: FilePath | None = None, extra: Mapping[str, Any] = NO_EXTRA, db_url: str | None = None,
                 db_pool_size: int = 4, db_timeout: float = 30.0, db_busy_timeout: float = 5.0) -> None:
        # keyword arguments given win over PYVIA_APP__* variables, which win over ./pyvia.toml's [app]
        settings = load_settings(**self._options)
        self.config = Config.from_options(settings.app_options())
        self.router = Router()
        #: The words for failures every page starts from (pyvia.alerts).
        self._messages = messages_for(self.config.error_messages)
        self.templates = Templates(self.config.template_dir)
        self._middleware: list[Middleware] = []
        self._secret = load_secret(self.config.secret)
        self._session_ids = SessionIds(self._secret)  # only ids signed with the secret are sessions
        self._bundle: Bundle | None = None
        self._bundle_url = ""
        self._downloads = Downloads()
        self._not_found: Callable[[Request], Any] | None = None
        self._error_page: Callable[[Request, BaseException], Any] | None = None
        self._session_cookie = SECURE_SESSION_COOKIE if self.config.secure_cookie else SESSION_COOKIE
        self._limiter = RateLimiter(self.config.action_rate, self.config.action_burst)
        config = self.config
        self._form_limits = FormLimits(config.max_form_fields, config.max_form_files, config.max_form_bytes,
                                       config.max_file_bytes, config.upload_spool_bytes, config.upload_dir)
        self.compression = Compression(
            preference=self.config.compression_preference,
            budget=self.config.encoder_budget if self.config.encoder_budget is not None else default_budget(),
            enabled=self.config.compression,
        )
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._bundle_asset: Asset | None = None
        self.static: StaticFiles | None = None
        self._proxies = TrustedProxies(self.config.trusted_proxies)
        # rotated session id -> (new id, until when the old one is still honoured)
        self._rotated: OrderedDict[str, tuple[str, float]] = OrderedDict()
        self._rotated_from: OrderedDict[str, str] = OrderedDict()  # new session -> the one its ids were signed for
        #: Sessions another worker rotated, by the new one's hash -> the old id, until a request
        #: brings the new id here (the engine carries hashes, never ids: _rotated_elsewhere).
        self._awaiting_rotation: OrderedDict[str, str] = OrderedDict()
        # URLs the browser is given: under base_path when the app is mounted below "/"
        self._set_base(self.config.base_path)
        self._mounts: list[tuple[str, App]] = []
        # every live tab, by context id
        self.contexts: dict[str, Context] = {}
        self._connected: dict[str, Context] = {}
        #: Page contexts waiting for their first stream, oldest first (``max_waiting_contexts``).
        self._waiting: dict[str, Context] = {}
        # (deadline, seq, ctx) for tabs without a stream; stale entries are skipped
        self._deadlines: list[tuple[float, int, Context]] = []
        self._seq = 0
        self._destroy_queue: deque[Context] = deque()
        self._destroying = False
        # destroyed ids -> what revives them; insertion order is expiry order
        self._graveyard: OrderedDict[str, _Grave] = OrderedDict()
        self._graveyard_bytes = 0  # of the snapshots it holds
        self._reviving: dict[str, asyncio.Task[Any]] = {}  # revivals under way, by context id
        self._reload_sent: OrderedDict[str, float] = OrderedDict()
        self.clock: Clock | None = None
        #: The running loop, once started: asyncio.get_running_loop() costs a getpid() system call on 3.11.
        self._loop: asyncio.AbstractEventLoop | None = None
        self._started_at = 0.0
        self._sweep_handle: TimerHandle | None = None
        self._next_keep_alive = 0.0
        self._tasks: set[Any] = set()
        self.broadcaster = Broadcaster(self, self.config.broadcast_tick, self.config.broadcast_settle)
        self.scopes = ScopeRegistry(self.broadcaster.mark)
        #: Process-wide state: ``app.global_state["visits"]``, with atomic ``increment``/``mutate``.
        self.global_state = GlobalState()
        self.sessions = SessionStore(self.config.max_sessions)
        self._on_connect: list[Callable[..., Any]] = []
        self._on_disconnect: list[Callable[..., Any]] = []
        self._on_start: list[Callable[..., Any]] = []
        self._on_stop: list[Callable[..., Any]] = []
        self._on_error: list[Callable[..., Any]] = []
        self._app_intervals: list[tuple[Callable[..., Any], float, bool]] = []
        self._app_timers: list[TimerHandle] = []
        self.errors = 0
        #: Page contexts destroyed unconnected because more than ``max_waiting_contexts`` waited.
        self.evicted_waiting = 0
        #: (phase, where, error type, message) -> [when its traceback was last logged, repeats since]
        self._errors_seen: dict[tuple[str, str, str, str], list[Any]] = {}
        #: Prometheus metrics of this app (``/metrics``); the hot paths count into pre-bound children.
        self.metrics = PyviaMetrics()
        self._outflow = Outflow(self.metrics)
        #: Each tab's recent frames, replayed to a stream that reconnects (pyvia.replay).
        self._replays = Replays(tab_limit=self.config.replay_tab_bytes, limit=self.config.replay_budget,
                                idle=self.config.replay_idle, encoders=self.compression.budget)
        db_config = settings.db_config()
        #: The database of ``[db] url`` (:mod:`pyvia.db`), opened at start and closed at stop.
        self.db: Database = NoDatabase(metrics=self.metrics) if db_config is None else connect(
            db_config, metrics=self.metrics)
        if self.config.persist_in_db and db_config is None:
            raise ConfigError("persist_in_db keeps the shared state in the app's database: give [db] url "
                              "(or App(db_url=...)) too")
        self._dev_log = DevLog()
        #: True from the start of a graceful stop: ``/_ready`` answers 503 so balancers look elsewhere.
        self.draining = False
        #: Re-raise exceptions from user code instead of answering 500 (the test client sets it).
        self.raise_server_exceptions = False
        #: The engine link when several workers or nodes share state (pyvia.cluster.link), else None.
        self.link: ClusterLink | None = None
        #: Set by the native server (plain HTTP): ``adopt_connection(sock, request_bytes)`` serves a
        #: connection another worker of this machine passed (pyvia.cluster.passing).
        self.adopt_connection: Callable[[socket.socket, bytes], None] | None = None

    # --- registration ----------------------------------------------------------------------------

    def page(self, path: str, *, middleware: Sequence[Middleware] = (), title: str | None = None,
             error_messages: Mapping[str | int, str] | None = None
             ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Register a page: ``handler(c, **path_params)`` declares the tab's signals, actions and view.

        ``error_messages`` replaces some of the app's words for failures on this page (pyvia.alerts).
        """
        messages = messages_for(error_messages, self._messages)

        def register(handler: Callable[..., Any]) -> Callable[..., Any]:
            route = compile_route(path, handler, "page", ["GET"], middleware, title)
            route.call_args = _binders(handler, route.param_names, path)
            route.messages = messages
            route.alert = alert_markup(messages, self.config.error_view)
            self.router.add(route)
            return handler
        return register

    def route(self, methods: str | Sequence[str], path: str, *, middleware: Sequence[Middleware] = ()
              ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Register a plain HTTP route: ``handler(request, **path_params)`` returns a Response, str or dict."""
        method_list = [methods] if isinstance(methods, str) else list(methods)
        def register(handler: Callable[..., Any]) -> Callable[..., Any]:
            route = compile_route(path, handler, "route", method_list, middleware)
            route.call_args = _binders(handler, route.param_names, path)
            self.router.add(route)
            return handler
        return register

    def group(self, prefix: str, *, middleware: Sequence[Middleware] = ()) -> RouteGroup:
        return RouteGroup(self, prefix, middleware)

    def middleware(self, fn: Middleware) -> Middleware:
        """Add middleware ``fn(request, call_next)`` around every page, action, stream and revival.

        ``request.kind`` says which; data put in ``request.state`` reaches the context as
        ``c.state_from_middleware``. Returning a Response instead of calling ``call_next``
        answers the request (a revival answered this way makes the tab reload).
        """
        self._middleware.append(fn)
        return fn

    def not_found(self, fn: Callable[[Request], Any]) -> Callable[[Request], Any]:
        """Set the 404 page: ``fn(request)`` returns a Response or HTML."""
        self._not_found = fn
        return fn

    def error_page(self, fn: Callable[[Request, BaseException], Any]) -> Callable[..., Any]:
        """Set the 500 page for failing page views: ``fn(request, exc)`` returns a Response or HTML."""
        self._error_page = fn
        return fn

    def url_for_action(self, name: str) -> str:
        return self._base + ACTION_PREFIX[1:] + name

    def _set_base(self, base: str) -> None:
        self._base = base
        self._ids = ContextIds(self._secret, base)
        self._snapshots = Snapshots(self._secret, base, max_bytes=self.config.max_snapshot_bytes)
        self._sse_url = base + SSE_PATH[1:]
        self._close_url = base + CLOSE_PATH[1:]
        if self._bundle is not None:
            self._bundle_url = f"{base}{BUNDLE_PATH[1:]}?v={self._bundle.version}"

    def mount(self, prefix: str, app: App) -> None:
        """Serve another App below ``prefix`` (``"/examples/counter"``): its own tabs, routes and settings.

        Requests under the prefix go to ``app`` with the prefix stripped, and every URL it gives the
        browser carries the prefix. Mount before the server starts; the mounted app starts and stops
        with this one.
        """
        if not isinstance(prefix, str) or not prefix.startswith("/") or prefix.endswith("/") or "//" in prefix:
            raise RouteError(f"mount prefix {prefix!r} must start with '/' and not end with one, like '/chat'")
        if app is self or any(p == prefix for p, _ in self._mounts):
            raise RouteError(f"mount prefix {prefix!r} is already taken (or the app is mounted in itself)")
        if app.clock is not None or app.contexts:
            raise RouteError("mount an app before it starts")
        app._set_base(self._base + prefix.lstrip("/") + "/")
        self._mounts.append((prefix, app))

    def url(self, path: str) -> str:
        """An absolute URL path for ``path`` under the app's ``base_path`` (``/x`` → ``/live/x``)."""
        return self._base + path.lstrip("/")

    # --- shared state and broadcasting -------------------------------------------------------------

    def broadcast(self, scope: str) -> None:
        """Mark a scope (``"global"``, ``"route:/chat"``, ``"room:lobby"``, ``"room:*"``) for the next flush
        (on every worker and node)."""
        check_broadcast_target(scope)
        for state in self.scopes.matching(scope):
            self.broadcaster.mark(state)
        if self.link is not None:
            self.link.broadcast(scope)

    def flush_broadcasts(self) -> int:
        """Send every marked scope now, ignoring the tick and throttles; return the tabs written
        (mounted apps included)."""
        return self.broadcaster.flush(force=True) + sum(m.flush_broadcasts() for _, m in self._mounts)

    def broadcast_throttle(self, scope: str, seconds: float | None = None, *,
                           min_interval_ms: float | None = None) -> None:
        """Render ``scope`` (a name or ``*`` pattern) at most once every ``seconds``; the last state
        always goes out. ``min_interval_ms=`` is the deprecated spelling in milliseconds."""
        seconds = seconds_of("broadcast_throttle", seconds, min_interval_ms, "min_interval_ms")
        if scope in (TAB, ROUTE, SESSION):
            raise DeclarationError(f"broadcast_throttle needs a concrete scope or pattern, not {scope!r}")
        check_broadcast_target(scope)
        self.broadcaster.throttle(scope, seconds)

    def signal(self, initial: Any, name: str, *, scope: str, writable: bool = False,
               max_length: int | None = None) -> SharedSignal[Any]:
        """A shared signal reached from outside any tab (timers, background tasks), like ``c.signal``.

        ``scope`` is concrete: ``"global"``, ``"route:/path"``, ``"room:lobby"``. The scope is kept
        even without members while the app holds it this way. Server-owned unless ``writable``,
        as every signal; a page declaring it must declare it the same way.
        """
        if scope in (TAB, ROUTE, SESSION):
            raise DeclarationError(f"app.signal needs a concrete scope, not {scope!r}")
        if not scope.startswith(("route:", "session:")) and scope != GLOBAL:
            check_custom(scope)
        check_name("signal", name, f"scope {scope!r}")
        state = self.scopes.state(scope)
        state.kept = True
        return state.signal(name, initial, writable=writable, max_length=max_length)

    def session_data(self, session_id: str) -> SessionData:
        return self.sessions.get(session_id)

    def local_clients(self, scope: str = GLOBAL) -> list[Context]:
        """This worker's tabs with an open stream in ``scope`` (a concrete name or a ``*`` pattern).

        With several workers or nodes the others' tabs are objects in other processes: count
        them with :meth:`count_clients`, which covers every worker."""
        seen: dict[str, Context] = {}
        for state in self.scopes.matching(scope):
            for ctx in state.members.values():
                if ctx.state is State.CONNECTED:
                    seen[ctx.id] = ctx
        return list(seen.values())

    def clients(self, scope: str = GLOBAL) -> list[Context]:
        """Renamed :meth:`local_clients` (it lists this worker's tabs only); goes in 0.2."""
        warnings.warn("app.clients() lists this worker's tabs only and is now app.local_clients(); "
                      "app.count_clients() counts the tabs of every worker", PyviaDeprecationWarning, stacklevel=2)
        return self.local_clients(scope)

    def count_clients(self, scope: str = GLOBAL) -> int:
        """Tabs with an open stream in ``scope``, on every worker and node (:meth:`local_clients`
        lists this worker's). The other workers' counts are as they last told them (within 250 ms)."""
        local = len(self.local_clients(scope))
        return local if self.link is None else local + self.link.remote_count(scope)

    # --- hooks -----------------------------------------------------------------------------------

    # Hooks are named after their event, on the App (every tab) as on a Context (one tab):
    # app.on_connect / c.on_connect, app.on_disconnect / c.on_disconnect, on_start, on_stop.

    def on_connect(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """Run ``fn(c)`` when any tab's stream opens (reconnects included); ``c.on_connect`` is one tab's."""
        self._on_connect.append(fn)
        return fn

    def on_disconnect(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """Run ``fn(c)`` when any tab's last stream closes; ``c.on_disconnect`` is one tab's."""
        self._on_disconnect.append(fn)
        return fn

    def on_client_connect(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """Deprecated name of :meth:`on_connect`."""
        warnings.warn("app.on_client_connect is deprecated: use app.on_connect (the same hook)",
                      DeprecationWarning, stacklevel=2)
        return self.on_connect(fn)

    def on_client_disconnect(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """Deprecated name of :meth:`on_disconnect`."""
        warnings.warn("app.on_client_disconnect is deprecated: use app.on_disconnect (the same hook)",
                      DeprecationWarning, stacklevel=2)
        return self.on_disconnect(fn)

    def on_start(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """Run ``fn()`` (or ``async fn()``) when the server starts."""
        self._on_start.append(fn)
        return fn

    def on_stop(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """Run ``fn()`` (or ``async fn()``) when the server stops."""
        self._on_stop.append(fn)
        return fn

    def on_error(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """Observe every error in user code: ``fn(exc, context_or_None, phase)``."""
        self._on_error.append(fn)
        return fn

    def set_interval(self, fn: Callable[..., Any], seconds: float | None = None, *, every_worker: bool = False,
                     ms: float | None = None) -> Callable[..., Any]:
        """Call ``fn()`` every ``seconds`` while the server runs (errors are reported, not fatal).

        With several workers or nodes it runs on one of them (the holder of the engine's timer
        lease) unless ``every_worker``. ``ms=`` is the deprecated spelling in milliseconds.
        """
        period = seconds_of("set_interval", seconds, ms, "ms")
        if period <= 0:
            raise DeclarationError(f"set_interval needs a positive period, got {period} s")
        self._app_intervals.append((fn, period, every_worker))
        if self.clock is not None:
            self._arm_app_interval(fn, period, every_worker)
        return fn

    def spawn(self, awaitable: Awaitable[Any]) -> None:
        """Run a coroutine in the background; its errors are reported, never fatal."""
        self._spawn(awaitable, None, "task")

    def _arm_app_interval(self, fn: Callable[..., Any], period: float, every_worker: bool = False) -> None:
        clock = self.clock
        assert clock is not None
        slot = len(self._app_timers)
        self._app_timers.append(clock.call_later(period, lambda: None))

        def tick() -> None:
            try:
                elsewhere = self.link is not None and not every_worker and not self.link.is_timer_leader
                result = None if elsewhere else fn()  # elsewhere: another worker runs the app's timers
                if inspect.isawaitable(result):
                    self._spawn(result, None, "timer")
            except Exception as exc:
                self._report(exc, None, "timer")
            if self.clock is not None and slot < len(self._app_timers):
                self._app_timers[slot] = clock.call_later(period, tick)

        self._app_timers[slot].cancel()
        self._app_timers[slot] = clock.call_later(period, tick)

    def _report(self, exc: BaseException, ctx: Context | None, phase: str, *, reraise: bool = True) -> None:
        """Log an error from user code once, tell the on_error observers, never let it escape
        (except to a test that asked for it with ``raise_server_exceptions``)."""
        self.errors += 1
        where = ctx.route.pattern if ctx is not None else "app"
        if self.config.dev:
            self._dev_log.add(phase, where, f"{type(exc).__name__}: {exc}")
        self._log_error(exc, phase, where)
        for fn in self._on_error:
            try:
                fn(exc, ctx, phase)
            except Exception:
                log.exception("an on_error observer failed")
        if reraise and self.raise_server_exceptions:
            raise exc

    def _tell_the_tab(self, exc: BaseException, request: Request) -> None:
        """An action of a tab failed: show the tab what happened, in its words (pyvia.alerts). The
        status alone reaches the page too (its answer); this says more where the server knows more."""
        ctx = _context_of(request, self)
        if ctx is None or ctx.state is State.DESTROYED:
            return
        messages = ctx.route.messages
        if isinstance(exc, RateLimited):
            wait = next((v for k, v in exc.headers if k == "retry-after"), "1")
            text = f"{messages['429']} (wait {wait} s)"
        elif isinstance(exc, ClientError):
            text = exc.public_message if exc.public_message != type(exc).public_message else messages.get(
                str(exc.status), messages["default"])
        elif isinstance(exc, ServiceError):
            text = messages.get(str(exc.status), messages["default"])
        else:
            text = messages["500"]
        ctx.show_error(text)

    def _log_refusal(self, request: Request, exc: ClientError) -> None:
        """One line per refusal with its reason: at WARNING when a tab's request was refused (the
        user's page is affected), at INFO for pages and routes. Refusals come in floods (a
        rate-limited client, a crawler): the same kind is logged once a minute, with its count."""
        level = logging.WARNING if request.kind in _TAB_KINDS else logging.INFO
        key = ("refusal", request.kind or "request", type(exc).__name__, str(exc.status))
        now = self.clock.now() if self.clock is not None else time.monotonic()
        seen = self._errors_seen.get(key)
        if seen is not None and now - seen[0] < _ERROR_LOG_INTERVAL:
            seen[1] += 1
            log.debug("%s %s -> %d %s", request.method, request.path, exc.status, exc.detail)
            return
        if len(self._errors_seen) >= _ERRORS_REMEMBERED:
            self._errors_seen.clear()
        self._errors_seen[key] = [now, 0]
        more = ""
        if seen is not None and seen[1]:
            more = f" (and {seen[1]} more like it in the last {int(now - seen[0])} s)"
        log.log(level, "%s %s -> %d %s%s", request.method, request.path, exc.status, exc.detail, more)

    def _log_error(self, exc: BaseException, phase: str, where: str) -> None:
        """One traceback per kind of error a minute: a timer that keeps failing, or every tab
        hitting the same bug, would otherwise fill the log with copies. The repeats are counted
        and said with the next traceback."""
        key = (phase, where, type(exc).__name__, str(exc)[:200])
        now = self.clock.now() if self.clock is not None else time.monotonic()
        seen = self._errors_seen.get(key)
        if seen is not None and now - seen[0] < _ERROR_LOG_INTERVAL:
            seen[1] += 1
            log.debug("error in %s of %s (again): %s: %s", phase, where, type(exc).__name__, exc)
            return
        repeats = seen[1] if seen is not None else 0
        if len(self._errors_seen) >= _ERRORS_REMEMBERED:
            self._errors_seen.clear()
        self._errors_seen[key] = [now, 0]
        if repeats:
            log.error("error in %s of %s (and %d more like it in the last %d s)", phase, where, repeats,
                      int(now - seen[0]) if seen is not None else 0, exc_info=exc)
        else:
            log.error("error in %s of %s", phase, where, exc_info=exc)

    # --- serving ---------------------------------------------------------------------------------

    async def startup(self) -> None:
        """Called by the front end inside the running loop before it serves."""
        import gc
        import os

        from pyvia.cluster import ENGINE_URL_ENV, create_engine

        self._loop = asyncio.get_running_loop()
        url = os.environ.get(ENGINE_URL_ENV)
        if url and not url.startswith("memory:") and (self.link is None or self.link.is_stopped):
            await self.use_engine(create_engine(url, prefix=self.config.engine_prefix))
        self.start(LoopClock(self._loop))
        if self.persists_in_db:
            try:
                await self.restore_from_db()
            except Exception as exc:  # serve without it: readiness never waits for a database
                self._report(exc, None, "start", reraise=False)
        self.compression.prepare_process()
        if self.config.gc_thresholds is not None:
            gc.collect()
            gc.freeze()  # modules, routes, templates: nothing the collector needs to walk again
            gc.set_threshold(*self.config.gc_thresholds)

    async def use_engine(self, engine: Any) -> None:
        """Share scoped signals, global state, broadcasts and tabs with other workers through ``engine``
        (a :class:`pyvia.cluster.Engine`, not yet connected). ``startup`` does it when
        ``PYVIA_ENGINE_URL`` is set, as ``pyvia run --workers N`` does."""
        link = ClusterLink(self, engine)
        await link.start()
        self.link = link
        self.scopes.link = link
        self.global_state.link = link
        self.sessions.link = link

    @property
    def engine(self) -> Any:
        """The cluster engine (``/_health`` reports it), or None with one worker."""
        return self.link.engine if self.link is not None else None

    @property
    def is_running(self) -> bool:
        """Whether the app was started and not stopped since (its sweep is armed)."""
        return self._sweep_handle is not None

    def start(self, clock: Clock, loop: asyncio.AbstractEventLoop | None = None) -> None:
        """Start timers on ``clock`` (``startup`` does this with the loop's clock); ``loop`` runs the
        app's tasks (``startup``'s running loop; a test client's own)."""
        self.clock = clock
        if loop is not None:
            self._loop = loop
        self._started_at = clock.now()
        self._limiter.reset()  # its times came from the previous clock
        self.broadcaster.reset()  # its times came from the previous clock
        for _, mounted in self._mounts:
            mounted.raise_server_exceptions = self.raise_server_exceptions
            mounted.start(clock)
        self.draining = False
        self.metrics.start_monitors(clock)
        self._start_assets()  # a missing bundle fails at start, not on a page
        self.db.open()  # a SQLite file that cannot be opened fails at start
        if self.config.persist_path is not None:
            self._restore()
        self._sweep_handle = clock.call_later(self.config.sweep_interval, self._sweep)
        for fn, period, every_worker in self._app_intervals:
            self._arm_app_interval(fn, period, every_worker)
        for fn in self._on_start:
            try:
                result = fn()
                if inspect.isawaitable(result):
                    self._spawn(result, None, "start")
            except Exception as exc:
                self._report(exc, None, "start")

    async def shutdown(self, budget: float = 1.5, *, spread: float = 0.0,
                       saved: Callable[[], object] | None = None) -> None:
        """Ask every tab to reconnect (its stream is ended; the page reopens it) and stop timers.

        ``saved`` is called once the shared state is persisted and the stop hooks ran, before the
        streams end; ``spread`` ends them over that many seconds, in random order, so the tabs of a
        replaced worker reconnect staggered rather than all in the same second.
        """
        self.draining = True
        if self.link is not None:
            self.link.stop_taking_connections()  # they would not be told to close after their answer
        self.metrics.stop_monitors()
        if self.clock is not None:
            moving = protocol.patch_signals({protocol.FILTER_SIGNAL: protocol.FILTER_DOWN})
            now = self.clock.now()
            for ctx in self._connected.values():  # their streams end soon: meanwhile actions carry the snapshot
                ctx.stream.send(moving, None, now)
        for _, mounted in self._mounts:
            await mounted.shutdown(budget)
        if self._sweep_handle is not None:
            self._sweep_handle.cancel()
            self._sweep_handle = None
        self.broadcaster.flush(force=True)
        self.broadcaster.cancel()
        if self.config.persist_path is not None:
            self._persist()
        for timer in self._app_timers:
            timer.cancel()
        self._app_timers = []
        for fn in self._on_stop:
            try:
                result = fn()
                if inspect.isawaitable(result):
                    await result
            except Exception as exc:
                self._report(exc, None, "stop")
        if self.persists_in_db:
            try:
                await self._persist_to_db()
            except Exception as exc:  # the stop goes on: the previous saved state stays
                self._report(exc, None, "stop", reraise=False)
        await self.db.close()  # after the stop hooks, which may still write
        if saved is not None:
            saved()
        await self._end_streams(spread)
        for closable in (self.static, self._bundle_asset):
            if closable is not None:
                closable.close()
        if self.link is not None:
            # It stays attached, stopped: a request still answered after this fails on the closed
            # engine (503) instead of changing shared state here alone and answering 200.
            await self.link.stop()
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None
        self.static = None
        self._bundle_asset = None

    async def _end_streams(self, spread: float) -> None:
        import random

        tabs = list(self._connected.values())
        if spread > 0 and len(tabs) > 1:
            random.shuffle(tabs)
            steps = max(1, min(len(tabs), int(spread / 0.05)))  # a batch every 50 ms at most
            per_step = -(-len(tabs) // steps)
            for start in range(0, len(tabs), per_step):
                if start:
                    await asyncio.sleep(spread / steps)
                for ctx in tabs[start:start + per_step]:
                    if self._connected.get(ctx.id) is ctx:  # not gone on its own meanwhile
                        self._end_stream(ctx)
                        self._disconnected(ctx)
        for ctx in list(self._connected.values()):
            self._end_stream(ctx)
            self._disconnected(ctx)

    @staticmethod
    def _end_stream(ctx: Context) -> None:
        """End a tab's stream on purpose: the page is told first, so its actions carry the tab's
        snapshot until its stream is back (wherever it lands, the tab can be revived)."""
        ctx.stream.send(protocol.patch_signals(_STREAM_DOWN), None, ctx.app.now())
        ctx.stream.close()

    def run(self, host: str = "127.0.0.1", port: int = 3000, **server_options: Any) -> None:
        """Serve the app on the native server until SIGINT/SIGTERM.

        The server's limits come from ``pyvia.toml`` ``[server]``, ``PYVIA_SERVER__*`` and
        keywords named like those keys (``app.run(max_streams_per_ip=64)``), checked as strictly
        as the App's options (:func:`pyvia.server.options.serve_options`).
        """
        from pyvia.server.options import serve_options  # the core imports a front end only here
        from pyvia.server.runner import run

        run(self, host=host, port=port, **serve_options(server_options, trusted_proxies=self.config.trusted_proxies))

    @property
    def bundle(self) -> Bundle:
        if self._bundle is None:
            self._bundle = load_bundle(self.config.datastar_js)
            self._bundle_url = f"{self._base}{BUNDLE_PATH[1:]}?v={self._bundle.version}"
        return self._bundle

    def _executor_for_assets(self) -> concurrent.futures.ThreadPoolExecutor:
        """One low-priority thread precompresses static files off the loop (the codecs release the GIL)."""
        if self._executor is None:
            self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="pyvia-precompress")
        return self._executor

    def _start_assets(self) -> None:
        bundle = self.bundle
        if self._bundle_asset is None:
            self._bundle_asset = Asset(bundle.body, content_type="text/javascript; charset=utf-8",
                                       version=bundle.version, executor=self._executor_for_assets())
        if self.config.static_dir is not None and self.static is None:
            self.static = StaticFiles(self.config.static_dir, cache_control=self.config.static_cache_control,
                                      executor=self._executor_for_assets(),
                                      preference=self.config.compression_preference)
            self.static.start()

    # --- dispatch ----------------------------------------------------------------------------------

    def handle(self, request: Request) -> HandleResult:
        """Answer one request (see the module docstring)."""
        if self.link is not None:  # several workers: the session's data comes from the engine first
            if request.path.startswith(ACTION_PREFIX):
                relayed = self._relay_action(request)
                if relayed is not None:
                    return relayed
            session_id = self._session_of(request)
            if self._unfollowed(session_id) and not self._for_a_tab_elsewhere(request):
                return self._handle_after(self._follow(session_id), request)
        try:
            result = self._dispatch(request)
        except BaseException as exc:  # every failure becomes an answer here
            result = self._error_response(exc, request)
        return self._answer(result, request)

    def _relay_action(self, request: Request) -> asyncio.Future[Response] | None:
        """An action for a tab another worker holds, when this one knows which: sent there without
        a task, to be checked and run there (a proxy's connection carries the actions of many
        browsers, whose tabs live anywhere). None: the dispatch takes it (a tab of this worker, an
        owner not known yet, a connection that moves there instead, a malformed request)."""
        if request.method != "POST" or "_relayed" in request.state or not self._parses_here(request):
            return None
        try:
            ctx_id = self._action_signals(request).get(protocol.CONTEXT_SIGNAL)
        except ClientError:
            return None
        if not isinstance(ctx_id, str) or ctx_id in self.contexts:
            return None
        assert self.link is not None and self._loop is not None  # called by handle() with several workers
        answer: asyncio.Future[Response] = self._loop.create_future()

        def answered(result: Response | Exception | None) -> None:
            if answer.done():
                return  # the client left
            if result is None:  # the tab moved, or its worker is gone: the long way
                request.state["_relayed"] = True
                _settle(answer, self.handle(request))
                return
            response = self._error_response(result, request) if isinstance(result, Exception) else result
            self.metrics.observe_request("action", response.status)
            answer.set_result(response)

        if not self.link.relay(ctx_id, request, self.config.action_timeout, answered):
            return None
        request.kind = "action"
        return answer

    def _for_a_tab_elsewhere(self, request: Request) -> bool:
        """A stream or an action for a tab this worker does not hold: most go to the tab's worker
        (passed or forwarded), so the session is read here only if the tab comes (``_follow``)."""
        path = request.path
        if path != SSE_PATH and not path.startswith(ACTION_PREFIX):
            return False
        if path != SSE_PATH and not self._parses_here(request):
            return False
        try:
            signals = request_signals(request, None) if path == SSE_PATH else self._action_signals(request)
        except ClientError:
            return False  # answered as a bad request by the dispatch
        ctx_id = signals.get(protocol.CONTEXT_SIGNAL)
        return isinstance(ctx_id, str) and ctx_id not in self.contexts

    def _unfollowed(self, session_id: str | None) -> bool:
        """Several workers, and this one has not read the session's data from the engine yet."""
        link = self.link
        return link is not None and session_id is not None and not link.has_session(session_id)

    async def _follow(self, session_id: str | None) -> None:
        """Read the session's data, if this worker does not follow it yet, before a tab of it comes here."""
        if self._unfollowed(session_id):
            assert self.link is not None and session_id is not None  # checked by _unfollowed
            await self.link.load_session(session_id)

    def handle_forwarded(self, request: Request, ctx_id: str) -> HandleResult:
        """An action for tab ``ctx_id`` of this worker that another worker received: checked
        (origin, rate limit) and run here without dispatching it again."""
        request.kind = "action"
        session_id = self._session_of(request)
        if self._unfollowed(session_id):
            return self._handle_after(self._follow(session_id), request)  # as handle() does
        try:
            self._check_action(request)
            result = self._run_action(request, self.contexts.get(ctx_id), request.path[len(ACTION_PREFIX):],
                                      self._action_signals(request))
        except BaseException as exc:
            result = self._error_response(exc, request)
        return self._answer(result, request)

    def _answer(self, result: Any, request: Request) -> HandleResult:
        if isinstance(result, (Response, StreamResponse)):
            self.metrics.observe_request(request.kind or "other", result.status)
            _close_uploads(request)
            return result
        return self._finish(result, request)

    async def _handle_after(self, loading: Awaitable[None], request: Request) -> Response | StreamResponse:
        await loading
        result = self.handle(request)
        return await result if inspect.isawaitable(result) else result

    async def _finish(self, pending: Awaitable[Any], request: Request) -> Response | StreamResponse:
        try:
            result = self._as_response(await pending)
        except BaseException as exc:
            result = self._error_response(exc, request)
        finally:
            _close_uploads(request)
        self.metrics.observe_request(request.kind or "other", result.status)
        return result

    def _error_response(self, exc: BaseException, request: Request) -> Response:
        if request.kind == "action" and not isinstance(exc, (KeyboardInterrupt, SystemExit)):
            self._tell_the_tab(exc, request)
        if isinstance(exc, ClientError):
            self._log_refusal(request, exc)
            if isinstance(exc, NotFound) and self._not_found is not None and request.kind in ("page", "route"):
                return self._not_found_response(request)
            return Response.text(exc.public_message, exc.status, list(exc.headers))
        if isinstance(exc, ServiceError):
            log.warning("%s %s -> %d %s", request.method, request.path, exc.status, exc)
            return Response.text(exc.public_message, exc.status, [("retry-after", str(exc.retry_after))])
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            raise exc
        phase = request.kind or "request"
        self._report(exc, _context_of(request, self), phase)  # logs, counts, tells on_error; may re-raise
        if self.config.dev and request.kind in ("page", "route"):
            return dev_error_page(exc, request.kind)
        if self.config.dev and request.kind in ("action", "stream"):
            return dev_error_events(exc, request.kind)  # an overlay on the tab
        if request.kind == "action":
            return Response.text("Action failed", 500)
        if request.kind == "page" and self._error_page is not None:
            try:
                return self._as_response(self._error_page(request, exc), 500)
            except Exception:
                log.exception("the error page failed too")
        return Response.text("Internal Server Error", 500)

    def _dispatch(self, request: Request) -> Any:
        path = request.path
        if "\0" in path:  # decoded from %00: no route holds one; the native server refuses it first
            raise MalformedRequest("a NUL (%00) in the request path")
        if path in _OPS_PATHS and request.method in ("GET", "HEAD"):
            request.kind = "ops"  # before middleware: probes must not need a login
            return _OPS_PATHS[path](self)
        if path == DEVTOOLS_PATH and self.config.dev:
            request.kind = "ops"
            return devtools_page(self)
        if self._mounts:
            for prefix, mounted in self._mounts:
                if path.startswith(prefix) and (len(path) == len(prefix) or path[len(prefix)] == "/"):
                    request.path = path[len(prefix):] or "/"
                    return mounted.handle(request)
        if path == SSE_PATH:
            request.kind = "stream"
            return self._open_stream(request)
        if path.startswith(ACTION_PREFIX):
            request.kind = "action"
            return self._action(request, path[len(ACTION_PREFIX):])
        if path == BUNDLE_PATH:
            request.kind = "asset"
            return self._bundle_response(request)
        static = self.static
        if static is not None and "." in path.rsplit("/", 1)[-1]:
            request.kind = "asset"
            found = static.get(path, request)
            if found is not None:
                return found
        if path == CLOSE_PATH:
            request.kind = "beacon"
            return self._close_beacon(request)
        if path.startswith(DOWNLOAD_PREFIX):
            request.kind = "download"
            found = self._downloads.take(path[len(DOWNLOAD_PREFIX):], self._session_of(request) or "")
            if found is None:
                raise NotFound("unknown or used download")
            return found
        routes, params = self.router.match(path)
        if not routes:
            return self._not_found_response(request)
        method = "GET" if request.method == "HEAD" else request.method
        route = next((r for r in routes if method in r.methods or "*" in r.methods), None)
        if route is None:
            allowed = sorted({m for r in routes for m in r.methods} | ({"HEAD"} if any(
                "GET" in r.methods for r in routes) else set()))
            raise MethodNotAllowed(headers=[("allow", ", ".join(allowed))])
        request.path_params = params
        if route.kind == "page":
            request.kind = "page"
            if request.method == "HEAD":
                return Response(200, [("content-type", "text/html; charset=utf-8")])
            return self._with_middleware(request, route, lambda r: self._page(r, route))
        request.kind = "route"
        return self._with_middleware(request, route, lambda r: self._plain_route(r, route))

    def _with_middleware(self, request: Request, route: Route | None, endpoint: Callable[[Request], Any]) -> Any:
        chain = [*self._middleware, *(route.middleware if route is not None else ())]
        if not chain:
            return endpoint(request)
        call = endpoint
        for mw in reversed(chain):
            call = _wrap_middleware(mw, call)
        return call(request)

    def _not_found_response(self, request: Request) -> Response:
        if self._not_found is None:
            raise NotFound()
        return _then(self._not_found(request), lambda r: self._as_response(r, 404))  # type: ignore[no-any-return]

    def _as_response(self, result: Any, status: int = 200) -> Response | StreamResponse:
        if isinstance(result, (Response, StreamResponse)):
            return result
        if isinstance(result, str):
            return Response.html(result, status)
        if isinstance(result, (dict, list)):
            return Response.json(result, status)
        if isinstance(result, bytes):
            return Response(status, [("content-type", "application/octet-stream")], result)
        raise TypeError(f"a handler returned {type(result).__name__}; expected a Response, str, dict or list")

    # --- plain routes ------------------------------------------------------------------------------

    def _plain_route(self, request: Request, route: Route) -> Any:
        kwargs = _bind(route, request.path_params, None, request)
        return _then(route.handler(**kwargs), self._as_response)

    # --- pages -----------------------------------------------------------------------------------

    def _session_of(self, request: Request) -> str | None:
        if not self._rotated:  # no session being rotated: what this app found before holds
            known = request._session
            if known is not None and known[0] is self:
                return known[1]
        value = request.cookies.get(self._session_cookie)
        if value is None or not self._session_ids.is_issued(value):
            value = None  # none, or one this app never issued (planted): never adopted
        elif self._rotated:
            rotated = self._rotated.get(value)
            if rotated is not None and rotated[1] >= self._now():
                return rotated[0]  # a request already in flight when the session was rotated
            return value
        request._session = (self, value)
        return value

    def session_id(self, request: Request) -> str | None:
        """The browser session of ``request`` (for middleware: ``app.session_data(app.session_id(r))``)."""
        return self._session_of(request)

    def regenerate_session(self, ctx: Context) -> str:
        """Give ``ctx``'s browser a new session id (at login or logout); return it.

        Every live tab of the old session moves to the new one, with its session data and session
        scope; the old cookie is still honoured for 2 s so requests already in flight succeed.
        """
        old = ctx.session_id
        new = self._session_ids.make()
        first = self._rotated_from.get(old, old)
        data = self.sessions.peek(old)
        if data is not None:
            saved = dict(data)
            self.sessions.clear(old)
            self.sessions.get(new).update(saved)
        self._rotate_session(old, new, first)
        if self.link is not None:
            self.link.session_rotated(old, new, first)  # the session's tabs on other workers move too
        ctx._cookies_out.append(self._session_cookie_header(new))
        return new

    def _rotate_session(self, old: str, new: str, first: str) -> None:
        """Session ``old`` is ``new`` from now on (``regenerate_session`` here or on another
        worker): its tabs here move, and the old cookie is honoured for a moment. ``first``: the
        session their ids were signed for."""
        self._rotated[old] = (new, self._now() + _ROTATION_OVERLAP)
        self._rotated_from.pop(old, None)
        self._rotated_from[new] = first
        while len(self._rotated) > _GRAVEYARD_CAP:
            self._rotated.popitem(last=False)
        while len(self._rotated_from) > _GRAVEYARD_CAP:
            self._rotated_from.popitem(last=False)
        old_scope, new_scope = Scope.session(old), Scope.session(new)
        for tab in [c for c in self.contexts.values() if c.session_id == old]:
            tab.session_id = new
            if old_scope in tab._scopes:
                tab._scopes.discard(old_scope)
                tab._scopes.add(new_scope)
        self.scopes.rename(old_scope, new_scope)

    def _rotated_elsewhere(self, old_key: str, new_key: str) -> None:
        """``regenerate_session`` on another worker made the session hashed ``new_key`` of the one
        hashed ``old_key`` (the ids never travel: whoever reads the engine learns no cookie). Its
        session scope moves at once; its tabs here take the new id with the first request that
        carries it (:meth:`_same_session`)."""
        old_scope, new_scope = "session:" + old_key, "session:" + new_key
        state = self.scopes.get(old_scope)
        old = next((ctx.session_id for ctx in state.members.values()), None) if state is not None else None
        if old is None:
            old = next((sid for sid, data in self.sessions.items() if data.key == old_key), None)
        if old is None:
            old = next((c.session_id for c in self.contexts.values() if Scope.session(c.session_id) == old_scope),
                       None)
        if old is None:
            return  # nothing of that session here
        self.sessions.forget(old)  # its data moved to the new session in the engine
        for tab in self.contexts.values():
            if old_scope in tab._scopes:
                tab._scopes.discard(old_scope)
                tab._scopes.add(new_scope)
        self.scopes.rename(old_scope, new_scope)
        self._awaiting_rotation[new_key] = old
        while len(self._awaiting_rotation) > _GRAVEYARD_CAP:
            self._awaiting_rotation.popitem(last=False)

    def _same_session(self, ctx: Context, session_id: str | None) -> bool:
        """Whether a request of ``session_id`` may use tab ``ctx``: its session, or the one another
        worker rotated it to (then the tab moves to it now)."""
        if ctx.session_id == session_id:
            return True
        old = self._rotation_of(session_id)
        if old is None or old != ctx.session_id:
            return False
        self._finish_rotation(old, session_id)  # type: ignore[arg-type]  # not None: _rotation_of found it
        return True

    def _rotation_of(self, session_id: str | None) -> str | None:
        """The old id of a session another worker rotated to ``session_id``, if this one was told."""
        if session_id is None or not self._awaiting_rotation:
            return None
        return self._awaiting_rotation.get(Scope.session(session_id).split(":", 1)[1])

    def _finish_rotation(self, old: str, new: str) -> None:
        del self._awaiting_rotation[Scope.session(new).split(":", 1)[1]]
        self._rotate_session(old, new, self._rotated_from.get(old, old))

    def _page(self, request: Request, route: Route) -> Any:
        if self.config.content_security_policy:
            request.state["csp_nonce"] = secrets.token_urlsafe(16)  # templates: c.request.state
        session_id = self._session_of(request)
        if session_id is None:
            session_id = self._session_ids.make()
            if self.link is not None:
                self.link.new_session(session_id)
                request.state[NEW_SESSION] = True  # its session-scoped signals are new too
        params = request.path_params
        ctx = Context(self, self._ids.make(route.pattern, params, session_id), route, params, session_id, request)
        if self.link is not None:
            self.link.claim(ctx.id, wait=True)  # the page is answered once other workers can find the tab
        kwargs = _bind(route, params, ctx, request)
        return _then(route.handler(**kwargs),
                     lambda result: self._after_loads(lambda: self._page_response(ctx, result)))

    def _after_loads(self, fn: Callable[[], Any]) -> Any:
        """``fn()`` once the scoped signals just declared hold their shared values (several workers)."""
        link = self.link
        if link is None or not link.loading:
            return fn()

        async def later() -> Any:
            await link.loaded()
            return fn()

        return later()

    def _page_response(self, ctx: Context, result: Any) -> Response | Awaitable[Response]:
        if result is not None:
            if isinstance(result, Response):
                return result
            raise DeclarationError(
                f"page handler for {ctx.route.pattern!r} returned {type(result).__name__}; "
                "a page declares a view with c.view() and returns None (or a Response)"
            )
        return _then(ctx.render_view(False), lambda content: self._page_document(ctx, content))  # type: ignore[no-any-return]  # Response or its awaitable

    def _page_document(self, ctx: Context, content: str) -> Response:
        seed: dict[str, Any] = {protocol.CONTEXT_SIGNAL: ctx.id, **_STREAM_DOWN}
        seed.update(ctx.seed_signals())
        bundle = self.bundle
        nonce = ctx.request.state.get("csp_nonce") if self.config.content_security_policy else None
        head = bootstrap_head(seed, self._bundle_url, bundle.integrity, self._sse_url, self._close_url,
                              nonce=nonce)
        if self.config.head or ctx._head:
            head += "\n" + "\n".join([*self.config.head, *ctx._head])
        foot = [ctx.route.alert, *self.config.foot, *ctx._foot]
        if self.config.dev:
            foot.append(devtools_panel(self))
        doc = document_bytes(content, title=ctx.route.title or self.config.title, head=head,
                             foot="\n".join(foot), lang=self.config.lang)
        self._register(ctx)
        response = Response(200, [("content-type", "text/html; charset=utf-8")], doc)
        self.compression.encode_page(ctx.request, response)
        response.headers.append(("set-cookie", self._session_cookie_header(ctx.session_id)))
        response.headers.append(("cache-control", "no-store"))
        if self.config.security_headers:
            response.headers.extend(_SECURITY_HEADERS)
        if nonce:
            response.headers.append(("content-security-policy", _CSP.format(nonce=nonce)))
        self._take_cookies(ctx, response)
        return response

    def _session_cookie_header(self, session_id: str) -> str:
        secure = "; Secure" if self.config.secure_cookie else ""
        # Path=base_path keeps two apps mounted on one host from sharing a session (a __Host- cookie
        # must have Path=/).
        path = "/" if self.config.secure_cookie else self._base
        return (f"{self._session_cookie}={session_id}; Path={path}; Max-Age={SESSION_MAX_AGE}; HttpOnly; "
                f"SameSite=Lax{secure}")

    @staticmethod
    def _take_cookies(ctx: Context, response: Response) -> None:
        if ctx._cookies_out:
            response.headers.extend(("set-cookie", c) for c in ctx._cookies_out)
            ctx._cookies_out.clear()

    # --- lifecycle -------------------------------------------------------------------------------

    def now(self) -> float:
        """The app clock's time in seconds (monotonic; a manual clock under pyvia.testing)."""
        return self._now()

    def _now(self) -> float:
        if self.clock is None:
            raise RuntimeError("the app has not been started; run it with app.run() or pyvia.testing")
        return self.clock.now()

    def _register(self, ctx: Context) -> None:
        self.contexts[ctx.id] = ctx
        if self.link is not None and ctx.revived:
            self.link.claim(ctx.id)  # a page view claimed it already
        for name in ctx._scopes:
            self.scopes.join(ctx, name)
        ctx.state = State.CREATED
        self._set_deadline(ctx, self._now() + self.config.connect_timeout)
        waiting = self._waiting
        waiting[ctx.id] = ctx
        if len(waiting) > self.config.max_waiting_contexts:
            oldest = waiting.pop(next(iter(waiting)))
            self.evicted_waiting += 1
            self.destroy(oldest)  # revived from its signed id if its stream comes after all

    def _set_deadline(self, ctx: Context, deadline: float) -> None:
        ctx.deadline = deadline
        self._seq += 1
        heapq.heappush(self._deadlines, (deadline, self._seq, ctx))

    def _on_stream_open(self, ctx: Context, sink: StreamSink, coding: str = "identity",
                        last_event_id: str | None = None) -> None:
        if ctx.state is State.DESTROYED:
            sink.write(protocol.execute_script("window.location.reload()"))
            sink.close()
            return
        now = self._now()
        # The first connect after the page view only needs what happened since (unless what
        # waited for it overflowed: ``stream.lost``). A reconnect gets the frames after the last
        # one its page got (``last_event_id``) from the tab's replay buffer, and a full render when
        # they are not all there any more, or the tab was revived.
        replay: list[bytes] | None = None
        if ctx.revived or ctx.stream.lost:
            full = True
        elif ctx.state is State.CREATED:
            full = False
        else:
            replay = ctx.stream.frames_after(last_event_id)
            full = replay is None
            replays = self._replays
            if full:
                replays.full_renders += 1
            else:
                replays.resumes += 1
                replays.replayed_frames += len(replay or ())
        if full:
            ctx.stream.held_view = None  # superseded by the full render below
        ctx.stream.attach(sink, now, self.compression.stream_encoder(coding, owner=ctx.stream), replay)
        self._waiting.pop(ctx.id, None)
        ctx.state = State.CONNECTED
        ctx.deadline = 0.0
        self._connected[ctx.id] = ctx
        signals: dict[str, Any] = {protocol.DISCONNECTED_SIGNAL: False, protocol.FILTER_SIGNAL: protocol.FILTER_OPEN,
                                   LOST_SIGNAL: False}
        view = None
        if full:
            ctx.revived = False
            try:
                view = ctx._view_frame()
            except Exception as exc:  # the tab still connects; the next render may succeed
                self._report(exc, ctx, "render", reraise=False)
            signals.update(ctx.full_signals())
        else:
            signals.update(ctx.changed_signals())
        if view is None or type(view) is bytes:
            ctx.stream.send(protocol.patch_signals(signals), view, now, opening=True)  # type: ignore[arg-type]  # bytes, checked
        else:  # an async view: it follows once rendered, before anything sent after it
            ctx.stream.send(protocol.patch_signals(signals), None, now, opening=True)
            ctx.deliver(b"", view)
        for fn in list(ctx._on_connect):
            self._run_hook(fn, ctx, "connect")
        for fn in self._on_connect:
            self._run_hook(fn, ctx, "connect")

    def _on_stream_close(self, ctx: Context, sink: StreamSink) -> None:
        if ctx.state is State.DESTROYED or not ctx.stream.detach(sink):
            return
        self._disconnected(ctx)

    def _disconnected(self, ctx: Context) -> None:
        """The tab has no stream any more (the peer left, or the server ended it)."""
        now = self._now()
        ctx.state = State.DISCONNECTED
        self._connected.pop(ctx.id, None)
        deadline = now + self.config.cleanup_delay
        if ctx.last_action:
            deadline = max(deadline, ctx.last_action + self.config.reconnect_timeout)
        self._set_deadline(ctx, deadline)
        for fn in list(ctx._on_disconnect):
            self._run_hook(fn, ctx, "disconnect")
        for fn in self._on_disconnect:
            self._run_hook(fn, ctx, "disconnect")

    def _run_hook(self, fn: Callable[..., Any], ctx: Context, phase: str) -> None:
        try:
            result = call_hook(fn, ctx)
            if inspect.isawaitable(result):
                self._spawn(result, ctx, phase)
        except Exception as exc:
            self._report(exc, ctx, phase)

    def _spawn(self, awaitable: Awaitable[Any], ctx: Context | None, phase: str) -> None:
        async def guarded() -> None:
            try:
                await awaitable
            except Exception as exc:
                with contextlib.suppress(Exception):  # nothing above a background task to raise to
                    self._report(exc, ctx, phase)

        task = self.create_task(guarded())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def create_task(self, coro: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
        """A task on the app's loop (the one it was started on), even from a callback outside it."""
        if self._loop is not None:
            return self._loop.create_task(coro)
        return asyncio.ensure_future(coro)

    def _sweep(self) -> None:
        """The one periodic pass: expire tabs whose deadline passed, keep idle streams alive."""
        clock = self.clock
        assert clock is not None
        now = clock.now()
        heap = self._deadlines
        while heap and heap[0][0] <= now:
            deadline, _, ctx = heapq.heappop(heap)
            if ctx.deadline == deadline and ctx.state in (State.CREATED, State.DISCONNECTED):
                self._destroy_queue.append(ctx)
        if self._destroy_queue and not self._destroying:
            self._destroying = True
            clock.call_soon(self._destroy_slice)
        if now >= self._next_keep_alive:  # the pass over open streams: a few times per keep-alive period
            interval = self.config.keep_alive
            ping = protocol.keep_alive()
            patience = self.config.slow_tab_timeout
            idle_release = self.config.encoder_idle_release
            for ctx in list(self._connected.values()):
                stream = ctx.stream
                if stream.over_since and stream.is_stalled(now, patience):
                    log.info("disconnecting a tab of %s that stopped reading", ctx.route.pattern)
                    stream.close(abort=True)  # what it has not read is dropped, not kept for the send deadline
                    continue
                if interval > 0 and now - stream.last_write >= interval:
                    stream.keep_alive(ping, now)
                encoder = stream.encoder
                if encoder is not None and encoder.is_active and now - stream.last_event > idle_release \
                        and encoder.releases_in_place and stream.sink is not None:
                    stream.sink.write(encoder.release().data)  # zstd ends its frame; a new compressor starts later
            period = min(interval / 3 if interval > 0 else 5.0, max(idle_release / 2, self.config.sweep_interval))
            self._next_keep_alive = now + period
        if self._outflow.ended:  # streams the server ended (slow tab, encoder budget): tabs without one
            self._outflow.ended = 0
            for ctx in [c for c in self._connected.values() if c.stream.sink is None]:
                self._disconnected(ctx)
        if self.compression.budget.is_over:
            self._reclaim_encoders()
        self.compression.return_memory(now)
        self._replays.sweep(now)
        self._measure_unsent()
        self._prune_records(now)
        self._sweep_handle = clock.call_later(self.config.sweep_interval, self._sweep)

    def _measure_unsent(self) -> None:
        """Add up what waits in every tab socket; past the cap, view frames are held everywhere
        and the readers furthest behind are cut off (:meth:`pyvia.stream.Outflow.measure`)."""
        self._outflow.measure([ctx.stream for ctx in self._connected.values()], self.config.max_unsent_bytes)

    def _persist(self) -> None:
        signals = [(state.name, name, sig.value) for state in self.scopes for name, sig in state.signals.items()]
        signals += [(scope, name, value) for (scope, name), value in self.scopes.restored.items()]
        sessions = [(sid, dict(data)) for sid, data in self.sessions.items()]
        rows = save_state(self.config.persist_path, global_state=dict(self.global_state), signals=signals,  # type: ignore[arg-type]  # checked by the caller
                          sessions=sessions, tabs=self._tab_records())
        log.info("kept %d values of shared state in %s", rows, self.config.persist_path)

    @property
    def persists_in_db(self) -> bool:
        """Shared state is kept in the app's database across graceful restarts: ``persist_in_db``
        is on and no engine holds the state (one worker)."""
        return self.config.persist_in_db and self.link is None

    async def _persist_to_db(self) -> None:
        signals = [(state.name, name, sig.value) for state in self.scopes for name, sig in state.signals.items()]
        signals += [(scope, name, value) for (scope, name), value in self.scopes.restored.items()]
        sessions = [(sid, dict(data)) for sid, data in self.sessions.items()]
        rows = await save_state_to_db(self.db, global_state=dict(self.global_state), signals=signals,
                                      sessions=sessions, tabs=self._tab_records())
        log.info("kept %d values of shared state in the database", rows)

    async def restore_from_db(self) -> None:
        """Read back what the last graceful stop kept in the database (``startup`` calls it)."""
        global_state, signals, sessions, tabs = await load_state_from_db(self.db)
        self.global_state._data.update(global_state)
        self.scopes.restored.update(signals)
        for sid, data in sessions.items():
            self.sessions.get(sid)._data.update(data)
        self._restore_tabs(tabs)

    def _restore(self) -> None:
        global_state, signals, sessions, tabs = load_state(self.config.persist_path)  # type: ignore[arg-type]  # checked by the caller
        self.global_state.update(global_state)
        self.scopes.restored.update(signals)
        for sid, data in sessions.items():
            self.sessions.get(sid).update(data)
        self._restore_tabs(tabs)

    def _tab_records(self) -> list[tuple[str, dict[str, Any]]]:
        """What revives each live or recently destroyed tab, for the next process (a graceful restart)."""
        records = []
        for ctx in self.contexts.values():
            try:
                snapshot = ctx.final_snapshot()
            except TypeError:
                snapshot = None
            records.append((ctx.id, {"tab_state": _json_or_empty(ctx.tab_state), "seq": ctx.snapshot_seq,
                                     "snapshot": snapshot}))
        for ctx_id, grave in self._graveyard.items():
            if ctx_id not in self.contexts:
                records.append((ctx_id, {"tab_state": _json_or_empty(grave.tab_state), "seq": grave.seq,
                                         "snapshot": grave.snapshot}))
        return records[-_GRAVEYARD_CAP:]

    def _restore_tabs(self, tabs: dict[str, dict[str, Any]]) -> None:
        """The tab records an earlier process kept: they revive the tabs that come back here."""
        for ctx_id, record in tabs.items():
            self._vouch(ctx_id, record, restored=True)

    def _reclaim_encoders(self) -> None:
        """Over the encoder budget: release the least recently used encoders (zstd keeps its stream;
        brotli and gzip cannot restart mid-stream, so those tabs are asked to reconnect)."""
        for encoder, released in self.compression.reclaim():
            stream = encoder.owner
            if not isinstance(stream, Stream) or stream.sink is None:
                continue
            if released.data:
                stream.sink.write(released.data)
            if released.action is Release.RECONNECT:
                stream.encoder = None
                stream.close()

    def _destroy_slice(self) -> None:
        """Destroy queued contexts for a few milliseconds, then yield the loop."""
        stop = time.perf_counter() + _DESTROY_SLICE
        queue = self._destroy_queue
        while queue:
            self.destroy(queue.popleft())
            if time.perf_counter() >= stop:
                break
        if queue and self.clock is not None:
            self.clock.call_soon(self._destroy_slice)
        else:
            self._destroying = False

    def destroy(self, ctx: Context) -> None:
        """Destroy a context now: timers stop, cleanup hooks run, its stream ends."""
        if ctx.state is State.DESTROYED:
            return
        ctx.state = State.DESTROYED
        if self.contexts.get(ctx.id) is ctx:
            del self.contexts[ctx.id]
        self._connected.pop(ctx.id, None)
        if self._waiting.get(ctx.id) is ctx:
            del self._waiting[ctx.id]
        for timer in ctx._timers:
            timer.cancel()
        for fn in ctx._on_cleanup:
            self._run_hook(fn, ctx, "cleanup")
        ctx.stream.close()
        self._replays.forget(ctx.stream)
        for name in ctx._scopes:
            self.scopes.leave(ctx, name)
        if self.link is not None:
            self.link.release(ctx.id)
        if self.config.revival_window > 0:
            self._bury(ctx)
        # drop what closures hold, so a destroyed context leaves no reference cycle
        ctx._signals = {}
        ctx._shared = {}
        ctx._components = {}
        ctx._actions = {}
        ctx._view = None
        ctx._view_data = None
        ctx._timers = []
        ctx._on_cleanup = []
        ctx._on_disconnect = []
        ctx._on_connect = []

    def _bury(self, ctx: Context) -> None:
        """Keep what revives ``ctx`` for the revival window: its tab state and a snapshot of its
        server-owned signals (the newest, which the browser may not have got), within a budget."""
        try:
            snapshot = ctx.final_snapshot()
        except TypeError:
            snapshot = None  # a value that is not JSON: the page could not show it either
        self._unbury(ctx.id)
        grave = _Grave(self._now() + self.config.revival_window, ctx.tab_state, ctx.snapshot_seq, snapshot,
                       ask_page=ctx.has_writable_signals)
        self._graveyard[ctx.id] = grave
        if snapshot is not None:
            self._graveyard_bytes += len(snapshot)
            if self._graveyard_bytes > self.config.max_snapshot_bytes * 2048:  # 32 MiB at the default bound
                for old in self._graveyard.values():  # the oldest first
                    if old.snapshot is not None:
                        self._graveyard_bytes -= len(old.snapshot)
                        old.snapshot = None
                        if self._graveyard_bytes <= self.config.max_snapshot_bytes * 1024:
                            break

    def _unbury(self, ctx_id: str) -> _Grave | None:
        grave = self._graveyard.pop(ctx_id, None)
        if grave is not None and grave.snapshot is not None:
            self._graveyard_bytes -= len(grave.snapshot)
        return grave

    def _prune_records(self, now: float) -> None:
        grave = self._graveyard
        while grave:
            first = next(iter(grave.values()))
            if first.deadline > now and len(grave) <= _GRAVEYARD_CAP:
                break
            self._unbury(next(iter(grave)))
        sent = self._reload_sent
        while sent and (next(iter(sent.values())) <= now or len(sent) > _GRAVEYARD_CAP):
            sent.popitem(last=False)

    def _arm_interval(self, ctx: Context, fn: Callable[..., Any], period: float) -> _Interval:
        if self.clock is None:
            raise RuntimeError("set_interval needs a started app")
        interval = _Interval(self, ctx, fn, period)
        interval.arm()
        ctx._timers.append(interval)
        return interval

    # --- streams ---------------------------------------------------------------------------------

    def _open_stream(self, request: Request) -> Any:
        if request.method not in ("GET", "HEAD", "POST"):
            raise MethodNotAllowed(headers=[("allow", "GET, POST")])
        if request.method == "POST":
            self._check_origin(request)  # its body may write the tab's writable signals
        signals = request_signals(request, None)
        ctx_id = signals.get(protocol.CONTEXT_SIGNAL)
        if not isinstance(ctx_id, str) or not ctx_id:
            raise ContextNotFound("stream without via_ctx")
        session_id = self._session_of(request)
        ctx = self.contexts.get(ctx_id)
        if ctx is None:
            if self.link is not None:
                return self._take_over(request, ctx_id, session_id, signals)
            return self._revive_stream(request, ctx_id, session_id, signals)
        return self._stream_for(request, ctx)

    def _revive_stream(self, request: Request, ctx_id: str, session_id: str | None, signals: dict[str, Any]) -> Any:
        """A stream for a tab this server does not hold: revived from what this server kept of it,
        else from the browser's snapshot, which a stream request carries only when asked for."""
        grave = self._graveyard.get(ctx_id)
        restore = self._kept_snapshot(ctx_id, grave)
        if restore is None or (grave is not None and grave.ask_page):
            if self._verify_id(ctx_id, session_id) is None:
                return self._reload_stream(ctx_id)
            if request.method != "POST" or "last-event-id" in request.headers:
                return self._ask_for_snapshot()  # a GET, or a retry whose body was made before
            sent = self._browser_snapshot(ctx_id, signals, grave, restore)
            if sent is False:
                return self._reload_stream(ctx_id)
            restore = _newest(restore, sent)
        return _then(self._revive(request, ctx_id, session_id, signals, restore or None),
                     lambda found: self._stream_for(request, found) if found is not None
                     else self._reload_stream(ctx_id))

    def _kept_snapshot(self, ctx_id: str, grave: _Grave | None) -> tuple[int, dict[str, Any]] | None:
        """The snapshot this server kept of a tab (its own, handed over or restored), opened."""
        if grave is None or grave.snapshot is None:
            return None
        return self._snapshots.open(ctx_id, grave.snapshot)

    def _browser_snapshot(self, ctx_id: str, signals: dict[str, Any], grave: _Grave | None,
                          kept: tuple[int, dict[str, Any]] | None) -> tuple[int, dict[str, Any]] | bool | None:
        """The snapshot the page sent: ``(seq, values)``; None if it sent none, or one older than
        what this server kept (the server's own newer values win: the page may have missed a
        frame); False if it is forged, made for another tab, or older than one this server sent
        while it kept no values to revive from (a replay)."""
        raw = signals.get(protocol.SNAPSHOT_SIGNAL)
        if raw is None:
            return None
        opened = self._snapshots.open(ctx_id, raw)
        if opened is None:
            log.warning("refused a forged snapshot for a tab (its page reloads)")
            return False
        if grave is not None and opened[0] < grave.seq:
            if kept is not None:
                return None
            log.warning("refused a replayed snapshot for a tab (its page reloads)")
            return False
        return opened

    def _ask_for_snapshot(self) -> Response:
        """Tell the page to open its stream again with its writable signals and its snapshot."""
        body = orjson.dumps({protocol.REVIVE_SIGNAL: secrets.token_hex(4), **_STREAM_DOWN})
        return Response(200, [("content-type", "application/json"), ("cache-control", "no-store")], body)

    async def _take_over(self, request: Request, ctx_id: str, session_id: str | None,
                         signals: dict[str, Any]) -> Any:
        """A stream for a tab another worker holds: pass it the connection when it is a worker of
        this machine no busier than this one, else take the tab over (with its tab state and its
        signals); revive it here when that worker is gone. (The stream is the tab's long-lived
        connection, which the balanced accept spread: where it landed is a fine home for the tab too.)"""
        assert self.link is not None
        owner = await self.link.owner(ctx_id, cached=False)
        if owner is not None and await self.link.pass_connection(owner, request, balanced=True):
            request.kind = "passed"  # the stream opens there
            return PASSED
        await self._follow(session_id)  # the tab comes here
        if owner is not None and session_id is not None:
            handed = await self.link.take_over(owner, ctx_id, Scope.session(session_id))
            self._vouch(ctx_id, handed or {})
        found = self.contexts.get(ctx_id)
        if found is None:
            return await _settled(self._revive_stream(request, ctx_id, session_id, signals))
        return await _settled(self._stream_for(request, found))

    def _vouch(self, ctx_id: str, handed: dict[str, Any], *, restored: bool = False) -> None:
        """The directory names an owner (alive or dead) for this tab, so it lived recently: let
        ``_revive`` bring it back here, with what its owner handed over, as it would a tab
        destroyed here. ``restored``: the record comes from an earlier process, which may have
        sent the page a newer snapshot after it was made."""
        if ctx_id not in self._graveyard:
            tab_state = handed.get("tab_state")
            snapshot = handed.get("snapshot")
            seq = handed.get("seq")
            self._graveyard[ctx_id] = _Grave(
                self._now() + self.config.revival_window, tab_state if isinstance(tab_state, dict) else {},
                seq if type(seq) is int else 0, snapshot if isinstance(snapshot, str) else None,
                ask_page=restored or handed.get("writable") is not False)
            if isinstance(snapshot, str):
                self._graveyard_bytes += len(snapshot)

    def _hand_over(self, ctx_id: str, session_hash: str) -> dict[str, Any] | None:
        """Another worker took this tab's stream: let the tab go, giving it its tab state and a
        snapshot of its server-owned signals."""
        ctx = self.contexts.get(ctx_id)
        if ctx is None:
            grave = self._unbury(ctx_id)
            if grave is None:
                return None
            return {"tab_state": _json_or_empty(grave.tab_state), "snapshot": grave.snapshot, "seq": grave.seq,
                    "writable": grave.ask_page}
        if Scope.session(ctx.session_id) != session_hash:
            return None
        state = _json_or_empty(ctx.tab_state)
        writable = ctx.has_writable_signals
        self.destroy(ctx)
        grave = self._unbury(ctx_id)
        return {"tab_state": state, "snapshot": grave.snapshot if grave else None, "seq": grave.seq if grave else 0,
                "writable": writable}

    def _stream_for(self, request: Request, ctx: Context) -> Any:
        if not self._same_session(ctx, self._session_of(request)):
            raise Forbidden("stream for another session's tab")

        def endpoint(req: Request) -> StreamResponse:
            coding = self.compression.coding_for(req)
            tab = _TabStream(self, ctx, coding, req.headers.get("last-event-id"))
            headers = [*protocol.SSE_HEADERS, *self.compression.stream_headers(coding)]
            return StreamResponse(headers, on_open=tab.open, on_close=tab.close)

        return self._with_middleware(request, ctx.route, endpoint)

    def _reload_stream(self, ctx_id: str) -> Response | StreamResponse:
        """A stream for a tab that cannot be revived: reload once; then say so in the page's alert
        (a JSON answer, which also ends the page's retries)."""
        if ctx_id in self._reload_sent:
            body = orjson.dumps({ERROR_SIGNAL: self._messages["gone"], protocol.DISCONNECTED_SIGNAL: True})
            return Response(200, [("content-type", "application/json"), ("cache-control", "no-store")], body)
        self._reload_sent[ctx_id] = self._now() + _RELOAD_MEMORY

        def on_open(sink: StreamSink) -> None:
            sink.write(protocol.execute_script("window.location.reload()"))
            sink.close()

        return StreamResponse(list(protocol.SSE_HEADERS), on_open=on_open, on_close=lambda: None)

    def _verify_id(self, ctx_id: str, session_id: str | None) -> tuple[str, dict[str, str]] | None:
        """The route and params of a context id this app signed for ``session_id``, if it may revive."""
        if session_id is None or self.config.revival_window <= 0:
            return None
        grave = self._graveyard.get(ctx_id)
        if grave is None:
            # Unknown here: made by an earlier process (or its record expired). It died at least
            # as long ago as this process has run, so past the window it is too old to revive.
            if self._now() - self._started_at > self.config.revival_window:
                return None
        elif grave.deadline < self._now():
            return None
        verified = self._ids.verify(ctx_id, session_id)
        if verified is None and session_id in self._rotated_from:  # made before a regenerate_session
            verified = self._ids.verify(ctx_id, self._rotated_from[session_id])
        if verified is None and (old := self._rotation_of(session_id)) is not None:  # rotated elsewhere
            verified = self._ids.verify(ctx_id, self._rotated_from.get(old, old))
            if verified is not None:
                self._finish_rotation(old, session_id)
        if verified is None:
            log.info("refused to revive a context id not signed for this session")
        return verified

    def _revive(self, request: Request, ctx_id: str, session_id: str | None, signals: dict[str, Any],
                restore: tuple[int, dict[str, Any]] | None) -> Any:
        """Rebuild a destroyed or unknown tab from its signed id; ``None`` when it cannot be.

        ``restore`` holds the values of its server-owned signals (a verified snapshot); the
        writable ones come from ``signals``, the browser's. A second revival of the same tab while
        one is under way (its stream and an action at once) waits for it: the handler runs once.
        """
        under_way = self._reviving.get(ctx_id)
        if under_way is not None:
            return _when_done(under_way, lambda: self.contexts.get(ctx_id))
        verified = self._verify_id(ctx_id, session_id)
        if verified is None:
            return None
        assert session_id is not None  # checked by _verify_id
        pattern, params = verified
        route = self.router.page(pattern)
        if route is None:
            return None
        grave = self._graveyard.get(ctx_id)
        request.kind = "revival"
        request.path_params = params

        def endpoint(req: Request) -> Any:
            ctx = Context(self, ctx_id, route, params, session_id, req)
            if grave is not None:
                ctx.tab_state = grave.tab_state
            kwargs = _bind(route, params, ctx, req)
            return _then(route.handler(**kwargs), lambda result: _Revived(ctx))

        def finish(result: Any) -> Context | None:
            if not isinstance(result, _Revived):
                return None  # middleware answered instead: the tab reloads and gets that answer
            existing = self.contexts.get(ctx_id)
            if existing is not None:  # a concurrent revival of the same tab won
                return existing
            ctx = result.ctx
            if restore is not None:
                ctx.restore_snapshot(*restore)
            ctx.apply_client_signals(signals)
            for sig in ctx._signals.values():
                sig._changed = True
            ctx.revived = True
            self._unbury(ctx_id)
            self._register(ctx)
            log.info("revived a tab of %s", route.pattern)
            return ctx

        result = _then(self._with_middleware(request, route, endpoint),
                       lambda result: self._after_loads(lambda: finish(result)))
        if not inspect.isawaitable(result):
            return result
        task = self.create_task(_settled(result))
        self._reviving[ctx_id] = task
        task.add_done_callback(lambda _: self._reviving.pop(ctx_id, None))
        return task

    # --- actions ---------------------------------------------------------------------------------

    def _check_origin(self, request: Request) -> None:
        """A POST that changes state must come from a page of this site: one ``Origin`` naming
        this request's scheme, host and port, or listed in ``trusted_origins``. ``null``, two
        Origins, and a request without exactly one non-empty ``Host`` never pass."""
        origins = request.headers.get_all("origin")
        if not origins:
            if self.config.dev or self.config.allow_missing_origin:
                return
            raise Forbidden("missing Origin header")
        if len(origins) > 1:
            raise Forbidden(f"{len(origins)} Origin headers: {origins!r}")
        origin = origins[0]
        hosts = request.headers.get_all("host")
        if len(hosts) != 1 or not hosts[0].strip():
            raise Forbidden(f"Origin {origin!r} on a request without one non-empty Host")
        if origin in self.config.trusted_origins:
            return
        scheme = self._proxies.scheme(request)
        if not same_origin(origin, scheme, hosts[0]):
            hint = ("; behind a TLS proxy, list it in trusted_proxies (it sends X-Forwarded-Proto) or the "
                    "origin in trusted_origins") if same_origin(origin, origin.partition("://")[0], hosts[0]) else ""
            raise Forbidden(f"untrusted origin {origin!r} for {scheme}://{hosts[0]}{hint}")

    def client_address(self, request: Request) -> str:
        """The client's address: the peer's, or what a trusted proxy says it is."""
        return self._proxies.client_address(request)

    def _action(self, request: Request, name: str) -> Any:
        if request.method != "POST":
            raise MethodNotAllowed(headers=[("allow", "POST")])
        self._refuse_early(request)
        if "_signals" not in request.state and forms.parses_off_loop(request):
            return self._parse_off_loop(request, lambda: self._action(request, name))
        signals = self._action_signals(request)
        ctx_id = signals.get(protocol.CONTEXT_SIGNAL)
        session_id = self._session_of(request)
        named = isinstance(ctx_id, str) and ctx_id != ""
        ctx = self.contexts.get(ctx_id) if named else None
        if ctx is None and named and self.link is not None:
            return self._forward_action(request, ctx_id, session_id, signals, name)  # checked where it runs
        self._check_action(request)
        if not named:
            raise ContextNotFound("action without via_ctx")
        if ctx is None:
            return _then(self._revive_for_action(request, ctx_id, session_id, signals),
                         lambda found: self._run_action(request, found, name, signals))
        return self._run_action(request, ctx, name, signals)

    def _revive_for_action(self, request: Request, ctx_id: str, session_id: str | None,
                           signals: dict[str, Any]) -> Any:
        """An action for a tab this server does not hold: revived from what this server kept of it,
        or from the snapshot the page sends with its actions while its stream is down. Without
        either the action is refused (409) until the stream revives the tab: it never runs on
        values the tab never had."""
        grave = self._graveyard.get(ctx_id)
        restore = self._kept_snapshot(ctx_id, grave)
        if protocol.SNAPSHOT_SIGNAL in signals:
            sent = self._browser_snapshot(ctx_id, signals, grave, restore)
            if sent is False:
                raise ContextNotFound("a tab whose snapshot was refused")
            restore = _newest(restore, sent)
        if restore is None:
            verified = self._verify_id(ctx_id, session_id)
            if verified is None:
                raise ContextNotFound("unknown tab")
            raise TabGone(f"an action for a tab of {verified[0]!r} this server does not hold, "
                          "without its snapshot; its stream revives it")
        return self._revive(request, ctx_id, session_id, signals, restore or None)

    def _refuse_early(self, request: Request) -> None:
        """The checks an action passes before its body is parsed, each cheap (headers, one HMAC,
        a count of separators): a foreign Origin, no session of this app (403), a form over its
        counts (413). So a flood of forged or oversized posts costs no parsing (issue 21)."""
        if "_early" in request.state:
            return
        self._check_origin(request)
        if self._session_of(request) is None:
            raise Forbidden("action without a session of this app")
        if request.content_type in FORM_TYPES:
            check_form(request, self._form_limits)
        request.state["_early"] = True

    def _parses_here(self, request: Request) -> bool:
        """Whether the dispatch may parse this action's body on the loop now: it passed the
        early checks and is small (a big form is parsed on a thread, by ``_action``)."""
        try:
            self._refuse_early(request)
        except ClientError:
            return False  # answered by the dispatch
        return "_signals" in request.state or not forms.parses_off_loop(request)

    async def _parse_off_loop(self, request: Request, then: Callable[[], Any]) -> Any:
        """Parse a big form on a worker thread, so the loop goes on serving the other tabs."""
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(forms.executor(), self._action_signals, request)
        return await _settled(then())

    def _check_action(self, request: Request) -> None:
        """The early checks and the rate limit, on the worker that runs the action (one that
        passes or forwards it does not count it)."""
        self._refuse_early(request)
        limiter = self._limiter
        wait = limiter.check(self.client_address(request), self._now()) if limiter.rate > 0 else 0.0
        if wait:
            raise RateLimited(f"action rate limit for {self.client_address(request)}",
                              headers=[("retry-after", str(max(1, math.ceil(wait))))])

    def _action_signals(self, request: Request) -> dict[str, Any]:
        """The signals an action carries, parsed once per request (kept in ``request.state``)."""
        signals = request.state.get("_signals")
        if signals is None:
            form = parse_form(request, self._form_limits) if request.content_type in FORM_TYPES else None
            if form is not None:
                request.state["_form"] = form
            signals = request.state["_signals"] = request_signals(request, form)
        return signals  # type: ignore[return-value]  # set here

    async def _forward_action(self, request: Request, ctx_id: str, session_id: str | None,
                              signals: dict[str, Any], name: str) -> Any:
        """An action for a tab held by another worker or node: its owner answers it; when the
        owner is gone the tab is revived here."""
        assert self.link is not None
        owner = await self.link.owner(ctx_id)
        if owner is not None and await self.link.pass_connection(owner, request):
            request.kind = "passed"  # answered by the owner, on the connection it now holds
            return PASSED
        response = await self.link.forward(ctx_id, request, self.config.action_timeout)
        if response is not None:
            return response
        self._check_action(request)  # it runs here
        await self._follow(session_id)  # the tab revives here
        if (ctx_id not in self._graveyard and self.contexts.get(ctx_id) is None
                and await self.link.owner(ctx_id, cached=False) is not None):
            self._vouch(ctx_id, {})
        ctx = self.contexts.get(ctx_id) or await _settled(
            self._revive_for_action(request, ctx_id, session_id, signals))
        return await _settled(self._run_action(request, ctx, name, signals))

    def _run_action(self, request: Request, ctx: Context | None, name: str, signals: dict[str, Any]) -> Any:
        if ctx is None:
            raise ContextNotFound("unknown tab")
        if not self._same_session(ctx, self._session_of(request)):
            raise Forbidden("action on another session's tab")
        request.kind = "action"
        action = ctx._actions.get(name)
        if action is None:
            raise NotFound(f"unknown action {name!r}")
        arguments = decode_arguments(name, action.params, request.query) if action.params.arguments else None

        def endpoint(req: Request) -> Any:
            now = self._now()
            started = time.perf_counter()
            writes = self.link.writing if self.link is not None else 0
            ctx.request = req
            ctx.last_action = now
            if ctx.state is State.DISCONNECTED:
                self._set_deadline(ctx, max(ctx.deadline, now + self.config.reconnect_timeout))
            ctx.apply_client_signals(signals)
            ctx._begin_batch()
            try:
                pending = ctx.run_action(action, arguments)
            except BaseException:
                ctx._end_batch()
                raise
            if pending is None:
                ctx._end_batch()
                self.metrics.observe_action(time.perf_counter() - started)
                if self.config.dev:
                    self._dev_log.add("action", ctx.route.pattern, name, time.perf_counter() - started)
                if self.link is not None and self.link.writing > writes:
                    return self._after_writes(ctx, writes)
                return self._action_response(ctx)
            return self._await_action(ctx, pending, started, writes)

        return self._with_middleware(request, ctx.route, endpoint)

    async def _await_action(self, ctx: Context, pending: Awaitable[Any], started: float, writes: int = 0
                            ) -> Response:
        try:
            await asyncio.wait_for(pending, self.config.action_timeout)
        except TimeoutError:
            raise ActionTimeout(f"an action of {ctx.route.pattern} ran past {self.config.action_timeout} s") from None
        finally:
            ctx._end_batch()
            self.metrics.observe_action(time.perf_counter() - started)
        if self.link is not None:
            await self.link.written(writes)
        return self._action_response(ctx)

    async def _after_writes(self, ctx: Context, writes: int) -> Response:
        """Answer once the shared-state writes the action made are in the engine."""
        assert self.link is not None
        await self.link.written(writes)
        return self._action_response(ctx)

    def _action_response(self, ctx: Context) -> Response:
        ctx.clear_error()
        response = Response(200)
        self._take_cookies(ctx, response)
        return response

    def _form_of(self, request: Request) -> dict[str, str]:
        form = request.state.get("_form")
        return form.fields if isinstance(form, Form) else {}

    def _files_of(self, request: Request) -> dict[str, UploadedFile]:
        form = request.state.get("_form")
        return form.files if isinstance(form, Form) else {}

    # --- small endpoints -------------------------------------------------------------------------

    def _close_beacon(self, request: Request) -> Response:
        if request.method != "POST":
            raise MethodNotAllowed(headers=[("allow", "POST")])
        self._check_origin(request)
        ctx_id = request.body.decode(errors="replace").strip()
        ctx = self.contexts.get(ctx_id)
        if ctx is not None and self._same_session(ctx, self._session_of(request)):
            ctx.last_action = 0.0  # a closed tab waits only for the cleanup grace, not for a reconnect
            if ctx.state is State.DISCONNECTED:  # the stream closed first: shorten its deadline now
                self._set_deadline(ctx, min(ctx.deadline, self._now() + self.config.cleanup_delay))
        return Response(200)

    def _bundle_response(self, request: Request) -> Response:
        if self._bundle_asset is None:
            self._start_assets()
        assert self._bundle_asset is not None
        found = self._bundle_asset.get(request)
        if found is None:
            raise MethodNotAllowed(headers=[("allow", "GET, HEAD")])
        return found


def _newest(kept: tuple[int, dict[str, Any]] | None, sent: tuple[int, dict[str, Any]] | None
            ) -> tuple[int, dict[str, Any]] | None:
    """The later of two snapshots of one tab (by number; the server's own when they tie)."""
    if kept is None or (sent is not None and sent[0] > kept[0]):
        return sent
    return kept


async def _when_done(task: asyncio.Task[Any], then: Callable[[], Any]) -> Any:
    """``then()`` once ``task`` is done, whatever it ended with."""
    with contextlib.suppress(Exception):
        await asyncio.shield(task)
    return then()


async def _settled(result: Any) -> Any:
    """The value of a result that may be awaitable (handlers and middleware may be sync or async)."""
    return await result if inspect.isawaitable(result) else result


def _json_or_empty(state: dict[str, Any]) -> dict[str, Any]:
    """Tab state that can travel to another worker (JSON), or nothing."""
    try:
        import orjson

        orjson.dumps(state)
    except TypeError:
        log.warning("a tab's tab_state is not JSON: it does not move with the tab to another worker")
        return {}
    return state


def _close_uploads(request: Request) -> None:
    """The request is answered: its uploaded files are closed (spooled ones deleted)."""
    form = request.state.get("_form")
    if isinstance(form, Form) and form.all_files:
        form.close()


def _context_of(request: Request, app: App) -> Context | None:
    """The tab a failed action or stream belonged to, for error reports (None for pages)."""
    if request.kind not in ("action", "stream"):
        return None
    try:
        signals = request_signals(request, request.state.get("_form"))  # type: ignore[arg-type]  # Form or None
    except ClientError:
        return None
    ctx_id = signals.get(protocol.CONTEXT_SIGNAL)
    return app.contexts.get(ctx_id) if isinstance(ctx_id, str) else None


def _wrap_middleware(mw: Middleware, call_next: Callable[[Request], Any]) -> Callable[[Request], Any]:
    if inspect.iscoroutinefunction(mw):
        async def next_async(req: Request) -> Any:
            result = call_next(req)
            return await result if inspect.isawaitable(result) else result
        return lambda req: mw(req, next_async)
    return lambda req: mw(req, call_next)


_PATH_INT = re.compile(r"-?[0-9]{1,19}\Z")
_PATH_FLOAT = re.compile(r"-?(?:[0-9]{1,300}(?:\.[0-9]{0,300})?|\.[0-9]{1,300})(?:[eE][-+]?[0-9]{1,3})?\Z")


def _path_int(text: str) -> int:
    """A whole number that fits 64 bits, in ASCII digits: what a database key can be. Anything
    else (thousands of digits, ``1_000``, other scripts' digits) is no such page (404)."""
    if _PATH_INT.match(text) is None:
        raise ValueError(text)
    value = int(text)
    if not -(2**63) <= value < 2**63:
        raise ValueError(text)
    return value


def _path_float(text: str) -> float:
    """A finite decimal number; ``nan``, ``inf`` and overflowing exponents are no such page."""
    if _PATH_FLOAT.match(text) is None:
        raise ValueError(text)
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(text)
    return value


_CASTS: dict[Any, Callable[[str], Any]] = {
    int: _path_int,
    float: _path_float,
    bool: lambda v: v.lower() in ("1", "true", "yes", "on"),
    str: str,
}


def _binders(handler: Callable[..., Any], param_names: tuple[str, ...], path: str) -> tuple[tuple[str, str, Any], ...]:
    """Decide once how each handler parameter is filled: the context, the request or a path param."""
    try:
        hints = typing.get_type_hints(handler)
    except Exception:
        hints = {}
    out = []
    for name, param in inspect.signature(handler).parameters.items():
        hint = hints.get(name)
        if hint is Context or (hint is None and name in ("c", "ctx", "context")):
            out.append(("context", name, None))
        elif hint is Request or name == "request":
            out.append(("request", name, None))
        elif name in param_names:
            out.append(("param", name, _CASTS.get(hint, str)))
        elif param.default is param.empty:
            raise DeclarationError(
                f"handler {getattr(handler, '__name__', handler)!r} for {path!r} has a parameter {name!r} "
                "that is neither the context, the request nor a path parameter"
            )
    return tuple(out)


def _bind(route: Route, params: dict[str, str], ctx: Context | None, request: Request) -> dict[str, Any]:
    kwargs: dict[str, Any] = {}
    for source, name, cast in route.call_args:
        if source == "context":
            if ctx is None:
                raise DeclarationError(f"plain route {route.pattern!r} cannot take a Context")
            kwargs[name] = ctx
        elif source == "request":
            kwargs[name] = request
        else:
            try:
                kwargs[name] = cast(params[name])
            except (ValueError, KeyError):
                raise NotFound(f"path parameter {name!r} has the wrong form") from None
    return kwargs

