"""A chat-like page for the reliability tests: every tab of ``/`` joins one room, and a message of
about 2 KB is posted to the room every 50 ms (its view and its signal go to every tab).

Small stream limits make the slow-reader bounds engage within seconds: 64 KiB of unsent bytes per
tab before its view frames are held, 512 KiB for all tabs together.
"""

from __future__ import annotations

import itertools

from pyvia import App, Context

ROOM = "room:lobby"
KEEP = 20  # messages a tab shows

app = App(title="chat", max_stream_buffer=64 * 1024, max_unsent_bytes=512 * 1024)
_count = itertools.count()
_messages: list[str] = []


@app.page("/")
def chat(c: Context) -> None:
    c.scope(ROOM)
    latest = c.signal("", "latest", scope=ROOM)

    def view() -> str:
        items = "".join(f"<li>{m}</li>" for m in _messages)
        return f'<ul id="messages">{items}</ul><p id="latest">{latest.value[:40]}</p>'

    c.view(view, share_render=True)


def post_message() -> None:
    n = next(_count)
    text = f"message {n} " + "lorem ipsum " * 170  # about 2 KB
    _messages.append(text)
    del _messages[:-KEEP]
    for state in app.scopes:
        if state.name == ROOM and "latest" in state.signals:
            state.signals["latest"].value = text
    app.broadcast(ROOM)


app.set_interval(post_message, 0.05)
