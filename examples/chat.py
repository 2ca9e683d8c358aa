"""Chat rooms: each room is a custom scope, the user name lives in the session.

Open ``/chat/lobby`` in two browsers: messages, the list of who is here and "… is typing" are
shared by every tab of the room; the name you pick is shared by every tab of your session.
"""

from __future__ import annotations

import html

from pyvia import App, Context, Scope

app = App(title="Chat")
MAX_MESSAGES = 50
TYPING_SECONDS = 3.0


def room_scope(room: str) -> str:
    return f"room:{room}"


def expire_typing() -> None:
    """Forget typists who stopped typing (one app timer for every room)."""
    now = app.now()
    for state in app.scopes:
        typing = state.signals.get("typing")
        if typing is not None and typing.value:
            fresh = [t for t in typing.value if now - t["at"] < TYPING_SECONDS]
            if len(fresh) != len(typing.value):
                typing.value = fresh


app.set_interval(expire_typing, 1000)


@app.page("/chat/{room}")
def chat(c: Context, room: str) -> None:
    scope = room_scope(room)
    c.scope(scope)
    messages = c.signal([], "messages", scope=scope)
    typing = c.signal([], "typing", scope=scope)
    username = c.signal(c.session_data.get("name", ""), "username", scope=Scope.SESSION)
    draft = c.signal("", "draft")
    name_field = c.signal(c.session_data.get("name", ""), "name")

    @c.action
    def set_name() -> None:
        name = name_field.as_str().strip()[:30]
        if name:
            c.session_data["name"] = name
            username.value = name
            app.broadcast(scope)  # the presence list shows names

    @c.action
    def send() -> None:
        text = draft.as_str().strip()[:500]
        if not text or not username.value:
            return
        messages.mutate(lambda ms: [*ms, {"who": username.value, "text": text}][-MAX_MESSAGES:])
        typing.mutate(lambda ts: [t for t in ts if t["who"] != username.value])
        draft.value = ""

    @c.action
    def is_typing() -> None:
        if username.value:
            now = app.now()
            typing.mutate(lambda ts: [*[t for t in ts if t["who"] != username.value],
                                      {"who": username.value, "at": now}])

    def view() -> str:
        present = sorted({ctx.session_data.get("name") or "(anonymous)" for ctx in app.local_clients(scope)})
        lines = "".join(
            f"<li><b>{html.escape(m['who'])}</b>: {html.escape(m['text'])}</li>" for m in messages.value
        )
        typists = [t["who"] for t in typing.value if t["who"] != username.value]
        typing_line = f"{html.escape(', '.join(typists))} typing…" if typists else ""
        return f"""
<main id="chat">
  <h1>#{html.escape(room)}</h1>
  <form id="name-form" data-on:submit__prevent="{set_name}">
    <input id="name" placeholder="Your name" {name_field.bind()}><button>Set name</button>
    <span id="me" data-text="{username.ref()}"></span>
  </form>
  <p id="present">Here: {html.escape(", ".join(present))}</p>
  <ul id="messages">{lines}</ul>
  <p id="typing">{typing_line}</p>
  <form id="send-form" data-on:submit__prevent="{send}">
    <input id="draft" autocomplete="off" {draft.bind()} data-on:input__debounce.300ms="{is_typing}">
    <button>Send</button>
  </form>
</main>"""

    c.view(view)


@app.page("/")
def index(c: Context) -> None:
    c.view(lambda: '<p>Rooms: <a href="/chat/lobby">lobby</a>, <a href="/chat/random">random</a></p>')


if __name__ == "__main__":
    app.run(host="127.0.0.1", port=3000)
