"""stario's side of ``python -m bench peers``, written from stario's documentation (5.x).

Mirrors ``pyvia_app.py`` in stario's own idiom (the "go-to architecture" of its docs: a GET
page, a long-lived SSE subscription per tab, commands as short POSTs, in-process fan-out
through ``Relay``):

* ``GET /``: the counter page, built with ``stario.h``; the tab's id is a Datastar signal the
  page carries (``data-signals``) and its ``data-init`` opens ``GET /stream``.
* ``GET /stream``: the tab's stream. Its count lives on the server from the moment the stream
  connects until it closes; the first event is the current count. It then waits on
  ``relay.subscribe("tab.<id>")`` and patches the ``count`` signal on every message.
* ``POST /increment``: reads the tab's id from the posted signals, adds one, publishes the new
  count to that tab's subject and answers 204; the patch goes out on the tab's stream.
* ``GET /board``, ``GET /board/stream``, ``POST /bump``: the broadcast; ``/bump`` renders the
  300-byte fragment once and publishes it with the value on ``board``; every board stream
  patches the fragment and the ``n`` signal (one ``patch_elements``, one ``patch_signals``).
* ``GET /doc``: the documentation page of ``content.DOC``, built with ``stario.h``.

Run as ``python stario_app.py`` in stario's virtualenv; the listener comes from stario's own
``STARIO_*`` variables (``ServerConfig.from_env``), which the harness sets, and so does
streaming compression (stario's defaults: zstd, br, gzip as the client accepts).
"""

from __future__ import annotations

import asyncio
import re
import secrets
from collections.abc import AsyncGenerator
from typing import Any

from content import BOARD_TITLE, COUNTER_INTRO, COUNTER_TITLE, DOC, DOC_MARKER, board_filler
from stario import App, Context, Relay, Route, Span, Writer, h, serve
from stario.datastar import SSE, at, data, read_signals
from stario.markup import render

_TAB_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")

relay: Relay[Any] = Relay()
counts: dict[str, int] = {}  # the count of every tab whose stream is open
board = {"n": 0}


def _document(title: str, *body: Any) -> Any:
    return h.HtmlDocument(
        {"lang": "en"},
        h.Head(
            h.Meta({"charset": "utf-8"}),
            h.Meta({"name": "viewport", "content": "width=device-width, initial-scale=1"}),
            h.Title(title),
            h.Script({"type": "module", "src": "/datastar.js"}),
        ),
        h.Body(*body),
    )


def _tab_of(signals: dict[str, Any]) -> str | None:
    tab = signals.get("tab")
    return tab if isinstance(tab, str) and _TAB_ID.fullmatch(tab) else None


async def page(c: Context, w: Writer) -> None:
    w.html(
        _document(
            COUNTER_TITLE,
            h.Main(
                {"class": "counter"},
                data.signals({"tab": secrets.token_urlsafe(12), "count": 0}),
                data.init(at.get("/stream")),
                h.H1(COUNTER_TITLE),
                h.P(COUNTER_INTRO),
                h.Section(
                    {"id": "counter"},
                    h.P("Count: ", h.Strong({"id": "count"}, data.text("$count"), "0")),
                    h.Button({"id": "inc"}, data.on("click", at.post("/increment")), "+"),
                ),
            ),
        )
    )


async def stream(c: Context, w: Writer) -> None:
    tab = _tab_of(await read_signals(c.req))
    if tab is None:
        w.text("a stream needs its tab's id", 400)
        return
    sse = SSE(w)
    counts[tab] = 0
    try:
        async with relay.subscribe(f"tab.{tab}") as subscription:
            sse.patch_signals({"count": counts[tab]})
            async for _subject, value in c.alive(subscription):
                sse.patch_signals({"count": value})
    finally:
        counts.pop(tab, None)


async def increment(c: Context, w: Writer) -> None:
    tab = _tab_of(await read_signals(c.req))
    if tab is None or tab not in counts:
        w.text("no open stream for that tab", 404)
        return
    counts[tab] += 1
    relay.publish(f"tab.{tab}", counts[tab])
    w.empty()


def _board(value: int) -> Any:
    """``content.board_view`` built with ``stario.h``: the same 300 bytes."""
    return h.Section(
        {"id": "board", "data-n": str(value)},
        h.H2(BOARD_TITLE),
        h.P("Count ", h.B({"id": "nv"}, str(value))),
        h.P(board_filler(value)),
    )


async def board_page(c: Context, w: Writer) -> None:
    w.html(
        _document(
            BOARD_TITLE,
            h.Main(data.signals({"n": board["n"]}), data.init(at.get("/board/stream")), _board(board["n"])),
        )
    )


async def board_stream(c: Context, w: Writer) -> None:
    sse = SSE(w)
    async with relay.subscribe("board", latest=True) as subscription:
        sse.patch_signals({"n": board["n"]})
        async for _subject, (fragment, value) in c.alive(subscription):
            sse.patch_elements(fragment)
            sse.patch_signals({"n": value})


async def bump(c: Context, w: Writer) -> None:
    board["n"] += 1
    value = board["n"]
    relay.publish("board", (render(_board(value)), value))  # rendered once, as pyvia's share_render does
    w.json({"n": value})


def _doc_body() -> Any:
    sections = []
    for s in DOC["sections"]:
        sections.append(
            h.Section(
                {"id": s["id"]},
                h.H2(s["title"]),
                *(h.P(p) for p in s["paragraphs"]),
                h.Pre(h.Code(s["code"])),
                h.Table(
                    h.Thead(h.Tr(h.Th("Name"), h.Th("Type"), h.Th("Meaning"))),
                    h.Tbody(
                        *(h.Tr(h.Td(h.Code(name)), h.Td(kind), h.Td(meaning)) for name, kind, meaning in s["rows"])
                    ),
                ),
                h.Ul(*(h.Li(item) for item in s["points"])),
            )
        )
    return h.Article(
        {"class": "doc"},
        h.Header(h.H1(DOC["title"]), h.P({"class": "lead"}, DOC["intro"])),
        h.Nav({"aria-label": "Contents"}, h.Ol(*(h.Li(h.A({"href": href}, label)) for href, label in DOC["nav"]))),
        *sections,
        h.Footer({"id": DOC_MARKER.split('"')[1]}, h.P(DOC["footer"])),
    )


async def doc(c: Context, w: Writer) -> None:
    w.html(_document(DOC["title"], _doc_body()))


async def bootstrap(app: App, span: Span) -> AsyncGenerator[None]:
    app.add(Route("GET /"), page)
    app.add(Route("GET /stream"), stream)
    app.add(Route("POST /increment"), increment)
    app.add(Route("GET /board"), board_page)
    app.add(Route("GET /board/stream"), board_stream)
    app.add(Route("POST /bump"), bump)
    app.add(Route("GET /doc"), doc)
    yield


if __name__ == "__main__":
    try:
        import uvloop
    except ImportError:  # stario runs on asyncio too
        asyncio.run(serve(bootstrap))
    else:
        uvloop.run(serve(bootstrap))
