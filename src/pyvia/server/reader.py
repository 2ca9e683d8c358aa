"""The request being read on a native-server connection: :class:`RequestReader`.

One per connection (httptools binds its callbacks once, when the parser is made); every field but
the parser and the connection belongs to the request being read and is reset when the next one
begins (h11's ``_readers.py``, uvicorn's "per-request" attributes).

Rules this module keeps:

1. Parser callbacks only collect (uvicorn's rule); a complete request is handed to the connection
   (:meth:`~pyvia.server.connection.HttpProtocol.received`), which answers or queues it.
2. The parser never sees more than one request's head at a time: each head is fed up to its
   blank line, a body up to its declared or chunked end, so the server knows where each request
   starts and can be as strict as h11 where llhttp is lenient (request-line spaces, chunk sizes).
3. What llhttp accepts and h11 refuses raises :class:`Reject`; the parser's own errors go through
   to the connection, which turns them into refusals.
4. Once a request is complete the reader keeps none of its bytes: an idle or streaming connection
   holds no request.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from httptools import HttpParserError, HttpParserUpgrade, HttpRequestParser

from pyvia.http import Headers, Request
from pyvia.server import http as wire
from pyvia.server.http import ChunkedBody, ServerLimits

if TYPE_CHECKING:
    from pyvia.server.connection import HttpProtocol

__all__ = ["BODY", "HEAD", "NO_REQUEST", "Reject", "RequestReader", "Stop"]

# Where the reader is inside the request it reads (orthogonal to the connection's state: a
# pipelined request arrives while an earlier one is answered). Trailers arrive while BODY.
NO_REQUEST, HEAD, BODY = 0, 1, 2

_NO_HEADERS = Headers()
_NO_RAW_HEADERS: list[tuple[bytes, bytes]] = []  # never appended to: on_message_begin sets a fresh list

logger = logging.getLogger("pyvia.server")

#: Words of httptools' errors about a request's framing (two Content-Length, Content-Length with
#: Transfer-Encoding, a bad Transfer-Encoding): the request-smuggling attempts it refuses itself.
_FRAMING_WORDS = ("Content-Length", "Transfer-Encoding")


_METHODS = {m.encode(): m for m in ("GET", "POST", "HEAD", "PUT", "DELETE", "PATCH", "OPTIONS")}

#: The end of a request head (llhttp refuses a bare LF, so a head has no other).
_HEAD_END = b"\r\n\r\n"


def _kind_of_error(message: str) -> str:
    """How the metrics count a parser's refusal: ``smuggling`` when it is about the framing."""
    return "smuggling" if any(word in message for word in _FRAMING_WORDS) else ""


class Reject(Exception):
    """Raised while parsing to stop and answer ``status`` (then close); ``cause`` is
    ``"smuggling"`` for ambiguous framing, ``"host"`` for a ``Host`` not served; ``reason`` is
    the sentence of the log line."""

    __slots__ = ("cause", "reason", "status")

    def __init__(self, status: int, reason: str, cause: str = "") -> None:
        self.status = status
        self.reason = reason
        self.cause = cause


class Stop(Exception):
    """Raised to stop reading requests: silently (queue full, closing, an upgrade), or with
    ``final``, the last bytes to write once what is owed is out."""

    __slots__ = ("final",)

    def __init__(self, final: bytes = b"") -> None:
        self.final = final


