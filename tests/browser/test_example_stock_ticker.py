"""The stock ticker in two Chromium sessions: the same prices move in both, coloured, with sparklines."""

from __future__ import annotations

import re
import time

from playwright.sync_api import Browser, Page, expect

from tests.processes import ServerProcess, free_port


def prices(page: Page) -> list[str]:
    return page.locator("td[id^=price-]").all_inner_texts()


def test_two_browsers_watch_the_same_prices(browser: Browser) -> None:
    server = ServerProcess("examples.stock_ticker:app", free_port())
    server.start()
    context_a, context_b = browser.new_context(), browser.new_context()
    errors: list[str] = []
    try:
        a, b = context_a.new_page(), context_b.new_page()
        for page in (a, b):
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.goto(f"http://127.0.0.1:{server.port}/")
        expect(a.locator("#watching")).to_contain_text("2 watching")
        expect(a.locator("#price-ACME")).to_have_text(re.compile(r"^\d+\.\d\d$"))
        expect(a.locator("#change-ACME")).to_have_text(re.compile(r"^[+-]\d+\.\d\d%$"))
        expect(a.locator("#change-ACME")).to_have_class(re.compile(r"^(up|down)$"))
        points = a.locator("#spark-ACME").get_attribute("points") or ""
        assert len(points.split()) == 40

        before = a.locator("tbody").inner_text()
        expect(a.locator("tbody")).not_to_have_text(before)  # the next tick moved something

        # both pages get every tick from the same flush: read until no tick falls between the reads
        deadline = time.monotonic() + 5
        while (seen := (prices(a), prices(b)))[0] != seen[1] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert seen[0] == seen[1] and all(seen[0])

        context_b.close()
        expect(a.locator("#watching")).to_contain_text("1 watching")
        assert errors == []
    finally:
        context_a.close()
        context_b.close()
        server.stop()
