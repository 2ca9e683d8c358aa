"""Start and stop the native server: the listening socket, TLS, signals and the graceful stop.

The order of a stop, on SIGTERM, SIGINT or ``stop``: stop accepting; read for 50 ms more (requests
on connections accepted in the last instants); close idle keep-alive connections (busy ones close
after their response), so no new request reaches the app;
``await app.shutdown(budget/2)`` (the app saves what it persists, then ends its streams, which asks
the tabs to reconnect); let the requests in flight finish within what is left of
``graceful_timeout``; close whatever remains. A :class:`StopPlan` can spread the end of the streams
over some seconds (a worker replaced by a reload) and be told once the state is saved.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import resource
import signal
import socket
import ssl
import threading
from collections.abc import Callable

from pyvia.app import App
from pyvia.cluster import join_from_env
from pyvia.ops.logs import configure_logging
from pyvia.server import ServedApp
from pyvia.server.balance import BalancedAcceptor, BalanceTable
from pyvia.server.connection import ConnectionRegistry, HttpProtocol
from pyvia.server.http import ServerLimits, derive_max_connections, derive_max_streams, derive_per_ip
from pyvia.server.os_limits import SOMAXCONN, OsLimits, limit_warnings, raise_open_files, read_sysctl

__all__ = ["DEFAULT_LIMITS", "StopPlan", "bind_socket", "effective_caps", "make_ssl_context", "run", "serve"]

logger = logging.getLogger("pyvia.server")

DEFAULT_LIMITS = ServerLimits()

#: How long a stop keeps reading before it closes idle connections (a request sent right after
#: the connection was accepted arrives within it; a preconnected browser socket retries anyway).
_LAST_ACCEPTS_GRACE = 0.05

#: Ready notification: an Event to set, or a callback given the bound (host, port).
Ready = asyncio.Event | Callable[[str, int], object] | None


class StopPlan:
    """How the next graceful stop goes; the owner may change it until the stop begins.

    ``spread``: seconds over which the app ends its streams, so the tabs reconnect staggered
    instead of all at once (a reload sets it; a plain stop leaves 0: nobody would take them).
    ``saved``: called once the app has stopped taking requests and saved what it persists, before
    its streams end (a reload waits for it before the new worker starts accepting).
    """

    __slots__ = ("saved", "spread")

    def __init__(self, spread: float = 0.0, saved: Callable[[], object] | None = None) -> None:
        self.spread = spread
        self.saved = saved


def bind_socket(host: str, port: int) -> socket.socket:
    """A bound, non-blocking TCP socket with SO_REUSEADDR (a restart need not wait for TIME_WAIT).

    The event loop calls ``listen(backlog)`` on it in ``create_server``.
    """
    infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.setblocking(False)
    except OSError as exc:
        sock.close()
        hint = " (another server holds it: stop that one, or give --port)" if exc.errno == errno.EADDRINUSE else ""
        raise OSError(exc.errno, f"cannot listen on {host or '*'}:{port}: {exc.strerror}{hint}") from None
    except BaseException:
        sock.close()
        raise
    return sock


def make_ssl_context(certfile: str, keyfile: str | None = None) -> ssl.SSLContext:
    """A TLS server context (1.2 or later) announcing ``http/1.1`` by ALPN: this server speaks no h2."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(certfile, keyfile)
    context.set_alpn_protocols(["http/1.1"])
    return context


def effective_caps(limits: ServerLimits, fd_soft_limit: int | None = None) -> tuple[int, int, int, int]:
    """(max_connections, max_streams, max_connections_per_ip, max_streams_per_ip) for ``limits``:
    the ``None`` ones derived from the soft fd limit (:class:`ServerLimits` says how).

    An explicit ``max_connections`` above what the fd limit allows is lowered to it (``serve``
    logs it): past the fd limit accept fails with EMFILE and nobody gets an answer, not even a 503.
    """
    if fd_soft_limit is None:
        fd_soft_limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    ceiling = derive_max_connections(fd_soft_limit)
    connections = limits.max_connections
    if connections is None:
        connections = ceiling
    elif connections > ceiling:
        connections = ceiling  # serve() says so, with the fix (pyvia.server.os_limits)
    streams = min(
        limits.max_streams if limits.max_streams is not None else derive_max_streams(connections), connections
    )
    per_ip = limits.max_connections_per_ip
    streams_per_ip = limits.max_streams_per_ip
    return (
        connections,
        streams,
        derive_per_ip(connections) if per_ip is None else per_ip,
        derive_per_ip(streams) if streams_per_ip is None else streams_per_ip,
    )


