"""The ASGI front end: serve a pyvia App on uvicorn, hypercorn or granian, or mount it in Starlette.

``asgi(app)`` returns an ASGI 3 application. It turns each ``http`` scope into the same
:class:`pyvia.http.Request` the native server builds, hands it to ``App.handle`` and sends back
what it gets; ``lifespan`` starts and stops the app; ``websocket`` is refused.

Rules this module keeps:

1. The core sees what the native server would give it: ``path`` percent-decoded and without the
   mount prefix (``root_path``), the raw query string, latin-1 headers, the whole body (at most
   ``max_body`` bytes, else 413 before the app runs), the client's address and the scheme.
2. A sink's ``write`` never blocks and never starts a task: bytes queue in the sink, and the task
   the server runs for the connection sends everything queued as one ``http.response.body``
   message. ``buffered`` counts the bytes of a send the server's flow control holds plus those
   queued behind it, so the core's slow-tab policy sees a client that stops reading.
3. The peer going away (``http.disconnect``, ``send`` raising, the task cancelled) calls
   ``stream.closed()`` exactly once, unless the core closed the sink first. Disconnects are seen
   by one extra task per stream awaiting ``receive()``: servers such as uvicorn drop a ``send`` to
   a closed connection silently, so a quiet stream would otherwise never learn of it.
4. ``app.startup()`` runs once per event loop: on ``lifespan.startup``, or before the first
   request when the server or a mounting framework sends no lifespan (Starlette does not forward
   it to mounted apps). ``lifespan.shutdown`` runs ``app.shutdown()`` within ``shutdown_budget``.
5. Framing is the server's: ``content-length``, ``transfer-encoding`` and ``connection`` given by
   the app are dropped; header names must be tokens and values may not hold CR, LF or NUL
   (a response that breaks this is answered 500 and logged, as on the native server).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping, MutableMapping
from typing import TYPE_CHECKING, Any

from pyvia.http import STATUS_PHRASES, Headers, Request, Response, StreamResponse
from pyvia.overrides import override

if TYPE_CHECKING:
    from pyvia.app import App

__all__ = ["MAX_BODY", "ASGIApp", "asgi"]

logger = logging.getLogger("pyvia.asgi")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

#: Largest request body → 413; the native server's ``ServerLimits.max_body`` (16 MiB).
MAX_BODY = 16 * 1024 * 1024
#: Seconds ``app.shutdown()`` may take on ``lifespan.shutdown``; the native runner's half of 3 s.
SHUTDOWN_BUDGET = 1.5

#: RFC 9110 §5.6.2 token: the only characters a field name may hold.
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_BAD_VALUE = re.compile(r"[\r\n\0]")
#: Names the server writes itself (rule 5).
_FRAMING = frozenset({"content-length", "transfer-encoding", "connection"})
#: Header lists repeat (SSE heads, the bundle, plain text): each distinct one is checked and
#: encoded once. Cleared when full, so a stream of one-off values (cookies) cannot grow it.
_ENCODED: dict[tuple[object, ...], list[tuple[bytes, bytes]]] = {}
_ENCODED_MAX = 512
_TEXT_PLAIN = [("content-type", "text/plain; charset=utf-8")]


def _declared_over(length: str, limit: int) -> bool:
    """A Content-Length over ``limit``, read as ASCII digits (leading zeros and all, never int() of
    thousands of digits); anything else is the ASGI server's to refuse."""
    if not (length.isascii() and length.isdigit()):
        return False
    digits = length.lstrip("0")
    return len(digits) > 18 or (digits != "" and int(digits) > limit)


def _base_of(base_path: str) -> str:
    return base_path if base_path.endswith("/") else base_path + "/"


class _TooLarge(Exception):
    """The request body passed ``max_body``."""


def asgi(
    app: App,
    *,
    root_path: str | None = None,
    max_body: int = MAX_BODY,
    shutdown_budget: float = SHUTDOWN_BUDGET,
    base_path: str | None = None,
    db_url: str | None = None,
    settings: Mapping[str, Any] | None = None,
) -> ASGIApp:
    """The ASGI application serving ``app``: ``uvicorn mod:asgi_app`` or ``Mount("/live", app=...)``.

    Options are those of :class:`ASGIApp`; ``base_path``, ``db_url`` and ``settings`` (any App
    options) replace the app's own while this adapter serves it.
    """
    merged = {
        **(settings or {}),
        **({"base_path": base_path} if base_path is not None else {}),
        **({"db_url": db_url} if db_url is not None else {}),
    }
    return ASGIApp(app, root_path=root_path, max_body=max_body, shutdown_budget=shutdown_budget, settings=merged)


