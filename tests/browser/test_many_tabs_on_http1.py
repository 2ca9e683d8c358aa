"""Many tabs of one browser on one host over HTTP/1.1, where Chromium opens six connections at most.

A user opens the app in tab after tab (`pyvia run` serves plain HTTP/1.1): each tab's stream holds
a connection. A tab in the background gives its connection back and resumes when shown, so the
seventh tab loads and every tab's clicks go through; where six visible windows hold all six, a
click that cannot be sent says so instead of hanging in silence.
"""

from __future__ import annotations

import re
import time

from playwright.sync_api import Browser, BrowserContext, Page, expect

from pyvia import App, Context
from pyvia.alerts import DEFAULT_MESSAGES
from tests.browser.latency import LatencyProxy, latency_proxy
from tests.helpers import running_server

HIDE = """() => {
    Object.defineProperty(document, 'hidden', {configurable: true, get: () => true});
    Object.defineProperty(document, 'visibilityState', {configurable: true, get: () => 'hidden'});
    document.dispatchEvent(new Event('visibilitychange'));
}"""
SHOW = """() => {
    Object.defineProperty(document, 'hidden', {configurable: true, get: () => false});
    Object.defineProperty(document, 'visibilityState', {configurable: true, get: () => 'visible'});
    document.dispatchEvent(new Event('visibilitychange'));
}"""


def shared_counter() -> App:
    app = App(title="Shared")

    @app.page("/")
    def page(c: Context) -> None:
        count = c.signal(0, "count", scope="route")

        @c.action
        def add() -> None:
            count.value += 1

        c.view(lambda: f'<p id="count" data-text="{count.ref()}"></p><button id="add" data-on:click="{add}">+</button>')

    return app


def _open(context: BrowserContext, proxy: LatencyProxy) -> Page:
    page = context.new_page()
    page.goto(f"http://127.0.0.1:{proxy.port}/", timeout=10_000)
    expect(page.locator("#count")).to_have_text(re.compile(r"^\d+$"))  # rendered
    time.sleep(0.3)  # its stream is open
    return page


def test_tab_after_tab_loads_and_a_tab_shown_again_has_what_the_others_did(browser: Browser) -> None:
    with running_server(shared_counter()) as (_, port), latency_proxy(port) as proxy:
        context = browser.new_context()  # one browser profile: one pool of six connections per host
        try:
            pages: list[Page] = []
            for _ in range(8):  # each new tab sends the one before to the background
                if pages:
                    pages[-1].evaluate(HIDE)
                pages.append(_open(context, proxy))
            last = pages[-1]
            for n in range(1, 4):
                last.locator("#add").click()
                expect(last.locator("#count")).to_have_text(str(n))
            first = pages[0]
            first.evaluate(SHOW)  # back to the first tab: its stream resumes with what it missed
            expect(first.locator("#count")).to_have_text("3")
            first.locator("#add").click()
            expect(first.locator("#count")).to_have_text("4")
            expect(first.get_by_role("alert")).to_be_hidden()
        finally:
            context.close()


def test_a_click_that_six_open_streams_hold_up_says_so_and_goes_through_once_one_closes(browser: Browser) -> None:
    with running_server(shared_counter()) as (_, port), latency_proxy(port) as proxy:
        context = browser.new_context()
        try:
            pages = [_open(context, proxy) for _ in range(6)]  # six windows side by side: all visible
            before = proxy.requests_to(b"/_action/add")
            clicked = pages[0]
            clicked.locator("#add").click()  # queued in the browser: no connection is free
            alert = clicked.get_by_role("alert")
            expect(alert).to_contain_text(DEFAULT_MESSAGES["waiting"], timeout=10_000)
            assert proxy.requests_to(b"/_action/add") == before  # it never left the browser
            pages[5].close()  # the user closes a window: its connection is free
            expect(clicked.locator("#count")).to_have_text("1", timeout=10_000)
            expect(alert).to_be_hidden()
        finally:
            context.close()