def _format_address(sock: socket.socket) -> tuple[str, int]:
    address = sock.getsockname()
    return str(address[0]), int(address[1])


async def serve(
    app: ServedApp,
    *,
    host: str = "127.0.0.1",
    port: int = 3000,
    certfile: str | None = None,
    keyfile: str | None = None,
    limits: ServerLimits = DEFAULT_LIMITS,
    backlog: int = 4096,
    graceful_timeout: float = 3.0,
    sock: socket.socket | None = None,
    ready: Ready = None,
    stop: asyncio.Event | None = None,
    plan: StopPlan | None = None,
    balance: tuple[BalanceTable, int] | None = None,
    worker_sock: socket.socket | None = None,
) -> None:
    """Serve ``app`` until SIGTERM/SIGINT (main thread only) or until ``stop`` is set.

    ``sock`` is an already bound socket to serve on instead of binding ``host:port`` (several
    workers sharing one socket). ``backlog`` is the accept queue; 4096 matches the kernel's
    ``somaxconn`` on our machines (machine-limits.md, setup) so bursts of reconnecting tabs are
    queued, not refused. ``ready`` is set, or called with the bound (host, port), once connections
    are accepted. ``plan`` shapes the graceful stop (see :class:`StopPlan`); its ``spread`` is
    added to ``graceful_timeout``. ``balance`` is the table and slot of one of several workers
    sharing ``sock``: it then accepts only while it holds at most one connection more than the others
    (:mod:`pyvia.server.balance`). ``worker_sock`` is this worker's own listening socket besides
    (``pyvia run --worker-ports``), for a proxy that keeps each browser on one worker.
    """
    if keyfile is not None and certfile is None:
        raise ValueError("keyfile given without certfile: pass both to serve over TLS")
    loop = asyncio.get_running_loop()
    ssl_context = make_ssl_context(certfile, keyfile) if certfile is not None else None
    scheme = "https" if ssl_context is not None else "http"
    own_sock = sock is None
    if sock is None:
        sock = bind_socket(host, port)
    fd_before, fd_soft, fd_hard = raise_open_files()
    os_limits = OsLimits(fd_before, fd_soft, fd_hard, read_sysctl(SOMAXCONN))
    max_connections, max_streams, per_ip, streams_per_ip = effective_caps(limits, fd_soft)
    capped = limit_warnings(
        os_limits, backlog=backlog, max_connections=limits.max_connections, effective_connections=max_connections
    )
    if capped:
        logger.warning("system limits cap this server: %s", "; ".join(capped))
    registry = ConnectionRegistry(
        loop,
        limits.sweep_interval,
        limits,
        max_connections=max_connections,
        max_streams=max_streams,
        max_connections_per_ip=per_ip,
        max_streams_per_ip=streams_per_ip,
    )
    server: asyncio.Server | BalancedAcceptor | None = None
    # /metrics reads the server's counts through the app's metrics (pyvia.ops.metrics), when it has them
    watch = getattr(getattr(app, "metrics", None), "watch_server", None)
    if watch is not None:
        watch(registry.stats)
    handshake_timeout = limits.header_timeout if ssl_context is not None else None
    acceptor = None
    if balance is not None:  # one of several workers: accept when the least loaded (pyvia.server.balance)
        acceptor = BalancedAcceptor(
            loop,
            sock,
            lambda: HttpProtocol(app, registry, limits, scheme),
            *balance,
            ssl_context=ssl_context,
            ssl_handshake_timeout=handshake_timeout,
        )
        registry.on_count = acceptor.counted
    adopting = ssl_context is None and hasattr(app, "adopt_connection")
    if adopting:  # other workers of this machine may pass it connections (pyvia.cluster.passing)
        app.adopt_connection = ConnectionAdopter(app, registry, limits, acceptor)  # type: ignore[attr-defined]  # checked above
    try:
        if isinstance(app, App):  # one of several workers: share through the engine it was given
            await join_from_env(app)
        await app.startup()
        lag_monitor = getattr(getattr(app, "metrics", None), "lag_monitor", None)
        if lag_monitor is not None:  # the loop probe measures the same lateness: one timer, not two
            lag_monitor.stop()
            registry.loop_probe.on_lag = lag_monitor.observe
        if acceptor is None:
            server = await loop.create_server(
                lambda: HttpProtocol(app, registry, limits, scheme),
                sock=sock,
                backlog=backlog,
                ssl=ssl_context,
                ssl_handshake_timeout=handshake_timeout,
            )
            if ssl_context is None:  # while overloaded the probe drains the queue uvloop accepts from slowly
                registry.listen(sock, _HandOver(loop, lambda: HttpProtocol(app, registry, limits, scheme, judged=True)))
        else:
            acceptor.start(backlog)
            server = acceptor
        own_port = None
        if worker_sock is not None:
            own_port = await loop.create_server(
                lambda: HttpProtocol(app, registry, limits, scheme),
                sock=worker_sock,
                backlog=backlog,
                ssl=ssl_context,
                ssl_handshake_timeout=handshake_timeout,
            )
        registry.start()
        stop_event = stop if stop is not None else asyncio.Event()
        signals = _install_signal_handlers(loop, stop_event)
        bound_host, bound_port = _format_address(sock)
        shown = f"[{bound_host}]" if ":" in bound_host else bound_host
        logger.info("pyvia listening on %s://%s:%d", scheme, shown, bound_port)
        raised = f"raised from {fd_before}, hard {fd_hard}" if fd_soft > fd_before else f"hard {fd_hard}"
        logger.info(
            "capacity: %d connections (%d per address), %d streams (%d per address), %d requests in "
            "flight, shed after %s s of waiting; per-address caps skip %s; open files %d (%s), listen "
            "backlog %d (somaxconn %s)",
            max_connections,
            per_ip,
            max_streams,
            streams_per_ip,
            limits.max_in_flight,
            limits.shed_after,
            ", ".join(limits.per_ip_exempt) or "nobody",
            fd_soft,
            raised,
            backlog,
            os_limits.somaxconn if os_limits.somaxconn is not None else "unknown",
        )
        if isinstance(ready, asyncio.Event):
            ready.set()
        elif ready is not None:
            ready(bound_host, bound_port)
        try:
            await stop_event.wait()
        finally:
            for sig in signals:
                loop.remove_signal_handler(sig)
            if own_port is not None:
                own_port.close()  # its socket stays open in the supervisor, for this worker's successor
            await _stop(app, server, registry, graceful_timeout, plan)
    finally:
        registry.stop()
        if adopting:
            app.adopt_connection = None  # type: ignore[attr-defined]  # checked above
        if watch is not None:
            watch(None)
        if server is None and own_sock:
            sock.close()