class ASGIApp:
    """An ASGI 3 application serving one pyvia App.

    ``root_path`` is the URL prefix stripped from request paths when the server does not say
    where the app is mounted (a proxy that forwards ``/live/...`` unchanged). ``None``, the
    default, takes the app's ``base_path``; ``""`` strips nothing. A ``root_path`` in the ASGI
    scope (Starlette's ``Mount``, uvicorn's ``--root-path``) always wins. Wrap an App once: two
    adapters of one App on one loop would start its timers twice.

    ``settings`` (App options by name, such as ``{"base_path": "/live", "db_url": ...}``) replace
    the app's own from its start by this adapter to its stop (pyvia.overrides); they are checked
    here, as ``App(...)`` checks them.
    """

    __slots__ = (
        "_restore",
        "_start_lock",
        "_started_on",
        "_warned_root",
        "app",
        "max_body",
        "root_path",
        "settings",
        "shutdown_budget",
    )

    def __init__(
        self,
        app: App,
        *,
        root_path: str | None = None,
        max_body: int = MAX_BODY,
        shutdown_budget: float = SHUTDOWN_BUDGET,
        settings: Mapping[str, Any] | None = None,
    ) -> None:
        self.settings = dict(settings or {})
        self._restore: Callable[[], None] | None = None
        if self.settings and not app.is_running:
            override(app, self.settings)()  # refused now, not at the first request
        if root_path is None:
            root_path = _base_of(self.settings["base_path"]) if "base_path" in self.settings else app.config.base_path
        if root_path and not root_path.startswith("/"):
            raise ValueError(f"root_path={root_path!r}: must be '' or start with '/', like '/live'")
        if not isinstance(max_body, int) or max_body < 0:
            raise ValueError(f"max_body={max_body!r}: must be a byte count >= 0")
        if not shutdown_budget > 0:
            raise ValueError(f"shutdown_budget={shutdown_budget!r}: must be a number of seconds > 0")
        self.app = app
        self.root_path = root_path.rstrip("/")
        self.max_body = max_body
        self.shutdown_budget = shutdown_budget
        self._started_on: asyncio.AbstractEventLoop | None = None
        self._start_lock: tuple[asyncio.AbstractEventLoop, asyncio.Lock] | None = None
        self._warned_root = False

    def __repr__(self) -> str:
        return f"ASGIApp({self.app!r}, root_path={self.root_path!r})"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "http":
            await self._http(scope, receive, send)
        elif kind == "lifespan":
            await self._lifespan(receive, send)
        elif kind == "websocket":
            await _refuse_websocket(receive, send)
        else:
            raise ValueError(f"pyvia.asgi serves 'http', 'lifespan' and 'websocket' scopes, not {kind!r}")

    # --- lifespan -------------------------------------------------------------------------------

    @property
    def is_started(self) -> bool:
        """Whether ``app.startup()`` ran on the event loop running now."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return False
        return self._started_on is loop

    async def startup(self) -> None:
        """Start the app on the running loop unless it already is (lifespan, or the first request)."""
        loop = asyncio.get_running_loop()
        if self._started_on is loop:
            return
        if self._start_lock is None or self._start_lock[0] is not loop:
            self._start_lock = (loop, asyncio.Lock())  # a lock serves the loop it was made for
        async with self._start_lock[1]:
            if self._started_on is not loop:
                if self.settings and self._restore is None:
                    self._restore = override(self.app, self.settings)
                try:
                    await self.app.startup()
                except BaseException:
                    self._put_back()
                    raise
                self._started_on = loop

    async def shutdown(self) -> None:
        """Stop the app if it was started: its streams end (the tabs reconnect) and its timers stop."""
        if self._started_on is None:
            return
        self._started_on = None
        try:
            await asyncio.wait_for(self.app.shutdown(self.shutdown_budget), self.shutdown_budget)
        except TimeoutError:
            logger.warning("app.shutdown() did not finish within %.2f s", self.shutdown_budget)
        self._put_back()

    def _put_back(self) -> None:
        """The app's own options again, once this adapter's run with ``settings`` ended."""
        restore, self._restore = self._restore, None
        if restore is not None:
            restore()

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            kind = message["type"]
            if kind == "lifespan.startup":
                try:
                    await self.startup()
                except Exception as exc:
                    logger.exception("pyvia app failed to start")
                    await send({"type": "lifespan.startup.failed", "message": f"{type(exc).__name__}: {exc}"})
                    return
                await send({"type": "lifespan.startup.complete"})
            elif kind == "lifespan.shutdown":
                try:
                    await self.shutdown()
                except Exception as exc:
                    logger.exception("pyvia app failed to stop")
                    await send({"type": "lifespan.shutdown.failed", "message": f"{type(exc).__name__}: {exc}"})
                    return
                await send({"type": "lifespan.shutdown.complete"})
                return

    # --- http -----------------------------------------------------------------------------------

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        method: str = scope["method"]
        head_only = method == "HEAD"
        http1 = scope.get("http_version", "1.1") in ("1.0", "1.1")
        headers = Headers.from_raw(scope.get("headers") or [])
        length = headers.get("content-length")
        try:
            if length is not None and _declared_over(length, self.max_body):
                raise _TooLarge
            body = await self._read_body(receive)
        except _TooLarge:
            logger.info("%s %s -> 413 body over %d bytes", method, scope.get("path", ""), self.max_body)
            too_large = Response.text(STATUS_PHRASES[413], 413)
            if http1:  # answered without reading the rest: do not read it to find the next request
                too_large.headers.append(("connection", "close"))
            await _send_response(send, too_large, head_only, keep_connection_header=True)
            return
        if body is None:
            return  # the client left before its request was complete
        client = scope.get("client")
        request = Request(
            method,
            self._route_path(scope),
            scope.get("query_string", b"").decode("latin-1"),
            headers,
            body,
            str(client[0]) if client else "",
            scope.get("scheme") or "http",
        )
        try:
            if self._started_on is not asyncio.get_running_loop():
                await self.startup()
            result: object = self.app.handle(request)
            if not isinstance(result, Response | StreamResponse) and inspect.isawaitable(result):
                result = await result
        except Exception:
            logger.exception("error handling %s %s", request.method, request.path)
            result = None
        if isinstance(result, Response):
            await _send_response(send, result, head_only)
        elif isinstance(result, StreamResponse):
            await _serve_stream(result, receive, send, head_only)
        else:
            if result is not None:
                logger.error("handle() for %s %s gave %r, not a response", request.method, request.path, result)
            await _send_response(send, Response.text(STATUS_PHRASES[500], 500), head_only)

    async def _read_body(self, receive: Receive) -> bytes | None:
        """The whole request body, or None if the client disconnected first. Raises _TooLarge."""
        chunks: list[bytes] = []
        size = 0
        limit = self.max_body
        while True:
            message = await receive()
            kind = message["type"]
            if kind == "http.request":
                chunk = message.get("body", b"")
                if chunk:
                    size += len(chunk)
                    if size > limit:
                        raise _TooLarge
                    chunks.append(chunk)
                if not message.get("more_body", False):
                    break
            elif kind == "http.disconnect":
                return None
        if not chunks:
            return b""
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    def _route_path(self, scope: Scope) -> str:
        """The path the app routes on: the scope's path without the mount prefix.

        Starlette ≥ 0.33 and uvicorn's ``--root-path`` keep the prefix in ``path`` and name it in
        ``root_path``; older Starlette removed it from ``path``. A path that does not start with
        the prefix (followed by ``/`` or nothing) is taken as it is, as Starlette's own
        ``get_route_path`` does.
        """
        path: str = scope.get("path") or "/"
        root: str = scope.get("root_path") or ""
        if root:
            root = root.rstrip("/")
            if not self._warned_root and root != self.root_path:
                self._warned_root = True
                logger.warning(
                    "pyvia app mounted at %r but its base_path is %r: the URLs it gives the browser "
                    "(stream, actions, bundle) miss the prefix; create it with App(base_path=%r)",
                    root,
                    self.app.config.base_path,
                    root or "/",
                )
        else:
            root = self.root_path
        if root and path.startswith(root):
            rest = path[len(root) :]
            if not rest:
                return "/"
            if rest[0] == "/":
                return rest
        return path


async def _refuse_websocket(receive: Receive, send: Send) -> None:
    """pyvia speaks SSE only: close the handshake, which the server answers with 403."""
    message = await receive()
    if message["type"] == "websocket.connect":
        await send({"type": "websocket.close", "code": 1008, "reason": "pyvia serves no websockets"})


def _encode_headers(headers: Iterable[tuple[str, str]], keep_connection: bool = False) -> list[tuple[bytes, bytes]]:
    """Check and encode response headers once per distinct list (rule 5). Raises ValueError."""
    try:
        key: tuple[object, ...] = (keep_connection, *headers)
        cached = _ENCODED.get(key)
    except TypeError:  # an unhashable pair: encode it to say what is wrong with it
        key, cached = (), None
    if cached is not None:
        return cached
    out: list[tuple[bytes, bytes]] = []
    for name, value in headers:
        if not isinstance(name, str) or not _TOKEN.fullmatch(name):
            raise ValueError(f"invalid response header name {name!r}")
        lower = name.lower()
        if lower in _FRAMING and not (keep_connection and lower == "connection"):
            continue
        if not isinstance(value, str) or _BAD_VALUE.search(value):
            raise ValueError(f"invalid value for response header {name!r}: {value!r} (CR, LF and NUL are refused)")
        out.append((lower.encode("latin-1"), value.encode("latin-1")))
    if key:
        if len(_ENCODED) >= _ENCODED_MAX:
            _ENCODED.clear()
        _ENCODED[key] = out
    return out


async def _send_response(send: Send, response: Response, head_only: bool, keep_connection_header: bool = False) -> None:
    """Send a complete response: ``content-length`` from the body, no body for HEAD (rule 5)."""
    status = response.status
    body = response.body
    try:
        if not isinstance(status, int) or not 100 <= status <= 599:
            raise ValueError(f"HTTP status must be within 100-599, got {status!r}")
        if not isinstance(body, bytes | bytearray | memoryview):
            raise ValueError(f"response body must be bytes, got {type(body).__name__}")
        headers = _encode_headers(response.headers, keep_connection_header)
    except (ValueError, UnicodeEncodeError):
        logger.exception("invalid response (status %r)", status)
        status, body, headers = 500, b"Internal Server Error", _encode_headers(_TEXT_PLAIN)
    if status < 200 or status == 204 or status == 304:
        body = b""  # RFC 9110 §6.4.1: no content, and no content-length either
        headers = list(headers)  # the cached list is never handed to a server
    else:
        headers = [*headers, (b"content-length", b"%d" % len(body))]
    try:
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": b"" if head_only else bytes(body)})
    except OSError:
        pass  # the client left (ASGI 2.4 servers raise an OSError); nothing is owed to it now


# --- streams ---------------------------------------------------------------------------------------


class _Sink:
    """The :class:`pyvia.http.StreamSink` of one ASGI stream: a queue the connection's task drains."""

    __slots__ = ("_chunks", "_closed", "_gone", "_in_flight", "_queued", "_wake")

    def __init__(self) -> None:
        self._chunks: list[bytes] = []
        self._closed = False  # closed by the core: send what is queued, then end the body
        self._gone = False  # the peer left: drop what is queued
        self._wake: asyncio.Future[None] | None = None  # set while the task waits for work
        self._queued = 0  # bytes in _chunks
        self._in_flight = 0  # bytes in a send() that has not returned

    def write(self, data: bytes) -> None:
        """Queue ``data`` (one or more whole events); ignored once closed or when empty."""
        if self._closed or self._gone or not data:
            return
        self._chunks.append(data)
        self._queued += len(data)
        self._poke()

    def close(self) -> None:
        """End the response once what is queued is sent."""
        if self._closed or self._gone:
            return
        self._closed = True
        self._poke()

    @property
    def buffered(self) -> int:
        """Bytes the server has not taken: the core's slow-client signal.

        That is the bytes of a ``send`` still waiting (the server's flow control holds it) plus
        those queued behind it. Bytes queued while no send waits leave on the next loop turn,
        as the native server's transport writes at once when the socket takes them: they are not
        counted, or every event would look like a backlog of its own size.
        """
        if self._closed or self._gone or not self._in_flight:
            return 0
        return self._in_flight + self._queued

    @property
    def is_closed(self) -> bool:
        return self._closed or self._gone

    def _poke(self) -> None:
        wake = self._wake
        if wake is not None and not wake.done():
            wake.set_result(None)

    def peer_gone(self) -> None:
        self._gone = True
        self._chunks = []
        self._queued = self._in_flight = 0
        self._poke()

    def _on_disconnect(self, watcher: asyncio.Future[None]) -> None:
        if watcher.cancelled():
            return  # the stream ended first and stopped watching
        exc = watcher.exception()
        if exc is not None:
            logger.debug("receive() failed while streaming; taking the client as gone", exc_info=exc)
        self.peer_gone()


