"""The live search example in Chromium: debounced typing, highlighted results, the input keeps focus."""

from __future__ import annotations

from examples.live_search import SHOWN, search_places
from playwright.sync_api import Browser, Request, expect

from tests.processes import ServerProcess, free_port


def test_search_as_you_type(browser: Browser) -> None:
    server = ServerProcess("examples.live_search:app", free_port())
    server.start()
    page = browser.new_page()
    errors: list[str] = []
    searches: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))

    def on_request(request: Request) -> None:
        if request.method == "POST" and "/_action/search" in request.url:
            searches.append(request.url)

    page.on("request", on_request)
    try:
        page.goto(f"http://127.0.0.1:{server.port}/")
        expect(page.locator("#count")).to_have_text("1000")
        expect(page.locator("#results li")).to_have_count(SHOWN)

        page.locator("#q").press_sequentially("north", delay=30)
        expect(page.locator("#count")).to_have_text(str(len(search_places("north"))))
        expect(page.locator("#results li").first).to_have_text("".join(search_places("north")[0]))
        expect(page.locator("#results mark").first).to_have_text("North", ignore_case=True)
        expect(page.locator("#q")).to_be_focused()
        expect(page.locator("#q")).to_have_value("north")
        assert 1 <= len(searches) <= 2, searches  # one post once typing paused, not one per key

        page.locator("#q").fill("kingser")
        expected = search_places("kingser")
        expect(page.locator("#count")).to_have_text(str(len(expected)))
        expect(page.locator("#results li")).to_have_count(min(SHOWN, len(expected)))
        expect(page.locator("#results li mark").first).to_have_text("Kingser")

        page.locator("#q").fill("<b>zzz")
        expect(page.locator("#count")).to_have_text("0")
        expect(page.locator("#results li")).to_have_count(0)
        assert errors == []
    finally:
        page.close()
        server.stop()
