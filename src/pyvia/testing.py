"""Drive an App like a browser would, in-process, without sockets.

::

    client = TestClient(app)
    tab = client.open("/counter")      # page view + stream connect
    tab.click("#inc")                  # posts the element's @post action with the tab's signals
    assert tab.signals["count"] == 1
    client.clock.advance(60)           # timeouts run on a manual clock

Every call is plain (no ``await``): the client owns an event loop and runs async handlers on it.
Exceptions from user code re-raise in the test unless ``raise_server_exceptions=False``.
"""

from __future__ import annotations

import asyncio
import html as html_lib
import inspect
import re
import time
import zlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Any
from urllib.parse import unquote, urlencode

import brotli
import orjson
import zstandard

from pyvia import protocol
from pyvia.app import App
from pyvia.clock import ManualClock
from pyvia.context import Context
from pyvia.errors import UsageError
from pyvia.http import Headers, Request, Response, StreamResponse
from pyvia.overrides import override
from pyvia.render import VIEW_ID

__all__ = ["Event", "Tab", "TestClient"]

_ORIGIN = "http://testserver"


@dataclass(slots=True)
class Event:
    """One parsed Datastar event."""

    type: str
    selector: str | None = None
    mode: str = "outer"
    elements: str = ""
    signals: dict[str, Any] = field(default_factory=dict)
    #: The event's ``id:`` field, if it has one (a tab's frames end with an event that only has one).
    id: str | None = None

    @property
    def script(self) -> str | None:
        """The JavaScript of an execute-script event, else None."""
        m = re.fullmatch(r'<script data-effect="el.remove\(\)">(.*)</script>', self.elements, re.DOTALL)
        return m.group(1) if m and self.selector == "body" and self.mode == "append" else None


def parse_events(data: bytes) -> tuple[list[Event], bytes]:
    """Parse complete SSE events from ``data``; return them and the unparsed rest."""
    events = []
    text = data.decode()
    *complete, rest = text.split("\n\n")
    for block in complete:
        lines = [line for line in block.split("\n") if line and not line.startswith(":")]
        if not lines:
            continue
        ev = Event(type="")
        element_lines = []
        for line in lines:
            key, _, value = line.partition(": ")
            if key == "event":
                ev.type = value
            elif key == "id":
                ev.id = value
            elif key == "data":
                dkey, _, dval = value.partition(" ")
                if dkey == "selector":
                    ev.selector = dval
                elif dkey == "mode":
                    ev.mode = dval
                elif dkey == "elements":
                    element_lines.append(dval)
                elif dkey == "signals":
                    ev.signals = orjson.loads(dval)
        ev.elements = "\n".join(element_lines)
        events.append(ev)
    return events, rest.encode()


class _Decoder:
    """Decodes a compressed stream write by write, as a browser does (zstd may hold many frames)."""

    def __init__(self, coding: str) -> None:
        self.coding = coding
        self.wire_bytes = 0
        self._obj: Any = self._new()

    def _new(self) -> Any:
        if self.coding == "zstd":
            return zstandard.ZstdDecompressor().decompressobj()
        if self.coding == "br":
            return brotli.Decompressor()
        if self.coding == "gzip":
            return zlib.decompressobj(wbits=31)
        return None

    def decode(self, data: bytes) -> bytes:
        self.wire_bytes += len(data)
        if self._obj is None:
            return data
        if self.coding == "br":
            decoded: bytes = self._obj.process(data)
            return decoded
        out = b""
        while data:
            out += self._obj.decompress(data)
            if not self._obj.eof:
                break
            data = self._obj.unused_data
            self._obj = self._new()
        return out


def _apps(app: App) -> Iterator[App]:
    """An app and the apps mounted in it, at any depth."""
    yield app
    for _, mounted in app.mounts:
        yield from _apps(mounted)


def _forget_tabs(app: App) -> None:
    for _, mounted in app.mounts:
        _forget_tabs(mounted)
    for ctx in list(app.contexts.values()):
        app.destroy(ctx)


