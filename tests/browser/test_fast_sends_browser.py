"""A user who types and sends line after line faster than the round trip, on a page whose send
is ``async`` (it awaits before it reads the line): every line is stored once, as typed, in order.

Chromium through the 50 ms latency proxy; each Enter posts the draft and clears the input in the
page (the docs' pattern), so several sends of one tab are on their way at once.
"""

from __future__ import annotations

import asyncio
import time

from playwright.sync_api import Browser, expect

from pyvia import App, Context, html
from tests.browser.latency import latency_proxy
from tests.helpers import running_server

LINES = [f"line {i} of the fast typist" for i in range(15)]


def composer_app(said: list[str]) -> App:
    app = App(title="Composer", action_rate=0)

    @app.page("/")
    def page(c: Context) -> None:
        draft = c.signal("", "draft", writable=True)
        count = c.signal(0, "count")

        @c.action
        async def send() -> None:
            await asyncio.sleep(0.2)  # a check that awaits (is the room still open?), say
            said.append(draft.as_str())  # the line this send posted, whatever came after it
            count.value = len(said)

        c.view(
            lambda: html(
                '<form id="f" data-on:submit__prevent="{}; {} = \'\'"><input id="draft" {}></form>'
                '<p id="count" data-text="{}"></p>',
                send,
                draft.ref(),
                draft.bind(),
                count.ref(),
            )
        )

    return app


def test_lines_sent_faster_than_the_round_trip_are_stored_once_each_in_order(browser: Browser) -> None:
    said: list[str] = []
    with running_server(composer_app(said)) as (_, port), latency_proxy(port) as proxy:
        page = browser.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        try:
            page.goto(f"http://127.0.0.1:{proxy.port}/")
            time.sleep(0.4)  # the stream is open
            for line in LINES:
                page.locator("#draft").fill(line)
                page.locator("#draft").press("Enter")
            expect(page.locator("#count")).to_have_text(str(len(LINES)), timeout=10_000)
            assert said == LINES
            expect(page.locator("#draft")).to_have_value("")
            assert errors == []
        finally:
            page.close()
