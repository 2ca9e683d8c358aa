"""A type race between two Chromium sessions: names, the countdown, live progress, the ranking."""

from __future__ import annotations

import re

from playwright.sync_api import Browser, Locator, Page, expect

from tests.processes import ServerProcess, free_port


def player(page: Page, name: str) -> Locator:
    return page.locator(".player", has_text=name)


def test_two_players_race(browser: Browser) -> None:
    server = ServerProcess("examples.type_race:app", free_port())
    server.start()
    base = f"http://127.0.0.1:{server.port}"
    context_a, context_b = browser.new_context(), browser.new_context()
    errors: list[str] = []
    try:
        a, b = context_a.new_page(), context_b.new_page()
        for page in (a, b):
            page.on("pageerror", lambda exc: errors.append(str(exc)))
        a.goto(f"{base}/")
        a.click("text=lobby")
        expect(a).to_have_url(f"{base}/room/lobby")
        b.goto(f"{base}/")
        expect(b.locator("#rooms li", has_text="lobby")).to_contain_text("1 here")
        b.fill("#wanted", "lobby")
        b.press("#wanted", "Enter")
        expect(b).to_have_url(f"{base}/room/lobby")

        for page, name in ((a, "Ann"), (b, "Bob")):
            page.fill("#name", name)
            page.press("#name", "Enter")
            expect(page.locator("#me")).to_have_text(name)
        a.click("#start")
        expect(b.locator("#countdown")).to_be_visible()
        b.click("#start")  # joins during the countdown
        expect(a.locator("#players .who")).to_have_text(["Ann", "Bob"])
        expect(a.locator("#phase")).to_have_text("Go!", timeout=10_000)
        expect(a.locator("#typed")).to_be_focused()
        expect(a.locator("#typed")).to_be_enabled()

        sentence = a.locator("#sentence").inner_text().strip()
        a.keyboard.type(sentence[:5] + "#")  # a typo shows at once, in the browser
        expect(a.locator("#typed")).to_have_class("typo")
        expect(player(b, "Ann").locator(".took")).to_have_text(f"{100 * 5 // len(sentence)}%")
        a.keyboard.press("Backspace")
        expect(a.locator("#typed")).not_to_have_class("typo")
        a.keyboard.type(sentence[5:])
        expect(player(b, "Ann").locator(".took")).to_have_text(re.compile(r"^\d+\.\d\d s$"))
        expect(player(b, "Ann").locator(".bar div")).to_have_attribute("style", "width: 100%")
        expect(a.locator("#typed")).to_be_disabled()

        b.locator("#typed").type(sentence)
        expect(a.locator("#phase")).to_contain_text("Race over.")
        expect(b.locator("#results li")).to_have_count(2)
        expect(b.locator("#results li").first).to_contain_text("Ann")
        expect(b.locator("#results li").nth(1)).to_contain_text(re.compile(r"Bob: \d+\.\d\d s, \d+ wpm"))

        b.click("#start")  # the next race
        expect(a.locator("#countdown")).to_be_visible()
        expect(a.locator("#typed")).to_have_value("")
        expect(a.locator("#players .who")).to_have_text(["Bob"])
        assert errors == []
    finally:
        context_a.close()
        context_b.close()
        server.stop()
