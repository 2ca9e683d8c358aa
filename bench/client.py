"""A raw-socket HTTP/1.1 client for the benchmarks, on asyncio (uvloop when installed).

Why not an HTTP library: the harness must cost little next to the server it measures (one core
each), hold thousands of idle streams in one process, and see each SSE event the moment its
chunk arrives. So this is an ``asyncio.Protocol`` with a small parser: status line, headers,
``Content-Length``, chunked and read-until-close bodies; one request in flight per connection
(keep-alive, no pipelining). A connection whose response head announces a chunked body to
:meth:`Connection.open_stream` turns into a :class:`Stream` that splits the chunks into SSE events.
"""

from __future__ import annotations

import asyncio
import html
import re
import socket
import time
import zlib
from collections import deque
from typing import Any
from urllib.parse import quote

import orjson

__all__ = [
    "BodyDecoder",
    "Connection",
    "ProtocolError",
    "Response",
    "Stream",
    "boot_signals",
    "build_request",
    "event_signals",
    "run",
    "stream_target",
]

_MAX_HEAD = 64 * 1024
_HEAD, _BODY, _CHUNK_SIZE, _CHUNK_DATA, _TRAILERS, _UNTIL_CLOSE, _DONE = range(7)
_BOOT = re.compile(rb'<meta id="via-boot" data-signals="([^"]*)"')


class ProtocolError(Exception):
    """The server sent something that is not HTTP/1.1 as we expect it."""


class Response:
    """A complete response; ``done`` is the ``perf_counter()`` when its last byte was parsed."""

    __slots__ = ("body", "done", "headers", "set_cookies", "status")

    def __init__(self, status: int, headers: dict[str, str], set_cookies: list[str], body: bytes) -> None:
        self.status = status
        self.headers = headers
        self.set_cookies = set_cookies
        self.body = body
        self.done = 0.0

    def cookie(self, name: str) -> str | None:
        """The value a ``Set-Cookie`` of this response gives ``name``."""
        prefix = name + "="
        for line in self.set_cookies:
            pair = line.split(";", 1)[0].strip()
            if pair.startswith(prefix):
                return pair[len(prefix) :]
        return None


def build_request(
    method: str, target: str, host: str, headers: list[tuple[str, str]] | None = None, body: bytes = b""
) -> bytes:
    """One request as bytes, built once so a hot loop only writes it."""
    lines = [f"{method} {target} HTTP/1.1", f"Host: {host}"]
    lines += [f"{name}: {value}" for name, value in headers or ()]
    if body or method in ("POST", "PUT", "PATCH"):
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def _parse_head(head: bytes) -> tuple[int, dict[str, str], list[str]]:
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1."):
        raise ProtocolError(f"bad status line {lines[0]!r}")
    try:
        status = int(parts[1])
    except ValueError:
        raise ProtocolError(f"bad status line {lines[0]!r}") from None
    headers: dict[str, str] = {}
    cookies: list[str] = []
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep:
            raise ProtocolError(f"bad header line {line!r}")
        name = name.strip().lower()
        value = value.strip()
        if name == "set-cookie":
            cookies.append(value)
        elif name in headers:
            headers[name] += ", " + value
        else:
            headers[name] = value
    return status, headers, cookies


def _expire(fut: asyncio.Future[Any], what: str) -> None:
    if not fut.done():
        fut.set_exception(TimeoutError(what))


class BodyDecoder:
    """Decodes a stream body as it arrives: ``zstd`` (a new decompressor after each frame: pyvia
    ends a frame when it releases an idle encoder), ``br``, ``gzip`` or identity."""

    __slots__ = ("_d", "coding", "frames")

    def __init__(self, coding: str) -> None:
        self.coding = coding
        self.frames = 0  # zstd frames ended (an encoder released mid-stream ends one)
        self._d: Any = None
        if coding == "zstd":
            import zstandard

            self._d = zstandard.ZstdDecompressor().decompressobj()
        elif coding == "br":
            import brotli  # type: ignore[import-untyped]

            self._d = brotli.Decompressor()
        elif coding == "gzip":
            self._d = zlib.decompressobj(wbits=31)
        elif coding != "identity":
            raise ProtocolError(f"unknown content-encoding {coding!r}")

    def decode(self, payload: bytes) -> bytes:
        if self.coding == "identity":
            return payload
        if self.coding == "br":
            return bytes(self._d.process(payload))
        if self.coding == "gzip":
            return bytes(self._d.decompress(payload))
        parts = []
        while payload:
            parts.append(self._d.decompress(payload))
            if not self._d.eof:
                break
            payload = self._d.unused_data
            self.frames += 1
            import zstandard

            self._d = zstandard.ZstdDecompressor().decompressobj()
        return b"".join(parts)


