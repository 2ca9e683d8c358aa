"""Async views served by several workers, in Chromium through a 100 ms round trip."""

from __future__ import annotations

from pathlib import Path

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


def test_a_stop_with_tabs_open_logs_no_error(browser: Browser, tmp_path: Path) -> None:
    """Three users on a board whose async view reads SQLite and whose disconnect hook keeps who is
    online: a stop (SIGTERM) ends their streams, and no render runs on the closed database."""
    log = tmp_path / "server.log"
    server = ServerProcess(
        "tests.browser.apps:online_board", free_port(), env={"TEST_BOARD_DB": f"sqlite:///{tmp_path / 'b.db'}"}, log=log
    )
    server.start()
    contexts = [browser.new_context() for _ in range(3)]
    try:
        with latency_proxy(server.port) as proxy:
            for context, name in zip(contexts, ("ann", "bob", "cy"), strict=True):
                context.new_page().goto(f"http://127.0.0.1:{proxy.port}/{name}")
            last = contexts[-1].pages[0]
            expect(last.locator("#online")).to_have_text("ann, bob, cy")
            expect(contexts[0].pages[0].locator("#online")).to_have_text("ann, bob, cy")
            server.stop()
    finally:
        for context in contexts:
            context.close()
        server.stop()
    text = log.read_text()
    assert "stopping" in text and "ERROR" not in text and "Traceback" not in text, text


def test_who_is_online_stays_right_across_a_restart_that_keeps_the_state(browser: Browser, tmp_path: Path) -> None:
    """Presence kept by connect and disconnect hooks, saved at a stop (``persist_path``): the
    saved list must not hold the tabs that are leaving, or each revived tab counts twice and a
    user who closes the page after the restart never leaves the list."""
    env = {"TEST_BOARD_DB": f"sqlite:///{tmp_path / 'b.db'}", "TEST_BOARD_STATE": str(tmp_path / "state.db")}
    server = ServerProcess("tests.browser.apps:online_board", free_port(), env=env, log=tmp_path / "server.log")
    server.start()
    ann, bob = browser.new_context(), browser.new_context()
    try:
        with latency_proxy(server.port) as proxy:
            ann_page, bob_page = ann.new_page(), bob.new_page()
            ann_page.goto(f"http://127.0.0.1:{proxy.port}/ann")
            bob_page.goto(f"http://127.0.0.1:{proxy.port}/bob")
            expect(ann_page.locator("#online")).to_have_text("ann, bob")
            server.restart()  # a graceful stop, then the same port: both pages reconnect and revive
            expect(ann_page.locator("#online")).to_have_text("ann, bob", timeout=15_000)
            expect(bob_page.locator("#online")).to_have_text("ann, bob", timeout=15_000)
            bob.close()  # bob leaves after the restart
            expect(ann_page.locator("#online")).to_have_text("ann", timeout=15_000)
    finally:
        ann.close()
        server.stop()


def test_the_page_an_action_redirects_to_shows_what_it_made_on_either_worker(browser: Browser) -> None:
    """A lobby's button makes a game and sends the tab to its page, 20 times, under two workers:
    every game page finds its game, whichever worker serves it (8 in 20 did not for a newcomer)."""
    server = ServerProcess("tests.browser.apps:games_app", free_port(), extra=("--workers", "2"))
    server.start()
    context = browser.new_context()
    try:
        page = context.new_page()
        spectator = browser.new_context().new_page()  # keeps both workers following the list
        spectator.goto(f"http://127.0.0.1:{server.port}/")
        for _ in range(20):
            page.goto(f"http://127.0.0.1:{server.port}/")
            expect(page.locator("#create")).to_be_visible()
            page.wait_for_timeout(150)  # the stream is open
            page.locator("#create").click()
            page.wait_for_url("**/game/*")
            expect(page.locator("#game, #nogame")).to_have_count(1)
            assert page.locator("#nogame").count() == 0, f"{page.url} did not find its game"
        spectator.context.close()
    finally:
        context.close()
        server.stop()
