"""The app the multi-worker tests run: shared state of every kind, on several workers or nodes.

Each action reports the worker that ran it in the tab signal ``pid``, so a test sees where an
action was answered (its own tab, or forwarded to the worker holding the tab).
"""

from __future__ import annotations

import os
import time

from pyvia import App, Context, Request, Response, Scope

app = App(title="Shared state")


def tick() -> None:
    """An app timer: with several workers exactly one of them runs it."""
    app.global_state.mutate("tickers", lambda pids: sorted({*pids, os.getpid()}), [])


app.set_interval(tick, 0.1)


@app.page("/")
def home(c: Context) -> None:
    c.scope(Scope.ROUTE)
    count = c.signal(0, "count", scope=Scope.ROUTE)
    items = c.signal([], "items", scope=Scope.ROUTE)
    item = c.signal("", "item", writable=True)
    pid = c.signal(0, "pid")
    notes = c.signal(0, "notes")
    cart = c.signal(0, "cart", scope=Scope.SESSION)
    games = c.signal([], "games", scope=Scope.GLOBAL)

    def ran_here() -> None:
        pid.value = os.getpid()

    @c.action
    def bump() -> None:
        count.increment()
        ran_here()

    @c.action
    def add() -> None:
        name = item.value
        items.mutate(lambda xs: [*xs, name])
        ran_here()

    @c.action
    def note() -> None:
        c.tab_state["notes"] = c.tab_state.get("notes", 0) + 1
        notes.value = c.tab_state["notes"]
        ran_here()

    @c.action
    def visit() -> None:
        app.global_state.increment("visits")
        ran_here()

    @c.action
    def buy() -> None:
        cart.increment()
        ran_here()

    @c.action
    def login() -> None:
        c.session_data["user"] = item.value
        ran_here()

    @c.action
    def rotate() -> None:
        app.regenerate_session(c)  # at a login: the session's tabs on every worker follow
        ran_here()

    @c.action
    def announce() -> None:
        app.broadcast(Scope.route("/"))  # no signal changed: the view reads global state
        ran_here()

    @c.action
    def create() -> None:
        name = item.value
        games.mutate(lambda names: [*names, name])
        c.redirect(f"/game/{name}")  # the page of the game just made, on whichever worker

    @c.action
    def stall() -> None:
        time.sleep(3.0)  # holds this worker's loop on purpose: what a stuck owner looks like
        ran_here()

    c.view(lambda: f"<main id='m'>count {count.value} visits {app.global_state.get('visits', 0)}</main>")


@app.page("/game/{name}")
def game(c: Context, name: str) -> None:
    games = c.signal([], "games", scope=Scope.GLOBAL)
    c.view(lambda: f"<main id='g'>{'found' if name in games.value else 'missing'} {name}</main>")


@app.page("/claim")
def claim(c: Context) -> None:
    """Two bidders claim one prize per round at the same moment: each is told whether it won, from
    what the engine kept (mutate's own result is this worker's view, which the engine may redo)."""
    winners = c.signal({}, "winners", scope=Scope.GLOBAL)
    round_ = c.signal(0, "round", writable=True)
    won = c.signal("", "won")

    @c.action
    async def take() -> None:
        key = str(round_.value)
        winners.mutate(lambda kept: kept if key in kept else {**kept, key: c.id})
        kept = await winners.committed()
        won.value = f"{key}:{'yes' if kept.get(key) == c.id else 'no'}"


@app.page("/cards")
def cards(c: Context) -> None:
    """A board whose cards change by scope patches, from an action on any node."""
    c.scope("board:one")

    @c.action
    def edit(text: str) -> None:
        app.patch_elements("board:one", f'<li id="card">{text} from {os.getpid()}</li>')

    @c.action
    def grow(size: int, parts: int) -> None:  # patches past the engine's message size, kept in state too
        for part in range(parts):
            line = f"{part}:" + "x" * size
            app.global_state[f"line{part}"] = line
            app.patch_elements("board:one", f'<li id="line{part}">{line}</li>')

    def view() -> str:
        lines = "".join(f'<li id="line{i}">{app.global_state.get(f"line{i}", "")}</li>' for i in range(6))
        return f"<ul id='cards'><li id='card'>first</li>{lines}</ul>{edit}"

    c.view(view)


@app.page("/wizard")
def wizard(c: Context) -> None:
    c.add_scope("wiz")
    c.view(lambda: "<main id='w'>in the wizard</main>")


@app.page("/admin")
def admin(c: Context) -> None:  # shows the count of a scope it is not in
    c.scope("admin")
    c.view(lambda: f"<main id='a'>{app.count_clients('wiz')} in the wizard</main>", share_render=True)


@app.on_connect
@app.on_disconnect
def presence_changed(c: Context) -> None:
    if "wiz" in c.scopes:  # as the docs show: re-render who shows the count
        app.broadcast("admin")


@app.route("GET", "/pid")
def pid_route(request: object) -> Response:
    return Response.text(str(os.getpid()))


@app.route("GET", "/whoami")
def whoami(request: Request) -> Response:
    session_id = app.session_id(request)
    user = app.session_data(session_id).get("user", "") if session_id else ""
    return Response.text(user)


@app.route("GET", "/watching")
def watching(request: Request) -> Response:
    return Response.text(str(app.count_clients(Scope.route("/"))))


@app.route("GET", "/block")
def block(request: object) -> Response:
    time.sleep(0.3)  # holds this worker's loop on purpose: the next connections go to the other
    return Response.text(str(os.getpid()))


@app.route("GET", "/tickers")
def tickers(request: object) -> Response:
    return Response.json(app.global_state.get("tickers", []))
