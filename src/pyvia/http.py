"""Transport-agnostic HTTP values shared by the core and every front end.

A front end (the native server, the ASGI adapter, the test client) turns what it reads into a
:class:`Request`, hands it to ``App.handle`` and writes back what it gets:

* a :class:`Response` — status, headers and a complete body, written in one go;
* a :class:`StreamResponse` — the head is written, then ``open(sink)`` is called with a
  :class:`StreamSink` the core writes events into directly (no task per stream, DESIGN.md
  hot-path rules) until either side closes it;
* an awaitable resolving to one of the two, when user code is asynchronous.

Nothing here does I/O.
"""

from __future__ import annotations

import contextlib
import re
import sys
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from http.cookies import SimpleCookie
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Protocol, TypeVar
from urllib.parse import parse_qsl

if TYPE_CHECKING:
    from pyvia.forms import Form

__all__ = [
    "STATUS_PHRASES",
    "HandleResult",
    "Headers",
    "Request",
    "Response",
    "SharedFields",
    "StreamResponse",
    "StreamSink",
]


class Headers:
    """Request headers: names lower-cased once, looked up case-insensitively.

    Repeated headers are kept in order; :meth:`get` returns the last one, :meth:`get_all`
    all of them (as ``Cookie`` and ``Accept-Encoding`` may repeat). A tab keeps its latest
    request for as long as it is open, so the usual request, where no name repeats, is held as
    one dict whose names are shared with every other request's (a browser's ~15 headers: ~1.9 KB
    less than a list of pairs beside the dict, each with its own copy of the names), and once
    its stream is open as two tuples of shared strings (:meth:`pack`), made a dict again when
    next asked.
    """

    __slots__ = ("_items", "_map", "_packed", "_packed_names")

    def __init__(self, items: list[tuple[str, str]] | None = None) -> None:
        #: Every (name, value) in order, only when some name repeats (None: ``_map`` has them all).
        self._items: list[tuple[str, str]] | None = None
        self._map: dict[str, str] = {}
        #: Not None: the fields' values, in the order of ``_packed_names`` (``_map`` is empty
        #: until they are asked for).
        self._packed: tuple[str, ...] | None = None
        self._packed_names: tuple[str, ...] = ()
        if items:
            fields = self._map = {name.lower(): value for name, value in items}
            if len(fields) != len(items):
                self._items = [(name.lower(), value) for name, value in items]

    @classmethod
    def from_raw(cls, raw: list[tuple[bytes, bytes]]) -> Headers:
        """Build from a parser's (name, value) byte pairs in one pass: the native server's hot path.

        Bytes are decoded as latin-1 (RFC 9110 §5.5: field values are octets; latin-1 keeps them all).
        """
        headers = cls.__new__(cls)
        names = _NAMES
        fields: dict[str, str] = {}
        for name, value in raw:
            fields[names.get(name) or _name_of(name)] = value.decode("latin-1")
        headers._map = fields
        headers._items = None
        headers._packed = None
        headers._packed_names = ()
        if len(fields) != len(raw):  # a name repeats (rare): keep every field, in order
            headers._items = _all_fields(raw)
        return headers

    @classmethod
    def from_lowered(cls, pairs: Iterable[Sequence[str]]) -> Headers:
        """Build from (name, value) pairs whose names are lower-cased already (another worker's
        :class:`Headers`, sent as JSON)."""
        headers = cls.__new__(cls)
        items = [(name, value) for name, value in pairs]
        headers._map = dict(items)
        headers._items = items if len(headers._map) != len(items) else None
        headers._packed = None
        headers._packed_names = ()
        return headers

    def pack(self, shared: SharedFields) -> None:
        """Hold the fields as shared strings until they are next asked for.

        A tab keeps its latest request, mostly unread, for as long as it is open, and tabs of one
        browser send most of their headers alike: the names and most values become the ones
        ``shared`` holds, and what is the tab's own is two tuples and its own values (its
        ``Cookie``). Not done when a name repeats.
        """
        fields = self._map
        if self._items is not None or not fields:
            return
        self._packed_names = shared.names(tuple(fields))
        known = shared.known.get  # the usual value is known: one C call, not a method's
        share = shared.value
        own = _OWN_VALUES
        packed = []
        for name, value in fields.items():  # a loop: a comprehension would make the three cells
            packed.append(value if name in own else known(value) or share(value))
        self._packed = tuple(packed)
        self._map = _PACKED  # shared and never written: every write unpacks first

    def _unpack(self) -> dict[str, str]:
        values = self._packed
        if values is not None:
            self._packed = None
            self._map = dict(zip(self._packed_names, values, strict=True))
            self._packed_names = ()
        return self._map

    def add(self, name: str, value: str) -> None:
        name = name.lower()
        fields = self._unpack()
        items = self._items
        if items is None and name in fields:  # the first repeat: from now on, every field in order
            items = self._items = list(fields.items())
        if items is not None:
            items.append((name, value))
        fields[name] = value

    def repeats_a_name(self) -> bool:
        """Whether some name comes more than once (rare: the checks for a repeated field start here)."""
        return self._items is not None

    def get(self, name: str, default: str | None = None) -> str | None:
        """The last value of header ``name`` (any case: ``"User-Agent"`` or ``"user-agent"``)."""
        value = self._map.get(name)
        if value is None:
            if self._packed is not None:
                self._unpack()
                return self.get(name, default)
            if name in _LOWER_NAMES:  # the names pyvia asks for: lower-case already, no lower() call
                return default
            value = self._map.get(name.lower())
            if value is None:
                return default
        return value

    def get_lower(self, name: str) -> str | None:
        """:meth:`get` for a name in lower case already, in one dict lookup: pyvia's own lookups on
        every request."""
        value = self._map.get(name)
        if value is None and self._packed is not None:
            return self._unpack().get(name)
        return value

    def get_all(self, name: str) -> list[str]:
        fields = self._map if self._packed is None else self._unpack()
        value = fields.get(name)
        if value is None and name not in _LOWER_NAMES:
            name = name.lower()
            value = fields.get(name)
        if value is None:
            return []
        if self._items is None:  # no name repeats (the usual request): no scan
            return [value]
        values = []
        for each, text in self._items:  # a loop: a comprehension over ``name`` makes it a cell
            if each == name:
                values.append(text)
        return values

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lower() in self._unpack()

    def __iter__(self) -> Iterator[tuple[str, str]]:
        return iter(self._unpack().items() if self._items is None else self._items)

    def __len__(self) -> int:
        return len(self._unpack() if self._items is None else self._items)

    def __repr__(self) -> str:
        return f"Headers({list(self)!r})"


