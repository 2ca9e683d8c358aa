"""The app of the overload test: a counter page whose render costs about 1 ms of CPU, so a page
view is real work (a context, a render) and capacity is about a thousand views a second on one
core; ``max_waiting_contexts`` 2,000 bounds what views whose stream never comes hold."""

from __future__ import annotations

import time

from pyvia import App, Context

#: CPU seconds one render burns (thread CPU time, so a preempted server still does 1 ms).
WORK_SECONDS = 0.001

app = App(title="overload", max_waiting_contexts=2000, action_rate=0)


def burn(seconds: float) -> None:
    until = time.thread_time() + seconds
    while time.thread_time() < until:
        pass


@app.page("/")
def counter(c: Context) -> None:
    count = c.signal(0, "count")

    def view() -> str:
        burn(WORK_SECONDS)
        return f'<p id="count">{count.value}</p>'

    c.view(view)
