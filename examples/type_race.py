"""Typing races in rooms: everyone in a room types the same sentence, progress bars move live.

``/`` lists the rooms; ``/room/{name}`` joins the custom scope ``race:{name}``, which holds the
room's state in shared signals (the phase, the countdown, the sentence, the players). Your name
is kept in the session (and shown in every tab of it through a SESSION-scoped signal).

Pressing "Start" joins the race and, if none is under way, starts a 3-2-1 countdown; others may
join until it ends. One app timer drives the countdowns of every room and ends races that run
too long. Each keystroke posts your text (throttled); the server measures the correct prefix,
and the room's broadcast moves everyone's bars. Finishers are ranked by time; afterwards anyone
may start the next race.
"""

from __future__ import annotations

import hashlib
import math
import random
import re

from pyvia import App, Context, Markup, Scope, SharedSignal, html, raw

COUNTDOWN = 3  # seconds
RACE_LIMIT = 120  # seconds: a race ends then, finished or not
ROOMS = ("lobby", "sprint", "marathon")
SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "Pack my box with five dozen liquor jugs.",
    "Sphinx of black quartz, judge my vow.",
    "How vexingly quick daft zebras jump!",
    "Servers render the page and the browser only morphs it.",
]
MAX_NAME = 20  # characters of a player's or a room's name
MAX_TYPED = 2 * max(map(len, SENTENCES))  # room for typos past the end

app = App(
    title="Type race",
    head=[
        """<style>
  body { font-family: system-ui, sans-serif; margin: 2rem; max-width: 44rem; }
  #sentence { font: 1.3rem/1.6 ui-monospace, monospace; padding: .6rem; background: #f6f8fa; border-radius: 6px; }
  #sentence .done { color: #1b5e20; background: #c8e6c9; }
  #typed { font: 1.2rem ui-monospace, monospace; width: 100%; box-sizing: border-box; padding: .4rem; }
  #typed.typo { background: #ffcdd2; }
  .player { display: grid; grid-template-columns: 9rem 1fr 7rem; gap: .6rem; align-items: center; margin: .3rem 0; }
  .player.me .who { font-weight: bold; }
  .bar { height: .9rem; background: #eee; border-radius: 4px; overflow: hidden; }
  .bar div { height: 100%; background: #1a73e8; }
  #phase { margin: 1rem 0; font-size: 1.2rem; }
  #countdown { font-size: 3rem; font-weight: bold; text-align: center; margin: .5rem; }
  ol#results li { margin: .2rem 0; }
</style>"""
    ],
)


def room_scope(room: str) -> str:
    """The room's custom scope; ``Scope.custom`` escapes what a name may hold (the rooms here are
    letters and digits, so ``race:lobby`` is the name as it is, and the list reads it back)."""
    return Scope.custom("race", room)


def player_key(session_id: str) -> str:
    """A player is a browser session; others see a hash of it, never the session id."""
    return hashlib.sha256(session_id.encode()).hexdigest()[:12]


def correct_prefix(typed: str, sentence: str) -> int:
    """How many characters from the start are typed right."""
    n = 0
    while n < min(len(typed), len(sentence)) and typed[n] == sentence[n]:
        n += 1
    return n


def race_over(scope: str, room: dict[str, SharedSignal]) -> bool:
    """Every player still in the room has finished, or the race ran past its limit."""
    if app.wall_time() - room["starts_at"].value > RACE_LIMIT:
        return True
    present = {player_key(ctx.session_id) for ctx in app.local_clients(scope)}
    return all(p["time"] is not None or p["key"] not in present for p in room["players"].value)


def tick() -> None:
    """One timer for every room: count down, start the race, end it when it is over."""
    for state in app.scopes.matching("race:*"):
        room = state.signals
        phase = room.get("phase")
        if phase is None:
            continue
        if phase.value == "countdown":
            left = math.ceil(room["starts_at"].value - app.wall_time())
            if left <= 0:
                phase.value = "racing"
            elif left != room["countdown"].value:
                room["countdown"].value = left
        elif phase.value == "racing" and race_over(state.name, room):
            phase.value = "finished"


app.set_interval(tick, 0.1)