class Stream:
    """The SSE body of one open stream: events as they arrive, each with its arrival time.

    Comment-only blocks (``: via``, keep-alives) are counted, not queued. ``events`` holds
    ``(perf_counter at parse, raw event bytes)`` until :meth:`next_event` takes them.
    """

    __slots__ = (
        "_pending",
        "_waiter",
        "bytes_seen",
        "closed",
        "comments",
        "conn",
        "decoder",
        "events",
        "headers",
        "last_id",
        "set_cookies",
        "status",
    )

    def __init__(self, conn: Connection, status: int, headers: dict[str, str], set_cookies: list[str]) -> None:
        self.conn = conn
        self.status = status
        self.headers = headers
        self.set_cookies = set_cookies
        self.events: deque[tuple[float, bytes]] = deque()
        self.comments = 0
        self.bytes_seen = 0
        self.closed = False
        #: The id of the last frame received (a tab's stream ends each frame with one).
        self.last_id: str | None = None
        self._pending = bytearray()
        self._waiter: asyncio.Future[None] | None = None
        self.decoder = BodyDecoder(headers.get("content-encoding", "identity"))

    def _feed(self, payload: bytes) -> None:
        self.bytes_seen += len(payload)
        payload = self.decoder.decode(payload)
        pending = self._pending
        pending += payload
        now = 0.0
        while (end := pending.find(b"\n\n")) >= 0:
            raw = bytes(pending[:end])
            del pending[: end + 2]
            if all(line.startswith(b":") for line in raw.split(b"\n")):
                self.comments += 1
                continue
            if raw.startswith(b"id: ") and b"\n" not in raw:  # the id that ends a tab's frame
                self.last_id = raw[4:].decode()
                continue
            now = now or time.perf_counter()
            self.events.append((now, raw))
        if self.events:
            self._wake()

    def _end(self, exc: BaseException | None = None) -> None:
        self.closed = True
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            if exc is None:
                waiter.set_result(None)
            else:
                waiter.set_exception(exc)

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def next_event(self, timeout: float) -> tuple[float, bytes]:
        """The next event and its arrival time; TimeoutError, or ConnectionError once closed."""
        if not self.events:
            if self.closed:
                raise ConnectionError("stream closed")
            loop = asyncio.get_running_loop()
            self._waiter = waiter = loop.create_future()
            handle = loop.call_later(timeout, _expire, waiter, f"no event within {timeout} s")
            try:
                await waiter
            finally:
                handle.cancel()
                self._waiter = None
            if not self.events:
                raise ConnectionError("stream closed")
        return self.events.popleft()

    def close(self) -> None:
        self.conn.close()


