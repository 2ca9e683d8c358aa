"""Apps the cluster tests run under ``pyvia run --workers N``.

``app`` answers ``/pid`` with the worker's process id, ``/hit`` with a counter kept in the engine
the supervisor gave the workers (``PYVIA_ENGINE_URL``), so a test sees which worker answered and
that all of them share one state; ``/block`` holds its worker's loop, which sends the next
connections to the other workers.
"""

from __future__ import annotations

import asyncio
import os
import time

from pyvia import App, Context, Response, Scope
from pyvia.cluster import Engine, engine_from_env

app = App(title="Cluster test")
_engine: list[Engine] = []
_connected = asyncio.Event()  # on_start runs as a task: a request may come before it connected


@app.on_start
async def connect_engine() -> None:
    engine = engine_from_env(prefix="clustertest")
    await engine.connect()
    _engine.append(engine)
    _connected.set()


@app.on_stop
async def close_engine() -> None:
    while _engine:
        await _engine.pop().close()


@app.route("GET", "/pid")
def pid(request: object) -> Response:
    return Response.text(str(os.getpid()))


@app.route("GET", "/block")
def block(request: object) -> Response:
    time.sleep(0.3)  # holds this worker's loop on purpose
    return Response.text(str(os.getpid()))


@app.route("GET", "/hit")
async def hit(request: object) -> Response:
    await asyncio.wait_for(_connected.wait(), 10)
    count = await _engine[0].increment("hits", "total")
    return Response.text(f"{os.getpid()} {count}")


@app.page("/")
def home(c: Context) -> None:
    c.view(lambda: f"<main id='home'>worker {os.getpid()}</main>")


#: A page with a session-scoped and a route-scoped signal and no timers: what a tab alone costs
#: the engine (``test_engine_traffic``).
visits = App(title="Visits")


@visits.page("/")
def visit(c: Context) -> None:
    cart = c.signal(0, "cart", scope=Scope.SESSION)
    seen = c.signal(0, "seen", scope=Scope.ROUTE)
    c.view(lambda: f"<main id='visit'>{cart.value} {seen.value}</main>")