@app.on_connect
@app.on_disconnect
def rooms_changed(c: Context) -> None:
    app.broadcast(Scope.route("/"))  # the room list shows who is where


@app.page("/")
def rooms(c: Context) -> None:
    c.scope(Scope.ROUTE)
    wanted = c.signal("", "wanted", writable=True, max_length=MAX_NAME)
    problem = c.signal("", "problem")

    @c.action
    def go() -> None:
        name = wanted.as_str().strip().lower()
        if not re.fullmatch(rf"[a-z0-9]{{1,{MAX_NAME}}}", name):
            problem.value = f"A room name is 1 to {MAX_NAME} letters or digits."
            return
        c.redirect(app.url(f"/room/{name}"))

    def view() -> Markup:
        open_rooms = {s.name.split(":", 1)[1] for s in app.scopes.matching("race:*")}
        items = (
            html(
                '<li><a href="{}">{}</a> <span class="count">{} here</span></li>',
                app.url(f"/room/{name}"),
                name,
                app.count_clients(room_scope(name)),
            )
            for name in sorted(set(ROOMS) | open_rooms)
        )
        return html(
            """
<main>
  <h1>Type race</h1>
  <ul id="rooms">{items}</ul>
  <form id="go-form" data-on:submit__prevent="{go}">
    <input id="wanted" {wanted} maxlength="{max_name}" placeholder="another room" autocomplete="off">
    <button>Go</button>
  </form>
  <p id="problem" data-text="{problem}"></p>
</main>""",
            items=items,
            go=go,
            wanted=wanted.bind(),
            max_name=MAX_NAME,
            problem=problem.ref(),
        )

    c.view(view, share_render=True)  # nothing in it is one tab's: render once for all