class _HandOver:
    """Gives a socket accepted by the registry's backlog drain to uvloop, as if it had accepted it."""

    __slots__ = ("_factory", "_loop", "_pending")

    def __init__(self, loop: asyncio.AbstractEventLoop, factory: Callable[[], HttpProtocol]) -> None:
        self._loop = loop
        self._factory = factory
        self._pending: set[asyncio.Task[object]] = set()

    def __call__(self, conn: socket.socket) -> None:
        task: asyncio.Task[object] = self._loop.create_task(self._loop.connect_accepted_socket(self._factory, conn))
        self._pending.add(task)
        task.add_done_callback(lambda done: self._done(done, conn))

    def _done(self, task: asyncio.Task[object], conn: socket.socket) -> None:
        self._pending.discard(task)
        if not task.cancelled() and task.exception() is not None:
            logger.warning("could not serve a connection taken from the listen queue: %s", task.exception())
            conn.close()


class ConnectionAdopter:
    """Serves the connections other workers of this machine pass (:mod:`pyvia.cluster.passing`)."""

    __slots__ = ("_acceptor", "_app", "_limits", "_loop", "_registry", "_starting")

    def __init__(
        self,
        app: ServedApp,
        registry: ConnectionRegistry,
        limits: ServerLimits,
        acceptor: BalancedAcceptor | None = None,
    ) -> None:
        self._app = app
        self._registry = registry
        self._limits = limits
        self._acceptor = acceptor
        self._loop = asyncio.get_running_loop()
        self._starting: set[asyncio.Task[object]] = set()

    def load(self) -> int:
        """Open connections: a worker holding more than the one offering a stream refuses it."""
        return self._acceptor.load() if self._acceptor is not None else len(self._registry)

    def __call__(self, sock: socket.socket, preface: bytes) -> None:
        """Serve ``sock``, starting with the request the other worker read (``preface``); the
        balanced acceptor counts it from now on, like one it accepted."""
        sock.setblocking(False)
        acceptor = self._acceptor
        if acceptor is not None:
            acceptor.incoming()
        app, registry, limits = self._app, self._registry, self._limits
        task = self._loop.create_task(
            self._loop.connect_accepted_socket(lambda: HttpProtocol(app, registry, limits, "http", preface), sock)
        )
        self._starting.add(task)

        def started(task: asyncio.Task[object]) -> None:
            self._starting.discard(task)
            if not task.cancelled() and task.exception() is not None:
                logger.warning("could not serve a connection passed by another worker: %s", task.exception())
                sock.close()
                if acceptor is not None:
                    acceptor.incoming_failed()

        task.add_done_callback(started)


