"""The todo example in two Chromium sessions: every write shows in the other one, filters stay apart."""

from __future__ import annotations

from pathlib import Path

from playwright.sync_api import Browser, Page, expect

from tests.processes import ServerProcess, free_port


def on(page: Page) -> Page:
    """Switch to ``page`` before acting in it, as a user would: Chromium throttles the animation
    frames of a page in the background, and Playwright waits for them before it clicks."""
    page.bring_to_front()
    return page


def test_two_browsers_share_the_list(browser: Browser, tmp_path: Path) -> None:
    server = ServerProcess("examples.todo:app", free_port(), env={"PYVIA_TODO_DB": str(tmp_path / "todo.sqlite3")})
    server.start()
    context_a, context_b = browser.new_context(), browser.new_context()
    errors: list[str] = []
    try:
        a, b = context_a.new_page(), context_b.new_page()
        for page in (a, b):
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.goto(f"http://127.0.0.1:{server.port}/")
        expect(a.locator("#left")).to_have_text("0 left")

        on(a).fill("#draft", "buy milk")
        on(a).press("#draft", "Enter")
        expect(a.locator("#draft")).to_have_value("")
        on(a).fill("#draft", "<b>call mum</b>")
        on(a).click("#add-form button")
        expect(b.locator("#todos li")).to_have_count(2)
        expect(b.locator("#todo-2 span")).to_have_text("<b>call mum</b>")
        expect(b.locator("#left")).to_have_text("2 left")

        on(b).check("#toggle-1")
        expect(a.locator("#toggle-1")).to_be_checked()
        expect(a.locator("#todo-1")).to_have_class("done")
        expect(a.locator("#left")).to_have_text("1 left")

        on(a).click("#show-active")
        expect(a.locator("#todos li")).to_have_count(1)
        expect(a.locator("#todo-2")).to_be_visible()
        expect(b.locator("#todos li")).to_have_count(2)  # b still shows all

        on(b).uncheck("#toggle-1")
        expect(a.locator("#todos li")).to_have_count(2)  # active again, so a shows it
        expect(a.locator("#toggle-1")).not_to_be_checked()

        on(b).click("#delete-2")
        expect(a.locator("#todos li")).to_have_count(1)
        expect(a.locator("#todo-1 span")).to_have_text("buy milk")
        assert errors == []
    finally:
        context_a.close()
        context_b.close()
        server.stop()


SCRIPT_AND_EXPRESSION = "</p><script>alert(1)</script>@post('/x') $x"


def test_an_item_of_markup_and_expressions_renders_as_text(browser: Browser, tmp_path: Path) -> None:
    server = ServerProcess("examples.todo:app", free_port(), env={"PYVIA_TODO_DB": str(tmp_path / "todo.sqlite3")})
    server.start()
    context = browser.new_context()
    errors: list[str] = []
    dialogs: list[str] = []
    elsewhere: list[str] = []
    try:
        page = context.new_page()
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
        page.on("request", lambda r: elsewhere.append(r.url) if r.url.split("?")[0].endswith("/x") else None)
        page.goto(f"http://127.0.0.1:{server.port}/")
        page.fill("#draft", SCRIPT_AND_EXPRESSION)
        page.press("#draft", "Enter")
        expect(page.locator("#todo-1 span")).to_have_text(SCRIPT_AND_EXPRESSION)
        page.check("#toggle-1")  # the page keeps working: the item's own actions still post
        expect(page.locator("#todo-1")).to_have_class("done")
        newcomer = context.new_page()  # the first render of a page holds it too
        newcomer.on("pageerror", lambda exc: errors.append(str(exc)))
        newcomer.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
        newcomer.goto(f"http://127.0.0.1:{server.port}/")
        expect(newcomer.locator("#todo-1 span")).to_have_text(SCRIPT_AND_EXPRESSION)
        for shown in (page, newcomer):
            assert shown.locator("#todos script").count() == 0
            assert shown.locator("#todos li").count() == 1
        assert dialogs == [] and elsewhere == [] and errors == []
    finally:
        context.close()
        server.stop()
