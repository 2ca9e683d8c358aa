"""The counter in Debian's Chromium: clicks, a cut connection, and a server restart."""

from __future__ import annotations

import time
from collections.abc import Callable

from playwright.sync_api import Browser, expect

from tests.browser.conftest import Proxy, ServerProcess, free_port


def test_counter_survives_a_cut_stream_and_a_server_restart(browser: Browser) -> None:
    server = ServerProcess("examples.counter:app", free_port())
    server.start()
    proxy = Proxy(server.port)
    page = browser.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        page.goto(f"http://127.0.0.1:{proxy.port}/")
        expect(page.locator("#count")).to_have_text("0")
        _wait(lambda: proxy.stream_requests() >= 1, "the tab to open its stream")
        for _ in range(3):
            page.click("#inc")
        expect(page.locator("#count")).to_have_text("3")

        # a network failure: every connection through the proxy is cut, the stream included
        streams_before = proxy.stream_requests()
        proxy.cut_all()
        _wait(lambda: proxy.stream_requests() > streams_before, "the tab to reopen its stream")
        expect(page.locator("#count")).to_have_text("3")
        page.click("#inc")
        expect(page.locator("#count")).to_have_text("4")

        # a restart: the new process has no record of the tab and revives it from its signed id
        streams_before = proxy.stream_requests()
        server.restart()
        _wait(lambda: proxy.stream_requests() > streams_before, "the tab to reconnect to the new server")
        expect(page.locator("#count")).to_have_text("4")
        page.click("#inc")
        expect(page.locator("#count")).to_have_text("5")
        page.click("#inc")
        expect(page.locator("#count")).to_have_text("6")
        assert errors == []
    finally:
        page.close()
        proxy.close()
        server.stop()


def _wait(predicate: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")
