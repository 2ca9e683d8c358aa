"""Dev mode helpers: a panel in every page with the tab's live signals, ``/_via`` with the
server's tabs, scopes and recent actions, and the error shown in the page: a 500 page for a page
that fails, an overlay on the open tab for a stream or an action that fails, and
:class:`BrokenApp` for an app that no longer imports after a change (``pyvia run --dev``).
Nothing here runs unless ``App(dev=True)`` or ``pyvia run --dev``."""

from __future__ import annotations

import html
import logging
import re
import time
import traceback
from collections import deque
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from pyvia import protocol
from pyvia.http import Request, Response, StreamResponse, StreamSink

if TYPE_CHECKING:
    from pyvia.app import App

DEVTOOLS_PATH = "/_via"

PANEL = """<div id="via-devtools" data-signals="{_devtools: false}"
  style="position:fixed;right:8px;bottom:8px;z-index:99999;font:12px/1.4 monospace;max-width:40vw">
  <button data-on:click="$_devtools = !$_devtools" style="float:right">pyvia</button>
  <div data-show="$_devtools" style="clear:both;background:#111;color:#eee;padding:8px;border-radius:6px;
       max-height:50vh;overflow:auto">
    <div>stream: <b data-text="$_disconnected ? 'down' : 'open'"></b> · <a style="color:#fca311"
       href="{path}" target="_blank">server</a></div>
    <pre data-json-signals style="margin:4px 0;white-space:pre-wrap"></pre>
  </div>
</div>"""


class DevLog:
    """The last actions and errors, with their timings (dev mode only)."""

    __slots__ = ("entries", "warned")

    def __init__(self, size: int = 200) -> None:
        self.entries: deque[tuple[float, str, str, str, float]] = deque(maxlen=size)
        #: (route, written reference) already warned about by :func:`warn_misnamed_signals`.
        self.warned: set[tuple[str, str]] = set()

    def add(self, phase: str, where: str, detail: str, seconds: float = 0.0) -> None:
        self.entries.append((time.time(), phase, where, detail, seconds))


#: A signal reference in a Datastar expression: ``$name``.
_REFERENCE = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*)")
logger = logging.getLogger("pyvia")


def misnamed_signals(markup: str, ids: Iterable[str]) -> dict[str, str]:
    """``$name`` references in ``markup`` that name no signal of the tab though ``name`` is one of
    its signals' names, each with the id meant (``$count`` for the tab's ``$_count``): written by
    hand, they read a signal that does not exist, and Datastar shows nothing, silently."""
    known = set(ids)
    by_name: dict[str, str] = {}
    for signal_id in known:
        by_name.setdefault(signal_id.rsplit("__", 1)[-1].lstrip("_"), signal_id)
    found: dict[str, str] = {}
    for written in _REFERENCE.findall(markup):
        meant = by_name.get(written.lstrip("_"))
        if written not in known and meant is not None and meant != written:
            found[written] = meant
    return found


def warn_misnamed_signals(app: App, route: str, markup: str, ids: Iterable[str]) -> None:
    """Dev mode: say once per route and reference what :func:`misnamed_signals` finds."""
    for written, meant in misnamed_signals(markup, ids).items():
        if (route, written) in app.dev_log.warned:
            continue
        app.dev_log.warned.add((route, written))
        name = meant.rsplit("__", 1)[-1].lstrip("_")
        message = (
            f"the view of {route} reads ${written}, which is no signal of the tab: its signal {name!r} is "
            f"${meant} in the browser (write {{{name}.ref()}} rather than the id by hand)"
        )
        logger.warning("%s", message)
        app.dev_log.add("view", route, message)


def panel(app: App) -> str:
    return PANEL.replace("{path}", app.url(DEVTOOLS_PATH.lstrip("/")))


def server_page(app: App) -> Response:
    """Every tab, scope and recent action of this process, as one page."""
    rows = []
    for ctx in list(app.contexts.values())[:500]:
        rows.append(
            f"<tr><td>{html.escape(ctx.id[:16])}…</td><td>{html.escape(ctx.route.pattern)}</td>"
            f"<td>{ctx.state.name}</td><td>{len(ctx.signals)}</td><td>{len(ctx.scopes)}</td></tr>"
        )
    scopes = []
    for state in list(app.scopes)[:500]:
        values = html.escape(", ".join(f"{n}={sig.value!r}"[:60] for n, sig in state.signals.items()))
        scopes.append(f"<tr><td>{html.escape(state.name)}</td><td>{len(state.members)}</td><td>{values}</td></tr>")
    log = []
    for when, phase, where, detail, seconds in reversed(app.dev_log.entries):
        log.append(
            f"<tr><td>{time.strftime('%H:%M:%S', time.localtime(when))}</td><td>{phase}</td>"
            f"<td>{html.escape(where)}</td><td>{html.escape(detail)}</td><td>{seconds * 1000:.2f} ms</td></tr>"
        )
    body = (
        "<!doctype html><meta charset=utf-8><title>pyvia dev tools</title>"
        "<style>body{font:14px system-ui;margin:1rem}td,th{border:1px solid #ccc;padding:2px 6px}"
        "table{border-collapse:collapse;margin-bottom:1rem}</style>"
        f"<h1>pyvia dev tools</h1><p>{len(app.contexts)} tabs, {len(app.connected)} streams open, "
        f"{len(app.scopes)} scopes.</p>"
        "<h2>Tabs</h2><table><tr><th>id</th><th>route</th><th>state</th><th>signals</th><th>scopes</th></tr>"
        + "".join(rows)
        + "</table><h2>Scopes</h2><table><tr><th>scope</th><th>members</th><th>signals</th></tr>"
        + "".join(scopes)
        + "</table><h2>Recent actions and errors</h2><table><tr><th>time</th><th>phase</th>"
        "<th>where</th><th>what</th><th>took</th></tr>" + "".join(log) + "</table>"
    )
    return Response.html(body)