def decoded_body(response: Response) -> bytes:
    """The body as the browser sees it, whatever its ``Content-Encoding``."""
    coding = dict(response.headers).get("content-encoding", "identity")
    decoder = _Decoder(coding)
    body = decoder.decode(response.body)
    if coding == "zstd" and not body and response.body:
        body = zstandard.ZstdDecompressor().decompress(response.body, max_output_size=64 << 20)
    return body


class _Sink:
    __slots__ = ("_buffer", "_decoder", "_unread", "closed", "paused", "tab")

    def __init__(self, tab: Tab, coding: str = "identity") -> None:
        self.tab = tab
        self._buffer = b""
        self._decoder = _Decoder(coding)
        self._unread: list[bytes] = []
        self.closed = False
        self.paused = False

    def write(self, data: bytes) -> None:
        if self.closed:
            raise RuntimeError("write to a closed stream")
        self.tab.writes += 1
        self.tab.wire_bytes += len(data)
        if self.paused:
            self._unread.append(data)
            return
        self._feed(data)

    def _feed(self, data: bytes) -> None:
        plain = self._decoder.decode(data)
        if plain and self._decoder.coding != "identity" and not plain.endswith(b"\n\n"):
            raise AssertionError("a compressed event did not decode whole as soon as it was written")
        events, self._buffer = parse_events(self._buffer + plain)
        for ev in events:
            if ev.id is not None:
                self.tab.last_event_id = ev.id or None  # as Datastar keeps it for its retries
                self.tab.event_ids.append(ev.id)
            if ev.type:
                self.tab._receive(ev)

    def resume(self) -> None:
        self.paused = False
        unread, self._unread = self._unread, []
        for data in unread:
            self._feed(data)

    def close(self) -> None:
        self.closed = True
        self.tab._stream_ended(self)

    def abort(self) -> None:
        """The server cut the stream off (a reader too far behind): what was unread is lost."""
        self._unread = []
        self.close()

    @property
    def buffered(self) -> int:
        """Bytes written but not read: what a socket would hold for a tab that stopped reading."""
        return sum(map(len, self._unread))

    @property
    def is_closed(self) -> bool:
        return self.closed


class _Element:
    __slots__ = ("attrs", "tag")

    def __init__(self, tag: str, attrs: dict[str, str]) -> None:
        self.tag = tag
        self.attrs = attrs

    def __repr__(self) -> str:
        return f"<{self.tag} {self.attrs}>"


