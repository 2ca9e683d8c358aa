"""Async views served by several workers, in Chromium through a 100 ms round trip."""

from __future__ import annotations

from playwright.sync_api import Browser, expect

from tests.browser.latency import latency_proxy
from tests.processes import ServerProcess, free_port


def test_an_async_view_is_served_and_shared_by_two_workers(browser: Browser) -> None:
    server = ServerProcess("tests.browser.apps:async_board", free_port(), extra=("--workers", "2"))
    server.start()
    contexts = [browser.new_context() for _ in range(4)]  # four visitors, spread over both workers
    try:
        with latency_proxy(server.port) as proxy:
            pages = [context.new_page() for context in contexts]
            for page in pages:
                response = page.goto(f"http://127.0.0.1:{proxy.port}/")
                assert response is not None and response.status == 200
                expect(page.locator("#count")).to_have_text("0")
            for n, page in enumerate(pages, start=1):
                page.locator("#add").click()
                for each in pages:  # every tab, whichever worker holds it, renders the new count
                    expect(each.locator("#count")).to_have_text(str(n))
    finally:
        for context in contexts:
            context.close()
        server.stop()
