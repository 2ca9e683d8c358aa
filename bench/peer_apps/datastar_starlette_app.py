"""datastar-py on Starlette (served by uvicorn): its side of ``python -m bench peers``.

Written from the documentation of datastar-py (the official Python SDK:
``ServerSentEventGenerator``, ``DatastarResponse`` and ``read_signals`` for Starlette) and of
Starlette (``Route``, ``Jinja2Templates``). Mirrors ``pyvia_app.py`` the way an app on the bare
SDK has to: the SDK formats events, the app keeps the state and the fan-out itself, an
``asyncio.Queue`` per open stream (what Starlette's streaming responses are fed from).

* ``GET /``: the counter page (``templates/peer_counter.html``); the tab's id is a Datastar
  signal and ``data-init`` opens ``GET /stream``.
* ``GET /stream``: the tab's stream (a ``DatastarResponse`` of an async generator): the count
  exists from its connect to its close, the first event is the current count, then one
  ``patch_signals`` per message on the tab's queue.
* ``POST /increment``: adds one to the posting tab's count and queues it for that tab's stream;
  answers 204.
* ``GET /board``, ``GET /board/stream``, ``POST /bump``: the broadcast; ``/bump`` renders the
  fragment once and puts it with the value on every board stream's queue, which yields a
  ``patch_elements`` and a ``patch_signals`` for it.
* ``GET /doc``: ``content.DOC`` through ``templates/doc.html``, the template pyvia's app renders.

Served as ``uvicorn datastar_starlette_app:app --app-dir bench/peer_apps --loop uvloop --http
httptools``. Starlette has no streaming compression (its GZip middleware leaves
``text/event-stream`` alone), so streams are identity only.
"""

from __future__ import annotations

import asyncio
import re
import secrets
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

from content import BOARD_TITLE, COUNTER_INTRO, COUNTER_TITLE, DOC, board_view
from datastar_py import ServerSentEventGenerator as SSE
from datastar_py.starlette import DatastarResponse, read_signals
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route
from starlette.templating import Jinja2Templates

_TAB_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")

templates = Jinja2Templates(directory=Path(__file__).parent / "templates")
tabs: dict[str, asyncio.Queue[int]] = {}  # the queue of every tab whose stream is open
counts: dict[str, int] = {}
boards: set[asyncio.Queue[tuple[str, int]]] = set()
board = {"n": 0}


async def _tab_of(request: Request) -> str | None:
    signals = await read_signals(request) or {}
    tab = signals.get("tab")
    return tab if isinstance(tab, str) and _TAB_ID.fullmatch(tab) else None


async def page(request: Request) -> Response:
    return templates.TemplateResponse(
        request, "peer_counter.html", {"title": COUNTER_TITLE, "intro": COUNTER_INTRO, "tab": secrets.token_urlsafe(12)}
    )


async def stream(request: Request) -> Response:
    tab = await _tab_of(request)
    if tab is None:
        return PlainTextResponse("a stream needs its tab's id", 400)
    queue: asyncio.Queue[int] = asyncio.Queue()

    async def events() -> AsyncGenerator[str]:
        tabs[tab] = queue
        counts[tab] = 0
        try:
            yield SSE.patch_signals({"count": 0})
            while True:
                yield SSE.patch_signals({"count": await queue.get()})
        finally:
            tabs.pop(tab, None)
            counts.pop(tab, None)

    return DatastarResponse(events())


async def increment(request: Request) -> Response:
    tab = await _tab_of(request)
    if tab is None or tab not in tabs:
        return PlainTextResponse("no open stream for that tab", 404)
    counts[tab] += 1
    tabs[tab].put_nowait(counts[tab])
    return Response(status_code=204)


async def board_page(request: Request) -> Response:
    return templates.TemplateResponse(
        request, "peer_board.html", {"title": BOARD_TITLE, "n": board["n"], "view": board_view(board["n"])}
    )


async def board_stream(request: Request) -> Response:
    queue: asyncio.Queue[tuple[str, int]] = asyncio.Queue()

    async def events() -> AsyncGenerator[str]:
        boards.add(queue)
        try:
            yield SSE.patch_signals({"n": board["n"]})
            while True:
                fragment, value = await queue.get()
                yield SSE.patch_elements(fragment)
                yield SSE.patch_signals({"n": value})
        finally:
            boards.discard(queue)

    return DatastarResponse(events())


async def bump(request: Request) -> Response:
    board["n"] += 1
    value = board["n"]
    fragment = board_view(value)
    for queue in boards:
        queue.put_nowait((fragment, value))
    return JSONResponse({"n": value})


async def doc(request: Request) -> Response:
    return templates.TemplateResponse(request, "peer_doc.html", {"title": DOC["title"], "doc": DOC})


def _routes() -> list[Any]:
    return [
        Route("/", page),
        Route("/stream", stream),
        Route("/increment", increment, methods=["POST"]),
        Route("/board", board_page),
        Route("/board/stream", board_stream),
        Route("/bump", bump, methods=["POST"]),
        Route("/doc", doc),
    ]


app = Starlette(routes=_routes())
