"""A chat's composer whose send is ``async`` (it awaits, as a database insert does): each action
must keep the text its own post carried, however many posts of the tab are in flight."""

from __future__ import annotations

import asyncio

from pyvia import App, Context, Request

app = App(title="async send", action_rate=0)
said: list[str] = []


@app.page("/")
def composer(c: Context) -> None:
    draft = c.signal("", "draft", writable=True)

    @c.action
    async def send() -> None:
        text = draft.as_str()  # read before anything is awaited, as the docs' chat does
        await asyncio.sleep(0.002)  # an INSERT, say
        said.append(text)
        if draft.as_str() != text:
            said.append(f"changed under it: {text!r} became {draft.as_str()!r}")

    c.view(lambda: "<p>composer</p>")


@app.route("GET", "/said")
def everything_said(request: Request) -> list[str]:
    return said
