"""Two Chromium pages on the shared counter: a click in one shows in the other."""

from __future__ import annotations

from playwright.sync_api import Browser, expect

from tests.processes import ServerProcess, free_port


def test_click_in_one_page_shows_in_the_other(browser: Browser) -> None:
    server = ServerProcess("examples.shared_counter:app", free_port())
    server.start()
    context_a = browser.new_context()
    context_b = browser.new_context()  # another browser session
    errors: list[str] = []
    try:
        a, b = context_a.new_page(), context_b.new_page()
        for page in (a, b):
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.goto(f"http://127.0.0.1:{server.port}/")
        expect(a.locator("#count")).to_have_text("0")
        expect(b.locator("#watching")).to_have_text("2 watching")
        for _ in range(3):
            a.click("#inc")
        expect(b.locator("#count")).to_have_text("3")
        b.click("#inc")
        expect(a.locator("#count")).to_have_text("4")
        b.click("#reset")
        expect(a.locator("#count")).to_have_text("0")
        assert errors == []
    finally:
        context_a.close()
        context_b.close()
        server.stop()
