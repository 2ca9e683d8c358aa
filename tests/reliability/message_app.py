"""A page whose action takes a long message: a writable ``draft`` signal of up to 1 MB, sent with
``send``, which counts its characters and empties it (a chat's composer, a notes field)."""

from __future__ import annotations

from pyvia import App, Context

app = App(title="messages", action_rate=0)


@app.page("/")
def composer(c: Context) -> None:
    draft = c.signal("", "draft", writable=True, max_length=1_000_000)
    received = c.signal(0, "received")

    @c.action
    def send() -> None:
        received.value += len(draft.value)
        draft.value = ""

    c.view(lambda: f'<p id="received">{received.value}</p>')
