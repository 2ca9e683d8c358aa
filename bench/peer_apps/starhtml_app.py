"""StarHTML on uvicorn: its side of ``python -m bench peers``, written from StarHTML's documentation.

Mirrors ``pyvia_app.py`` in StarHTML's idiom (``star_app`` and ``@rt`` routes returning FT
components, ``Signal`` for the page's signals, ``@sse`` generators yielding ``signals(...)``
and ``elements(...)``, handler arguments read from the Datastar signals):

* ``GET /``: the counter page; the tab's id and the count are ``Signal``\\ s of the page, and
  ``data_init`` opens ``GET /stream``.
* ``GET /stream``: the tab's stream (``@sse``): the count exists from its connect to its close,
  the first event is the current count, then one ``signals(count=...)`` per message on the
  tab's ``asyncio.Queue`` (StarHTML's ``Relay`` fans every event out to every subscriber, so a
  private patch goes through a queue of the tab's own).
* ``POST /increment``: adds one to the posting tab's count (``tab`` is a handler argument, read
  from the posted signals) and queues it for that tab's stream; answers 204.
* ``GET /board``, ``GET /board/stream``, ``POST /bump``: the broadcast through StarHTML's
  ``Relay``: ``/bump`` emits the board's fragment (FT components with the same content as
  ``content.board_view``) and the ``n`` signal; every board stream yields them from
  ``relay.stream()``.
* ``GET /doc``: ``content.DOC`` as FT components.

Defaults are StarHTML's (its default headers: the vendored Datastar bundle, the icon loader),
except ``static_path=None`` (no static files served from the working directory), a fixed
``secret_key`` (else it writes a ``.sesskey`` file into the working directory) and the
``compression()`` middleware StarHTML offers (gzip, br, zstd; it streams ``text/event-stream``),
so the broadcast runs with every coding. Served as ``uvicorn starhtml_app:app --app-dir
bench/peer_apps --loop uvloop --http httptools``.
"""

from __future__ import annotations

import asyncio
import re
import secrets
from collections.abc import AsyncGenerator
from typing import Any

from content import BOARD_TITLE, COUNTER_INTRO, COUNTER_TITLE, DOC, DOC_MARKER, board_filler
from starhtml import (
    H1,
    H2,
    A,
    Article,
    B,
    Button,
    Code,
    Footer,
    Header,
    Li,
    Main,
    Nav,
    Ol,
    P,
    PlainTextResponse,
    Pre,
    Relay,
    Response,
    Section,
    Signal,
    Strong,
    Table,
    Tbody,
    Td,
    Th,
    Thead,
    Title,
    Tr,
    Ul,
    compression,
    signals,
    sse,
    star_app,
)
from starhtml.datastar import get, post

_TAB_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")

app, rt = star_app(title=COUNTER_TITLE, static_path=None, secret_key="bench", middleware=(compression(),))
relay = Relay()
relay.install(app)
tabs: dict[str, asyncio.Queue[int]] = {}  # the queue of every tab whose stream is open
counts: dict[str, int] = {}
board = {"n": 0}


def _board(value: int) -> Any:
    """``content.board_view`` as components: the same words, StarHTML's markup."""
    return Section(H2(BOARD_TITLE), P("Count ", B(value, id="nv")), P(board_filler(value)), id="board", data_n=value)


@rt("/")
def home() -> Any:
    return Title(COUNTER_TITLE), Main(
        Signal("tab", secrets.token_urlsafe(12)),
        (count := Signal("count", 0)),
        H1(COUNTER_TITLE),
        P(COUNTER_INTRO),
        Section(
            P("Count: ", Strong("0", id="count", data_text=count)),
            Button("+", id="inc", data_on_click=post("/increment")),
            id="counter",
        ),
        data_init=get("/stream"),
        cls="counter",
    )


@rt("/stream")
@sse
async def stream(tab: str = "") -> AsyncGenerator[Any]:
    if not _TAB_ID.fullmatch(tab):
        return
    queue: asyncio.Queue[int] = asyncio.Queue()
    tabs[tab] = queue
    counts[tab] = 0
    try:
        yield signals(count=0)
        while True:
            yield signals(count=await queue.get())
    finally:
        tabs.pop(tab, None)
        counts.pop(tab, None)


@rt("/increment", methods=["post"])
async def increment(tab: str = "") -> Any:
    if tab not in tabs:
        return PlainTextResponse("no open stream for that tab", 404)
    counts[tab] += 1
    tabs[tab].put_nowait(counts[tab])
    return Response(status_code=204)


@rt("/board")
def board_page() -> Any:
    return Title(BOARD_TITLE), Main(Signal("n", board["n"]), _board(board["n"]), data_init=get("/board/stream"))


@rt("/board/stream")
@sse
async def board_stream() -> AsyncGenerator[Any]:
    yield signals(n=board["n"])
    async for item in relay.stream():
        yield item


@rt("/bump", methods=["post"])
def bump() -> Any:
    board["n"] += 1
    value = board["n"]
    relay.emit_element(_board(value), "#board")
    relay.emit_signals({"n": value})
    return {"n": value}


@rt("/doc")
def doc() -> Any:
    sections = [
        Section(
            H2(s["title"]),
            *(P(p) for p in s["paragraphs"]),
            Pre(Code(s["code"])),
            Table(
                Thead(Tr(Th("Name"), Th("Type"), Th("Meaning"))),
                Tbody(*(Tr(Td(Code(name)), Td(kind), Td(meaning)) for name, kind, meaning in s["rows"])),
            ),
            Ul(*(Li(item) for item in s["points"])),
            id=s["id"],
        )
        for s in DOC["sections"]
    ]
    return Title(DOC["title"]), Article(
        Header(H1(DOC["title"]), P(DOC["intro"], cls="lead")),
        Nav(Ol(*(Li(A(label, href=href)) for href, label in DOC["nav"])), aria_label="Contents"),
        *sections,
        Footer(P(DOC["footer"]), id=DOC_MARKER.split('"')[1]),
        cls="doc",
    )