def error_page(exc: BaseException, phase: str) -> Response:
    """A 500 page that shows the error, for dev mode only (production pages leak nothing)."""
    trace = "".join(traceback.format_exception(exc))
    return Response.html(
        "<!doctype html><meta charset=utf-8><title>Error</title>"
        f"<h1>{html.escape(type(exc).__name__)} in {html.escape(phase)}</h1>"
        f"<p>{html.escape(str(exc))}</p><pre>{html.escape(trace)}</pre>"
        "<p>This page shows because the app runs with <code>dev=True</code>.</p>",
        500,
    )


OVERLAY_ID = "via-dev-error"

_OVERLAY = (
    '<div id="' + OVERLAY_ID + '" style="position:fixed;inset:0;z-index:100000;overflow:auto;'
    'background:rgba(20,0,0,.92);color:#fee;font:14px/1.45 monospace;padding:24px">'
    '<h1 style="font:bold 20px system-ui;color:#ff8a80;margin:0 0 8px">{title}</h1>'
    '<p style="white-space:pre-wrap;margin:0 0 12px">{message}</p>'
    '<pre style="white-space:pre-wrap;color:#ddd">{trace}</pre>'
    '<p style="color:#aaa">pyvia dev mode: this shows until the next change{dismiss}.</p></div>'
)


def _describe(exc: BaseException) -> tuple[str, str, str]:
    return type(exc).__name__, str(exc), "".join(traceback.format_exception(exc))


def overlay(exc: BaseException, phase: str, *, dismissible: bool = True) -> str:
    """The error as an element over the page, for dev mode only."""
    name, message, trace = _describe(exc)
    dismiss = (
        ' (or <a style="color:#fca311" href="#" data-on:click__prevent="el.closest(\'#'
        + OVERLAY_ID
        + "').remove()\">close it</a>)"
        if dismissible
        else ""
    )
    return _OVERLAY.format(
        title=html.escape(f"{name} in {phase}"), message=html.escape(message), trace=html.escape(trace), dismiss=dismiss
    )


def overlay_events(exc: BaseException, phase: str, *, dismissible: bool = True) -> bytes:
    """Datastar events that replace any previous overlay with this error's."""
    return protocol.patch_elements("", f"#{OVERLAY_ID}", "remove") + protocol.patch_elements(
        overlay(exc, phase, dismissible=dismissible), "body", "append"
    )


def error_events(exc: BaseException, phase: str) -> Response:
    """The answer to a stream or an action that failed, in dev mode: the overlay on the tab.

    Status 200, since Datastar applies the events of a successful response only; the tab's
    stream, if this was one, ends and reopens a second later, as after any error.
    """
    return Response(200, list(protocol.SSE_HEADERS), overlay_events(exc, phase))


class BrokenApp:
    """What a dev-mode worker serves when the app cannot be imported: the error, as a 500 page on
    every page and as an overlay on every open tab (whose stream stays open, so the tab does not
    ask again each second), until the next change reloads the worker. Its stop removes the
    overlay from the tabs before ending their streams."""

    def __init__(self, spec: str, exc: BaseException) -> None:
        self.spec = spec
        self.exc = exc
        self._sinks: set[StreamSink] = set()

    async def startup(self) -> None:
        return None

    async def shutdown(self, budget: float, *, spread: float = 0.0, saved: Callable[[], object] | None = None) -> None:
        if saved is not None:
            saved()
        gone = protocol.patch_elements("", f"#{OVERLAY_ID}", "remove")
        for sink in list(self._sinks):
            if not sink.is_closed:
                sink.write(gone)
                sink.close()
        self._sinks.clear()

    def handle(self, request: Request) -> Response | StreamResponse:
        phase = f"loading {self.spec}"
        if request.path.endswith("/_sse"):
            return self._stream(phase)
        if "/_action/" in request.path:
            return error_events(self.exc, phase)
        return error_page(self.exc, phase)

    def _stream(self, phase: str) -> StreamResponse:
        held: list[StreamSink] = []

        def opened(sink: StreamSink) -> None:
            held.append(sink)
            self._sinks.add(sink)
            sink.write(protocol.STREAM_PREAMBLE + overlay_events(self.exc, phase, dismissible=False))

        def closed() -> None:
            self._sinks.difference_update(held)

        return StreamResponse(list(protocol.SSE_HEADERS), on_open=opened, on_close=closed)
