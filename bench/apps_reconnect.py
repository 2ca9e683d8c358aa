"""The page of ``python -m bench reconnect``: a board of 100 rows whose ticker changes 10 times a second.

Each tick is one small element patch per tab (an app timer writes every tab); the view (about
6 KB) goes out only on a full render, which is what a reconnect costs without replay.
"""

from __future__ import annotations

from pyvia import App, Context

app = App()
TICK_MS = 100
ticks = [0]


@app.on_start
def start_ticking() -> None:
    def tick() -> None:
        ticks[0] += 1
        patch = f'<b id="tick">{ticks[0]}</b>'
        for c in app.local_clients():
            c.patch_elements(patch)

    app.set_interval(tick, TICK_MS / 1000)


def rows(tick: int) -> str:
    """The board as of ``tick``: rendered for every full render, as a real view would be."""
    return "".join(
        f'<tr id="r{n}"><td>row {n}</td><td>{(n * 37 + tick) % 101}</td><td>{n * n % 97}</td></tr>' for n in range(100)
    )


@app.page("/")
def board(c: Context) -> None:
    c.view(lambda: f'<p>tick <b id="tick">{ticks[0]}</b></p><table>{rows(ticks[0])}</table>')