class Connection(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection with at most one request in flight."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self._buf = bytearray()
        self._state = _DONE
        self._waiter: asyncio.Future[Any] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._status = 0
        self._headers: dict[str, str] = {}
        self._cookies: list[str] = []
        self._parts: list[bytes] = []
        self._remaining = 0
        self._no_body = False
        self._want_stream = False
        self._stream: Stream | None = None
        self._keep_alive = True
        self.closed = False

    @classmethod
    async def open(cls, host: str, port: int, timeout: float = 5.0) -> Connection:
        loop = asyncio.get_running_loop()
        _, conn = await asyncio.wait_for(loop.create_connection(cls, host, port), timeout)
        return conn

    # --- asyncio.Protocol -------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self._state == _UNTIL_CLOSE:
            self._finish(b"".join(self._parts))
        error = ConnectionError(f"connection lost: {exc}" if exc else "connection closed by the server")
        if self._stream is not None:
            self._stream._end(None if self._state in (_DONE, _UNTIL_CLOSE) else error)
        self._fail(error)

    def data_received(self, data: bytes) -> None:
        self._buf += data
        try:
            self._parse()
        except ProtocolError as exc:
            self._fail(exc)
            self.close()

    # --- requests ---------------------------------------------------------------------------------

    def request(self, raw: bytes, timeout: float = 5.0, head_only: bool = False) -> asyncio.Future[Response]:
        """Send ``raw`` (from :func:`build_request`); the future resolves to its Response."""
        return self._send(raw, timeout, head_only, stream=False)

    async def open_stream(self, raw: bytes, timeout: float = 5.0) -> Stream | Response:
        """Send a GET for a stream: a :class:`Stream` once a chunked head arrives, else the Response."""
        result: Stream | Response = await self._send(raw, timeout, False, stream=True)
        return result

    def _send(self, raw: bytes, timeout: float, head_only: bool, stream: bool) -> asyncio.Future[Any]:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Any] = loop.create_future()
        if self.closed or self.transport is None:
            fut.set_exception(ConnectionError("connection is closed"))
            return fut
        if self._state != _DONE or self._stream is not None:
            raise RuntimeError("one request at a time on a Connection")
        self._waiter = fut
        self._state = _HEAD
        self._no_body = head_only
        self._want_stream = stream
        self._timer = loop.call_later(timeout, self._time_out, timeout)
        self.transport.write(raw)
        return fut

    def close(self) -> None:
        if self.transport is not None and not self.closed:
            self.closed = True
            self.transport.close()

    # --- parsing ----------------------------------------------------------------------------------

    def _time_out(self, timeout: float) -> None:
        self._timer = None
        self._fail(TimeoutError(f"no complete response within {timeout} s"))
        self.close()  # the rest of a late response would be read as the next one

    def _fail(self, exc: BaseException) -> None:
        waiter, self._waiter = self._waiter, None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if waiter is not None and not waiter.done():
            waiter.set_exception(exc)

    def _resolve(self, value: Any) -> None:
        waiter, self._waiter = self._waiter, None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if waiter is not None and not waiter.done():
            waiter.set_result(value)

    def _finish(self, body: bytes) -> None:
        self._state = _DONE
        self._parts = []
        response = Response(self._status, self._headers, self._cookies, body)
        response.done = time.perf_counter()
        if not self._keep_alive:
            self.close()
        self._resolve(response)

    def _parse(self) -> None:  # one state machine, clearer in one piece
        buf = self._buf
        while buf:
            state = self._state
            if state == _HEAD:
                end = buf.find(b"\r\n\r\n")
                if end < 0:
                    if len(buf) > _MAX_HEAD:
                        raise ProtocolError("response head too large")
                    return
                status, headers, cookies = _parse_head(bytes(buf[:end]))
                del buf[: end + 4]
                if 100 <= status < 200:
                    continue  # an interim response; the real head follows
                self._status, self._headers, self._cookies = status, headers, cookies
                self._keep_alive = headers.get("connection", "").lower() != "close"
                chunked = "chunked" in headers.get("transfer-encoding", "").lower()
                if self._want_stream and chunked and status == 200:
                    self._stream = Stream(self, status, headers, cookies)
                    self._state = _CHUNK_SIZE
                    self._resolve(self._stream)
                elif self._no_body or status in (204, 304):
                    self._finish(b"")
                elif chunked:
                    self._state = _CHUNK_SIZE
                elif "content-length" in headers:
                    try:
                        self._remaining = int(headers["content-length"])
                    except ValueError:
                        raise ProtocolError(f"bad content-length {headers['content-length']!r}") from None
                    self._state = _BODY
                    if self._remaining == 0:
                        self._finish(b"")
                else:
                    self._state = _UNTIL_CLOSE
            elif state == _BODY:
                n = self._remaining
                if len(buf) < n:
                    return
                body = bytes(buf[:n])
                del buf[:n]
                self._finish(body)
            elif state == _CHUNK_SIZE:
                end = buf.find(b"\r\n")
                if end < 0:
                    return
                line = bytes(buf[:end]).split(b";", 1)[0].strip()
                del buf[: end + 2]
                try:
                    size = int(line, 16)
                except ValueError:
                    raise ProtocolError(f"bad chunk size {line!r}") from None
                if size == 0:
                    self._state = _TRAILERS
                else:
                    self._remaining = size
                    self._state = _CHUNK_DATA
            elif state == _CHUNK_DATA:
                n = self._remaining
                if len(buf) < n + 2:
                    return
                if buf[n : n + 2] != b"\r\n":
                    raise ProtocolError("chunk not followed by CRLF")
                payload = bytes(buf[:n])
                del buf[: n + 2]
                self._state = _CHUNK_SIZE
                if self._stream is not None:
                    self._stream._feed(payload)
                else:
                    self._parts.append(payload)
            elif state == _TRAILERS:
                end = buf.find(b"\r\n")
                if end < 0:
                    return
                empty = end == 0
                del buf[: end + 2]
                if empty:
                    if self._stream is not None:
                        self._state = _DONE
                        self._stream._end()
                        self.close()
                    else:
                        self._finish(b"".join(self._parts))
            elif state == _UNTIL_CLOSE:
                self._parts.append(bytes(buf))
                buf.clear()
            else:
                raise ProtocolError(f"{len(buf)} unexpected bytes with no request in flight")


def boot_signals(page: bytes) -> dict[str, Any]:
    """The signals a pyvia page seeds (``<meta id="via-boot" data-signals="…">``), or {} if absent."""
    found = _BOOT.search(page)
    if found is None:
        return {}
    value: dict[str, Any] = orjson.loads(html.unescape(found.group(1).decode()))
    return value


def stream_target(signals: dict[str, Any]) -> str:
    """The ``/_sse`` target a page opens its stream with: the context id of ``signals`` in the
    ``datastar`` query parameter, and nothing else (no signal value rides a URL)."""
    return "/_sse?datastar=" + quote(orjson.dumps({"via_ctx": signals["via_ctx"]}).decode(), safe="")


def posted(signals: dict[str, Any]) -> dict[str, Any]:
    """What Datastar posts of a tab's signals: every one whose id does not start with ``_`` (the
    writable signals, their revisions and ``via_ctx``); server-owned ones stay in the browser."""
    return {k: v for k, v in signals.items() if not k.startswith("_")}


def event_signals(raw: bytes) -> dict[str, Any] | None:
    """The JSON of a ``datastar-patch-signals`` event, or None for any other event."""
    if not raw.startswith(b"event: datastar-patch-signals\n"):
        return None
    data = b"".join(line[len(b"data: signals ") :] for line in raw.split(b"\n") if line.startswith(b"data: signals "))
    value: dict[str, Any] = orjson.loads(data)
    return value


def run(main: Any) -> Any:
    """Run coroutine ``main`` on uvloop when installed (as the server does), else on asyncio."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(main)
    return uvloop.run(main)
