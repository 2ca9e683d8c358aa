"""Pure HTTP/1.1 pieces of the native server: limits, request targets, response heads, chunks, errors.

Values in, bytes out: nothing here touches asyncio, sockets or a clock (STYLE.md, "Keep I/O out of
protocol logic"), so every function can be tested and fuzzed on its own.

Invariants:

1. Every head built here is one ``bytes`` object, encoded once, with no CR, LF or NUL coming from a
   caller's header name or value: anything that could split a response raises :class:`ValueError`.
2. Framing is the server's job. ``content-length``, ``transfer-encoding`` and ``connection`` given
   by the application are dropped; the server writes its own from the body and the connection's
   state (the one exception: a HEAD answered without its body keeps the app's ``content-length``).
3. Canned error responses carry ``connection: close``: after a protocol error the byte stream can
   no longer be trusted, so the connection ends.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, fields
from http import HTTPStatus
from urllib.parse import unquote

from pyvia.http import STATUS_PHRASES

__all__ = [
    "CONNECTION_CLOSE",
    "CONNECTION_KEEP_ALIVE",
    "CONTINUE",
    "ERRORS",
    "LAST_CHUNK",
    "ServerLimits",
    "encode_response",
    "encode_stream_head",
    "frame_chunk",
    "internal_error",
    "split_target",
    "status_line",
]

_KIB = 1024
_MIB = 1024 * _KIB


@dataclass(frozen=True, slots=True)
class ServerLimits:
    """What one connection may ask of the server; over a limit the request is refused, never queued.

    The sizes follow the common front-line defaults (nginx ``large_client_header_buffers`` 8 KiB
    for a request line, Node's 64 KiB of headers…); the timeouts are enforced by one periodic
    sweep per server, so they are exact to within ``sweep_interval``.
    """

    #: Longest request target (URL) in bytes → 414. nginx, Node and h11 all stop near 8 KiB.
    max_request_line: int = 8 * _KIB
    #: Most header fields in one request (trailers included) → 431. Browsers send 10-25.
    max_header_count: int = 100
    #: Most bytes of header fields in one request (names, values, ": " and CRLF) → 431.
    max_header_bytes: int = 64 * _KIB
    #: Largest request body, declared or streamed → 413. Actions post signals, not files.
    max_body: int = 16 * _MIB
    #: Seconds from the first byte of a request to the end of its head → 408 (slowloris guard).
    header_timeout: float = 10.0
    #: Longest silence while a request body is arriving → 408.
    body_timeout: float = 30.0
    #: Seconds an idle keep-alive connection is kept; longer than browsers' and proxies' reuse
    #: windows (Chromium drops idle sockets after 60 s), so the client closes first.
    keep_alive_timeout: float = 75.0
    #: Requests parsed ahead of the one being answered; at this depth the server stops reading.
    max_pipelined: int = 32
    #: Period of the timeout sweep, in seconds (one timer per server, none per connection).
    sweep_interval: float = 1.0

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if not value > 0:
                raise ValueError(f"ServerLimits.{f.name} must be positive, got {value!r}")

    @property
    def max_head(self) -> int:
        """Raw bytes a request head may take before it is refused, whatever its shape."""
        return self.max_request_line + self.max_header_bytes + 1024


# --- status lines --------------------------------------------------------------------------------


def _phrase(status: int) -> str:
    phrase = STATUS_PHRASES.get(status)
    if phrase is None:
        try:
            phrase = HTTPStatus(status).phrase
        except ValueError:
            phrase = ""
    return phrase


#: Index = status code; precomputed for 100-599 so a response costs no formatting of its first line.
_STATUS_LINES: list[str] = [""] * 100 + [f"HTTP/1.1 {code} {_phrase(code)}\r\n" for code in range(100, 600)]


def status_line(status: int) -> str:
    """``HTTP/1.1 <status> <phrase>\\r\\n``; raises ValueError outside 100-599."""
    if not 100 <= status <= 599:
        raise ValueError(f"HTTP status must be within 100-599, got {status!r}")
    return _STATUS_LINES[status]


# --- header validation ---------------------------------------------------------------------------

#: RFC 9110 §5.6.2 token: the only characters a field name may hold.
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
#: Names the server writes itself (invariant 2).
_FRAMING = frozenset({"content-length", "transfer-encoding", "connection"})
#: name as given → True to drop it, False to write it. Names repeat across responses, so each is
#: checked once; the cap keeps a server that echoes arbitrary names from growing it without end.
_NAME_KIND: dict[str, bool] = {}
_NAME_CACHE_MAX = 1024


def _classify(name: object) -> bool:
    if not isinstance(name, str) or not _TOKEN.fullmatch(name):
        raise ValueError(f"invalid response header name {name!r}")
    drop = name.lower() in _FRAMING
    if len(_NAME_KIND) < _NAME_CACHE_MAX:
        _NAME_KIND[name] = drop
    return drop


def _bad_value(headers: Iterable[tuple[str, str]]) -> ValueError:
    for name, value in headers:
        if not isinstance(value, str) or "\r" in value or "\n" in value or "\0" in value:
            return ValueError(f"invalid value for response header {name!r}: {value!r} (CR, LF and NUL are refused)")
    return ValueError("invalid response header value")  # pragma: no cover - callers checked there is one


def _head(status: int, headers: Iterable[tuple[str, str]], extra: str) -> bytes:
    """Status line and header lines (not yet terminated), validated and encoded."""
    if not 100 <= status <= 599:
        raise ValueError(f"HTTP status must be within 100-599, got {status!r}")
    kinds = _NAME_KIND
    lines = [_STATUS_LINES[status]]
    for name, value in headers:
        drop = kinds.get(name)
        if drop is None:
            drop = _classify(name)
        if not drop:
            if value.__class__ is not str:
                raise _bad_value(headers)
            lines.append(f"{name}: {value}\r\n")
    if extra:
        lines.append(extra)
    head = "".join(lines)
    # One C-level count instead of membership tests per value: any CR or LF beyond the line
    # ends written here came from a value (names were checked against the token grammar).
    count = len(lines)
    if head.count("\n") != count or head.count("\r") != count or "\0" in head:
        raise _bad_value(headers)
    return head.encode("latin-1")


#: (status, connection, *headers) -> encoded head. Most responses repeat a few header sets, and a
#: hit costs a tuple and a lookup instead of validating and encoding again (3-4x faster measured);
#: values that vary (cookies, etags) just miss. Cleared when full, so the hot sets come back.
_HEADS: dict[tuple[object, ...], bytes] = {}
_HEADS_MAX = 512


def _cached_head(status: int, headers: Iterable[tuple[str, str]], extra: str) -> bytes:
    try:
        key = (status, extra, *headers)
        head = _HEADS.get(key)
    except TypeError:  # an unhashable pair: let _head say what is wrong with it
        return _head(status, headers, extra)
    if head is None:
        head = _head(status, headers, extra)
        if len(_HEADS) >= _HEADS_MAX:
            _HEADS.clear()
        _HEADS[key] = head
    return head


#: Written for a keep-alive response to an HTTP/1.0 request (RFC 9112 §9.3); see ``connection=``.
CONNECTION_KEEP_ALIVE = "connection: keep-alive\r\n"
#: Written when the server will close after this response.
CONNECTION_CLOSE = "connection: close\r\n"


def encode_response(
    status: int,
    headers: Iterable[tuple[str, str]],
    body: bytes,
    *,
    head_only: bool = False,
    connection: str = "",
) -> bytes:
    """A whole response (head and body) as one bytes object, ready for one ``write``.

    ``head_only`` (a HEAD request) keeps ``content-length`` but leaves the body out; with an empty
    body the app's own ``content-length`` is kept, if it gave one. 1xx, 204 and 304 responses carry
    neither (RFC 9110 §8.6, §15.3.5, §15.4.5). ``connection`` is
    :data:`CONNECTION_CLOSE`, :data:`CONNECTION_KEEP_ALIVE` or ``""``.

    Raises ValueError for a status outside 100-599, a header name that is not a token, a value
    that is not a str or holds CR, LF or NUL, or text that does not fit in latin-1.
    """
    head = _cached_head(status, headers, connection)
    if status < 200 or status == 204 or status == 304:
        return head + b"\r\n"
    if head_only:
        return _head_only(head, headers, body)
    if not body:
        return head + b"content-length: 0\r\n\r\n"
    return b"%bcontent-length: %d\r\n\r\n%b" % (head, len(body), body)


def _head_only(head: bytes, headers: Iterable[tuple[str, str]], body: bytes) -> bytes:
    """The answer to HEAD: the GET's length, if known. RFC 9110 §8.6 forbids a wrong one, so an
    app that answers HEAD without the body states the length with its own ``content-length``, or
    none is sent."""
    if body:
        return b"%bcontent-length: %d\r\n\r\n" % (head, len(body))
    for name, value in headers:
        if name.lower() == "content-length" and value.strip().isdigit() and value.isascii():
            return b"%bcontent-length: %d\r\n\r\n" % (head, int(value))
    return head + b"\r\n"


def encode_stream_head(
    status: int, headers: Iterable[tuple[str, str]], *, chunked: bool = True, connection: str = ""
) -> bytes:
    """The head of a streamed response; with ``chunked`` its body is framed by :func:`frame_chunk`.

    An HTTP/1.0 client cannot read chunks: its stream is sent unframed, ``chunked=False``, and the
    end of the body is the end of the connection. Raises ValueError as :func:`encode_response`.
    """
    head = _cached_head(status, headers, connection)
    return head + (b"transfer-encoding: chunked\r\n\r\n" if chunked else b"\r\n")


def frame_chunk(data: bytes) -> bytes:
    """``data`` as one chunk of a chunked body. Empty data would end the body, so it is refused."""
    if not data:
        raise ValueError("an empty chunk would end the response; skip the write instead")
    return b"%x\r\n%b\r\n" % (len(data), data)


#: The chunk that ends a chunked body (no trailers).
LAST_CHUNK = b"0\r\n\r\n"
#: The interim answer to ``Expect: 100-continue`` (RFC 9110 §10.1.1).
CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"

_TEXT_PLAIN = [("content-type", "text/plain; charset=utf-8")]


def _error(status: int) -> bytes:
    return encode_response(status, _TEXT_PLAIN, _phrase(status).encode(), connection=CONNECTION_CLOSE)


#: Prebuilt refusals, each with ``connection: close`` (invariant 3): the server writes them without
#: asking the application. 414 for a too-long URL, 431 for too many or too large headers, 501 for a
#: transfer coding other than chunked (RFC 9112 §6.1), 505 for a version other than 1.0 or 1.1.
ERRORS: dict[int, bytes] = {code: _error(code) for code in (400, 408, 413, 414, 417, 431, 500, 501, 505)}


def internal_error(*, head_only: bool = False, connection: str = "") -> bytes:
    """The plain 500 written when the application failed: the phrase only, nothing leaked."""
    return encode_response(500, _TEXT_PLAIN, b"Internal Server Error", head_only=head_only, connection=connection)


# --- request target --------------------------------------------------------------------------------


#: target -> (path, query); pages and actions repeat their URLs. Cleared when full.
_TARGETS: dict[bytes, tuple[str, str]] = {}
_TARGETS_MAX = 1024


def split_target(target: bytes) -> tuple[str, str]:
    """Split a request target into (percent-decoded path, raw query string).

    Accepts the origin form (``/a/b?q``), the absolute form (``http://host/a?q``, RFC 9112 §3.2.2,
    whose authority is ignored: ``Host`` names the site) and ``*``. Raises ValueError for
    anything else. The parser has already refused bytes outside ASCII, so latin-1 never fails.
    """
    found = _TARGETS.get(target)
    if found is None:
        found = _split_target(target)
        if len(_TARGETS) >= _TARGETS_MAX:
            _TARGETS.clear()
        _TARGETS[target] = found
    return found


def _split_target(target: bytes) -> tuple[str, str]:
    if target[:1] != b"/":
        if target == b"*":
            return "*", ""
        scheme, sep, rest = target.partition(b"://")
        if not sep or scheme.lower() not in (b"http", b"https"):
            raise ValueError(f"unsupported request target {target[:64]!r}")
        slash = rest.find(b"/")
        query_at = rest.find(b"?")
        if slash < 0 or 0 <= query_at < slash:
            target = b"/" + rest[query_at:] if query_at >= 0 else b"/"
        else:
            target = rest[slash:]
    if b"#" in target:
        target = target.partition(b"#")[0]
    path, _, query = target.partition(b"?")
    text = path.decode("latin-1")
    if "%" in text:
        text = unquote(text)
    return text, query.decode("latin-1")
