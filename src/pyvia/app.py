"""App: what an application declares (routes, middleware, hooks, mounts, configuration).

The App builds a :class:`pyvia.runtime.Runtime`, whose parts serve the tabs: the registry, the
dispatch and its endpoints, sessions, revival, persistence and error reporting. ``App.handle``
is the one entry point every front end calls (:mod:`pyvia.runtime.dispatch`).
"""

from __future__ import annotations

import asyncio
import logging
import socket
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from pyvia.alerts import alert_markup, messages_for
from pyvia.app_shared import AppShared
from pyvia.broadcast import Broadcaster
from pyvia.clock import Clock, LoopClock
from pyvia.compress import Compression, default_budget
from pyvia.config import NO_EXTRA, Config, FilePath, keyword_options, seconds_of
from pyvia.db import Database, NoDatabase, connect
from pyvia.devtools import DevLog
from pyvia.downloads import Downloads
from pyvia.errors import (
    ConfigError,
    DeclarationError,
    RouteError,
)
from pyvia.forms import FormLimits
from pyvia.http import Request
from pyvia.ops.metrics import PyviaMetrics
from pyvia.ops.settings import load_settings
from pyvia.render import Templates
from pyvia.replay import Replays
from pyvia.routing import Middleware, Router, compile_route
from pyvia.runtime import Runtime
from pyvia.runtime.binding import binders
from pyvia.runtime.common import (
    ACTION_PREFIX,
    BUNDLE_PATH,
    CLOSE_PATH,
    SSE_PATH,
)
from pyvia.runtime.host import Host
from pyvia.runtime.ownership import LOCAL_OWNERSHIP, Ownership
from pyvia.scopes import (
    ScopeRegistry,
)
from pyvia.security import RateLimiter, TrustedProxies
from pyvia.session import (
    SECURE_SESSION_COOKIE,
    SESSION_COOKIE,
    ContextIds,
    SessionIds,
    load_secret,
)
from pyvia.sharing import LOCAL_STORE, SharedStore
from pyvia.snapshot import Snapshots
from pyvia.state import GlobalState, SessionStore
from pyvia.stream import Outflow
from pyvia.tab_output import TabOutput

log = logging.getLogger("pyvia")
#: At most this many action URLs are kept by name (:meth:`App.url_for_action`).
_ACTION_URLS = 4096
T = TypeVar("T")