#: The empty ``_map`` of every packed :class:`Headers`: one object, not a dict per tab.
_PACKED: dict[str, str] = {}

#: Fields whose values are a visitor's own (sharing them would only fill :class:`SharedFields`).
_OWN_VALUES = frozenset({"cookie", "authorization", "proxy-authorization", "x-forwarded-for", "x-real-ip", "forwarded"})


class SharedFields:
    """The header names and values that open tabs' packed requests share, one object each.

    An app's browsers send the same ``User-Agent``, ``Accept``, ``sec-ch-ua``... with every tab:
    kept once here, each tab's :class:`Headers` points at them. Bounded: values over
    ``longest`` characters are not kept, and the table starts again when it holds ``kept``
    (what tabs packed before keep their strings; only the sharing with later tabs is lost).
    """

    __slots__ = ("_names", "kept", "known", "longest")

    def __init__(self, kept: int = 4096, longest: int = 512) -> None:
        #: Every value kept, to itself.
        self.known: dict[str, str] = {}
        self._names: dict[tuple[str, ...], tuple[str, ...]] = {}
        self.kept = kept
        self.longest = longest

    def value(self, value: str) -> str:
        values = self.known
        shared = values.get(value)
        if shared is None:
            if len(value) > self.longest:
                return value
            if len(values) >= self.kept:
                values.clear()
            shared = values[value] = value
        return shared

    def names(self, names: tuple[str, ...]) -> tuple[str, ...]:
        kept = self._names
        shared = kept.get(names)
        if shared is None:
            if len(kept) >= self.kept:
                kept.clear()
            shared = kept[names] = names
        return shared

    def __len__(self) -> int:
        return len(self.known)


