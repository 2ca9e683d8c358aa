"""A view that is a whole document (its own ``<html>``, built with ``html()``): the page works, and
after its body is updated the page still tells the user when the server is gone."""

from __future__ import annotations

from playwright.sync_api import Browser, expect

from tests.processes import ServerProcess, free_port


def test_a_whole_document_keeps_its_alert_through_updates_and_a_restart(browser: Browser) -> None:
    server = ServerProcess("tests.browser.apps:document_app", free_port())
    server.start()
    context = browser.new_context()
    errors: list[str] = []
    try:
        page = context.new_page()
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.goto(f"http://127.0.0.1:{server.port}/")
        expect(page.locator("body")).not_to_contain_text("via-boot")  # not escaped into text
        expect(page.locator("#n")).to_have_text("0")
        page.click("#b")
        page.click("#b")
        expect(page.locator("#n")).to_have_text("2")
        expect(page.locator("#app-foot")).to_have_text("app foot")
        assert server.proc is not None
        server.proc.kill()  # the server dies
        server.proc.wait()
        server.proc = None
        expect(page.locator("#via-alert")).to_be_visible(timeout=10_000)
        expect(page.locator("#via-alert")).to_contain_text("Connection lost")
        server.start()  # it comes back: the page reconnects, its tab revived
        expect(page.locator("#via-alert")).to_be_hidden(timeout=15_000)
        page.click("#b")
        expect(page.locator("#n")).to_have_text("3")
        assert errors == []
    finally:
        context.close()
        server.stop()
