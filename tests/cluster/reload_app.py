"""The app the reload tests run and edit: ``VERSION`` is the line a test rewrites before a reload.

``/`` is a page with a tab signal ``count`` and a global ``total``, both raised by the action
``inc`` (button ``#inc``), and an action ``fail`` that raises (button ``#fail``); ``/version``
answers the version and the worker's pid; ``/boom`` is a page whose handler fails.
``RELOAD_TEST_STATE`` names the ``persist_path``.
"""

from __future__ import annotations

import os
from html import escape

from pyvia import App, Context, Request, Response

VERSION = "v1"

app = App(title="Reload test", persist_path=os.environ["RELOAD_TEST_STATE"])


@app.page("/")
def page(c: Context) -> None:
    count = c.signal(0, "count")
    total = c.signal(0, "total", scope="global")

    @c.action
    def inc() -> None:
        count.value += 1
        total.increment()

    @c.action
    def fail() -> None:
        raise ValueError(f"the action failed in {VERSION}")

    c.view(
        lambda: (
            f"<main id='m'><p id='text'>{VERSION} count={count.value} total={total.value}</p>"
            f"<button id='inc' data-on:click=\"{escape(str(inc))}\">+</button>"
            f"<button id='fail' data-on:click=\"{escape(str(fail))}\">!</button></main>"
        )
    )


@app.page("/boom")
def boom(c: Context) -> None:
    raise LookupError(f"no such thing in {VERSION}")


@app.route("GET", "/version")
def version(request: Request) -> Response:
    return Response.text(f"{VERSION} {os.getpid()}")