def _install_signal_handlers(loop: asyncio.AbstractEventLoop, stop: asyncio.Event) -> list[int]:
    """SIGTERM and SIGINT set ``stop``; only possible in the main thread (tests run elsewhere)."""
    if threading.current_thread() is not threading.main_thread():
        return []
    installed: list[int] = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(sig, stop.set)
        except (NotImplementedError, RuntimeError, ValueError):  # not a Unix loop
            continue
        installed.append(sig)
    return installed


async def _stop(
    app: ServedApp,
    server: asyncio.Server | BalancedAcceptor,
    registry: ConnectionRegistry,
    budget: float,
    plan: StopPlan | None = None,
) -> None:
    loop = asyncio.get_running_loop()
    started = loop.time()
    server.close()  # stop accepting; open connections are ours to end
    registry.stop_listening()
    if len(registry):
        # a connection accepted in the last instants has its request on the way: closing it as
        # idle would fail that request, so the loop reads for a moment first
        await asyncio.sleep(_LAST_ACCEPTS_GRACE)
    registry.shutdown()  # idle keep-alive connections close: what the app saves next is final
    half = budget / 2
    spread = plan.spread if plan is not None else 0.0
    budget += spread
    try:
        if plan is None:
            await asyncio.wait_for(app.shutdown(half), half)
        else:
            await asyncio.wait_for(app.shutdown(half, spread=spread, saved=plan.saved), half + spread)
    except TimeoutError:
        logger.warning("app.shutdown() did not finish within %.2f s", half + spread)
    except Exception:
        logger.exception("error in app.shutdown()")
    registry.shutdown()  # the connections whose stream the app just ended
    left = budget - (loop.time() - started)
    if not await registry.wait_empty(left):
        logger.warning("closing %d connection(s) still open after %.2f s", len(registry), budget)
        registry.abort_all()
        await registry.wait_empty(0.5)  # let connection_lost run (stream close callbacks)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(server.wait_closed(), 0.5)


def run(app: ServedApp, **options: object) -> None:
    """Serve ``app`` on uvloop until SIGTERM or Ctrl-C; ``options`` are those of :func:`serve`."""
    import uvloop

    if not logging.getLogger().handlers:
        configure_logging("INFO", "text")  # the format and redaction of `pyvia run`
    uvloop.run(serve(app, **options))  # type: ignore[arg-type]  # options are serve()'s keywords
