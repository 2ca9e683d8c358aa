"""Conway's Game of Life on a 50x50 board shared by everyone on the page.

An app timer advances the board every 200 ms while at least one tab watches; a click on a cell
toggles it for everybody. The board is rendered once per flush (``share_render=True``) and the
same bytes go to every tab.
"""

from __future__ import annotations

import random

from pyvia import Action, App, Context, Markup, Scope, html, raw

SIZE = 50
PAGE = "/"

app = App(
    title="Game of Life",
    head=[
        """<style>
  #board { display: grid; grid-template-columns: repeat(50, 12px); gap: 1px; width: max-content; }
  #board div { width: 12px; height: 12px; background: #eee; cursor: pointer; }
  #board div.on { background: #222; }
</style>"""
    ],
)


def new_board(fill: float = 0.25, seed: int | None = None) -> list[bool]:
    rng = random.Random(seed)
    return [rng.random() < fill for _ in range(SIZE * SIZE)]


def step(board: list[bool]) -> list[bool]:
    """One generation on a torus."""
    out = [False] * (SIZE * SIZE)
    for y in range(SIZE):
        up, down = ((y - 1) % SIZE) * SIZE, ((y + 1) % SIZE) * SIZE
        row = y * SIZE
        for x in range(SIZE):
            left, right = (x - 1) % SIZE, (x + 1) % SIZE
            n = (
                board[up + left]
                + board[up + x]
                + board[up + right]
                + board[row + left]
                + board[row + right]
                + board[down + left]
                + board[down + x]
                + board[down + right]
            )
            out[row + x] = n == 3 or (n == 2 and board[row + x])
    return out


app.global_state["board"] = new_board(seed=1)
generation = app.signal(0, "generation", scope=Scope.route(PAGE))


def tick() -> None:
    if app.count_clients(Scope.route(PAGE)) == 0:
        return  # nobody watches: the board rests
    app.global_state["board"] = step(app.global_state["board"])
    generation.increment()


app.set_interval(tick, 0.2)


ON = raw('<div class="on"></div>')
OFF = raw("<div></div>")


def render_board(toggle: Action) -> Markup:
    # One click handler for the whole board, not 2,500 bound actions: the browser puts the
    # clicked cell's index in the URL as the typed argument ``cell`` (an int is its own JSON).
    on_click = "evt.target.parentElement.id == 'board' && " + str(
        toggle.js(cell="[...evt.target.parentElement.children].indexOf(evt.target)")
    )
    return html(
        '<div id="board" data-on:click="{}">{}</div>',
        on_click,
        (ON if alive else OFF for alive in app.global_state["board"]),
    )


@app.page(PAGE)
def life(c: Context) -> None:
    c.scope(Scope.ROUTE)
    gen = c.signal(0, "generation", scope=Scope.ROUTE)

    @c.action
    def toggle(cell: int) -> None:
        def flipped(board: list[bool]) -> list[bool]:  # a new list: a change in place would stay here
            return [not alive if i == cell else alive for i, alive in enumerate(board)]

        if 0 <= cell < len(app.global_state["board"]):
            app.global_state.mutate("board", flipped)
            c.broadcast()

    @c.action
    def randomize() -> None:
        app.global_state["board"] = new_board()
        gen.value = 0

    c.view(
        lambda: html(
            """
<main id="life">
  <h1>Game of Life</h1>
  <p>Generation <strong id="gen" data-text="{ref}">{gen}</strong>,
     {watching} watching.
     <button id="random" data-on:click="{randomize}">Randomize</button></p>
  {board}
</main>""",
            ref=gen.ref(),
            gen=gen.value,
            watching=app.count_clients(c.primary_scope),
            randomize=randomize,
            board=render_board(toggle),
        ),
        share_render=True,
    )


if __name__ == "__main__":
    app.run(host="127.0.0.1", port=3000)
