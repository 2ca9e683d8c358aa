"""Apps for the browser tests, configured through the environment of the server process."""

from __future__ import annotations

import asyncio
import os
import tempfile
import time

from pyvia import App, Context, Scope, html
from pyvia.db import Database

preference = tuple(os.environ.get("TEST_COMPRESSION", "zstd,br,gzip").split(","))
idle_release = float(os.environ.get("TEST_IDLE_RELEASE", "60"))

compressed = App(
    title="Compressed",
    compression_preference=preference,
    encoder_idle_release=idle_release,
    shared_frames_min_tabs=int(os.environ.get("TEST_SHARED_MIN_TABS", "16")),
    sweep_interval=0.2,
    keep_alive=0.6,
)


@compressed.page("/")
def board(c: Context) -> None:
    c.scope(Scope.ROUTE)
    n = c.signal(0, "n", scope=Scope.ROUTE)

    @c.action
    def inc() -> None:
        n.increment()

    def view() -> str:
        cells = "".join(f"<i class='{'on' if (i * (n.value + 1)) % 7 < 3 else 'off'}'></i>" for i in range(2000))
        button = f'<button id="inc" data-on:click="{inc}">+</button>'
        return f'<main id="board"><p id="n">{n.value}</p>{button}{cells}</main>'

    c.view(view, share_render=True)


@compressed.route("GET", "/encoders")
def encoders() -> dict:
    """The encoder budget's counters, so a test can see a release happen."""
    return compressed.compression.budget.stats() | {"shared_streams": len(compressed.compression.shared_streams)}


#: An async view (docs/views.md "Views that await") on a count every tab shares: under
#: ``--workers 2`` its page waited for the shared values and then answered the view's coroutine.
async_board = App(title="Async board")


@async_board.page("/")
def async_board_page(c: Context) -> None:
    count = c.signal(0, "count", scope=Scope.GLOBAL)

    @c.action
    def add() -> None:
        count.increment()

    async def view() -> str:
        await asyncio.sleep(0.001)  # a query, say
        return f'<p id="count">{count.value}</p><button id="add" data-on:click="{add}">+</button>'

    c.view(view)


#: Who is online, kept by the connect and disconnect hooks, beside cards an async view reads from
#: SQLite: a stop ends every stream, and each disconnect hook's write used to render the other
#: tabs' views after the database had closed (an error in the log per stop).
_board_db = os.environ.get("TEST_BOARD_DB") or f"sqlite:///{tempfile.gettempdir()}/pyvia-online-board.db"
online_board = App(title="Online board", db_url=_board_db, persist_path=os.environ.get("TEST_BOARD_STATE"))
online_names = online_board.signal({}, "online", scope=Scope.GLOBAL)


@online_board.db.on_open
async def online_board_schema(db: Database) -> None:
    await db.execute("CREATE TABLE IF NOT EXISTS cards (title TEXT NOT NULL)")


@online_board.on_connect
def online_board_came(c: Context) -> None:
    name = str(c.params.get("name", "?"))
    online_names.mutate(lambda who: {**who, name: who.get(name, 0) + 1})


@online_board.on_disconnect
def online_board_left(c: Context) -> None:
    name = str(c.params.get("name", "?"))
    online_names.mutate(lambda who: {**who, name: who.get(name, 0) - 1})


@online_board.page("/{name}")
def online_board_page(c: Context, name: str) -> None:
    who = c.signal({}, "online", scope=Scope.GLOBAL)

    async def view() -> str:
        cards = await online_board.db.fetchval("SELECT count(*) FROM cards")
        here = ", ".join(sorted(n for n, tabs in who.value.items() if tabs > 0))
        return f'<p id="online">{here}</p><p id="cards">{cards}</p>'

    c.view(view)


#: A whole document built with ``html()`` (its own head and body): its bootstrap was escaped into
#: text, and an update of its body dropped what the page puts at the end of it (the alert).
document_app = App(title="Document", foot=['<footer id="app-foot">app foot</footer>'])


@document_app.page("/")
def document_page(c: Context) -> None:
    n = c.signal(0, "n")

    @c.action
    def bump() -> None:
        n.value += 1
        c.sync()

    c.view(
        lambda: html(
            "<!doctype html><html><head><title>Own document</title></head><body>"
            '<main id="m"><p id="n">{}</p><button id="b" data-on:click="{}">+</button></main></body></html>',
            n.value,
            bump,
        )
    )


#: A lobby whose button makes a game and sends the tab to its page (a newcomer's tic-tac-toe):
#: under ``--workers 2`` the game's page, often served by the other worker, said "No such game".
games_app = App(title="Games", action_rate=0)


@games_app.page("/")
def games_lobby(c: Context) -> None:
    games = c.signal([], "games", scope=Scope.GLOBAL)

    @c.action
    def create() -> None:
        name = f"g{len(games.value)}-{os.getpid()}-{time.monotonic_ns()}"
        games.mutate(lambda names: [*names, name])
        c.redirect(f"/game/{name}")

    c.view(lambda: f'<main id="lobby"><button id="create" data-on:click="{create}">new game</button></main>')


@games_app.page("/game/{name}")
def games_game(c: Context, name: str) -> None:
    games = c.signal([], "games", scope=Scope.GLOBAL)
    c.view(lambda: f'<main id="{"game" if name in games.value else "nogame"}">{name}</main>')


notes_app = App(title="Notes")


@notes_app.page("/")
def notes_page(c: Context) -> None:
    text = c.signal("", "text", writable=True, max_length=100_000)

    @c.action
    def load() -> None:
        text.value = "loaded: "  # a server write: the signal's revision moves past 0

    c.view(
        lambda: html(
            '<main id="notes"><button id="load" data-on:click="{}">load</button>'
            '<textarea id="text" {}></textarea></main>',
            load,
            text.bind(),
        )
    )


#: Keys the browser reads from the event and posts as typed arguments (``Action.js``): a game's controls.
keys = App(title="Keys")


@keys.page("/")
def keys_page(c: Context) -> None:
    pressed = c.signal([], "pressed")

    @c.action
    def press(key: str, shifted: bool) -> None:
        pressed.value = [*pressed.value, key.upper() if shifted else key]
        c.sync()

    c.view(
        lambda: html(
            '<main id="keys" data-on:keydown__window="{press}"><p id="pressed">{shown}</p></main>',
            press=press.js(key="evt.key", shifted="evt.shiftKey"),
            shown=" ".join(pressed.value),
        )
    )
