"""Async page handlers, actions and views: a view that awaits renders once its awaits are done, and
a tab's updates stay in the order they were made."""

from __future__ import annotations

import asyncio
import gc
import logging
import time

import pytest

from pyvia import App, Context, Scope, html
from pyvia.testing import TestClient


def make_app(log: list[str]) -> App:
    app = App()
    rows = ["first"]

    async def fetch_rows() -> list[str]:  # a database read, say
        await asyncio.sleep(0.01)
        return list(rows)

    @app.page("/")
    async def page(c: Context) -> None:
        title = await asyncio.sleep(0, result="Notes")  # an async handler may await before declaring
        c.scope("room:notes")
        count = c.signal(0, "count")
        n = c.signal(0, "n", scope=Scope.custom("room", "notes"))

        @c.action
        async def add() -> None:
            await asyncio.sleep(0.005)
            rows.append(f"row {len(rows)}")
            count.value += 1
            c.sync()  # the view awaits: its frame goes out once rendered, before what follows
            c.patch_elements(html('<p id="after">after {}</p>', count.value))

        @c.action
        def bump() -> None:
            n.value += 1  # reaches every tab of the room, whose async views render again

        async def view() -> str:
            got = await fetch_rows()
            log.append(f"rendered {len(got)}")
            return html("<h1>{}</h1><ul>{}</ul>", title, (html("<li>{}</li>", r) for r in got))

        c.view(view)

    return app


def test_an_async_handler_and_view_render_the_page_once_their_awaits_are_done() -> None:
    log: list[str] = []
    with TestClient(make_app(log)) as client:
        tab = client.open("/")
        assert "<h1>Notes</h1><ul><li>first</li></ul>" in tab.html
        assert log == ["rendered 1"]


def test_a_sync_of_an_async_view_arrives_before_the_frames_made_after_it() -> None:
    log: list[str] = []
    with TestClient(make_app(log)) as client:
        tab = client.open("/")
        tab.new_events()
        tab.action("add")  # the test client settles: the render's awaits are done when it returns
        events = tab.new_events()
        views = [i for i, e in enumerate(events) if e.view is not None]
        after = [i for i, e in enumerate(events) if "after 1" in e.elements]
        assert views and after and views[0] < after[0]
        assert "<li>row 1</li>" in tab.html


def test_a_broadcast_renders_every_async_view_of_the_scope() -> None:
    log: list[str] = []
    with TestClient(make_app(log)) as client:
        a, b = client.open("/"), client.open("/")
        a.action("bump")
        client.clock.advance(0.1)
        client.settle()  # the async views of the room render
        assert "<li>first</li>" in b.html and b.signals["_room_notes__n"] == 1


def test_renders_that_finish_out_of_order_still_reach_the_tab_in_order() -> None:
    app = App()

    @app.page("/")
    def page(c: Context) -> None:
        state = {"label": "start", "delay": 0.0}

        @c.action
        async def twice() -> None:
            state.update(label="slow first", delay=0.05)
            c.sync()  # this render takes 50 ms ...
            await asyncio.sleep(0.01)  # (it has started: it read its label)
            state.update(label="fast second", delay=0.0)
            c.sync()  # ... this one none: it is done first, and must still arrive after the first

        async def view() -> str:
            label, delay = state["label"], state["delay"]
            await asyncio.sleep(delay)
            return html("<p>{}</p>", label)

        c.view(view)

    with TestClient(app) as client:
        tab = client.open("/")
        tab.new_events()
        tab.action("twice")
        labels = [e.view for e in tab.new_events() if e.view is not None]
        assert labels == ["<p>slow first</p>", "<p>fast second</p>"]
        assert tab.html == "<p>fast second</p>"


def test_a_second_browser_runs_the_async_renders_its_requests_start(caplog: pytest.LogCaptureFixture) -> None:
    """A second TestClient is another browser of the same app: the renders its requests set off
    (an on_connect hook writes a count every tab shows) run on the app's loop, before the request
    returns, not after a 5 s wait each; what is still rendering when the test ends is ended too."""
    app = App()
    online = app.signal(0, "online", scope=Scope.GLOBAL)

    @app.on_connect
    def came(c: Context) -> None:
        online.increment()

    @app.page("/")
    def page(c: Context) -> None:
        seen = c.signal(0, "online", scope=Scope.GLOBAL)

        async def view() -> str:
            await asyncio.sleep(0)
            return html('<p id="n">{}</p>', seen.value)

        c.view(view)

    with caplog.at_level(logging.ERROR, logger="asyncio"):
        with TestClient(app) as ann, TestClient(app) as bob:
            a = ann.open("/")
            started = time.monotonic()
            b = bob.open("/")
            assert time.monotonic() - started < 2  # it waited 5 s twice (page, stream) for a render
            bob.clock.advance(0.05)  # the broadcast's tick
            bob.settle()
            assert online.value == 2 and a.html == b.html == '<p id="n">2</p>'
            online.increment()
            ann.clock.advance(0.05)  # renders set off, and the test ends before they run
        gc.collect()
    assert not [r for r in caplog.records if "destroyed but it is pending" in r.getMessage()]