#: Raw header names as parsers hand them, to their lower-cased ``str``: decoded once and shared
#: by every request that sends them. Browsers' names to begin with; others are learned, up to
#: ``_NAMES_KEPT`` in all (a client inventing names cannot grow it: past that, each is decoded).
_NAMES: dict[bytes, str] = {}
_NAMES_KEPT = 1024


def _all_fields(raw: list[tuple[bytes, bytes]]) -> list[tuple[str, str]]:
    """Every field of a head in which a name repeats, in order (apart from ``from_raw``, whose
    names would be a cell for this comprehension)."""
    return [(_NAMES.get(name) or _name_of(name), value.decode("latin-1")) for name, value in raw]


def _name_of(raw: bytes) -> str:
    name = raw.decode("latin-1").lower()
    if len(_NAMES) < _NAMES_KEPT and len(raw) <= 64:
        name = _NAMES[raw] = sys.intern(name)  # one object for every spelling of it
    return name


def _learn_browsers_names() -> None:
    for name in _BROWSERS_NAMES:
        for spelling in {name, name.lower(), name.title()}:
            _name_of(spelling.encode("latin-1"))


_BROWSERS_NAMES = (
    *("Host", "Connection", "Cache-Control", "Pragma", "Upgrade-Insecure-Requests", "User-Agent"),
    *("Accept", "Accept-Encoding", "Accept-Language", "Cookie", "Referer", "Origin", "Priority"),
    *("Content-Type", "Content-Length", "Transfer-Encoding", "Last-Event-ID", "Datastar-Request"),
    *("Sec-Fetch-Site", "Sec-Fetch-Mode", "Sec-Fetch-User", "Sec-Fetch-Dest", "If-None-Match"),
    *("sec-ch-ua", "sec-ch-ua-mobile", "sec-ch-ua-platform", "If-Modified-Since", "DNT", "TE"),
    *("X-Forwarded-For", "X-Forwarded-Proto", "X-Forwarded-Host", "X-Real-IP"),
)
_learn_browsers_names()
#: Lower-case names a lookup that misses need not lower again (the ones pyvia itself asks for).
_LOWER_NAMES = frozenset([*(name.lower() for name in _BROWSERS_NAMES), "forwarded", "expect", "upgrade", "via-click"])


#: The path parameters of a route that has none: one object, never written.
NO_PATH_PARAMS: Mapping[str, str] = MappingProxyType({})


@dataclass(slots=True)
class Request:
    """One HTTP request as the core sees it. ``path`` is percent-decoded, without the query."""

    method: str
    path: str
    query_string: str = ""
    headers: Headers = field(default_factory=Headers)
    body: bytes = b""
    client: str = ""
    scheme: str = "http"
    #: Set by the dispatcher: path parameters of the matched route (one shared empty mapping for
    #: a route without any: a tab keeps its page's request).
    path_params: Mapping[str, str] = field(default_factory=dict)
    #: :attr:`state`, made when first asked for (most requests never are).
    _state: dict[str, object] | None = None
    #: What the request is to the core: "page", "action", "stream", "revival", "route", "asset".
    kind: str = ""
    #: Set by the native server on a plain HTTP/1.1 connection: ``await transfer(send)`` offers
    #: the connection to another worker of this machine (:mod:`pyvia.cluster.passing`);
    #: ``send(fd)`` returns None (not sent) or an awaitable of whether the other worker took it.
    #: True: it answers this request, and this process writes nothing more on the connection.
    transfer: Callable[[Callable[[int], Awaitable[bool] | None]], Awaitable[bool]] | None = None
    _cookies: dict[str, str] | None = None
    _query: dict[str, str] | None = None
    _content_type: str | None = None
    #: The app that read this request's session last and what it found (``Sessions.of``).
    session_cache: tuple[object, str | None] | None = None
    # What the core works out about the request, once (never in ``state``, which is the user's):
    #: the Datastar signals its body carried, parsed (``Actions.signals_of``, or another worker's);
    signals: dict[str, Any] | None = None
    #: its form, parsed (its uploads are closed once it is answered);
    form: Form | None = None
    #: an action's cheap checks before parsing passed (``Actions.refuse_early``);
    checked: bool = False
    #: an action sent here by the worker that received it, or sent on: not relayed again;
    relayed: bool = False
    #: a page view that began its session (the session-scoped signals are new too).
    new_session: bool = False

    @property
    def state(self) -> dict[str, object]:
        """Free-form data middleware attaches for the handler (e.g. the logged-in user)."""
        state = self._state
        if state is None:
            state = self._state = {}
        return state

    @state.setter
    def state(self, value: dict[str, object]) -> None:
        self._state = value

    @property
    def state_if_made(self) -> dict[str, object] | None:
        """:attr:`state` if anything asked for it, else None (and none is made)."""
        return self._state

    def forget_parsed(self) -> None:
        """Let go of what was parsed from the headers and the query (parsed again if asked)."""
        self._cookies = None
        self._query = None
        self.session_cache = None

    @property
    def cookies(self) -> dict[str, str]:
        if self._cookies is None:
            self._cookies = parse_cookies(self.headers.get_all("cookie"))
        return self._cookies

    @property
    def query(self) -> dict[str, str]:
        """Query parameters (the last value of a repeated name wins)."""
        if self._query is None:
            self._query = dict(parse_qsl(self.query_string, keep_blank_values=True))
        return self._query

    @property
    def content_type(self) -> str:
        """The media type, lower-cased, without parameters (read once: an action asks three times)."""
        content_type = self._content_type
        if content_type is None:
            raw = self.headers.get_lower("content-type") or ""
            content_type = _MEDIA_TYPES.get(raw)
            if content_type is None:
                content_type = raw.split(";", 1)[0].strip().lower()
                _keep(_MEDIA_TYPES, raw, content_type)
            self._content_type = content_type
        return content_type


