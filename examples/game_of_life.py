"""Conway's Game of Life on a 50x50 board shared by everyone on the page.

An app timer advances the board every 200 ms while at least one tab watches; a click on a cell
toggles it for everybody. The board is rendered once per flush (``share_render=True``) and the
same bytes go to every tab.
"""

from __future__ import annotations

import random

from pyvia import Action, App, Context, Scope

SIZE = 50
PAGE = "/"

app = App(title="Game of Life", head=["""<style>
  #board { display: grid; grid-template-columns: repeat(50, 12px); gap: 1px; width: max-content; }
  #board div { width: 12px; height: 12px; background: #eee; cursor: pointer; }
  #board div.on { background: #222; }
</style>"""])


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
            n = (board[up + left] + board[up + x] + board[up + right] + board[row + left]
                 + board[row + right] + board[down + left] + board[down + x] + board[down + right])
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


def render_board(toggle: Action) -> str:
    # one click handler for the whole board: the cell's index goes in the action's query string
    on_click = (
        "evt.target.parentElement.id == 'board' && "
        + str(toggle).replace(f"'{toggle.url}'",
                              f"'{toggle.url}?cell=' + [...evt.target.parentElement.children].indexOf(evt.target)", 1)
    )
    cells = "".join('<div class="on"></div>' if alive else "<div></div>" for alive in app.global_state["board"])
    return f'<div id="board" data-on:click="{on_click}">{cells}</div>'


@app.page(PAGE)
def life(c: Context) -> None:
    c.scope(Scope.ROUTE)
    gen = c.signal(0, "generation", scope=Scope.ROUTE)

    @c.action
    def toggle() -> None:
        try:
            cell = int(c.input("cell", "-1"))
        except ValueError:
            return
        board = app.global_state["board"]
        if 0 <= cell < len(board):
            board[cell] = not board[cell]
            c.broadcast()

    @c.action
    def randomize() -> None:
        app.global_state["board"] = new_board()
        gen.value = 0

    c.view(
        lambda: f"""
<main id="life">
  <h1>Game of Life</h1>
  <p>Generation <strong id="gen" data-text="{gen.ref()}">{gen.value}</strong>,
     {app.count_clients(c.primary_scope)} watching.
     <button id="random" data-on:click="{randomize}">Randomize</button></p>
  {render_board(toggle)}
</main>""",
        share_render=True,
    )


if __name__ == "__main__":
    app.run(host="127.0.0.1", port=3000)
