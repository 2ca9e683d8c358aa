"""The app of the overload test: ``POST /work`` costs about 1 ms of CPU, synchronously or after an
``await`` (then it is a task the server tracks as in flight); ``GET /`` is the recovery probe."""

from __future__ import annotations

import asyncio
import time

from pyvia import App
from pyvia.http import Response

#: CPU seconds one unit of work burns (thread CPU time, so a preempted server still does 1 ms).
WORK_SECONDS = 0.001

app = App(title="overload")


def burn(seconds: float) -> None:
    until = time.thread_time() + seconds
    while time.thread_time() < until:
        pass


@app.route("GET", "/")
def index() -> Response:
    return Response.text("ok")


@app.route("POST", "/work")
def work() -> Response:
    burn(WORK_SECONDS)
    return Response.text("done")


@app.route("POST", "/async-work")
async def async_work() -> Response:
    await asyncio.sleep(0)
    burn(WORK_SECONDS)
    return Response.text("done")
