"""A page loaded in the test client: its markup, its signals and the events its stream received,
and the actions a user takes on it (clicks, typing, submits).

Separate from the client because it is one page's state, kept up to date as a browser keeps its
DOM; the tab's end of its stream lives here too, because it feeds the tab alone.
"""

from __future__ import annotations

import html as html_lib
import re
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

import orjson

from pyvia import protocol
from pyvia.context import Context
from pyvia.http import Response, StreamResponse
from pyvia.render import VIEW_ID
from pyvia.testing.encoding import Decoder, decoded_body
from pyvia.testing.events import Event, parse_events
from pyvia.testing.html import Element, select
from pyvia.testing.patches import SIMPLE_ID, inner_of, merge_signals, patch_at, replace_by_id

if TYPE_CHECKING:
    from pyvia.testing.client import TestClient

__all__ = ["Tab", "iter_events"]

_POST = re.compile(r"@post\(\s*['\"]([^'\"]+)['\"]")


class _Sink:
    """The tab's end of its stream: what a socket carries, decoded and read as the page reads it."""

    __slots__ = ("_buffer", "_decoder", "_unread", "closed", "paused", "tab")

    def __init__(self, tab: Tab, coding: str = "identity") -> None:
        self.tab = tab
        self._buffer = b""
        self._decoder = Decoder(coding)
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
        self.html = inner_of(self.page, VIEW_ID)
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
            merge_signals(self.signals, patch)
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
            merge_signals(self.signals, ev.signals)
        elif ev.type == protocol.PATCH_ELEMENTS:
            script = ev.script
            if script is not None:
                self.scripts.append(script)
            elif (view := ev.view) is not None:
                self.html = view
            elif ev.selector is None and ev.mode == "outer":
                self.html = replace_by_id(self.html, ev.elements)
            elif ev.selector is not None and ev.selector.startswith("#") and SIMPLE_ID.match(ev.selector):
                self.html = patch_at(self.html, ev.selector[1:], ev.mode, ev.elements)

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

    def action(self, name: str, /, *, arguments: Mapping[str, Any] | None = None, **signals: Any) -> Response:
        """POST an action by name with the tab's signals (overridden by ``signals``) and the action's
        own ``arguments`` (``tab.action("bid", arguments={"lot_id": 1})``, as ``bid(lot_id=1)``
        in the view binds them)."""
        url = f"{self.base}_action/{name}"
        if arguments:
            ctx = self.context
            action = ctx.actions.get(name) if ctx is not None else None
            query = action(**arguments).url.partition("?")[2] if action is not None else urlencode(arguments)
            url = f"{url}?{query}"
        return self.post(url, **signals)

    def post(self, url: str, /, **signals: Any) -> Response:
        payload = {**self._outgoing(), **signals}
        self.signals.update(signals)
        return self.apply(self.client.post(url, json=payload))

    def apply(self, response: Response) -> Response:
        """Apply the events an action's answer carries, as Datastar does with a ``text/event-stream``
        answer (a navigation that follows the answer's cookies); returns ``response``."""
        if 200 <= response.status < 300 and dict(response.headers).get("content-type") == "text/event-stream":
            events, _ = parse_events(response.body)
            for ev in events:
                self._receive(ev)
        return response

    def find(self, selector: str) -> list[Element]:
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
        after = _assignments(expr[m.end() :])
        if not after:
            return self.post(m.group(1))
        payload = self._outgoing()  # the post takes the signals as they were when it was made,
        self.signals.update(after)  # then the statements after it run, before any answer
        return self.apply(self.client.post(m.group(1), json=payload))

    def submit(self, selector: str, **fields: Any) -> Response:
        """Fill bound inputs by name (``#id`` selectors of inputs), then submit the one form matching
        ``selector`` (its ``data-on:submit`` action)."""
        for field_id, value in fields.items():
            if not self.find(f"#{field_id}"):
                raise AssertionError(
                    f"submit({selector!r}, {field_id}=...): no input with id {field_id!r}; a field names "
                    "the id of the input it types into (give the input that id, or use tab.type first)"
                )
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


#: ``; $name = literal`` after an ``@post``: what the docs' "clear the input with the click" writes.
_ASSIGNMENT = re.compile(r";\s*\$(\w+)\s*=\s*(''|\"\"|-?\d+(?:\.\d+)?|true|false|null|\[\]|\{\})\s*(?=;|$)")


def _assignments(statements: str) -> dict[str, Any]:
    """The signals that plain assignments of literals in ``statements`` set, as the page runs them."""
    return {name: "" if value == "''" else orjson.loads(value) for name, value in _ASSIGNMENT.findall(statements)}


def _is_json(response: Response) -> bool:
    return dict(response.headers).get("content-type", "").startswith("application/json")


def iter_events(tab: Tab, type: str) -> Iterator[Event]:
    return (ev for ev in tab.events if ev.type == type)