async def _wait_disconnect(receive: Receive) -> None:
    """Return when the server reports the client gone (rule 3)."""
    while (await receive())["type"] != "http.disconnect":
        pass


def _call_closed(stream: StreamResponse) -> None:
    try:
        stream.closed()
    except Exception:
        logger.exception("error in stream close callback")


def _graceful_stop(exc: asyncio.CancelledError) -> bool:
    """Whether the server cancelled a stream because its graceful stop ran out of time (uvicorn
    gives that reason), rather than for anything else, which must stay a cancellation."""
    return any(isinstance(arg, str) and "graceful shutdown" in arg for arg in exc.args)


async def _serve_stream(stream: StreamResponse, receive: Receive, send: Send, head_only: bool) -> None:
    """Open ``stream`` and send what the core writes until either side ends it (rules 2 and 3)."""
    try:
        if not 100 <= stream.status <= 599:
            raise ValueError(f"HTTP status must be within 100-599, got {stream.status!r}")
        headers = _encode_headers(stream.headers)
    except (ValueError, UnicodeEncodeError, TypeError):
        logger.exception("invalid stream response")
        _call_closed(stream)
        await _send_response(send, Response.text(STATUS_PHRASES[500], 500), head_only)
        return
    start = {"type": "http.response.start", "status": stream.status, "headers": list(headers)}
    if head_only:
        _call_closed(stream)
        with contextlib.suppress(OSError):
            await send(start)
            await send({"type": "http.response.body", "body": b""})
        return
    sink = _Sink()
    try:
        stream.open(sink)  # queues the first events: they leave right after the head
    except Exception:
        logger.exception("error opening a stream")
        if not sink.is_closed:
            sink.peer_gone()
            _call_closed(stream)
        await _send_response(send, Response.text(STATUS_PHRASES[500], 500), head_only)
        return
    watcher = asyncio.ensure_future(_wait_disconnect(receive))
    watcher.add_done_callback(sink._on_disconnect)
    ended = False  # the body's last message was sent
    try:
        await send(start)
        loop = asyncio.get_running_loop()
        while not sink._gone:
            if sink._chunks:
                chunks, sink._chunks = sink._chunks, []
                data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
                sink._queued = 0
                sink._in_flight = len(data)
                last = sink._closed  # nothing can be queued after close: this is the end
                await send({"type": "http.response.body", "body": data, "more_body": not last})
                sink._in_flight = 0
                if last:
                    ended = True
                    break
            elif sink._closed:
                await send({"type": "http.response.body", "body": b"", "more_body": False})
                ended = True
                break
            else:
                sink._wake = wake = loop.create_future()
                try:
                    await wake
                finally:
                    sink._wake = None
    except OSError:
        sink.peer_gone()  # ASGI 2.4: send raises an OSError once the client is gone
    except asyncio.CancelledError as exc:
        if not _graceful_stop(exc):
            raise
        # The server's graceful stop ran out of time (uvicorn cancels with that reason): the way
        # every stream ends there, not a failure. The body is ended, so the server logs nothing and
        # the page reconnects to the next process; the core learns the tab left (finally).
        with contextlib.suppress(Exception):
            await send({"type": "http.response.body", "body": b"", "more_body": False})
    except Exception:
        logger.exception("error sending a stream")
        sink.peer_gone()
        raise
    finally:
        if not watcher.done():
            watcher.cancel()
        if not ended and not sink._closed:
            # The peer left, send failed, or the server cancelled this task (its graceful
            # stop ran out of time): the core learns it once, then the task ends.
            sink.peer_gone()
            _call_closed(stream)
