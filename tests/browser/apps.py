"""Apps for the browser tests, configured through the environment of the server process."""

from __future__ import annotations

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
