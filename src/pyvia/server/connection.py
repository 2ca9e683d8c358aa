"""One HTTP/1.1 connection of the native server: :class:`HttpProtocol` and its :class:`Exchange`.

:class:`HttpProtocol` is an ``asyncio.Protocol`` fed by httptools. Parser callbacks only collect
(uvicorn's rule); a complete request becomes an :class:`Exchange` and is answered at once when
nothing is ahead of it, otherwise it waits in a short pipeline queue so responses leave in
request order. What the connection is doing is one :class:`~pyvia.server.states.ConnState`,
changed only through the table of :mod:`pyvia.server.states`. Refusals, head building, chunk
framing and the chunked-body check are the pure functions of :mod:`pyvia.server.http`.

Rules this module keeps:

1. One ``transport.write`` per complete response (head and body joined) and one per stream event.
2. A request costs no task unless ``App.handle`` returns an awaitable.
3. No timer per connection: a connection records a ``deadline`` and the one sweep of its
   :class:`~pyvia.server.registry.ConnectionRegistry` enforces it. A deadline of 0 means
   "none": while the application owes a response, and for the whole life of a stream.
4. An application error becomes a plain 500 and is logged; the connection keeps serving.
5. A response after which the server closes the connection says ``connection: close``; one
   that does not, does not close it: a stream that ends cleanly leaves the connection open for
   the next request, as any response does (a pooled client never meets an unannounced close).
6. The parser never sees more than one request's head at a time: each head is fed up to its
   blank line, a body up to its declared or chunked end, so the server knows where each request
   starts and can be as strict as h11 where llhttp is lenient (request-line spaces, chunk sizes).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import socket
import struct
import termios
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, cast

from httptools import HttpParserError, HttpParserUpgrade, HttpRequestParser

from pyvia.http import Headers, Request, Response, StreamResponse
from pyvia.server import http as wire
from pyvia.server.exchange import Exchange, Sink
from pyvia.server.http import ChunkedBody, ServerLimits
from pyvia.server.registry import (
    QUEUE_SAMPLE,
    REFUSAL_STATUSES,
    TIMEOUT_PHASES,
    UNAVAILABLE_REASONS,
    ConnectionRegistry,
)
from pyvia.server.states import ConnState, check_move

if TYPE_CHECKING:
    from pyvia.server import ServedApp

__all__ = [
    "QUEUE_SAMPLE",
    "REFUSAL_STATUSES",
    "TIMEOUT_PHASES",
    "UNAVAILABLE_REASONS",
    "ConnectionRegistry",
    "Exchange",
    "HttpProtocol",
]

#: Older name of :data:`~pyvia.server.registry.QUEUE_SAMPLE`, kept for the tests that step it.
_QUEUE_SAMPLE = QUEUE_SAMPLE

logger = logging.getLogger("pyvia.server")

IDLE = ConnState.IDLE
RECEIVING = ConnState.RECEIVING
ANSWERING = ConnState.ANSWERING
STREAMING = ConnState.STREAMING
STALLED = ConnState.STALLED
LINGERING = ConnState.LINGERING
FLUSHING = ConnState.FLUSHING
CLOSED = ConnState.CLOSED

# Where the parser is inside the request it reads (orthogonal to the connection's state: a
# pipelined request arrives while an earlier one is answered). Trailers arrive while _BODY.
_IDLE, _HEAD, _BODY = 0, 1, 2

#: Seconds a refused connection keeps reading (and dropping) after its answer, so the bytes the
#: client is still sending do not make the kernel answer RST, which can destroy the unread
#: response on the client side (the "lingering close" of Apache and nginx).
_LINGER = 2.0
#: Refused connections allowed to linger at once; past it a refusal closes at once, so a flood of
#: refused connections cannot hold the descriptors the caps are there to keep.
_MAX_LINGERING_REFUSALS = 256

#: The accept wait of a connection the registry took from the listen queue and judged young.
_JUDGED = -2.0
#: ``SO_LINGER`` on with a time of 0: ``close()`` sends RST and discards the send queue.
_LINGER_OFF = struct.pack("ii", 1, 0)

_NO_HEADERS = Headers()
_NO_RAW_HEADERS: list[tuple[bytes, bytes]] = []  # never appended to: on_message_begin sets a fresh list

_METHODS = {m.encode(): m for m in ("GET", "POST", "HEAD", "PUT", "DELETE", "PATCH", "OPTIONS")}

#: Words of httptools' errors about a request's framing (two Content-Length, Content-Length with
#: Transfer-Encoding, a bad Transfer-Encoding): the request-smuggling attempts it refuses itself.
_FRAMING_WORDS = ("Content-Length", "Transfer-Encoding")
#: The end of a request head (llhttp refuses a bare LF, so a head has no other).
_HEAD_END = b"\r\n\r\n"


class _Reject(Exception):
    """Raised while parsing to stop and answer ``status`` (then close); ``cause`` is
    ``"smuggling"`` for ambiguous framing, ``"host"`` for a ``Host`` not served; ``reason`` is
    the sentence of the log line."""

    __slots__ = ("cause", "reason", "status")

    def __init__(self, status: int, reason: str, cause: str = "") -> None:
        self.status = status
        self.reason = reason
        self.cause = cause


class _Stop(Exception):
    """Raised inside a parser callback to stop reading requests, silently (queue full, closing)."""


class HttpProtocol(asyncio.Protocol):
    """One client connection: parse requests, hand them to the app, write the answers in order."""

    __slots__ = (  # noqa: RUF023 - grouped by lifetime (STYLE.md), not sorted
        # Server-wide, shared by every connection.
        "_app",
        "_hosts",
        "_limits",
        "_loop",
        "_registry",
        "_scheme",
        # Per connection.
        "_accept_wait",
        "_sock",
        "_exchange",
        "_final",
        "_flush_mark",
        "_parser",
        "_queue",
        "_reading_paused",
        "_state",
        "_writing_paused",
        "admitted",
        "client",
        "deadline",
        "draining",
        "ip_key",
        "refusing",
        "served",
        "stream_counted",
        "transport",
        # Per request being parsed.
        "_body",
        "_body_left",
        "_body_size",
        "_body_start",
        "_chunks",
        "_continue",
        "_head_raw",
        "_head_size",
        "_head_tail",
        "_headers",
        "_http10",
        "_line",
        "_parse",
        "_raw_headers",
        "_url",
        # Passing to another worker (pyvia.cluster.passing): the request read by the worker that
        # passed this connection here; whether this one may be passed on.
        "_preface",
        "_movable",
    )

    def __init__(
        self,
        app: ServedApp,
        registry: ConnectionRegistry,
        limits: ServerLimits,
        scheme: str = "http",
        preface: bytes = b"",
        *,
        judged: bool = False,
    ):
        self._app = app
        self._limits = limits
        self._loop = registry.loop
        self._registry = registry
        self._hosts = registry.hosts.cache
        self._scheme = scheme

        self._state = IDLE
        self._sock: socket.socket | None = None  # for TCP_INFO: how long a request waited unread
        # >= 0: waited this long in the listen queue of an overloaded server (its first request gets
        # a 503); _JUDGED: taken from the queue by the registry, which judged it young.
        self._accept_wait = _JUDGED if judged else -1.0
        #: The exchange being answered (None: nothing owed); the queue holds the ones behind it.
        self._exchange: Exchange | None = None
        # A list, not a deque: an empty deque costs 600 bytes per connection, and this holds at
        # most max_pipelined requests.
        self._queue: list[Exchange] = []
        self._final: bytes | None = None  # not None: read no more requests; write it, then close
        self._flush_mark = 0  # bytes unsent when the send deadline was last armed
        self._parser = HttpRequestParser(self)
        self._reading_paused = False
        self._writing_paused = False
        self.transport: asyncio.Transport  # set in connection_made
        #: The peer's address ("" when unknown).
        self.client = ""
        #: Counted by the registry's connection caps; the address its per-IP caps count (None: exempt).
        self.admitted = False
        self.ip_key: str | None = None
        #: Refused at accept and lingering (counted by the registry); counted by its stream caps.
        self.refusing = False
        self.stream_counted = False
        #: Exchanges begun on this connection (a stream's sink knows whether it is still the latest).
        self.served = 0
        #: Loop time after which the sweep calls :meth:`timeout`; 0.0 for none (rule 3).
        self.deadline = 0.0
        #: Set by :meth:`shutdown`: answer what is in flight with ``connection: close``.
        self.draining = False

        self._body: list[bytes] | None = None
        self._body_left = 0  # bytes of a Content-Length body still to feed; -1: chunked
        self._body_size = 0
        self._body_start = 0.0
        self._chunks: ChunkedBody | None = None
        self._continue = False
        self._head_raw = 0
        self._head_size = 0
        self._head_tail = b""  # the last bytes of a head that spans reads (its blank line may too)
        self._headers = _NO_HEADERS
        self._http10 = False
        self._line: bytes | None = None  # the request line so far, while it spans reads
        self._parse = _IDLE
        self._raw_headers = _NO_RAW_HEADERS
        self._url = b""

        self._preface = preface
        # Moved once at most: a connection that carries the actions of tabs on different workers
        # (a browser's pool, shared by its tabs) would move back and forth, and each move costs
        # more than forwarding one action (bench/RESULTS-2.md, section 7b).
        self._movable = scheme == "http" and not preface

    @property
    def state(self) -> ConnState:
        return self._state

    @property
    def unsent(self) -> int:
        """Bytes the transport holds for the peer (closing or not); 0 once the connection is gone."""
        if self._state is CLOSED:
            return 0
        try:
            return self.transport.get_write_buffer_size()
        except (AttributeError, RuntimeError):  # not connected yet, or a transport torn down under us
            return 0

    def _move(self, new: ConnState) -> None:
        self._state = check_move(self._state, new)

    # --- asyncio.Protocol -------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport = cast(asyncio.Transport, transport)  # uvloop's transports do not subclass asyncio's
        self.transport = transport
        self._sock = sock = transport.get_extra_info("socket")
        peer = transport.get_extra_info("peername")
        if isinstance(peer, tuple | list) and peer:
            self.client = str(peer[0])
        registry = self._registry
        registry.add(self)
        # (a passed connection was accepted long ago by another worker: its wait means nothing)
        if not registry.admit(self):
            self._refuse()
            return
        # (a passed connection was accepted long ago by another worker: its wait means nothing;
        # TLS read its handshake after accept). Its first request is refused once read, unless
        # it is for a path never shed.
        if self._scheme == "http" and not self._preface and self._accept_wait != _JUDGED:
            self._accept_wait = registry.late_accept(sock)
        if sock is not None:
            # OSError: a Unix socket; AttributeError: a transport without a real socket.
            with contextlib.suppress(OSError, AttributeError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        # A fresh connection is an idle one: browsers preconnect and send later.
        self.deadline = self._loop.time() + self._limits.keep_alive_timeout
        if self._preface:
            self.data_received(self._preface)

    def _refuse(self) -> None:
        """Over a connection cap: a 503 before any request, then close (lingering, if few are)."""
        registry = self._registry
        self._final = b""
        self.transport.write(registry.refusal)
        if registry.lingering_refusals < _MAX_LINGERING_REFUSALS:
            registry.lingering_refusals += 1
            self.refusing = True
            self._close(linger=True)
        else:
            self._close()

    def connection_lost(self, exc: Exception | None) -> None:
        self._move(CLOSED)
        registry = self._registry
        registry.discard(self)
        registry.release(self)
        self.deadline = 0.0
        self._queue.clear()
        self._parser = None  # type: ignore[assignment]  # break the parser <-> protocol cycle
        exchange = self._exchange
        if exchange is not None and exchange.stream is not None:
            stream, exchange.stream = exchange.stream, None
            sink = exchange.sink
            if sink is not None and not sink.is_closed:
                sink.peer_gone()
                self._call_closed(stream)

    def data_received(self, data: bytes) -> None:
        if self._final is not None or self._state >= LINGERING:
            return  # refusing or closing: what the peer sends now is not read
        if self._parse == _HEAD:
            self._head_raw += len(data)
        try:
            self._feed(data)
        except _Reject as reject:
            self._refuse_request(reject)
            return
        except HttpParserUpgrade:
            # Upgrade or CONNECT: the request was answered as plain HTTP; what follows is another
            # protocol, which this server does not speak.
            self._stop_reading(b"")
            return
        except HttpParserError as exc:
            if self._state >= LINGERING or self._final is not None:
                return  # e.g. bytes after "Connection: close": already answered, already leaving
            cause = exc.__context__
            if isinstance(cause, _Reject):
                self._refuse_request(cause)
            elif isinstance(cause, _Stop):
                self._stop_reading(b"")
            elif cause is None:
                message = str(exc)
                smuggling = any(w in message for w in _FRAMING_WORDS)
                self._refuse_request(_Reject(400, f"malformed request ({message})", "smuggling" if smuggling else ""))
            elif isinstance(cause, Exception):
                logger.error("internal error while parsing a request", exc_info=cause)
                self._stop_reading(wire.ERRORS[500])
            else:
                raise cause from None  # KeyboardInterrupt, SystemExit: not ours to swallow
            return
        state = self._state
        if self._final is not None or state >= LINGERING:
            return  # a refusal or close is under way
        # Deadlines are set here, once per read, not in the callbacks of each request (rule 3).
        parse = self._parse
        if parse == _HEAD:
            if self._head_raw > self._limits.max_head:
                # One header line still buffered by httptools: cap memory before it completes.
                self._refuse_request(_Reject(431, f"request head over {self._limits.max_head} bytes"))
                return
            if self._head_raw == 0 and state is RECEIVING:  # the first piece of this head
                self.deadline = self._loop.time() + self._limits.header_timeout
        elif state is IDLE:  # the keep-alive timeout runs
            self.deadline = self._loop.time() + self._limits.keep_alive_timeout
        elif state is RECEIVING:
            # Mid-body: no silence longer than body_timeout, and after that grace the body must
            # average min_body_rate (a body trickled byte by byte is cut off).
            limits = self._limits
            now = self._loop.time()
            if not self._body_start:
                self._body_start = now
            self.deadline = min(
                now + limits.body_timeout,
                self._body_start + limits.body_timeout + self._body_size / limits.min_body_rate,
            )
        if (
            (self._queue or self._exchange is not None)
            and not self._reading_paused
            and (len(self._queue) >= self._limits.max_pipelined or self._writing_paused)
        ):
            self._reading_paused = True
            self.transport.pause_reading()

    def _feed(self, data: bytes) -> None:
        """Feed ``data`` to the parser one head, or one body, at a time (rule 6).

        Raises :class:`_Reject` for what llhttp accepts and h11 refuses, and lets the parser's
        own errors through.
        """
        parser = self._parser
        while data:
            parse = self._parse
            if parse == _BODY:
                left = self._body_left
                chunks = self._chunks
                if left > 0:  # a Content-Length body: exactly that many bytes are its
                    if left >= len(data):
                        self._body_left = left - len(data)
                        parser.feed_data(data)
                        return
                    self._body_left = 0
                    piece, data = data[:left], data[left:]
                elif chunks is not None:
                    try:
                        end = chunks.scan(data)
                    except ValueError as exc:
                        raise _Reject(400, str(exc)) from None
                    if end >= len(data) or end <= 0:
                        parser.feed_data(data)
                        return
                    piece, data = data[:end], data[end:]
                else:  # a framing this loop does not follow: the parser has the rest
                    parser.feed_data(data)
                    return
            else:
                end = self._head_end(data)
                if end < 0 or end >= len(data):
                    if parse == _IDLE or self._line is not None:
                        self._check_line(data, parse == _IDLE)
                    parser.feed_data(data)
                    if self._parse == _HEAD:  # (reset by on_message_begin when this head began here)
                        self._head_tail = (self._head_tail + data)[-3:]
                    return
                piece, data = data[:end], data[end:]
                if parse == _IDLE or self._line is not None:
                    self._check_line(piece, parse == _IDLE)
            parser.feed_data(piece)
            if self._final is not None or self._state >= LINGERING:
                return  # answered with a close, or refused: the rest is not read

    def _head_end(self, data: bytes) -> int:
        """Where the head being read ends in ``data`` (just past its blank line), or -1."""
        tail = self._head_tail
        if tail and self._parse == _HEAD:
            found = (tail + data[:3]).find(_HEAD_END)
            if found >= 0:
                return found + 4 - len(tail)
        found = data.find(_HEAD_END)
        return found + 4 if found >= 0 else -1

    def _check_line(self, data: bytes, at_start: bool) -> None:
        """Refuse a request line with other spacing than h11's ``method SP target SP version``
        (llhttp takes runs of spaces). ``data`` starts a request (``at_start``, after any blank
        lines RFC 9112 §2.2 lets a server skip) or continues a line begun in an earlier read."""
        line = data.lstrip(b"\r\n") if at_start else (self._line or b"") + data
        if not line:
            return
        eol = line.find(b"\r\n")
        if eol < 0:
            if len(line) > self._limits.max_request_line + 64:
                raise _Reject(414, f"request line longer than {self._limits.max_request_line} bytes")
            self._line = line
            return
        self._line = None
        if line.count(b" ", 0, eol) != 2:
            raise _Reject(400, "malformed request line (spaces other than one between method, target and version)")

    def eof_received(self) -> bool | None:
        state = self._state
        if state is LINGERING or state is STREAMING:
            return None  # nothing more owed: close (a stream's peer is gone)
        if self._exchange is None and not self._queue:
            return None
        if self._scheme == "https":
            return None  # TLS cannot half-close; asyncio closes the transport anyway
        self._stop_reading(b"")
        return True  # keep the write side open for the answers still owed

    def pause_writing(self) -> None:
        self._writing_paused = True
        state = self._state
        if state is STREAMING or state >= LINGERING:
            return  # the core watches a stream's buffer; a closing connection has its deadline
        # The peer is slow to read a response: read no more requests, and give it the keep-alive
        # timeout to make progress.
        if not self._reading_paused:
            self._reading_paused = True
            self.transport.pause_reading()
        if state is IDLE or state is RECEIVING:
            self._move(STALLED)
            self.deadline = self._loop.time() + self._limits.keep_alive_timeout

    def resume_writing(self) -> None:
        self._writing_paused = False
        if self._state is STALLED:
            self._next()

    # --- httptools callbacks: collect only -----------------------------------------------------------

    def on_message_begin(self) -> None:
        if self._final is not None or self._state >= LINGERING:
            raise _Stop  # pipelined after a close or a refusal: not read
        if self._state is IDLE:
            self._move(RECEIVING)
        self._parse = _HEAD
        self._url = b""
        self._raw_headers = []
        self._head_size = 0
        self._head_raw = 0
        self._head_tail = b""
        self._body = None
        self._body_size = 0
        self._body_start = 0.0
        self._body_left = 0
        self._chunks = None
        self._continue = False

    def on_url(self, url: bytes) -> None:
        self._url += url
        if len(self._url) > self._limits.max_request_line:
            raise _Reject(414, f"request target longer than {self._limits.max_request_line} bytes")

    def on_header(self, name: bytes, value: bytes) -> None:
        # Trailers land here too, after the headers were taken: they count, then are ignored.
        raw = self._raw_headers
        raw.append((name, value))
        self._head_size += len(name) + len(value) + 4
        limits = self._limits
        if self._head_size > limits.max_header_bytes:
            raise _Reject(431, f"header fields over {limits.max_header_bytes} bytes")
        if len(raw) > limits.max_header_count:
            raise _Reject(431, f"more than {limits.max_header_count} header fields")

    def on_headers_complete(self) -> None:
        self._parse = _BODY
        self._line = None
        version = self._parser.get_http_version()
        if version == "1.1":
            self._http10 = False
        elif version == "1.0":
            self._http10 = True
        else:
            raise _Reject(505, f"HTTP version {version} (this server speaks 1.0 and 1.1)")
        raw = self._raw_headers
        self._headers = headers = Headers.from_raw(raw)
        coding = headers.get("transfer-encoding")
        if len(headers._map) != len(raw):  # a name repeats (rare): one dict size, not a scan
            if len(headers.get_all("host")) > 1:
                raise _Reject(400, "more than one Host field")  # RFC 9112 §3.2: MUST answer 400
            codings = headers.get_all("transfer-encoding")
            if len(codings) > 1:
                coding = ",".join(codings)  # gzip + chunked on two lines is "gzip, chunked"
        self._headers = headers = self._check_host(headers)
        length = headers.get("content-length")
        if coding is not None:
            if length is not None or self._http10:
                # Request smuggling (RFC 9112 §6.1, which also makes HTTP/1.0 framing by
                # Transfer-Encoding faulty); httptools refuses the first case too.
                raise _Reject(
                    400, "ambiguous framing (Transfer-Encoding with Content-Length, or on HTTP/1.0)", "smuggling"
                )
            if coding.strip().lower() != "chunked":
                raise _Reject(501, f"transfer coding {coding[:40]!r} (only chunked is served)")
            self._body_left = -1
            self._chunks = ChunkedBody(max(self._limits.max_header_bytes, 8 * 1024))
            declared = 0
        elif length is not None:
            try:
                declared = wire.content_length(length)
            except ValueError:
                raise _Reject(400, f"invalid Content-Length {length[:24]!r}") from None
            self._body_left = declared
        else:
            declared = 0
        if declared > self._limits.max_body:
            raise _Reject(413, f"body of {declared} bytes over {self._limits.max_body}")  # before it is sent
        expect = headers.get("expect")
        if expect is not None:
            if expect.strip().lower() != "100-continue":
                raise _Reject(417, f"Expect {expect[:40]!r}")
            if not self._http10 and (coding is not None or declared > 0):
                if self._exchange is not None or self._queue:
                    self._continue = True  # sent when this request's turn comes (_next)
                else:
                    self.transport.write(wire.CONTINUE)

    def _check_host(self, headers: Headers) -> Headers:
        """The request's headers once its host is checked: refused (before the app sees it) when
        missing, invalid or not served.

        In the absolute form (``GET http://host/…``) the target's authority is the host (RFC
        9112 §3.2.2): it is checked instead of ``Host`` and replaces it in the request. HTTP/1.1
        must send ``Host`` all the same (RFC 9112 §3.2; h11 refuses it missing too).
        """
        host = headers.get("host")
        if host is None and not self._http10:
            raise _Reject(400, "no Host field", "host")  # RFC 9112 §3.2: MUST answer 400
        try:
            authority = wire.authority_of(self._url)
        except ValueError:
            raise _Reject(400, f"invalid authority in the request target {self._url[:64]!r}", "host") from None
        if authority is not None:
            if not self._registry.hosts(authority):
                raise _Reject(400, f"host {authority[:64]!r} of the request target is not served here", "host")
            return Headers.from_lowered([*((n, v) for n, v in headers if n != "host"), ("host", authority)])
        if host is None:
            if not self._registry.hosts(""):
                raise _Reject(400, "no Host field", "host")  # an unnamed host is not one allowed_hosts lists
        elif self._hosts.get(host) is not True and not self._registry.hosts(host):
            raise _Reject(400, f"Host {host[:64]!r} invalid or not served here", "host")
        return headers

    def on_body(self, body: bytes) -> None:
        self._body_size += len(body)
        if self._body_size > self._limits.max_body:
            raise _Reject(413, f"body over {self._limits.max_body} bytes")
        if self._body is None:
            self._body = [body]
        else:
            self._body.append(body)
        self._continue = False  # the client did not wait for it

    def on_message_complete(self) -> None:
        self._parse = _IDLE
        self._chunks = None
        parser = self._parser
        raw_method = parser.get_method()
        method = _METHODS.get(raw_method) or raw_method.decode("ascii")
        try:
            path, query = wire.split_target(self._url)
        except ValueError as exc:
            raise _Reject(400, str(exc)) from None
        body = self._body
        request = Request(
            method,
            path,
            query,
            self._headers,
            b"" if body is None else body[0] if len(body) == 1 else b"".join(body),
            self.client,
            self._scheme,
        )
        if self._movable and not self._http10:
            request.transfer = self._transfer
        if self._preface:  # the request another worker passed with this connection
            self._preface = b""
            request.state["_passed"] = True
        # Drop what this request held: an idle or streaming connection keeps no request bytes.
        self._body = None
        self._url = b""
        self._headers = _NO_HEADERS
        self._raw_headers = _NO_RAW_HEADERS
        keep_alive = parser.should_keep_alive() and not self.draining and not parser.should_upgrade()
        exchange = Exchange(request, keep_alive, self._http10)
        if self._exchange is not None or self._queue or self._writing_paused:
            if len(self._queue) >= self._limits.max_pipelined:
                raise _Stop  # answer what is queued, then close; the client retries the rest
            self._queue.append(exchange)
            return
        self._dispatch(exchange)

    # --- answering -------------------------------------------------------------------------------------

    def _dispatch(self, exchange: Exchange) -> None:
        """Hand one request to the app; answer now unless it gave an awaitable (rule 2)."""
        self._move(ANSWERING)
        self._exchange = exchange
        self.served += 1
        self.deadline = 0.0
        request = exchange.request
        assert request is not None  # let go only once a stream is open
        registry = self._registry
        registry.dispatched += 1
        shedding = registry.shedding
        # A connection's first request was judged when it was accepted (how long it waited in the
        # listen queue); what it waits after that is the server's own turns, not a queue to shed.
        first = self.served == 1
        waited = -1.0 if shedding else self._accept_wait if first else registry.late_request(self._sock)
        if (shedding or waited >= 0) and request.path not in self._limits.shed_exempt:
            self._shed(exchange, waited, accepted=first)
            return
        try:
            result = self._app.handle(request)
        except Exception:
            logger.exception("error handling %s %s", request.method, request.path)
            self._write_500(exchange)
            return
        if isinstance(result, Response):
            self._write_response(result, exchange)
        elif isinstance(result, StreamResponse):
            self._start_stream(result, exchange)
        else:
            try:
                task: asyncio.Future[object] = asyncio.ensure_future(result, loop=self._loop)
            except TypeError:
                logger.error("handle() returned %r for %s %s, not a response", result, request.method, request.path)
                self._write_500(exchange)
                return
            exchange.task = task
            self._registry.task_started()
            task.add_done_callback(self._on_task_done)

    def _shed(self, exchange: Exchange, waited: float, *, accepted: bool = False) -> None:
        """Overloaded: 503 + Retry-After now, without asking the app; the connection stays usable,
        unless it is new and waited in the listen queue (``accepted``): it is closed, as at accept.
        ``waited``: how long the request waited unread, when that is why (else -1)."""
        registry = self._registry
        closing = waited >= 0 and accepted
        if waited >= 0:
            registry.shed_late(self.client, exchange.path, waited, accepted=accepted)
        else:
            registry.shed(self.client, exchange.path)
        keep_alive = exchange.keep_alive and not self.draining and not closing
        self.transport.write(
            wire.service_unavailable(
                self._registry.limits.retry_after,
                head_only=exchange.head_only,
                connection=self._connection_header(keep_alive, exchange.http10),
            )
        )
        if closing:  # a lingering close, as any refusal: what the client still sends must not reset it
            self._exchange = None
            self._final = b""
            self._close(linger=True)
            return
        self._answered(keep_alive)

    def _on_task_done(self, task: asyncio.Future[object]) -> None:
        self._registry.task_done()
        exchange = self._exchange
        if exchange is None or exchange.task is not task:
            return  # the connection was aborted and moved on (a bug elsewhere, or a transfer)
        exchange.task = None
        request = exchange.request
        assert request is not None  # let go only once a stream is open
        if task.cancelled():
            if self._state < LINGERING:
                logger.error("handler task for %s %s was cancelled", request.method, request.path)
                self._write_500(exchange)
            return
        exc = task.exception()
        if exc is not None:
            logger.error("error handling %s %s", request.method, request.path, exc_info=exc)
            result: object = None
        else:
            result = task.result()
        if self._state >= LINGERING:
            return  # the client left while the handler ran
        if isinstance(result, Response):
            self._write_response(result, exchange)
        elif isinstance(result, StreamResponse):
            self._start_stream(result, exchange)
        else:
            if exc is None:
                logger.error("handle() for %s %s resolved to %r, not a response", request.method, request.path, result)
            self._write_500(exchange)

    def _connection_header(self, keep_alive: bool, http10: bool) -> str:
        if keep_alive and not self.draining:
            return wire.CONNECTION_KEEP_ALIVE if http10 else ""
        return wire.CONNECTION_CLOSE

    def _write_response(self, response: Response, exchange: Exchange) -> None:
        keep_alive = exchange.keep_alive and not self.draining
        try:
            data = wire.encode_response(
                response.status,
                response.headers,
                response.body,
                head_only=exchange.head_only,
                connection=self._connection_header(keep_alive, exchange.http10),
            )
        except Exception:
            logger.exception("invalid response to %s %s", exchange.method, exchange.path)
            self._write_500(exchange)
            return
        self.transport.write(data)
        self._answered(keep_alive)

    def _write_500(self, exchange: Exchange) -> None:
        keep_alive = exchange.keep_alive and not self.draining
        self.transport.write(
            wire.internal_error(
                head_only=exchange.head_only, connection=self._connection_header(keep_alive, exchange.http10)
            )
        )
        self._answered(keep_alive)

    def _answered(self, keep_alive: bool) -> None:
        """The exchange's last byte is written: close (as its head said), or go on to the next."""
        self._exchange = None
        if not keep_alive:
            self._close()
        else:
            self._next()

    def _start_stream(self, stream: StreamResponse, exchange: Exchange) -> None:
        # A stream chunked on HTTP/1.1 ends with its last chunk and leaves the connection open,
        # as the Datastar SDK spec's `connection: keep-alive` says; an HTTP/1.0 one is unframed and
        # ends with the connection, and a stream to a client that asked to close says so too.
        keep_alive = exchange.keep_alive and not self.draining and not exchange.http10
        exchange.keep_alive = keep_alive
        try:
            head = wire.encode_stream_head(
                stream.status,
                stream.headers,
                chunked=not exchange.http10,
                connection=wire.CONNECTION_KEEP_ALIVE if keep_alive else wire.CONNECTION_CLOSE,
            )
        except Exception:
            logger.exception("invalid stream response to %s %s", exchange.method, exchange.path)
            self._write_500(exchange)
            self._call_closed(stream)
            return
        if exchange.head_only:
            self.transport.write(head)
            self._call_closed(stream)
            self._answered(keep_alive)
            return
        if not self._registry.stream_started(self):
            # Over a stream cap: the stream is never opened; the browser retries after a while.
            self._call_closed(stream)
            self.transport.write(
                wire.service_unavailable(self._registry.limits.retry_after, connection=wire.CONNECTION_CLOSE)
            )
            self._answered(False)
            return
        self._move(STREAMING)
        self.deadline = 0.0
        send_buffer = self._limits.stream_send_buffer
        if send_buffer is not None:
            sock = self.transport.get_extra_info("socket")
            if sock is not None:
                with contextlib.suppress(OSError, AttributeError):  # a Unix socket, a transport without one
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, send_buffer)
        sink = Sink(self, self.transport, head, chunked=not exchange.http10)
        exchange.sink = sink
        exchange.stream = stream
        try:
            stream.open(sink)
        except Exception:
            logger.exception("error opening stream for %s %s", exchange.method, exchange.path)
            if not sink.is_closed:
                sink.peer_gone()
                exchange.stream = None
                self._call_closed(stream)
                self._registry.stream_ended(self)
                self._exchange = None
                self._close()
            return
        exchange.request = None  # the stream is open: its request is the app's now, if it wants it
        sink.flush_head()

    def _call_closed(self, stream: StreamResponse) -> None:
        try:
            stream.closed()
        except Exception:
            logger.exception("error in stream close callback")

    def stream_finished(self) -> None:
        """The core closed the sink: the body is complete; the next request may follow (rule 5)."""
        exchange = self._exchange
        if exchange is None or self._state is not STREAMING:
            return
        exchange.stream = None
        self._registry.stream_ended(self)
        self._answered(exchange.keep_alive and not self.draining)

    def abort_stream(self) -> None:
        """The core gave up on a stream whose peer stopped reading: drop what it holds, now."""
        if self._state is CLOSED:
            return
        exchange = self._exchange
        if exchange is not None and exchange.stream is not None:
            exchange.stream = None
            self._registry.stream_ended(self)
        self._registry.timeouts["send"] += 1
        self.reset()

    def _next(self) -> None:
        """Nothing is owed now: answer the next queued request, or settle in the state that waits."""
        if self._state >= LINGERING:
            return
        if self._queue and not self._writing_paused:
            self._dispatch(self._queue.pop(0))
            return
        if self._writing_paused:
            # The peer must read what it has before more is answered; resume_writing calls back.
            self._move(STALLED)
            self.deadline = self._loop.time() + self._limits.keep_alive_timeout
            return
        if self._final is not None:
            if self._final:
                self.transport.write(self._final)
            self._close(linger=bool(self._final))
            return
        if self._reading_paused:
            self._reading_paused = False
            self.transport.resume_reading()
        parse = self._parse
        if parse == _IDLE:
            self._move(IDLE)
            self.deadline = self._loop.time() + self._limits.keep_alive_timeout
        elif parse == _HEAD:
            self._move(RECEIVING)
            self.deadline = self._loop.time() + self._limits.header_timeout
        else:
            self._move(RECEIVING)
            if self._continue:
                self._continue = False
                self.transport.write(wire.CONTINUE)
            self.deadline = self._loop.time() + self._limits.body_timeout

    async def _transfer(self, send: Callable[[int], Awaitable[bool] | None]) -> bool:
        """Offer the connection to another process (``send`` its descriptor): True once it took it.

        Only between requests: with bytes of another request read or queued, or an answer being
        written, the connection stays (the caller forwards instead). Nothing is read while the
        other process decides; when it refuses, the connection carries on here.
        """
        exchange = self._exchange
        if (
            self._state is not ANSWERING
            or exchange is None
            or exchange.stream is not None
            or self._queue
            or self._parse != _IDLE
            or self._final is not None
            or self.draining
            or self._writing_paused
        ):
            return False
        transport = self.transport
        sock = transport.get_extra_info("socket")
        answer = send(sock.fileno()) if sock is not None else None
        if answer is None:
            return False
        transport.pause_reading()
        taken = await answer
        if taken:
            # Theirs now: write nothing, and close only this process's descriptor (no FIN, no
            # RST: the socket lives on in the other process).
            self._move(CLOSED)
            transport.abort()
            return True
        if not self._reading_paused and self._state < LINGERING:
            transport.resume_reading()
        return False

    def _refuse_request(self, reject: _Reject) -> None:
        """Count and log a refused request, then answer it (after what is owed) and close."""
        self._registry.refused(reject.status, reject.cause, self.client, reject.reason)
        self._stop_reading(wire.ERRORS[reject.status])

    def _stop_reading(self, final: bytes) -> None:
        """Read no more requests; write ``final`` (if any) once the owed answers are out, then close.

        With nothing to add, the last owed answer says ``connection: close`` itself (rule 5).
        """
        self._final = final
        if self._queue:
            self._queue[-1].keep_alive = False
        elif self._exchange is not None and self._exchange.stream is None:
            self._exchange.keep_alive = False
        if self._exchange is None and not self._queue and self._state < LINGERING:
            if final:
                self.transport.write(final)
            self._close(linger=bool(final))

    def _close(self, linger: bool = False) -> None:
        """Close after what was written; with ``linger``, half-close and drop input for a while first."""
        if self._state >= LINGERING:
            return
        transport = self.transport
        if linger and transport.can_write_eof():
            self._move(LINGERING)
            transport.write_eof()
            self.deadline = self._loop.time() + _LINGER
            if self._reading_paused:
                self._reading_paused = False
                transport.resume_reading()
        else:
            self._move(FLUSHING)
            transport.close()
            self._flush_deadline()

    def _flush_deadline(self) -> None:
        """After ``close()``: a peer that reads nothing of what is left for the keep-alive timeout
        loses it (slow-read guard, nginx's ``send_timeout``), instead of holding the connection
        for ever; one that reads slowly keeps it."""
        left = self.transport.get_write_buffer_size()
        if left:
            self._flush_mark = left
            self.deadline = self._loop.time() + self._limits.keep_alive_timeout
        else:
            self._move(CLOSED)
            self._flush_mark = 0
            self.deadline = 0.0

    # --- called by the registry -------------------------------------------------------------------------

    def timeout(self) -> None:
        """The deadline passed; what that means depends on the state (``_TIMEOUTS``)."""
        handler = _TIMEOUTS.get(self._state)
        if handler is None:
            self.deadline = 0.0  # no deadline runs in this state: a stale one
        else:
            handler(self)

    def _idle_timeout(self) -> None:
        """Idle past the keep-alive timeout: close silently (nothing is owed), or abort when the
        kernel still holds bytes the peer has not read all that time (a stream's last frames to a
        reader that stopped): closed, the socket would keep them, orphaned, for minutes more."""
        self.deadline = 0.0
        self._registry.timeouts["idle"] += 1
        self._final = b""
        if self._kernel_unsent() > 0:
            self._registry.timeouts["send"] += 1
            self.reset()
            return
        self._close()

    def _kernel_unsent(self) -> int:
        """Bytes in the socket's kernel send queue, not yet acknowledged by the peer (0 if unknown)."""
        sock = self.transport.get_extra_info("socket")
        try:
            packed = fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, b"\0\0\0\0")
        except (OSError, AttributeError, ValueError):  # no socket, a Unix socket, not Linux
            return 0
        return int(struct.unpack("i", packed)[0])

    def _request_timeout(self) -> None:
        """A request head or body too slow to arrive: 408, then a lingering close."""
        self.deadline = 0.0
        phase = "header" if self._parse == _HEAD else "body"
        self._registry.timeouts[phase] += 1
        limit = self._limits.header_timeout if phase == "header" else self._limits.body_timeout
        self._registry.log_refusal(
            408,
            "timed out a request from %s with 408: its %s did not arrive in time (%s %s s)",
            self.client,
            "head" if phase == "header" else "body",
            f"{phase}_timeout",
            limit,
        )
        self.transport.write(wire.ERRORS[408])  # nothing was answered for this request yet
        self._final = b""
        self._close(linger=True)

    def _stalled_timeout(self) -> None:
        """The peer stopped reading what it was sent: do not wait to flush."""
        self.deadline = 0.0
        self._registry.timeouts["send"] += 1
        self.reset()

    def _linger_timeout(self) -> None:
        """The lingering moment is over: close (and flush what is left)."""
        self._move(FLUSHING)
        self.transport.close()
        self._flush_deadline()

    def _flush_timeout(self) -> None:
        """Closed with bytes unsent: another period if the peer read some, else abort."""
        if 0 < self.transport.get_write_buffer_size() < self._flush_mark:
            self._flush_deadline()  # the peer read some: it gets another period
            return
        self._flush_mark = 0
        self.deadline = 0.0
        self._registry.timeouts["send"] += 1
        self.reset()  # closed, and the peer read nothing of the rest

    def shutdown(self) -> None:
        """Graceful stop: close if idle, else finish the request in flight with ``connection: close``."""
        self.draining = True
        state = self._state
        if state is LINGERING:
            self._linger_timeout()
            return
        if state is STREAMING or state >= LINGERING:
            return  # streams are the app's to end (App.shutdown); abort() ends what is left
        if (state is IDLE or state is STALLED) and not self._queue and self._parse == _IDLE:
            self._final = b""
            self._close()

    def reset(self) -> None:
        """Abort and drop what the kernel still holds for the peer (an RST, ``SO_LINGER`` 0): for a
        peer that stopped reading. A plain close leaves the socket orphaned in FIN-WAIT-1 with
        its whole send queue, for minutes, however the process lets go of it."""
        sock = self.transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError, AttributeError):  # a Unix socket, a transport without one
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_OFF)
        self.abort()

    def abort(self) -> None:
        """Close now (the shutdown budget is spent); a handler still running is cancelled."""
        exchange = self._exchange
        if exchange is not None and exchange.task is not None:
            exchange.task.cancel()
        self._move(CLOSED)
        self.transport.abort()


#: state -> what its deadline passing means (rule 3); states without a deadline have no entry.
_TIMEOUTS: dict[ConnState, Callable[[HttpProtocol], None]] = {
    IDLE: HttpProtocol._idle_timeout,
    RECEIVING: HttpProtocol._request_timeout,
    STALLED: HttpProtocol._stalled_timeout,
    LINGERING: HttpProtocol._linger_timeout,
    FLUSHING: HttpProtocol._flush_timeout,
}
