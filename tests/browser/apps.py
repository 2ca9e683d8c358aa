"""Apps for the browser tests, configured through the environment of the server process."""

from __future__ import annotations

import asyncio
import os

from pyvia import App, Context, Scope

preference = tuple(os.environ.get("TEST_COMPRESSION", "zstd,br,gzip").split(","))
idle_release = float(os.environ.get("TEST_IDLE_RELEASE", "60"))

compressed = App(
    title="Compressed",
    compression_preference=preference,
    encoder_idle_release=idle_release,
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
    return compressed.compression.budget.stats()


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
