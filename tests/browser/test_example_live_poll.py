"""The live poll in Chromium: two browsers vote, both see the bars move, each votes once."""

from __future__ import annotations

import re

from playwright.sync_api import Browser, Page, expect

from tests.processes import ServerProcess, free_port


def click(page: Page, selector: str) -> None:
    """Click in ``page`` as a user would, after switching to it: Chromium throttles the animation
    frames of a page in the background, and Playwright waits for them before it clicks."""
    page.bring_to_front()
    page.click(selector)


def test_two_browsers_vote(browser: Browser) -> None:
    server = ServerProcess("examples.live_poll:app", free_port())
    server.start()
    context_a, context_b = browser.new_context(), browser.new_context()
    errors: list[str] = []
    try:
        a, a_again, b = context_a.new_page(), context_a.new_page(), context_b.new_page()
        for page in (a, a_again, b):
            page.on("pageerror", lambda exc: errors.append(str(exc)))
        a.goto(f"http://127.0.0.1:{server.port}/")
        expect(a.locator("#total")).to_have_text("0")  # the session cookie is set
        a_again.goto(f"http://127.0.0.1:{server.port}/")
        b.goto(f"http://127.0.0.1:{server.port}/")
        expect(a.locator("#thanks")).to_be_hidden()
        expect(b.locator("#vote-dark")).to_be_enabled()

        click(a, "#vote-dark")
        expect(b.locator("#count-dark")).to_have_text("1")
        expect(b.locator("#bar-dark")).to_have_attribute("style", "width: 100%")
        expect(a.locator("#thanks")).to_be_visible()
        expect(a.locator("#vote-api")).to_be_disabled()
        expect(a_again.locator("#vote-offline")).to_be_disabled()  # the other tab of the same browser
        expect(a_again.locator("#option-dark")).to_have_class(re.compile(r"\bmine\b"))
        expect(b.locator("#vote-api")).to_be_enabled()
        expect(b.locator("#option-dark")).not_to_have_class(re.compile(r"\bmine\b"))

        click(b, "#vote-api")
        expect(a.locator("#total")).to_have_text("2")
        expect(a.locator("#bar-api")).to_have_attribute("style", "width: 50%")
        expect(b.locator("#option-api")).to_have_class(re.compile(r"\bmine\b"))
        expect(b.locator("#vote-dark")).to_be_disabled()
        expect(a_again.locator("#count-api")).to_have_text("1")
        assert errors == []
    finally:
        context_a.close()
        context_b.close()
        server.stop()
