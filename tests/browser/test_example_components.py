"""The components example in Chromium: each component updates alone, the total adds up in the page."""

from __future__ import annotations

from playwright.sync_api import Browser, expect

from tests.processes import ServerProcess, free_port


def test_components_update_alone(browser: Browser) -> None:
    server = ServerProcess("examples.components:app", free_port())
    server.start()
    page = browser.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        page.goto(f"http://127.0.0.1:{server.port}/")
        expect(page.locator("#total")).to_have_text("0")
        page.click("#apples-inc")
        expect(page.locator("#apples-value")).to_have_text("1")
        page.click("#apples-inc")
        page.click("#pears-inc")
        expect(page.locator("#apples-value")).to_have_text("2")
        expect(page.locator("#pears-value")).to_have_text("1")
        expect(page.locator("#total")).to_have_text("3")  # data-text over both components' signals
        expect(page.locator("#apples-renders")).to_have_text("renders: 3")
        expect(page.locator("#pears-renders")).to_have_text("renders: 2")
        expect(page.locator("#notes-renders")).to_have_text("renders: 1")

        page.fill("#notes-draft", "<b>milk</b>")
        page.press("#notes-draft", "Enter")
        expect(page.locator("#note-0")).to_contain_text("<b>milk</b>")  # shown as text, not markup
        expect(page.locator("#notes-draft")).to_have_value("")
        page.fill("#notes-draft", "eggs")
        page.press("#notes-draft", "Enter")
        expect(page.locator("#notes-list li")).to_have_count(2)
        page.click("#note-0-remove")
        expect(page.locator("#notes-list li")).to_have_count(1)
        expect(page.locator("#note-0")).to_contain_text("eggs")
        expect(page.locator("#apples-renders")).to_have_text("renders: 3")

        page.click("#render-all")
        expect(page.locator("#apples-renders")).to_have_text("renders: 4")
        expect(page.locator("#pears-renders")).to_have_text("renders: 3")
        expect(page.locator("#total")).to_have_text("3")
        assert errors == []
    finally:
        page.close()
        server.stop()