@app.page("/room/{name}", title="Type race")
def race(c: Context, name: str) -> None:
    if not re.fullmatch(rf"[a-z0-9]{{1,{MAX_NAME}}}", name):
        c.view(lambda: html('<p>No room here. <a href="{}">All rooms</a></p>', app.url("/")))
        return
    scope = room_scope(name)
    c.scope(scope)  # c.broadcast() and the shared signals below reach everyone in the room
    room: dict[str, SharedSignal] = {
        "phase": c.signal("waiting", "phase", scope=scope),  # waiting, countdown, racing, finished
        "countdown": c.signal(COUNTDOWN, "countdown", scope=scope),
        "starts_at": c.signal(0.0, "starts_at", scope=scope),
        "sentence": c.signal(random.choice(SENTENCES), "sentence", scope=scope),
        "players": c.signal([], "players", scope=scope),  # [{key, name, done, time}]
    }
    phase, countdown, sentence, players = room["phase"], room["countdown"], room["sentence"], room["players"]
    username = c.signal(c.session_data.get("name", ""), "username", scope=Scope.SESSION)
    name_field = c.signal(c.session_data.get("name", ""), "name_field", writable=True, max_length=MAX_NAME)
    typed = c.signal("", "typed", writable=True, max_length=MAX_TYPED)
    me = player_key(c.session_id)

    def my_entry() -> dict | None:
        return next((p for p in players.value if p["key"] == me), None)

    @c.action
    def set_name() -> None:
        chosen = name_field.as_str().strip()
        if chosen:
            c.session_data["name"] = username.value = chosen
            players.mutate(lambda ps: [{**p, "name": chosen} if p["key"] == me else p for p in ps])

    @c.action
    def start() -> None:
        if not username.value or phase.value == "racing":
            return
        if phase.value in ("waiting", "finished"):  # a new race: a new sentence, a new field
            sentence.value = random.choice([s for s in SENTENCES if s != sentence.value])
            players.value = []
            room["starts_at"].value = app.wall_time() + COUNTDOWN
            countdown.value = COUNTDOWN
            phase.value = "countdown"
        if my_entry() is None:
            entry = {"key": me, "name": username.value, "done": 0, "time": None}
            players.mutate(lambda ps: [*ps, entry])

    @c.action
    def progress() -> None:
        mine = my_entry()
        if phase.value != "racing" or mine is None or mine["time"] is not None:
            return
        text = typed.as_str()
        done = correct_prefix(text, sentence.value)
        finished = text == sentence.value
        took = round(app.wall_time() - room["starts_at"].value, 2) if finished else None
        players.mutate(lambda ps: [{**p, "done": done, "time": took} if p["key"] == me else p for p in ps])
        if finished and race_over(scope, room):
            phase.value = "finished"

    def player_rows() -> Markup:
        length = len(sentence.value)
        rows = []
        for p in players.value:
            pct = 100 * p["done"] // length if length else 0
            took = f"{p['time']:.2f} s" if p["time"] is not None else f"{pct}%"
            rows.append(
                html(
                    """<div class="player{me}">
              <span class="who">{name}</span>
              <div class="bar"><div style="width: {pct}%"></div></div><span class="took">{took}</span></div>""",
                    me=" me" if p["key"] == me else "",
                    name=p["name"],
                    pct=pct,
                    took=took,
                )
            )
        return html("{}", rows) if rows else html("<p>No players yet: press Start.</p>")

    def results() -> Markup:
        ranked = sorted((p for p in players.value if p["time"] is not None), key=lambda p: p["time"])
        words = len(sentence.value) / 5
        items = (
            html("<li>{}: {:.2f} s, {:.0f} wpm</li>", p["name"], p["time"], words / p["time"] * 60) for p in ranked
        )
        unfinished = [p["name"] for p in players.value if p["time"] is None]
        return html('<ol id="results">{}</ol>', items) + (
            html("<p>Did not finish: {}</p>", ", ".join(unfinished)) if unfinished else ""
        )

    def view() -> Markup:
        mine = my_entry()
        done = mine["done"] if mine else 0
        racing_me = phase.value == "racing" and mine is not None and mine["time"] is None
        label = {"waiting": "Start", "countdown": "Join", "finished": "Start a new race"}.get(phase.value)
        button: Markup | str
        if not username.value:
            button = html("<p>Set your name to race.</p>")
        elif label and not (phase.value == "countdown" and mine):
            button = html('<button id="start" data-on:click="{}">{}</button>', start, label)
        else:
            button = ""
        banner = {
            "waiting": "Waiting for someone to press Start.",
            "countdown": html('<div id="countdown">{}</div>', countdown.value),
            "racing": "Go!" if mine else "A race is under way; you can join the next one.",
            "finished": html("Race over.{}", results()),
        }[phase.value]
        # While racing, the input is enabled and focused; the browser clears it for a new race.
        attrs = raw('data-init="el.focus()"') if racing_me else raw("disabled")
        return html(
            """
<main id="race">
  <p><a href="{home}">All rooms</a></p>
  <h1>Room {name}</h1>
  <form id="name-form" data-on:submit__prevent="{set_name}">
    <input id="name" {name_field} maxlength="{max_name}" placeholder="Your name" autocomplete="off">
    <button>Set name</button>
    <span id="me" data-text="{username_ref}">{username}</span>
  </form>
  <div id="phase" class="{phase}">{banner}</div>
  {button}
  <p id="sentence"><span class="done">{done}</span>{rest}
  </p>
  <input id="typed" {typed} {attrs} autocomplete="off" spellcheck="false"
         data-on:input__throttle.100ms.trailing="{progress}" data-on:paste="evt.preventDefault()"
         data-class:typo="!{sentence}.startsWith({typed_ref})"
         data-effect="{phase_ref} === 'countdown' && ({typed_ref} = '')">
  <div id="players">{players}</div>
</main>""",
            home=app.url("/"),
            name=name,
            set_name=set_name,
            name_field=name_field.bind(),
            max_name=MAX_NAME,
            username_ref=username.ref(),
            username=username.value,
            phase=phase.value,
            banner=banner,
            button=button,
            done=sentence.value[:done],
            rest=sentence.value[done:],
            typed=typed.bind(),
            attrs=attrs,
            progress=progress,
            sentence=sentence.ref(),
            typed_ref=typed.ref(),
            phase_ref=phase.ref(),
            players=player_rows(),
        )

    c.view(view)


if __name__ == "__main__":
    app.run(host="127.0.0.1", port=3000)
