"""Dev mode helpers: a panel in every page with the tab's live signals, and ``/_via`` with the
server's tabs, scopes and recent actions. Nothing here runs unless ``App(dev=True)``."""

from __future__ import annotations

import html
import time
import traceback
from collections import deque
from typing import TYPE_CHECKING

from pyvia.http import Response

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

    __slots__ = ("entries",)

    def __init__(self, size: int = 200) -> None:
        self.entries: deque[tuple[float, str, str, str, float]] = deque(maxlen=size)

    def add(self, phase: str, where: str, detail: str, seconds: float = 0.0) -> None:
        self.entries.append((time.time(), phase, where, detail, seconds))


def panel(app: App) -> str:
    return PANEL.replace("{path}", app.url(DEVTOOLS_PATH.lstrip("/")))


def server_page(app: App) -> Response:
    """Every tab, scope and recent action of this process, as one page."""
    rows = []
    for ctx in list(app.contexts.values())[:500]:
        rows.append(f"<tr><td>{html.escape(ctx.id[:16])}…</td><td>{html.escape(ctx.route.pattern)}</td>"
                    f"<td>{ctx.state.name}</td><td>{len(ctx.signals)}</td><td>{len(ctx.scopes)}</td></tr>")
    scopes = []
    for state in list(app.scopes)[:500]:
        values = html.escape(", ".join(f"{n}={sig.value!r}"[:60] for n, sig in state.signals.items()))
        scopes.append(f"<tr><td>{html.escape(state.name)}</td><td>{len(state.members)}</td><td>{values}</td></tr>")
    log = []
    for when, phase, where, detail, seconds in reversed(app._dev_log.entries):
        log.append(f"<tr><td>{time.strftime('%H:%M:%S', time.localtime(when))}</td><td>{phase}</td>"
                   f"<td>{html.escape(where)}</td><td>{html.escape(detail)}</td><td>{seconds * 1000:.2f} ms</td></tr>")
    body = (
        "<!doctype html><meta charset=utf-8><title>pyvia dev tools</title>"
        "<style>body{font:14px system-ui;margin:1rem}td,th{border:1px solid #ccc;padding:2px 6px}"
        "table{border-collapse:collapse;margin-bottom:1rem}</style>"
        f"<h1>pyvia dev tools</h1><p>{len(app.contexts)} tabs, {len(app._connected)} streams open, "
        f"{len(app.scopes)} scopes.</p>"
        "<h2>Tabs</h2><table><tr><th>id</th><th>route</th><th>state</th><th>signals</th><th>scopes</th></tr>"
        + "".join(rows) + "</table><h2>Scopes</h2><table><tr><th>scope</th><th>members</th><th>signals</th></tr>"
        + "".join(scopes) + "</table><h2>Recent actions and errors</h2><table><tr><th>time</th><th>phase</th>"
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