#: Pure parses of short header values a browser repeats with every request (its ``Cookie``, its
#: ``Content-Type``): worked out once, at most ``_PARSED_KEPT`` of each (cleared when full).
_MEDIA_TYPES: dict[str, str] = {}
_COOKIES: dict[str, dict[str, str]] = {}
_PARSED_KEPT = 4096
_PARSED_LENGTH = 512
_Parsed = TypeVar("_Parsed")


def _keep(cache: dict[str, _Parsed], raw: str, parsed: _Parsed) -> None:
    if len(raw) <= _PARSED_LENGTH:
        if len(cache) >= _PARSED_KEPT:
            cache.clear()
        cache[raw] = parsed


def parse_cookies(values: list[str]) -> dict[str, str]:
    """Parse ``Cookie`` headers leniently: a malformed pair is skipped, never an error."""
    if len(values) == 1:  # one header, as HTTP/1.1 sends: its parse is kept (a copy is returned)
        known = _COOKIES.get(values[0])
        if known is None:
            known = _parse_cookies(values)
            _keep(_COOKIES, values[0], known)
        return dict(known)
    return _parse_cookies(values)


def _parse_cookies(values: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for header in values:
        at, end = 0, len(header)
        while at < end:
            semi = header.find(";", at)
            if semi < 0:
                semi = end
            eq = header.find("=", at, semi)
            if eq < 0:  # a pair without '=': skipped
                at = semi + 1
                continue
            name = header[at:eq].strip()
            value = header[eq + 1 : semi].strip()
            if value[:1] == '"':  # quoted: it may hold ';' (a browser sends back what it was given)
                quoted = _QUOTED.match(header, header.index('"', eq))
                if quoted is not None:
                    value = _ESCAPE.sub(_unescape, quoted.group(1))
                    semi = header.find(";", quoted.end())
                    if semi < 0:
                        semi = end
            if not value.isascii():  # the UTF-8 bytes of text, read as latin-1 (RFC 9110 §5.5)
                with contextlib.suppress(UnicodeError):
                    value = value.encode("latin-1").decode("utf-8")
            if name:
                out.setdefault(name, value)
            at = semi + 1
    return out


#: A quoted cookie value (no backtracking: each character is matched once).
_QUOTED = re.compile(r'"((?:[^"\\]|\\.)*)"', re.DOTALL)
#: The escapes ``SimpleCookie`` writes in a quoted value: ``\ooo`` for a byte, ``\x`` for a character.
_ESCAPE = re.compile(r"\\(?:([0-3][0-7][0-7])|(.))", re.DOTALL)


def _unescape(match: re.Match[str]) -> str:
    octal, char = match.groups()
    return chr(int(octal, 8)) if octal is not None else char


@dataclass(slots=True)
class Response:
    """A complete response. ``headers`` are (name, value) pairs written as given."""

    status: int = 200
    headers: list[tuple[str, str]] = field(default_factory=list)
    body: bytes = b""

    @classmethod
    def text(cls, body: str, status: int = 200, headers: list[tuple[str, str]] | None = None) -> Response:
        return cls(status, [("content-type", "text/plain; charset=utf-8"), *(headers or [])], body.encode())

    @classmethod
    def html(cls, body: str, status: int = 200, headers: list[tuple[str, str]] | None = None) -> Response:
        return cls(status, [("content-type", "text/html; charset=utf-8"), *(headers or [])], body.encode())

    @classmethod
    def json(cls, data: object, status: int = 200, headers: list[tuple[str, str]] | None = None) -> Response:
        import orjson

        return cls(status, [("content-type", "application/json"), *(headers or [])], orjson.dumps(data))

    def set_cookie(
        self,
        name: str,
        value: str,
        *,
        max_age: int | None = None,
        path: str = "/",
        secure: bool = False,
        httponly: bool = True,
        samesite: str = "Lax",
    ) -> None:
        self.headers.append(
            (
                "set-cookie",
                format_cookie(
                    name, value, max_age=max_age, path=path, secure=secure, httponly=httponly, samesite=samesite
                ),
            )
        )


def format_cookie(
    name: str,
    value: str,
    *,
    max_age: int | None = None,
    path: str = "/",
    secure: bool = False,
    httponly: bool = True,
    samesite: str | None = "Lax",
) -> str:
    cookie: SimpleCookie = SimpleCookie()
    # Any text: its UTF-8 bytes, which SimpleCookie quotes with octal escapes where a byte is not a
    # cookie octet (a quote, ';', '\\', space, non-ASCII), so the header is ASCII whatever the value
    # (U+2028 or '李' would not even fit in latin-1). ``parse_cookies`` undoes both.
    cookie[name] = value.encode("utf-8", "surrogatepass").decode("latin-1")
    morsel = cookie[name]
    morsel["path"] = path
    if max_age is not None:
        morsel["max-age"] = str(max_age)
    if secure:
        morsel["secure"] = True
    if httponly:
        morsel["httponly"] = True
    if samesite:
        morsel["samesite"] = samesite
    return morsel.OutputString()


class StreamSink(Protocol):
    """Where a stream's bytes go. Implemented by each front end."""

    def write(self, data: bytes) -> None:
        """Queue ``data`` (one whole event) for sending; never blocks."""

    def close(self) -> None:
        """End the response (the front end finishes the body and may keep the connection)."""

    @property
    def buffered(self) -> int:
        """Bytes written but not yet handed to the kernel: the slow-client signal."""

    @property
    def is_closed(self) -> bool: ...


class StreamResponse:
    """A long-lived response (Server-Sent Events).

    The front end writes the head, then calls :meth:`open` with its sink. When the peer goes
    away it calls :meth:`closed` exactly once (unless the core closed the sink first, in
    which case it may still call it; the callbacks must be idempotent).
    """

    __slots__ = ("headers", "on_close", "on_open", "status")

    def __init__(
        self,
        headers: list[tuple[str, str]],
        on_open: Callable[[StreamSink], None],
        on_close: Callable[[], None],
        status: int = 200,
    ) -> None:
        self.status = status
        self.headers = headers
        self.on_open = on_open
        self.on_close = on_close

    def open(self, sink: StreamSink) -> None:
        self.on_open(sink)

    def closed(self) -> None:
        self.on_close()


HandleResult = Response | StreamResponse | Awaitable[Response | StreamResponse]

STATUS_PHRASES: dict[int, str] = {
    100: "Continue",
    200: "OK",
    204: "No Content",
    301: "Moved Permanently",
    302: "Found",
    303: "See Other",
    304: "Not Modified",
    307: "Temporary Redirect",
    400: "Bad Request",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    408: "Request Timeout",
    411: "Length Required",
    413: "Content Too Large",
    414: "URI Too Long",
    417: "Expectation Failed",
    429: "Too Many Requests",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    501: "Not Implemented",
    503: "Service Unavailable",
    504: "Gateway Timeout",
    505: "HTTP Version Not Supported",
}
