"""The app ``python -m bench.cluster`` runs on one or several workers.

``work`` is a CPU-bound private action (``BENCH_WORK`` iterations of arithmetic, about 2 ms by
default); ``tap`` is a trivial private action (forwarding cost); ``bump`` increments a counter
shared by every tab of the route (broadcast-bound).
"""

from __future__ import annotations

import os

from pyvia import App, Context, Scope

app = App(title="Cluster bench", action_rate=0)
WORK = int(os.environ.get("BENCH_WORK", "60000"))


def busy(n: int) -> int:
    total = 0
    for i in range(n):
        total += i * i % 7
    return total


@app.page("/")
def page(c: Context) -> None:
    c.scope(Scope.ROUTE)
    n = c.signal(0, "n")
    count = c.signal(0, "count", scope=Scope.ROUTE)

    @c.action
    def work() -> None:
        n.value = busy(WORK) + n.value % 2

    @c.action
    def tap() -> None:
        n.value += 1

    @c.action
    def bump() -> None:
        count.increment()

    c.view(lambda: f"<p id='c'>{count.value}</p>", share_render=True)
