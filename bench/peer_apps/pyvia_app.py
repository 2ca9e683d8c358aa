"""pyvia's side of ``python -m bench peers``: the counter, the broadcast board and the doc page.

Mirrors ``examples/counter.py`` (a tab-private, server-owned count and its + action, in a Jinja
template) cut down to what every peer's app has: one count and one + button. ``/board`` is
``bench.apps_broadcast``'s broadcast page (a route-scoped signal ``n`` and the 300-byte view of
``content.board_view``, rendered once per broadcast with ``share_render``); ``POST /bump``
increments ``n`` as any tab's action would. ``/doc`` renders ``content.DOC`` through
``templates/doc.html``, the template the datastar-py app renders too.

``action_rate=0``: the benchmark's closed loop from one address would otherwise be answered
with 429s (``bench.actions`` lifts the same limit); the peers have no such limit.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.peer_apps.content import COUNTER_INTRO, COUNTER_TITLE, DOC, board_view
from pyvia import App, Context, Scope
from pyvia.http import Request
from pyvia.scopes import SharedSignal

__all__ = ["app"]

app = App(title=COUNTER_TITLE, template_dir=Path(__file__).parent / "templates", action_rate=0)
_n = app.signal(0, "n", scope=Scope.route("/board"))


@app.page("/")
def counter(c: Context) -> None:
    count = c.signal(0, "count")

    @c.action
    def increment() -> None:
        count.value += 1

    c.view("counter.html", {"title": COUNTER_TITLE, "intro": COUNTER_INTRO})


@app.page("/board")
def board(c: Context) -> None:
    c.scope(Scope.ROUTE)
    n = c.signal(0, "n", scope=Scope.ROUTE)
    assert isinstance(n, SharedSignal)
    c.view(lambda: board_view(n.value), share_render=True)


@app.route("POST", "/bump")
def bump(request: Request) -> dict[str, Any]:
    return {"n": _n.increment()}


@app.page("/doc")
def doc(c: Context) -> None:
    c.view("doc.html", {"doc": DOC})
