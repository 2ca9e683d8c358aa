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
from dataclasses import dataclass, replace
from http import HTTPStatus
from urllib.parse import unquote

from pyvia.config import LOOPBACK, PROBE_PATHS, Limits
from pyvia.http import STATUS_PHRASES
from pyvia.schema import setting
from pyvia.security import HostPolicy, PeerExemption, normalize_host

__all__ = [
    "CONNECTION_CLOSE",
    "CONNECTION_KEEP_ALIVE",
    "CONTINUE",
    "ERRORS",
    "LAST_CHUNK",
    "LOOPBACK",
    "PROBE_PATHS",
    "ChunkedBody",
    "HostPolicy",
    "PeerExemption",
    "ServerLimits",
    "authority_of",
    "content_length",
    "derive_max_connections",
    "derive_max_streams",
    "derive_per_ip",
    "encode_response",
    "encode_stream_head",
    "frame_chunk",
    "internal_error",
    "normalize_host",
    "phrase",
    "service_unavailable",
    "split_target",
    "status_line",
]

_KIB = 1024


@dataclass(frozen=True, slots=True)
class ServerLimits(Limits):
    """What one connection, one address and the whole process may ask of the server.

    Over a limit a request is refused, never queued: the sizes and timeouts answer 4xx and close;
    the capacity caps (connections, streams, in-flight work, loop lag) answer a fast **503 with
    ``Retry-After``**. The sizes follow the common front-line defaults (nginx
    ``large_client_header_buffers`` 8 KiB for a request line, Node's 64 KiB of headers…); the
    timeouts are enforced by one periodic sweep per server, so they are exact to within
    ``sweep_interval``.

    **Capacity defaults and why** (ephpm-lessons §5.5: bound admission, shed with 503 +
    Retry-After, count sheds; every cap is O(1) work at accept, at stream start and at close,
    nothing per request but one flag test):

    * ``max_connections`` (``None``: derived at start from ``RLIMIT_NOFILE``, the soft limit
      minus a tenth of it, at least 32, kept for files, the engine and the listening socket; 18,000
      with the 20,000 of our machines). Past it a new connection gets 503 and is closed: accept
      keeps working instead of failing on EMFILE.
    * ``max_connections_per_ip`` and ``max_streams_per_ip`` (``None``: a quarter of the
      process-wide caps, 4,500 and 4,050 here, 230 and 207 under the common 1,024-file limit),
      keyed on the TCP peer. Their job is to keep one address from taking the whole process
      (the single-source slowloris or stream flood); they cannot stop an attacker with many
      addresses, and lower fixed values would refuse legitimate crowds behind one address: a
      company's whole staff on one egress NAT, a carrier-grade NAT, an unlisted proxy. Lower
      them (``max_streams_per_ip=64``…) when every client has its own address.
    * ``per_ip_exempt`` = loopback. The per-address caps count the *peer*: behind a reverse
      proxy every connection is the proxy's, and a per-address cap on it would be a global cap.
      A proxy on loopback (Caddy, nginx on the same host) and local benchmarks (10,000 tabs from
      127.0.0.1) are therefore exempt by default; a proxy on another address must be listed here
      (the same addresses as the app's ``trusted_proxies``), and its own per-client limits do the
      job. Set ``per_ip_exempt=()`` to cap loopback too. ``max_connections`` and
      ``max_streams`` apply to every peer, exempt or not. With several workers each process
      counts its own connections, so an address may hold up to (workers) times the per-address caps.
    * ``max_streams`` (``None``: nine tenths of ``max_connections``), so streams can never take
      the last connections that page loads and actions need.
    * ``max_in_flight`` = 1024 requests whose answer the app still owes (its awaitables). At
      1,000 actions a second that allows each one second; past it a request gets 503 at once
      instead of joining an unbounded queue of tasks (ePHPm measured the waiting policy growing
      to 6 GB and wedging).
    * ``shed_after`` = 0.18 s: under overload, the longest a request waits for its answer, a 503
      included. Under CPU overload requests do not queue in the server but in the kernel: new
      connections in the listen queue (uvloop accepts one per loop turn, so the probe takes
      over the queue when it is not kept short) and requests on open connections behind long
      loop turns; ``TCP_INFO`` (Linux) says how long each waited unread. Shedding starts only
      for *sustained* overload: loop turns longer than a quarter of ``shed_after``, each
      carrying many requests, for a whole ``shed_after``; or a whole ``shed_after`` window in
      which every sampled request or connection (four at least) waited more than half of it
      (CoDel's rule, with a fixed target). Then every request that waited more than a quarter
      of ``shed_after`` is answered 503 when it is read (a new connection's, before the app sees
      it; those still in the listen queue at once, on the raw socket), so turns stay about that
      long and what is served waited at most that. A loop late by twice ``shed_after`` twice in
      a row sheds every new request until it is on time. A single pause, a GC pass or one slow
      handler, sheds nothing: the bench measured generation-1 collections longer than this
      (bench/RESULTS.md), and what queued behind one is served a moment later. A 503 costs a
      small fraction of a real request, so the queues drain. Issue 21 asked accepted work's p99
      within 250 ms: that is this default. ``None`` turns it off.
    * ``shed_exempt``: the core's ``/_health``, ``/_ready`` and ``/metrics`` are answered even
      when shedding: an overloaded replica is alive, and a readiness probe failing on every
      overloaded replica at once would empty the service (ephpm-lessons §0.7).
    """

    #: Period of the timeout sweep, in seconds (one timer per server, none per connection); not a
    #: ``[server]`` key: it is the precision of the timeouts, and its name is the App's.
    sweep_interval: float = setting(1.0, unit="s", low=0, above=True, section="")

    def exempting(self, addresses: Iterable[str]) -> ServerLimits:
        """These limits with ``addresses`` (a trusted proxy's) added to ``per_ip_exempt``."""
        extra = tuple(a for a in addresses if a not in self.per_ip_exempt)
        return replace(self, per_ip_exempt=(*self.per_ip_exempt, *extra)) if extra else self

    @property
    def max_head(self) -> int:
        """Raw bytes a request head may take before it is refused, whatever its shape."""
        return self.max_request_line + self.max_header_bytes + 1024