__all__ = ["App", "RouteGroup"]


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

    def page(
        self,
        path: str,
        *,
        middleware: Sequence[Middleware] = (),
        title: str | None = None,
        error_messages: Mapping[str | int, str] | None = None,
    ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        return self.app.page(
            self._path(path), middleware=(*self.middleware, *middleware), title=title, error_messages=error_messages
        )

    def route(
        self, methods: str | Sequence[str], path: str, *, middleware: Sequence[Middleware] = ()
    ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        return self.app.route(methods, self._path(path), middleware=(*self.middleware, *middleware))

    def group(self, prefix: str, *, middleware: Sequence[Middleware] = ()) -> RouteGroup:
        return RouteGroup(self.app, self._path(prefix), (*self.middleware, *middleware))

    def __enter__(self) -> RouteGroup:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


class App(AppShared, Host):
    """A pyvia application: ``app = App(title="Counter")``, then ``@app.page("/")``.

    Options are the fields of :class:`pyvia.config.Config` (each documented there) and the ``[db]``
    keys as ``db_url``, ``db_pool_size``, ``db_timeout``, ``db_busy_timeout``; an unknown one is a
    TypeError naming the closest known option.
    """

    given_options: dict[str, Any]  # the options given, set by keyword_options before __init__ runs

    @keyword_options
    def __init__(
        self,
        *,
        title: str = "pyvia",
        lang: str = "en",
        template_dir: FilePath | None = None,
        secret: str | bytes | None = None,
        dev: bool = False,
        connect_timeout: float = 30.0,
        max_waiting_contexts: int = 10_000,
        cleanup_delay: float = 5.0,
        reconnect_timeout: float = 60.0,
        revival_window: float = 600.0,
        keep_alive: float = 15.0,
        sweep_interval: float = 1.0,
        broadcast_tick: float = 0.025,
        broadcast_settle: float = 0.002,
        max_sessions: int = 10_000,
        max_stream_buffer: int = 1 << 20,
        slow_tab_timeout: float = 30.0,
        trusted_origins: Sequence[str] = (),
        action_rate: float = 1200.0,
        action_burst: float = 2400.0,
        trusted_proxies: Sequence[str] = (),
        max_snapshot_bytes: int = 16 << 10,
        action_timeout: float = 60.0,
        security_headers: bool = True,
        content_security_policy: bool = False,
        allow_missing_origin: bool = False,
        secure_cookie: bool = False,
        head: Sequence[str] = (),
        foot: Sequence[str] = (),
        base_path: str = "/",
        compression: bool = True,
        compression_preference: Sequence[str] = ("zstd", "br", "gzip"),
        encoder_budget: int | None = None,
        encoder_idle_release: float = 60.0,
        shared_frames_min_tabs: int = 16,
        replay_tab_bytes: int = 64 << 10,
        replay_budget: int | None = None,
        replay_idle: float = 30.0,
        static_dir: FilePath | None = None,
        static_cache_control: str | Callable[[str, str], str] = "no-cache",
        gc_thresholds: tuple[int, int, int] | None = (50_000, 5, 100),
        persist_path: FilePath | None = None,
        persist_in_db: bool = False,
        engine_prefix: str = "pyvia",
        cluster_direct: bool = True,
        cluster_address: str | None = None,
        max_unsent_bytes: int = 256 << 20,
        max_form_fields: int = 1000,
        max_form_files: int = 100,
        max_form_bytes: int = 1 << 20,
        max_file_bytes: int | None = None,
        upload_spool_bytes: int = 1 << 20,
        upload_dir: FilePath | None = None,
        error_messages: Mapping[str | int, str] | None = None,
        error_view: Callable[..., str] | None = None,
        datastar_js: FilePath | None = None,
        extra: Mapping[str, Any] = NO_EXTRA,
        db_url: str | None = None,
        db_pool_size: int = 4,
        db_timeout: float = 30.0,
        db_busy_timeout: float = 5.0,
    ) -> None:
        # keyword arguments given win over PYVIA_APP__* variables, which win over ./pyvia.toml's [app]
        settings = load_settings(**self.given_options)
        self.config = Config.from_options(settings.app_options())
        self.router = Router()
        #: The parts that serve the tabs (pyvia.runtime): the registry, the endpoints, sessions, ...
        self.runtime = Runtime(self)
        #: The words for failures every page starts from (pyvia.alerts).
        self.messages = messages_for(self.config.error_messages)
        self.templates = Templates(self.config.template_dir)
        self.middleware_stack: list[Middleware] = []
        self.secret = load_secret(self.config.secret)
        self.session_ids = SessionIds(self.secret)  # only ids signed with the secret are sessions
        self.downloads = Downloads()
        self.not_found_handler: Callable[[Request], Any] | None = None
        self.error_page_handler: Callable[[Request, BaseException], Any] | None = None
        self.session_cookie = SECURE_SESSION_COOKIE if self.config.secure_cookie else SESSION_COOKIE
        self.limiter = RateLimiter(self.config.action_rate, self.config.action_burst)
        config = self.config
        self.form_limits = FormLimits(
            config.max_form_fields,
            config.max_form_files,
            config.max_form_bytes,
            config.max_file_bytes,
            config.upload_spool_bytes,
            config.upload_dir,
        )
        self.compression = Compression(
            preference=self.config.compression_preference,
            budget=self.config.encoder_budget if self.config.encoder_budget is not None else default_budget(),
            enabled=self.config.compression,
            shared_min_tabs=self.config.shared_frames_min_tabs,
        )
        self.proxies = TrustedProxies(self.config.trusted_proxies)
        # URLs the browser is given: under base_path when the app is mounted below "/"
        self.set_base(self.config.base_path)
        self.mounts: list[tuple[str, App]] = []
        self.clock: Clock | None = None
        #: The running loop, once started: asyncio.get_running_loop() costs a getpid() system call on 3.11.
        self.loop: asyncio.AbstractEventLoop | None = None
        self.started_at = 0.0
        self.started_wall = 0.0  # time.time() when it started: wall_time() runs on the app clock from there
        self.background_tasks: set[Any] = set()
        self.broadcaster = Broadcaster(self, self.config.broadcast_tick, self.config.broadcast_settle)
        self.scopes = ScopeRegistry(self.broadcaster.mark)
        #: Process-wide state: ``app.global_state["visits"]``, with atomic ``increment``/``mutate``.
        self.global_state = GlobalState()
        self.sessions = SessionStore(self.config.max_sessions)
        self.connect_hooks: list[Callable[..., Any]] = []
        self.disconnect_hooks: list[Callable[..., Any]] = []
        self.start_hooks: list[Callable[..., Any]] = []
        self.stop_hooks: list[Callable[..., Any]] = []
        self.error_hooks: list[Callable[..., Any]] = []
        #: Prometheus metrics of this app (``/metrics``); the hot paths count into pre-bound children.
        self.metrics = PyviaMetrics()
        self.outflow = Outflow(self.metrics)
        #: Each tab's recent frames, replayed to a stream that reconnects (pyvia.replay).
        self.replays = Replays(
            tab_limit=self.config.replay_tab_bytes,
            limit=self.config.replay_budget,
            idle=self.config.replay_idle,
            encoders=self.compression.budget,
        )
        db_config = settings.db_config()
        #: The database of ``[db] url`` (:mod:`pyvia.db`), opened at start and closed at stop.
        self.db: Database = (
            NoDatabase(metrics=self.metrics) if db_config is None else connect(db_config, metrics=self.metrics)
        )
        if self.config.persist_in_db and db_config is None:
            raise ConfigError(
                "persist_in_db keeps the shared state in the app's database: give [db] url (or App(db_url=...)) too"
            )
        self.dev_log = DevLog()
        #: True from the start of a graceful stop: ``/_ready`` answers 503 so balancers look elsewhere.
        self.draining = False
        #: Re-raise exceptions from user code instead of answering 500 (the test client sets it).
        self.raise_server_exceptions = False
        #: Where tabs are (pyvia.runtime.ownership) and where shared values live (pyvia.sharing): this
        #: process alone until ``share_through`` plugs in the cluster's link, which is both.
        self.ownership: Ownership = LOCAL_OWNERSHIP
        self.store: SharedStore = LOCAL_STORE
        #: The tab whose view is being rendered (its synchronous part): a count it shows is asked
        #: on its behalf, so another worker's new count re-renders it (pyvia.cluster.presence).
        self.rendering: TabOutput | None = None
        #: Set by the native server (plain HTTP): ``adopt_connection(sock, request_bytes)`` serves a
        #: connection another worker of this machine passed (pyvia.cluster.passing).
        self.adopt_connection: Callable[[socket.socket, bytes], None] | None = None

    # --- registration ----------------------------------------------------------------------------

    def page(
        self,
        path: str,
        *,
        middleware: Sequence[Middleware] = (),
        title: str | None = None,
        error_messages: Mapping[str | int, str] | None = None,
    ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Register a page: ``handler(c, **path_params)`` declares the tab's signals, actions and view.

        ``error_messages`` replaces some of the app's words for failures on this page (pyvia.alerts).
        """
        messages = messages_for(error_messages, self.messages)

        def register(handler: Callable[..., Any]) -> Callable[..., Any]:
            route = compile_route(path, handler, "page", ["GET"], middleware, title)
            route.call_args = binders(handler, route.param_names, path)
            route.messages = messages
            route.alert = alert_markup(messages, self.config.error_view)
            self.router.add(route)
            return handler

        return register

    def route(
        self, methods: str | Sequence[str], path: str, *, middleware: Sequence[Middleware] = ()
    ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Register a plain HTTP route: ``handler(request, **path_params)`` returns a Response, str or dict."""
        method_list = [methods] if isinstance(methods, str) else list(methods)

        def register(handler: Callable[..., Any]) -> Callable[..., Any]:
            route = compile_route(path, handler, "route", method_list, middleware)
            route.call_args = binders(handler, route.param_names, path)
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
        self.middleware_stack.append(fn)
        return fn

    def not_found(self, fn: Callable[[Request], Any]) -> Callable[[Request], Any]:
        """Set the 404 page: ``fn(request)`` returns a Response or HTML."""
        self.not_found_handler = fn
        return fn

    def error_page(self, fn: Callable[[Request, BaseException], Any]) -> Callable[..., Any]:
        """Set the 500 page for failing page views: ``fn(request, exc)`` returns a Response or HTML."""
        self.error_page_handler = fn
        return fn

    def url_for_action(self, name: str) -> str:
        # One string per action name, shared by every tab that declares it (not one per tab);
        # names made at run time (past the bound) are built each time instead.
        urls = self._action_urls
        url = urls.get(name)
        if url is None:
            url = self.url_base + ACTION_PREFIX[1:] + name
            if len(urls) < _ACTION_URLS:
                urls[name] = url
        return url

    def set_base(self, base: str) -> None:
        self.url_base = base
        self._action_urls: dict[str, str] = {}
        self.context_ids = ContextIds(self.secret, base)
        self.snapshots = Snapshots(self.secret, base, max_bytes=self.config.max_snapshot_bytes)
        self.sse_url = base + SSE_PATH[1:]
        self.close_url = base + CLOSE_PATH[1:]
        if self.runtime.assets.loaded is not None:
            self.runtime.assets.bundle_url = f"{base}{BUNDLE_PATH[1:]}?v={self.runtime.assets.loaded.version}"

    def mount(self, prefix: str, app: App) -> None:
        """Serve another App below ``prefix`` (``"/examples/counter"``): its own tabs, routes and settings.

        Requests under the prefix go to ``app`` with the prefix stripped, and every URL it gives the
        browser carries the prefix. Mount before the server starts; the mounted app starts and stops
        with this one.
        """
        if not isinstance(prefix, str) or not prefix.startswith("/") or prefix.endswith("/") or "//" in prefix:
            raise RouteError(f"mount prefix {prefix!r} must start with '/' and not end with one, like '/chat'")
        if app is self or any(p == prefix for p, _ in self.mounts):
            raise RouteError(f"mount prefix {prefix!r} is already taken (or the app is mounted in itself)")
        if app.clock is not None or app.contexts:
            raise RouteError("mount an app before it starts")
        app.set_base(self.url_base + prefix.lstrip("/") + "/")
        self.mounts.append((prefix, app))

    def url(self, path: str) -> str:
        """An absolute URL path for ``path`` under the app's ``base_path`` (``/x`` → ``/live/x``)."""
        return self.url_base + path.lstrip("/")

    # --- hooks -----------------------------------------------------------------------------------

    # Hooks are named after their event, on the App (every tab) as on a Context (one tab):
    # app.on_connect / c.on_connect, app.on_disconnect / c.on_disconnect, on_start, on_stop.

    def on_connect(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """Run ``fn(c)`` when any tab's stream opens (reconnects included); ``c.on_connect`` is one tab's."""
        self.connect_hooks.append(fn)
        return fn

    def on_disconnect(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """Run ``fn(c)`` when any tab's last stream closes; ``c.on_disconnect`` is one tab's."""
        self.disconnect_hooks.append(fn)
        return fn

    def on_client_connect(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """Deprecated name of :meth:`on_connect`."""
        warnings.warn(
            "app.on_client_connect is deprecated: use app.on_connect (the same hook)", DeprecationWarning, stacklevel=2
        )
        return self.on_connect(fn)

    def on_client_disconnect(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """Deprecated name of :meth:`on_disconnect`."""
        warnings.warn(
            "app.on_client_disconnect is deprecated: use app.on_disconnect (the same hook)",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.on_disconnect(fn)

    def on_start(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """Run ``fn()`` (or ``async fn()``) when the server starts."""
        self.start_hooks.append(fn)
        return fn

    def on_stop(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """Run ``fn()`` (or ``async fn()``) when the server stops."""
        self.stop_hooks.append(fn)
        return fn

    def on_error(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """Observe every error in user code: ``fn(exc, context_or_None, phase)``."""
        self.error_hooks.append(fn)
        return fn

    def set_interval(
        self,
        fn: Callable[..., Any],
        seconds: float | None = None,
        *,
        every_worker: bool = False,
        ms: float | None = None,
    ) -> Callable[..., Any]:
        """Call ``fn()`` every ``seconds`` while the server runs (errors are reported, not fatal).

        With several workers or nodes it runs on one of them (the holder of the engine's timer
        lease) unless ``every_worker``. ``ms=`` is the deprecated spelling in milliseconds.
        """
        period = seconds_of("set_interval", seconds, ms, "ms")
        if period <= 0:
            raise DeclarationError(f"set_interval needs a positive period, got {period} s")
        self.runtime.serving.add_interval(fn, period, every_worker)
        return fn

    # --- serving ---------------------------------------------------------------------------------

    async def startup(self) -> None:
        """Called by the front end inside the running loop before it serves (after attaching the
        engine, when there is one: :func:`pyvia.cluster.join_from_env`)."""
        import gc

        self.loop = asyncio.get_running_loop()
        self.start(LoopClock(self.loop))
        if self.runtime.persistence.in_db:
            try:
                await self.runtime.persistence.restore_from_db()
            except Exception as exc:  # serve without it: readiness never waits for a database
                self.runtime.reporting.report(exc, None, "start", reraise=False)
        if self.config.compression:  # freed encoder contexts go back to the OS at once
            self.runtime.registry.freed_memory.fix_mmap_threshold()
        if self.config.gc_thresholds is not None:
            gc.collect()
            gc.freeze()  # modules, routes, templates: nothing the collector needs to walk again
            gc.set_threshold(*self.config.gc_thresholds)

    def share_through(self, ownership: Ownership, store: SharedStore) -> None:
        """Plug in where tabs are and where shared values live, in place of this process alone:
        the cluster's link is both (:func:`pyvia.cluster.attach`)."""
        self.ownership = ownership
        self.store = self.scopes.store = self.global_state.store = self.sessions.store = store

    @property
    def engine(self) -> Any:
        """The cluster engine (``/_health`` reports it), or None with one worker."""
        return self.store.engine

    def start(self, clock: Clock, loop: asyncio.AbstractEventLoop | None = None) -> None:
        """Start timers on ``clock`` (``startup`` does this with the loop's clock); ``loop`` runs the
        app's tasks (``startup``'s running loop; a test client's own)."""
        self.runtime.serving.start(clock, loop)

    async def shutdown(
        self, budget: float = 1.5, *, spread: float = 0.0, saved: Callable[[], object] | None = None
    ) -> None:
        """Ask every tab to reconnect (its stream is ended; the page reopens it) and stop timers.

        ``saved`` is called once the shared state is persisted and the stop hooks ran, before the
        streams end; ``spread`` ends them over that many seconds, in random order, so the tabs of a
        replaced worker reconnect staggered rather than all in the same second.
        """
        await self.runtime.serving.shutdown(budget, spread=spread, saved=saved)

    def run(self, host: str = "127.0.0.1", port: int = 3000, **server_options: Any) -> None:
        """Serve the app on the native server until SIGINT/SIGTERM.

        The server's limits come from ``pyvia.toml`` ``[server]``, ``PYVIA_SERVER__*`` and
        keywords named like those keys (``app.run(max_streams_per_ip=64)``), checked as strictly
        as the App's options (:func:`pyvia.server.options.serve_options`).
        """
        from pyvia.server.options import serve_options  # the core imports a front end only here
        from pyvia.server.runner import run

        run(self, host=host, port=port, **serve_options(server_options, trusted_proxies=self.config.trusted_proxies))