class RequestReader:
    """Feeds one connection's bytes to httptools and collects the request being read (rule 1)."""

    __slots__ = (  # noqa: RUF023 - grouped by lifetime (STYLE.md), not sorted
        # Per connection.
        "_conn",
        "_limits",
        "_parser",
        # Per request being read.
        "_body",
        "_body_left",
        "_chunks",
        "_head_size",
        "_head_tail",
        "_headers",
        "_http10",
        "_line",
        "_raw_headers",
        "_url",
        "body_size",
        "body_start",
        "head_raw",
        "pending_continue",
        "phase",
    )

    def __init__(self, conn: HttpProtocol, limits: ServerLimits) -> None:
        self._conn = conn
        self._limits = limits
        self._parser = HttpRequestParser(self)
        #: NO_REQUEST, HEAD or BODY: where the reader is in the request it reads.
        self.phase = NO_REQUEST
        #: Bytes read since this head began (the head's cap, before httptools buffers more).
        self.head_raw = 0
        #: Body bytes read so far, and the loop time its first byte came (0.0: none yet).
        self.body_size = 0
        self.body_start = 0.0
        #: A ``100 Continue`` owed once this request's turn comes (an earlier answer is owed).
        self.pending_continue = False
        self._body: list[bytes] | None = None
        self._body_left = 0  # bytes of a Content-Length body still to feed; -1: chunked
        self._chunks: ChunkedBody | None = None
        self._head_size = 0
        self._head_tail = b""  # the last bytes of a head that spans reads (its blank line may too)
        self._headers = _NO_HEADERS
        self._http10 = False
        self._line: bytes | None = None  # the request line so far, while it spans reads
        self._raw_headers = _NO_RAW_HEADERS
        self._url = b""

    def rest(self) -> None:
        """The connection will carry nothing else for long (its stream is open): let the parser
        go between two requests (about 0.9 KB with its nine bound callbacks, per idle tab); the
        next bytes that come make a new one, as a new connection would."""
        if self.phase == NO_REQUEST:
            self._parser = None  # type: ignore[assignment]

    def close(self) -> None:
        """The connection is gone: break the parser <-> reader <-> connection cycle."""
        self._parser = None  # type: ignore[assignment]
        self._conn = None  # type: ignore[assignment]

    def feed(self, data: bytes) -> None:
        """Read ``data``, one head or one body at a time (rule 2): raises :class:`Reject` to
        refuse the request, :class:`Stop` to read no more.

        The parser's own errors become one of the two (rule 3); an error of the server's own while
        parsing is logged and answered 500. Once the connection stopped reading (an error after
        ``Connection: close``, when already answered and leaving) nothing is raised.
        """
        try:
            if self.phase == HEAD:
                self.head_raw += len(data)
            parser = self._parser
            if parser is None:  # resting (:meth:`rest`): a next request begins
                parser = self._parser = HttpRequestParser(self)
            conn = self._conn
            while data:
                phase = self.phase
                if phase == BODY:
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
                            raise Reject(400, str(exc)) from None
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
                        if phase == NO_REQUEST or self._line is not None:
                            self._check_line(data, phase == NO_REQUEST)
                        parser.feed_data(data)
                        if self.phase == HEAD:  # (reset by on_message_begin when this head began here)
                            self._head_tail = (self._head_tail + data)[-3:]
                        return
                    piece, data = data[:end], data[end:]
                    if phase == NO_REQUEST or self._line is not None:
                        self._check_line(piece, phase == NO_REQUEST)
                parser.feed_data(piece)
                if data and not conn.reading:
                    return  # answered with a close, or refused: the rest is not read
                if self._parser is None:  # a stream opened with more behind its request: read on
                    self._parser = parser
        except HttpParserUpgrade:
            # Upgrade or CONNECT: the request was answered as plain HTTP; what follows is another
            # protocol, which this server does not speak.
            raise Stop from None
        except HttpParserError as exc:
            if not self._conn.reading:
                return
            cause = exc.__context__
            if isinstance(cause, Reject | Stop):
                raise cause from None
            if cause is None:
                message = str(exc)
                raise Reject(400, f"malformed request ({message})", _kind_of_error(message)) from None
            if isinstance(cause, Exception):
                logger.error("internal error while parsing a request", exc_info=cause)
                raise Stop(wire.ERRORS[500]) from None
            raise cause from None  # KeyboardInterrupt, SystemExit: not ours to swallow

    def _head_end(self, data: bytes) -> int:
        """Where the head being read ends in ``data`` (just past its blank line), or -1."""
        tail = self._head_tail
        if tail and self.phase == HEAD:
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
                raise Reject(414, f"request line longer than {self._limits.max_request_line} bytes")
            self._line = line
            return
        self._line = None
        if line.count(b" ", 0, eol) != 2:
            raise Reject(400, "malformed request line (spaces other than one between method, target and version)")

    # --- httptools callbacks: collect only -----------------------------------------------------------

    def on_message_begin(self) -> None:
        if not self._conn.request_begins():
            raise Stop  # pipelined after a close or a refusal: not read
        self.phase = HEAD
        self._url = b""
        self._raw_headers = []
        self._head_size = 0
        self.head_raw = 0
        self._head_tail = b""
        self._body = None
        self.body_size = 0
        self.body_start = 0.0
        self._body_left = 0
        self._chunks = None
        self.pending_continue = False

    def on_url(self, url: bytes) -> None:
        self._url += url
        if len(self._url) > self._limits.max_request_line:
            raise Reject(414, f"request target longer than {self._limits.max_request_line} bytes")

    def on_header(self, name: bytes, value: bytes) -> None:
        # Trailers land here too, after the headers were taken: they count, then are ignored.
        raw = self._raw_headers
        raw.append((name, value))
        self._head_size += len(name) + len(value) + 4
        limits = self._limits
        if self._head_size > limits.max_header_bytes:
            raise Reject(431, f"header fields over {limits.max_header_bytes} bytes")
        if len(raw) > limits.max_header_count:
            raise Reject(431, f"more than {limits.max_header_count} header fields")

    def on_headers_complete(self) -> None:
        self.phase = BODY
        self._line = None
        version = self._parser.get_http_version()
        if version == "1.1":
            self._http10 = False
        elif version == "1.0":
            self._http10 = True
        else:
            raise Reject(505, f"HTTP version {version} (this server speaks 1.0 and 1.1)")
        raw = self._raw_headers
        self._headers = headers = Headers.from_raw(raw)
        coding = headers.get_lower("transfer-encoding")
        if headers.repeats_a_name():  # rare: one dict size, not a scan
            if len(headers.get_all("host")) > 1:
                raise Reject(400, "more than one Host field")  # RFC 9112 §3.2: MUST answer 400
            codings = headers.get_all("transfer-encoding")
            if len(codings) > 1:
                coding = ",".join(codings)  # gzip + chunked on two lines is "gzip, chunked"
        self._headers = headers = self._check_host(headers)
        length = headers.get_lower("content-length")
        if coding is not None:
            if length is not None or self._http10:
                # Request smuggling (RFC 9112 §6.1, which also makes HTTP/1.0 framing by
                # Transfer-Encoding faulty); httptools refuses the first case too.
                raise Reject(
                    400, "ambiguous framing (Transfer-Encoding with Content-Length, or on HTTP/1.0)", "smuggling"
                )
            if coding.strip().lower() != "chunked":
                raise Reject(501, f"transfer coding {coding[:40]!r} (only chunked is served)")
            self._body_left = -1
            self._chunks = ChunkedBody(max(self._limits.max_header_bytes, 8 * 1024))
            declared = 0
        elif length is not None:
            try:
                declared = wire.content_length(length)
            except ValueError:
                raise Reject(400, f"invalid Content-Length {length[:24]!r}") from None
            self._body_left = declared
        else:
            declared = 0
        if declared > self._limits.max_body:
            raise Reject(413, f"body of {declared} bytes over {self._limits.max_body}")  # before it is sent
        expect = headers.get_lower("expect")
        if expect is not None:
            if expect.strip().lower() != "100-continue":
                raise Reject(417, f"Expect {expect[:40]!r}")
            if not self._http10 and (coding is not None or declared > 0):
                conn = self._conn
                if conn.owes:
                    self.pending_continue = True  # sent when this request's turn comes
                else:
                    conn.transport.write(wire.CONTINUE)

    def _check_host(self, headers: Headers) -> Headers:
        """The request's headers once its host is checked: refused (before the app sees it) when
        missing, invalid or not served.

        In the absolute form (``GET http://host/…``) the target's authority is the host (RFC
        9112 §3.2.2): it is checked instead of ``Host`` and replaces it in the request. HTTP/1.1
        must send ``Host`` all the same (RFC 9112 §3.2; h11 refuses it missing too).
        """
        host = headers.get_lower("host")
        if host is None and not self._http10:
            raise Reject(400, "no Host field", "host")  # RFC 9112 §3.2: MUST answer 400
        try:
            authority = wire.authority_of(self._url)
        except ValueError:
            raise Reject(400, f"invalid authority in the request target {self._url[:64]!r}", "host") from None
        hosts = self._conn.registry.hosts
        if authority is not None:
            if not hosts(authority):
                raise Reject(400, f"host {authority[:64]!r} of the request target is not served here", "host")
            return Headers.from_lowered([*((n, v) for n, v in headers if n != "host"), ("host", authority)])
        if host is None:
            if not hosts(""):
                raise Reject(400, "no Host field", "host")  # an unnamed host is not one allowed_hosts lists
        elif hosts.cache.get(host) is not True and not hosts(host):
            raise Reject(400, f"Host {host[:64]!r} invalid or not served here", "host")
        return headers

    def on_body(self, body: bytes) -> None:
        self.body_size += len(body)
        if self.body_size > self._limits.max_body:
            raise Reject(413, f"body over {self._limits.max_body} bytes")
        if self._body is None:
            self._body = [body]
        else:
            self._body.append(body)
        self.pending_continue = False  # the client did not wait for it

    def on_message_complete(self) -> None:
        self.phase = NO_REQUEST
        self._chunks = None
        parser = self._parser
        raw_method = parser.get_method()
        method = _METHODS.get(raw_method) or raw_method.decode("ascii")
        try:
            path, query = wire.split_target(self._url)
        except ValueError as exc:
            raise Reject(400, str(exc)) from None
        body = self._body
        conn = self._conn
        request = Request(
            method,
            path,
            query,
            self._headers,
            b"" if body is None else body[0] if len(body) == 1 else b"".join(body),
            conn.client,
            conn.scheme,
        )
        # Drop what this request held (rule 4).
        self._body = None
        self._url = b""
        self._headers = _NO_HEADERS
        self._raw_headers = _NO_RAW_HEADERS
        conn.received(request, parser.should_keep_alive() and not parser.should_upgrade(), self._http10)