def derive_max_connections(fd_soft_limit: int) -> int:
    """The default process-wide connection cap for a soft ``RLIMIT_NOFILE``: a tenth (at least 32)
    is kept for everything else the process opens. A negative limit (``RLIM_INFINITY``) is taken
    as 1,048,576, the usual hard limit."""
    fds = fd_soft_limit if fd_soft_limit > 0 else 1 << 20
    return max(1, fds - max(32, fds // 10))


def derive_max_streams(max_connections: int) -> int:
    """The default stream cap: nine tenths of the connections, so requests always find a few."""
    return max(1, max_connections - max(1, max_connections // 10))


def derive_per_ip(process_cap: int) -> int:
    """The default per-address cap: a quarter of the process-wide one."""
    return max(1, process_cap // 4)


# --- status lines --------------------------------------------------------------------------------


def phrase(status: int) -> str:
    """The reason phrase of ``status`` (empty when it has none)."""
    found = STATUS_PHRASES.get(status)
    if found is None:
        try:
            found = HTTPStatus(status).phrase
        except ValueError:
            found = ""
    return found


#: Index = status code; precomputed for 100-599 so a response costs no formatting of its first line.
_STATUS_LINES: list[str] = [""] * 100 + [f"HTTP/1.1 {code} {phrase(code)}\r\n" for code in range(100, 600)]


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
#: hit costs a tuple and a lookup instead of validating and encoding again (faster, measured);
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
    return encode_response(status, _TEXT_PLAIN, phrase(status).encode(), connection=CONNECTION_CLOSE)


#: Prebuilt refusals, each with ``connection: close`` (invariant 3): the server writes them without
#: asking the application. 414 for a too-long URL, 431 for too many or too large headers, 501 for a
#: transfer coding other than chunked (RFC 9112 §6.1), 505 for a version other than 1.0 or 1.1.
ERRORS: dict[int, bytes] = {code: _error(code) for code in (400, 408, 413, 414, 417, 431, 500, 501, 505)}


def internal_error(*, head_only: bool = False, connection: str = "") -> bytes:
    """The plain 500 written when the application failed: the phrase only, nothing leaked."""
    return encode_response(500, _TEXT_PLAIN, b"Internal Server Error", head_only=head_only, connection=connection)


def service_unavailable(retry_after: int, *, head_only: bool = False, connection: str = "") -> bytes:
    """The 503 of a capacity cap or of load shedding: ``Retry-After`` tells the client when to come back."""
    headers = [*_TEXT_PLAIN, ("retry-after", str(retry_after))]
    return encode_response(503, headers, b"Service Unavailable", head_only=head_only, connection=connection)


# --- request target --------------------------------------------------------------------------------


#: target -> (path, query); pages and actions repeat their URLs. Cleared when full.
_TARGETS: dict[bytes, tuple[str, str]] = {}
_TARGETS_MAX = 1024


def split_target(target: bytes) -> tuple[str, str]:
    """Split a request target into (percent-decoded path, raw query string).

    Accepts the origin form (``/a/b?q``), the absolute form (``http://host/a?q``, whose authority
    :func:`authority_of` gives: RFC 9112 §3.2.2 makes it win over ``Host``) and ``*``. Raises
    ValueError for anything else, and for a path that decodes to a NUL (``%00``): no route holds
    one, and a NUL handed on to a file system or a C library ends the string early. The parser
    has already refused bytes outside ASCII, so latin-1 never fails.
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
        if "\0" in text:
            raise ValueError("a NUL (%00) in the request path")
    return text, query.decode("latin-1")


def authority_of(target: bytes) -> str | None:
    """The authority (``host[:port]``) of an absolute-form request target, None for any other form.

    RFC 9112 §3.2.2: a server MUST ignore ``Host`` and use this instead. Raises ValueError when it
    is empty, carries user information (``user@host``), or is not a valid ``uri-host [":" port]``.
    """
    if target[:1] == b"/" or target == b"*":
        return None
    _, sep, rest = target.partition(b"://")
    if not sep:
        return None  # split_target refuses it
    end = len(rest)
    for mark in (b"/", b"?", b"#"):
        at = rest.find(mark)
        if 0 <= at < end:
            end = at
    authority = rest[:end].decode("latin-1")
    if not authority or "@" in authority or normalize_host(authority) is None:
        raise ValueError(f"invalid authority in the request target {target[:64]!r}")
    return authority


def content_length(value: str) -> int:
    """The body size a ``Content-Length`` value declares (RFC 9110 §8.6: ``1*DIGIT``).

    Raises ValueError for anything but ASCII digits, and for more than 20 of them, leading zeros
    included, as h11 refuses them (its ``CONTENT_LENGTH_MAX_DIGITS``): no body that large is
    served, and a long run of digits is a probe, not a client (``int()`` of thousands of digits
    is quadratic and raises past 4,300 of them: refused here first, never a 500).
    """
    if not value or len(value) > 20 or not value.isascii() or not value.isdigit():
        raise ValueError(f"invalid Content-Length {value[:32]!r}")
    return int(value)


# --- chunked request bodies -----------------------------------------------------------------------

#: A chunk-size line as h11 reads it (its ``chunk_header``): 1-20 hex digits (len(str(2**64)) is
#: 20), any extension, optional trailing whitespace, CRLF.
_CHUNK_LINE = re.compile(rb"([0-9A-Fa-f]{1,20})(?:;[^\r\n]*)?[ \t]*\r\n")
_SIZE, _DATA, _DATA_END, _TRAILER, _DONE = range(5)


class ChunkedBody:
    """Finds where a chunked request body ends in the bytes that arrive, checking each size line.

    It frames the body alongside the real parser (httptools), which decodes it: its job is to
    be at least as strict as h11, which refuses a size of more than 20 hex digits (llhttp takes
    any run of leading zeros), and to say how many bytes of a read belong to the body, so the
    next request of a pipeline starts where it should. Pure: bytes in, counts out.
    """

    __slots__ = ("_left", "_line", "_max_line", "_phase")

    def __init__(self, max_line: int = 8 * _KIB) -> None:
        self._phase = _SIZE
        self._left = 0  # bytes of chunk data (or of its CRLF) still to come
        self._line = b""  # a size or trailer line begun in an earlier read
        self._max_line = max_line

    @property
    def is_done(self) -> bool:
        return self._phase == _DONE

    def scan(self, data: bytes) -> int:
        """How many bytes at the start of ``data`` belong to the body (all of them until its end).

        Raises ValueError for a size line h11 refuses or a size or trailer line longer than
        ``max_line``.
        """
        pos, size = 0, len(data)
        while pos < size:
            phase = self._phase
            if phase in (_DATA, _DATA_END):
                take = min(self._left, size - pos)
                pos += take
                self._left -= take
                if not self._left:
                    if phase == _DATA:
                        self._phase, self._left = _DATA_END, 2
                    else:
                        self._phase = _SIZE
                continue
            if phase == _DONE:
                return pos
            eol = data.find(b"\n", pos)
            if eol < 0:
                self._line += data[pos:]
                if len(self._line) > self._max_line:
                    raise ValueError("a chunk-size or trailer line that never ends")
                return size
            line = self._line + data[pos : eol + 1] if self._line else data[pos : eol + 1]
            self._line = b""
            pos = eol + 1
            if len(line) > self._max_line:
                raise ValueError("a chunk-size or trailer line that never ends")
            if phase == _TRAILER:
                if line == b"\r\n":
                    self._phase = _DONE
                    return pos
                continue
            match = _CHUNK_LINE.fullmatch(line)
            if match is None:
                raise ValueError(f"invalid chunk-size line {line[:40]!r}")
            self._left = int(match.group(1), 16)
            self._phase = _DATA if self._left else _TRAILER
        return pos
