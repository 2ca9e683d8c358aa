"""Arguments the browser computes when an action fires (``Action.js``), over a real network."""

from __future__ import annotations

from playwright.sync_api import Browser, expect

from tests.browser.conftest import ServerProcess, free_port
from tests.browser.latency import latency_proxy


def test_keys_read_from_the_event_reach_the_action_as_typed_arguments(browser: Browser) -> None:
    """A game's controls: each key press posts ``press(key=evt.key, shifted=evt.shiftKey)``; the
    keys arrive typed, quotes and backslashes intact, through a 50 ms proxy."""
    server = ServerProcess("tests.browser.apps:keys", free_port())
    server.start()
    page = browser.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        with latency_proxy(server.port, delay=0.05) as proxy:
            page.goto(f"http://127.0.0.1:{proxy.port}/")
            expect(page.locator("#pressed")).to_have_text("")
            expected: list[str] = []
            for key in ("ArrowUp", "ArrowLeft", "'", '"', "\\", "x"):
                page.keyboard.press(key)
                expected.append(key)
                expect(page.locator("#pressed")).to_have_text(" ".join(expected))  # one at a time: in order
            page.keyboard.press("Shift+KeyB")
            expect(page.locator("#pressed")).to_have_text(" ".join([*expected, "SHIFT", "B"]))  # shiftKey: a bool
        assert errors == []
    finally:
        page.close()
        server.stop()