class _Collector(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.elements: list[_Element] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements.append(_Element(tag, {k: v or "" for k, v in attrs}))


_SIMPLE = re.compile(r"([a-zA-Z][\w-]*)?((?:[#.][\w-]+|\[[^\]]+\])*)\Z")
_PART = re.compile(r"#([\w-]+)|\.([\w-]+)|\[([^\]=]+)(?:=['\"]?([^\]'\"]*)['\"]?)?\]")


def select(markup: str, selector: str) -> list[_Element]:
    """Elements of ``markup`` matching a simple selector: ``tag``, ``#id``, ``.cls``, ``[a=b]`` combined."""
    m = _SIMPLE.match(selector.strip())
    if not m:
        raise ValueError(f"unsupported selector {selector!r}; use tag, #id, .class and [attr=value] together")
    tag, rest = m.group(1), m.group(2)
    collector = _Collector()
    collector.feed(markup)
    found = []
    for el in collector.elements:
        if tag and el.tag != tag.lower():
            continue
        if all(_part_matches(el, *pm.groups()) for pm in _PART.finditer(rest)):
            found.append(el)
    return found


def _part_matches(el: _Element, ident: str | None, cls: str | None, attr: str | None, value: str | None) -> bool:
    if ident is not None:
        return el.attrs.get("id") == ident
    if cls is not None:
        return cls in el.attrs.get("class", "").split()
    if attr is not None:
        return attr in el.attrs and (value is None or el.attrs[attr] == value)
    return True


_POST = re.compile(r"@post\(\s*['\"]([^'\"]+)['\"]")


class TestClient:
    """An in-process browser for one App, with a manual clock."""

    __test__ = False  # not a pytest test class

    def __init__(
        self,
        app: App,
        *,
        raise_server_exceptions: bool = True,
        origin: str = _ORIGIN,
        accept_encoding: str | None = None,
        settings: Mapping[str, Any] | None = None,
    ) -> None:
        """``settings`` replaces some of the app's options (``{"db_url": ...}``) for this client's
        run only: the app gets its own back at :meth:`close` (pyvia.overrides)."""
        self.app = app
        self._restore: Callable[[], None] | None = None
        #: Sent with every request, as a browser sends it (None: no header, so identity).
        self.accept_encoding = accept_encoding
        self._loop: asyncio.AbstractEventLoop | None = None
        self.origin = origin
        self.cookies: dict[str, str] = {}
        app.raise_server_exceptions = raise_server_exceptions
        # A second client on a running app is another browser: same clock, own cookies.
        self._owner = not isinstance(app.clock, ManualClock)
        if settings and not self._owner:
            raise UsageError("settings= on a second TestClient of a running app: give them to the first one")
        if self._owner:
            self.clock = ManualClock()
            if settings:
                self._restore = override(app, settings)
            try:
                app.start(self.clock, self.loop)
            except BaseException:
                self.loop.close()  # a refused start (a database that cannot open) leaves nothing open
                self._loop = None
                self._put_back()
                raise
            if app.persists_in_db:
                self.loop.run_until_complete(app.restore_from_db())
        else:
            assert isinstance(app.clock, ManualClock)
            self.clock = app.clock

    def __enter__(self) -> TestClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The loop async handlers run on, made on first use."""
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
        return self._loop

    def close(self) -> None:
        if self._owner:
            self.loop.run_until_complete(self.app.shutdown())
            _forget_tabs(self.app)  # as a process exit would: the next client starts clean
            self.app.clock = None
            self._put_back()
        if self._loop is not None:
            self._loop.close()
            self._loop = None

    def _put_back(self) -> None:
        """The app's own options again, after a run with ``settings``."""
        restore, self._restore = self._restore, None
        if restore is not None:
            restore()

    def settle(self, timeout: float = 5.0) -> None:
        """Run the app's background work (async views rendering, spawned tasks) until none is left,
        for at most ``timeout`` seconds of real time; the manual clock does not move."""
        deadline = time.monotonic() + timeout
        while self.app.background_tasks and time.monotonic() < deadline:
            self.loop.run_until_complete(
                asyncio.wait(list(self.app.background_tasks), timeout=deadline - time.monotonic())
            )
            self.clock.run_due()

    def _settle_renders(self, timeout: float = 5.0) -> None:
        """Let async views that are rendering finish, so a request's frames are all in when it returns."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and any(
            ctx.pending_frames is not None for app in _apps(self.app) for ctx in app.contexts.values()
        ):
            self.loop.run_until_complete(asyncio.sleep(0.001))
            self.clock.run_due()

    # --- plain requests ----------------------------------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        *,
        body: bytes = b"",
        json: Any = None,
        headers: dict[str, str] | None = None,
        cookies: bool = True,
    ) -> Response | StreamResponse:
        path, _, query = path.partition("?")
        if "%" in path:
            path = unquote(path)  # as the servers give the core its path: percent-decoded
        base = self.app.config.base_path
        if base != "/" and path.startswith(base):
            path = "/" + path[len(base) :]  # what a mounting front end or proxy does
        hdrs = Headers([("host", "testserver")])
        if json is not None:
            body = orjson.dumps(json)
            hdrs.add("content-type", "application/json")
        if method not in ("GET", "HEAD"):
            hdrs.add("origin", self.origin)
        for k, v in (headers or {}).items():
            hdrs.add(k, v)
        if self.accept_encoding is not None:
            hdrs.add("accept-encoding", self.accept_encoding)
        if cookies and self.cookies:
            hdrs.add("cookie", "; ".join(f"{k}={v}" for k, v in self.cookies.items()))
        req = Request(method=method, path=path, query_string=query, headers=hdrs, body=body, client="127.0.0.1")
        result = self.app.handle(req)
        if inspect.isawaitable(result):
            result = self.loop.run_until_complete(result)
        self.clock.run_due()
        self._settle_renders()
        for name, value in result.headers:
            if name.lower() == "set-cookie":
                cname, _, rest = value.partition("=")
                self.cookies[cname] = rest.split(";", 1)[0]
        return result

    def get(self, path: str, **kw: Any) -> Response:
        response = self.request("GET", path, **kw)
        assert isinstance(response, Response), "use client.open() for a page with its stream"
        return response

    def post(self, path: str, **kw: Any) -> Response:
        response = self.request("POST", path, **kw)
        assert isinstance(response, Response)
        return response

    def open(self, path: str) -> Tab:
        """Load a page and connect its stream, as a browser tab does."""
        response = self.get(path)
        if response.status != 200:
            raise AssertionError(f"GET {path} answered {response.status}: {response.body[:200]!r}")
        tab = Tab(self, path, response)
        tab.connect()
        return tab


class Tab:
    """One page loaded in the test client, with the events its stream received."""

    __test__ = False

    def __init__(self, client: TestClient, path: str, response: Response) -> None:
        self.client = client
        self.path = path
        self.page = decoded_body(response).decode()
        boot = select(self.page, "meta#via-boot")
        if len(boot) != 1:
            raise AssertionError("the page has no pyvia bootstrap (meta#via-boot)")
        self.signals: dict[str, Any] = orjson.loads(html_lib.unescape(boot[0].attrs["data-signals"]))
        self.id: str = self.signals[protocol.CONTEXT_SIGNAL]
        found = re.search(r"@get\('([^']+)'", html_lib.unescape(boot[0].attrs.get("data-init", "")))
        #: Where this page opens its stream (under the app's base path).
        self.sse_url = found.group(1) if found else "/_sse"
        self.html = _inner_of(self.page, VIEW_ID)
        self.events: list[Event] = []
        #: How many writes the tab's streams received (one per event batch), and their bytes.
        self.writes = 0
        self.wire_bytes = 0
        self.stream_coding = "identity"
        self.scripts: list[str] = []
        self._seen = 0
        self._sink: _Sink | None = None
        self._stream: StreamResponse | None = None
        self.stream_status: int | None = None
        #: The id of the last frame received: a reconnect sends it (``last-event-id``), as Datastar's retries do.
        self.last_event_id: str | None = None
        #: Every event id received, in order (each frame of a tab's stream ends with one).
        self.event_ids: list[str] = []

    # --- stream ----------------------------------------------------------------------------------

    @property
    def is_connected(self) -> bool:
        return self._sink is not None and not self._sink.closed

    def connect(self) -> Response | StreamResponse:
        """Open the tab's stream as the page does: a GET carrying the context id only. A server
        that no longer holds the tab answers ``_via_revive``; the page then opens it with a POST
        carrying its writable signals and its snapshot."""
        query = urlencode({protocol.DATASTAR_PARAM: orjson.dumps({protocol.CONTEXT_SIGNAL: self.id}).decode()})
        resume = {"last-event-id": self.last_event_id} if self.last_event_id else None
        result = self.client.request("GET", f"{self.sse_url}?{query}", headers=resume)
        if isinstance(result, Response) and _is_json(result) and result.status == 200:
            patch = orjson.loads(decoded_body(result))
            _merge(self.signals, patch)
            if protocol.REVIVE_SIGNAL in patch:
                payload = {
                    k: v for k, v in self.signals.items() if not k.startswith("_") or k == protocol.SNAPSHOT_SIGNAL
                }
                self.last_event_id = None  # a new request of the page's: Datastar sends no id with it
                result = self.client.request("POST", self.sse_url, json=payload)
        if isinstance(result, StreamResponse):
            self.stream_status = result.status
            self.stream_coding = dict(result.headers).get("content-encoding", "identity")
            sink = _Sink(self, self.stream_coding)
            self._sink, self._stream = sink, result
            result.open(sink)
            self.client.clock.run_due()
        else:
            self.stream_status = result.status
        return result

    def reconnect(self, *, resume: bool = True) -> Response | StreamResponse:
        """Open the stream again, as Datastar's retry does: with the id of the last frame received,
        so the server sends only the frames after it. ``resume=False``: as a page whose last id
        the server no longer knows (its replay buffer was dropped): it gets a full render."""
        if not resume:
            self.last_event_id = "unknown.0"
        return self.connect()

    def expire(self) -> None:
        """Destroy the tab's server context (as the timeouts would) without touching the page."""
        self.disconnect()
        ctx = self.context
        if ctx is not None:
            self.client.app.destroy(ctx)

    def revive(self) -> Response | StreamResponse:
        """Expire the context, then reconnect: the server must rebuild it from the signed id."""
        self.expire()
        return self.connect()

    def disconnect(self) -> None:
        """Drop the stream as a network failure or a closed tab would (the page notices, as its
        markup does on a failed fetch: it shows itself disconnected and its actions carry the snapshot)."""
        sink, stream = self._sink, self._stream
        self._sink = self._stream = None
        self.signals[protocol.DISCONNECTED_SIGNAL] = True
        self.signals[protocol.FILTER_SIGNAL] = protocol.FILTER_DOWN
        if sink is not None and stream is not None and not sink.closed:
            sink.closed = True
            stream.closed()
            self.client.clock.run_due()

    def pause(self) -> None:
        """Stop reading the stream, as a stalled browser would: writes pile up as unsent bytes."""
        assert self._sink is not None, "the tab has no stream"
        self._sink.paused = True

    def resume(self) -> None:
        """Read what piled up, in order."""
        if self._sink is not None:
            self._sink.resume()

    @property
    def unread_bytes(self) -> int:
        return self._sink.buffered if self._sink is not None else 0

    def _stream_ended(self, sink: _Sink) -> None:
        self.signals[protocol.FILTER_SIGNAL] = protocol.FILTER_DOWN  # Datastar retries: the page is reconnecting
        if self._sink is sink and self._stream is not None:
            stream = self._stream
            self._sink = self._stream = None
            stream.closed()

    # --- what arrived ----------------------------------------------------------------------------

    def _receive(self, ev: Event) -> None:
        self.events.append(ev)
        if ev.type == protocol.PATCH_SIGNALS:
            _merge(self.signals, ev.signals)
        elif ev.type == protocol.PATCH_ELEMENTS:
            script = ev.script
            if script is not None:
                self.scripts.append(script)
            elif ev.selector == "#" + VIEW_ID and ev.mode == "inner":
                self.html = ev.elements
            elif ev.selector is None and ev.mode == "outer":
                self.html = _replace_by_id(self.html, ev.elements)
            elif ev.selector is not None and ev.selector.startswith("#") and _SIMPLE_ID.match(ev.selector):
                self.html = _patch_at(self.html, ev.selector[1:], ev.mode, ev.elements)

    def new_events(self) -> list[Event]:
        """Events received since the last call."""
        out = self.events[self._seen :]
        self._seen = len(self.events)
        return out

    @property
    def context(self) -> Context | None:
        """The tab's server context, in the app or whichever mounted app holds it."""
        apps = [self.client.app]
        while apps:
            app = apps.pop()
            ctx = app.contexts.get(self.id)
            if ctx is not None:
                return ctx
            apps.extend(mounted for _, mounted in app.mounts)
        return None

    @property
    def base(self) -> str:
        """The URL prefix of the app that serves this tab (``/`` unless it is mounted)."""
        return self.sse_url[: -len("_sse")] if self.sse_url.endswith("_sse") else "/"

    def _outgoing(self) -> dict[str, Any]:
        """What the page's actions send: the signals ``_via_filter`` does not exclude (no ``_``
        signal, but the snapshot while the stream is down or about to move)."""
        excluded = re.compile(str(self.signals.get(protocol.FILTER_SIGNAL, protocol.FILTER_OPEN)))
        return {k: v for k, v in self.signals.items() if not excluded.search(k)}

    # --- acting ------------------------------------------------------------------------------------

    def action(self, name: str, /, **signals: Any) -> Response:
        """POST an action by name with the tab's signals (overridden by ``signals``)."""
        payload = {**self._outgoing(), **signals}
        self.signals.update(signals)
        return self.client.post(f"{self.base}_action/{name}", json=payload)

    def post(self, url: str, /, **signals: Any) -> Response:
        payload = {**self._outgoing(), **signals}
        self.signals.update(signals)
        return self.client.post(url, json=payload)

    def find(self, selector: str) -> list[_Element]:
        return select(self.html, selector)

    def click(self, selector: str, event: str = "click") -> Response:
        """Trigger the ``@post`` of the one element matching ``selector``."""
        matches = self.find(selector)
        if len(matches) != 1:
            raise AssertionError(f"{selector!r} matched {len(matches)} elements, expected 1")
        el = matches[0]
        expr = next(
            (
                v
                for k, v in el.attrs.items()
                if k in (f"data-on:{event}", f"data-on-{event}") or k.startswith(f"data-on:{event}__")
            ),
            None,
        )
        if expr is None:
            raise AssertionError(f"{selector!r} has no data-on:{event} attribute: {el!r}")
        m = _POST.search(expr)
        if not m:
            raise AssertionError(f"data-on:{event} of {selector!r} posts no action: {expr!r}")
        return self.post(m.group(1))

    def submit(self, selector: str, **fields: Any) -> Response:
        """Fill bound inputs by name (``#id`` selectors of inputs), then submit the one form matching
        ``selector`` (its ``data-on:submit`` action)."""
        for field_id, value in fields.items():
            self.type(f"#{field_id}", value)
        return self.click(selector, event="submit")

    def type(self, selector: str, value: Any) -> None:
        """Set the signal bound (``data-bind``) to the one input matching ``selector``."""
        matches = self.find(selector)
        if len(matches) != 1:
            raise AssertionError(f"{selector!r} matched {len(matches)} elements, expected 1")
        attrs = matches[0].attrs
        name = attrs.get("data-bind") or next((k.split(":", 1)[1] for k in attrs if k.startswith("data-bind:")), None)
        if not name:
            raise AssertionError(f"{selector!r} is not bound to a signal (no data-bind)")
        self.signals[name] = value


def _is_json(response: Response) -> bool:
    return dict(response.headers).get("content-type", "").startswith("application/json")


def _merge(target: dict[str, Any], patch: dict[str, Any]) -> None:
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            _merge(target[key], value)
        else:
            target[key] = value


def _element_span(markup: str, element_id: str) -> tuple[int, int, int, int] | None:
    """(outer start, inner start, inner end, outer end) of the element with ``element_id``."""
    m = re.search(r"<([a-zA-Z][\w-]*)\b[^>]*\bid=[\"']" + re.escape(element_id) + r"[\"'][^>]*>", markup)
    if not m:
        return None
    tag = m.group(1)
    depth = 1
    pos = m.end()
    tags = re.compile(rf"<(/?){tag}\b[^>]*>", re.IGNORECASE)
    for t in tags.finditer(markup, pos):
        depth += -1 if t.group(1) else 1
        if depth == 0:
            return m.start(), m.end(), t.start(), t.end()
    return None


def _inner_of(markup: str, element_id: str) -> str:
    span = _element_span(markup, element_id)
    return markup[span[1] : span[2]] if span else markup


def _replace_by_id(markup: str, fragment: str) -> str:
    m = re.match(r"\s*<[a-zA-Z][\w-]*\b[^>]*\bid=[\"']([^\"']+)[\"']", fragment)
    if not m:
        return markup
    span = _element_span(markup, m.group(1))
    if span is None:
        return markup
    return markup[: span[0]] + fragment + markup[span[3] :]


_SIMPLE_ID = re.compile(r"#[\w-]+\Z")


def _patch_at(markup: str, element_id: str, mode: str, fragment: str) -> str:
    """Apply a patch at the element with ``element_id``, as Datastar's modes do (no morphing:
    the fragment replaces or joins the markup as it is)."""
    span = _element_span(markup, element_id)
    if span is None:
        return markup
    outer_start, inner_start, inner_end, outer_end = span
    if mode == "inner":
        return markup[:inner_start] + fragment + markup[inner_end:]
    if mode in ("outer", "replace"):
        return markup[:outer_start] + fragment + markup[outer_end:]
    if mode == "append":
        return markup[:inner_end] + fragment + markup[inner_end:]
    if mode == "prepend":
        return markup[:inner_start] + fragment + markup[inner_start:]
    if mode == "before":
        return markup[:outer_start] + fragment + markup[outer_start:]
    if mode == "after":
        return markup[:outer_end] + fragment + markup[outer_end:]
    if mode == "remove":
        return markup[:outer_start] + markup[outer_end:]
    return markup


def iter_events(tab: Tab, type: str) -> Iterator[Event]:
    return (ev for ev in tab.events if ev.type == type)
