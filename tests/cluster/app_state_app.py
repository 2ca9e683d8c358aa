"""App state under several workers: app signals declared at import time, before any engine link
exists, written by an app timer and by actions; session data; the timer's ticks, each recorded
with the worker that ran it and when.

``PYVIA_TEST_TICK_MS`` sets the timer's period (200 ms unless set).
"""

from __future__ import annotations

import os
import time

from pyvia import App, Context, Request, Response

app = App(title="App state")

PERIOD_MS = float(os.environ.get("PYVIA_TEST_TICK_MS", "200"))
ticks = app.signal(0, "ticks", scope="global")  # at import: no engine link yet
clicks = app.signal(0, "clicks", scope="global")
last = app.signal("", "last", scope="global")


def tick() -> None:
    """Runs on one worker of the cluster at a time; each tick is recorded with its worker and time."""
    ticks.increment()
    app.global_state.mutate("tick_log", lambda log: [*log[-499:], [os.getpid(), time.time()]], [])


app.set_interval(tick, PERIOD_MS / 1000)


@app.page("/")
def home(c: Context) -> None:
    @c.action
    def click() -> None:
        clicks.increment()
        last.value = f"clicked by {os.getpid()}"

    @c.action
    def remember() -> None:
        c.session_data["visits"] = c.session_data.get("visits", 0) + 1

    c.view(
        lambda: f"<main id='m'>ticks {ticks.value} clicks {clicks.value} last {last.value} worker {os.getpid()}</main>"
    )


@app.route("GET", "/pid")
def pid(request: Request) -> Response:
    return Response.text(str(os.getpid()))


@app.route("GET", "/state")
def state(request: Request) -> Response:
    session_id = app.session_id(request)
    visits = app.session_data(session_id).get("visits", 0) if session_id else 0
    return Response.json(
        {
            "pid": os.getpid(),
            "ticks": ticks.value,
            "clicks": clicks.value,
            "last": last.value,
            "visits": visits,
            "tabs": app.count_clients(),
            "local_tabs": len(app.local_clients()),
        }
    )


@app.route("GET", "/ticks")
def tick_log(request: Request) -> Response:
    return Response.json(app.global_state.get("tick_log", []))
