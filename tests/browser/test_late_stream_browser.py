"""A page whose stream could not open for longer than the connect timeout, in Debian's Chromium.

The server destroys such a page view and keeps nothing of it (issue 22: a crawler's burst must
not hold memory); when the stream finally opens, the tab is revived from its page's dated, signed
id and its snapshot, and the user's clicks work as if nothing had happened.
"""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Callable

from playwright.sync_api import Browser, Route, expect

from tests.browser.conftest import ServerProcess, free_port


def test_a_page_whose_stream_came_after_the_connect_timeout_still_works(browser: Browser) -> None:
    env = {"PYVIA_APP__CONNECT_TIMEOUT": "1", "PYVIA_APP__REVIVAL_WINDOW": "8"}
    server = ServerProcess("examples.counter:app", free_port(), env=env)
    server.start()
    time.sleep(8.5)  # the process outlived the revival window: only the id's own date can vouch for it
    page = browser.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    blocked: list[str] = []

    def refuse(route: Route) -> None:  # a proxy that holds the stream back: the fetch fails
        blocked.append(route.request.method)
        route.abort()

    try:
        page.route("**/_sse**", refuse)
        page.goto(f"http://127.0.0.1:{server.port}/")
        expect(page.locator("#count")).to_have_text("0")
        deadline = time.monotonic() + 10
        while not blocked and time.monotonic() < deadline:
            page.wait_for_timeout(50)
        assert blocked, "the page never tried to open its stream"
        page.wait_for_timeout(2500)  # past the connect timeout: the server destroyed the page view
        assert _metric(server.port, "pyvia_tabs") == 0
        page.evaluate("window.sameDocument = true")  # gone if the page reloads instead of reviving
        page.unroute("**/_sse**")
        expect(page.locator("#count")).to_have_text("0")
        _wait_for(lambda: _metric(server.port, "pyvia_tabs") == 1, "Datastar's retry to revive the tab")
        for _ in range(3):
            page.click("#inc")
        expect(page.locator("#count")).to_have_text("3")
        assert page.evaluate("window.sameDocument === true"), "the page reloaded: its tab was not revived"
        assert errors == []
    finally:
        page.close()
        server.stop()


def _metric(port: int, name: str) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"no {name} in /metrics")


def _wait_for(check: Callable[[], bool], what: str, timeout: float = 40.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")
