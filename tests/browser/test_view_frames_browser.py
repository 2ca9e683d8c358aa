"""A view that is one element with an id goes without the page's wrapper, morphed by that id.

Chromium through the 50 ms latency proxy, two visitors on one shared board: quick clicks while
the board's broadcasts are on their way, then a view whose root element changes (another id,
then two elements, then back). Every page must show every state, with no error: a frame sent
bare to a page whose view has another root would find nothing to morph.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, Page, expect

from pyvia import App, Context, Scope
from tests.browser.latency import LatencyProxy, latency_proxy
from tests.helpers import running_server


def board_app() -> App:
    app = App(title="Board")

    @app.page("/")
    def board(c: Context) -> None:
        c.scope(Scope.ROUTE)
        n = c.signal(0, "n", scope=Scope.ROUTE)
        shape = c.signal("board", "shape", scope=Scope.ROUTE)

        @c.action
        def inc() -> None:
            n.increment()

        @c.action
        def reshape(to: str) -> None:
            shape.value = to

        def view() -> str:
            buttons = (
                f'<button id="inc" data-on:click="{inc}">+</button>'
                f'<button id="to-other" data-on:click="{reshape(to="other")}">other</button>'
                f'<button id="to-split" data-on:click="{reshape(to="split")}">split</button>'
                f'<button id="to-board" data-on:click="{reshape(to="board")}">board</button>'
            )
            if shape.value == "other":
                return f'<article id="other"><b id="n">{n.value}</b>{buttons}</article>'
            if shape.value == "split":
                return f'<p id="head">split</p><div id="rest"><b id="n">{n.value}</b>{buttons}</div>'
            return f'\n<section id="board" data-n="{n.value}">\n  <b id="n">{n.value}</b>\n  {buttons}\n</section>\n'

        c.view(view, share_render=True)

    return app


@pytest.fixture
def proxy() -> Iterator[LatencyProxy]:
    with running_server(board_app()) as (_, port), latency_proxy(port) as proxy:
        yield proxy


def _open(browser: Browser, proxy: LatencyProxy, errors: list[str]) -> Page:
    page = browser.new_context().new_page()  # a visitor of its own
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    page.goto(f"http://127.0.0.1:{proxy.port}/")
    expect(page.locator("#n")).to_have_text("0")
    return page


def test_every_visitor_sees_every_shape_of_a_shared_view(browser: Browser, proxy: LatencyProxy) -> None:
    errors: list[str] = []
    a = _open(browser, proxy, errors)
    b = _open(browser, proxy, errors)
    time.sleep(0.3)  # both streams open
    try:
        for _ in range(8):  # each click is posted before the last broadcast came back
            a.locator("#inc").click()
        for page in (a, b):
            expect(page.locator("#board #n")).to_have_text("8")
            expect(page.locator("#board")).to_have_attribute("data-n", "8")
        b.locator("#to-other").click()
        for page in (a, b):
            expect(page.locator("#other #n")).to_have_text("8")
            expect(page.locator("#board")).to_have_count(0)
        a.locator("#inc").click()
        b.locator("#inc").click()
        for page in (a, b):
            expect(page.locator("#other #n")).to_have_text("10")
        a.locator("#to-split").click()
        for page in (a, b):
            expect(page.locator("#head")).to_have_text("split")
            expect(page.locator("#rest #n")).to_have_text("10")
        b.locator("#to-board").click()
        b.locator("#inc").click()
        for page in (a, b):
            expect(page.locator("#board #n")).to_have_text("11")
            expect(page.locator("#head")).to_have_count(0)
            expect(page.locator("#via-view > section#board")).to_have_count(1)
        a.locator("#inc").click()
        for page in (a, b):
            expect(page.locator("#board #n")).to_have_text("12")
        assert errors == []
    finally:
        a.context.close()
        b.context.close()
