"""Datastar answers from any route: event streams, one-shot responses, and the signals a request carries.

A plain route (``@app.route``) returns one of these like any other response::

    from pyvia.datastar import DatastarResponse, patch_elements, read_signals

    @app.route("GET", "/feed")
    async def feed(request: Request) -> DatastarResponse:
        async def events():
            for n in range(3):
                yield patch_elements(f'<li id="n{n}">{n}</li>', "#feed", "append")
                await asyncio.sleep(1)
        return DatastarResponse(events())

The event functions are :mod:`pyvia.protocol`'s (the SDK spec's every option; events made by the
datastar-py SDK are accepted too, after a check); a tab's own stream is sent to with the
``Context`` methods of the same names instead. The one-shot forms the 1.0 client also accepts
(``text/html``, ``application/json``, ``text/javascript`` with ``datastar-*`` headers) are
:func:`elements_response`, :func:`signals_response` and :func:`script_response`.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
from collections.abc import AsyncIterable, Awaitable, Callable, Iterable, Mapping
from typing import Any, TypeAlias

import orjson

from pyvia import protocol
from pyvia.forms import parse_form, request_signals
from pyvia.http import Request, Response, StreamResponse, StreamSink
from pyvia.protocol import (
    execute_script,
    patch_elements,
    patch_signals,
    remove_elements,
    remove_signals,
)

__all__ = [
    "DatastarResponse",
    "EventSink",
    "elements_response",
    "execute_script",
    "is_datastar_request",
    "last_event_id",
    "patch_elements",
    "patch_signals",
    "read_signals",
    "remove_elements",
    "remove_signals",
    "script_response",
    "signals_response",
]

log = logging.getLogger("pyvia")

#: Unsent bytes above which an event generator waits for the client to read (1 MiB, as a tab's stream).
HIGH_WATER = 1 << 20
_DRAIN_POLL = 0.01  # seconds between looks at the socket while a generator waits

Events: TypeAlias = "str | bytes"
#: What a :class:`DatastarResponse` is made from (see there).
Source: TypeAlias = "Events | Iterable[Events] | AsyncIterable[Events] | Callable[[EventSink], Awaitable[None] | None]"


def read_signals(request: Request) -> dict[str, Any]:
    """The Datastar signals a request carries: the ``datastar`` query parameter of a GET, else the
    JSON body (or a form's fields). Raises :class:`~pyvia.errors.MalformedRequest` (answered 400)
    for anything that is not a JSON object within the payload limits."""
    form = (
        parse_form(request)
        if request.content_type in ("application/x-www-form-urlencoded", "multipart/form-data")
        else None
    )
    return request_signals(request, form)


def is_datastar_request(request: Request) -> bool:
    """Whether Datastar's ``@get``/``@post`` made the request (it sends ``Datastar-Request: true``)."""
    return (request.headers.get_lower("datastar-request") or "").strip().lower() == "true"


def last_event_id(request: Request) -> str | None:
    """The id of the last event the client got on an earlier response to this request (Datastar's
    retries send it), so a stream can resume where it was; None on a first request."""
    return request.headers.get_lower("last-event-id") or None


class EventSink:
    """Where a :class:`DatastarResponse` writes: whole events, each in one write, in order.

    Writing after the client left does nothing (check :attr:`is_closed` to stop early);
    :meth:`on_close` callbacks run once, whichever side ends the stream.
    """

    __slots__ = ("_on_close", "_sink")

    def __init__(self, sink: StreamSink) -> None:
        self._sink: StreamSink | None = sink
        self._on_close: list[Callable[[], Any]] = []

    def send(self, events: Events) -> None:
        """Write whole Datastar events (from the functions of this module, or the datastar-py SDK's),
        checked so that no text in them can end one early or forge another."""
        self._write(protocol.check_events(events))

    def patch_elements(self, html: str = "", selector: str | None = None, mode: str = "outer", **options: Any) -> None:
        """:func:`pyvia.protocol.patch_elements` written to the stream."""
        self._write(patch_elements(html, selector, mode, **options))

    def remove_elements(self, selector: str, **options: Any) -> None:
        self._write(remove_elements(selector, **options))

    def patch_signals(self, signals: Mapping[str, Any] | str | bytes, **options: Any) -> None:
        self._write(patch_signals(signals, **options))

    def remove_signals(self, paths: str | Iterable[str], **options: Any) -> None:
        self._write(remove_signals(paths, **options))

    def execute_script(self, js: str, **options: Any) -> None:
        self._write(execute_script(js, **options))

    def _write(self, data: bytes) -> None:
        sink = self._sink
        if sink is not None and not sink.is_closed:
            sink.write(data)

    @property
    def is_closed(self) -> bool:
        return self._sink is None or self._sink.is_closed

    @property
    def buffered(self) -> int:
        """Bytes written that the client has not read yet."""
        return self._sink.buffered if self._sink is not None else 0

    def on_close(self, fn: Callable[[], Any]) -> Callable[[], Any]:
        """Call ``fn()`` once when the stream ends (usable as a decorator)."""
        if self._sink is None:
            fn()
        else:
            self._on_close.append(fn)
        return fn

    def close(self) -> None:
        """End the response (the connection stays open for the client's next request)."""
        sink, self._sink = self._sink, None
        if sink is not None and not sink.is_closed:
            sink.close()
        self._ended()

    def _ended(self) -> None:
        self._sink = None
        callbacks, self._on_close = self._on_close, []
        for fn in callbacks:
            try:
                fn()
            except Exception:
                log.exception("error in an EventSink on_close callback")


class DatastarResponse(StreamResponse):
    """A ``text/event-stream`` response of Datastar events, from any route.

    ``events`` is one of:

    * whole events (``str`` or ``bytes``): written, then the response ends;
    * an iterable of them: written in order, then the response ends;
    * an async iterable (an ``async def`` generator): each event written as it comes, the
      generator paused while the client has more than ``HIGH_WATER`` bytes unread, and closed
      (``GeneratorExit`` at its ``yield``) when the client leaves;
    * a function given the :class:`EventSink`: called when the stream opens; an ``async`` one
      ends the response when it returns, a plain one leaves it open for whoever holds the sink.

    An exception from the events ends the response and is logged; the client's Datastar then
    retries as its options say.
    """

    __slots__ = ("_events", "_out", "_task")

    def __init__(self, events: Source, *, status: int = 200, headers: Iterable[tuple[str, str]] = ()) -> None:
        super().__init__([*protocol.SSE_HEADERS, *headers], self._open, self._close, status)
        self._events: Source | None = events
        self._out: EventSink | None = None
        self._task: asyncio.Task[None] | None = None

    def _open(self, sink: StreamSink) -> None:
        out = self._out = EventSink(sink)
        events, self._events = self._events, None
        if isinstance(events, (str, bytes)):
            out.send(events)
            out.close()
        elif isinstance(events, AsyncIterable):
            self._start(self._pump(out, events))
        elif callable(events):
            try:
                result = events(out)
            except Exception:
                log.exception("error in a DatastarResponse's writer")
                out.close()
                return
            if inspect.isawaitable(result):
                self._start(self._finish(out, result))
        elif events is not None:
            try:
                for event in events:
                    out.send(event)
            except Exception:
                log.exception("error in a DatastarResponse's events")
            out.close()

    def _start(self, work: Awaitable[None]) -> None:
        self._task = asyncio.get_running_loop().create_task(work)  # type: ignore[arg-type]  # a coroutine

    async def _pump(self, out: EventSink, events: AsyncIterable[Events]) -> None:
        iterator = aiter(events)
        try:
            async for event in iterator:
                if out.is_closed:
                    break
                out.send(event)
                while out.buffered > HIGH_WATER and not out.is_closed:
                    await asyncio.sleep(_DRAIN_POLL)
        except Exception:
            log.exception("error in a DatastarResponse's event generator")
        finally:
            close = getattr(iterator, "aclose", None)
            if close is not None:
                await close()
            out.close()

    @staticmethod
    async def _finish(out: EventSink, work: Awaitable[None]) -> None:
        try:
            await work
        except Exception:
            log.exception("error in a DatastarResponse's writer")
        finally:
            out.close()

    def _close(self) -> None:
        """The client left (or the server ended the stream)."""
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
        if self._out is not None:
            self._out._ended()


def _datastar_headers(pairs: Iterable[tuple[str, str | None]]) -> list[tuple[str, str]]:
    out = []
    for name, value in pairs:
        if value is None:
            continue
        try:
            value.encode("latin-1")
        except UnicodeEncodeError:
            raise ValueError(f"{name} {value!r} must be latin-1 text to travel in a header") from None
        out.append((name, value))
    return out


def elements_response(
    html: str,
    *,
    selector: str | None = None,
    mode: str = "outer",
    namespace: str = "html",
    use_view_transition: bool = False,
    status: int = 200,
    headers: Iterable[tuple[str, str]] = (),
) -> Response:
    """Patch elements with one plain ``text/html`` answer; the options ride in ``datastar-*``
    headers (defaults left off), as the Datastar 1.0 client reads them."""
    protocol.patch_elements("", selector, mode, namespace=namespace)  # the same checks as the event
    extra = _datastar_headers(
        [
            ("datastar-selector", selector),
            ("datastar-mode", mode if mode != "outer" else None),
            ("datastar-namespace", namespace if namespace != "html" else None),
            ("datastar-use-view-transition", "true" if use_view_transition else None),
        ]
    )
    return Response(status, [("content-type", "text/html; charset=utf-8"), *extra, *headers], html.encode())


def signals_response(
    signals: Mapping[str, Any] | str | bytes,
    *,
    only_if_missing: bool = False,
    status: int = 200,
    headers: Iterable[tuple[str, str]] = (),
) -> Response:
    """Patch signals with one ``application/json`` answer (``datastar-only-if-missing: true`` when asked)."""
    if isinstance(signals, (str, bytes)):
        protocol.patch_signals(signals)  # must be one JSON object
        body = signals.encode() if isinstance(signals, str) else signals
    else:
        body = orjson.dumps(signals)
    extra = [("datastar-only-if-missing", "true")] if only_if_missing else []
    return Response(status, [("content-type", "application/json"), *extra, *headers], body)


def script_response(
    js: str,
    *,
    attributes: Mapping[str, str] | None = None,
    status: int = 200,
    headers: Iterable[tuple[str, str]] = (),
) -> Response:
    """Run JavaScript with one ``text/javascript`` answer; ``attributes`` go on the script element
    the client makes (``datastar-script-attributes``, a JSON object)."""
    extra = []
    if attributes:
        for name in attributes:
            protocol.script_tag("", attributes={name: ""})  # a valid attribute name
        extra.append(("datastar-script-attributes", json.dumps(dict(attributes), ensure_ascii=True)))
    return Response(status, [("content-type", "text/javascript; charset=utf-8"), *extra, *headers], js.encode())
