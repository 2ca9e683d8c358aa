"""The spreadsheet in two Chromium sessions: cursors, edits from the keyboard, scrolling, copy and paste."""

from __future__ import annotations

from pathlib import Path

from playwright.sync_api import Browser, Locator, Page, expect

from tests.processes import ServerProcess, free_port


def cell(page: Page, row: int, col: int) -> Locator:
    return page.locator(f'[data-cell="{row}:{col}"]')


def test_two_browsers_edit_the_same_sheet(browser: Browser, tmp_path: Path) -> None:
    server = ServerProcess(
        "examples.spreadsheet:app", free_port(), env={"PYVIA_SHEET_DB": str(tmp_path / "sheet.sqlite3")}
    )
    server.start()
    context_a, context_b = browser.new_context(), browser.new_context()
    errors: list[str] = []
    try:
        a, b = context_a.new_page(), context_b.new_page()
        for page in (a, b):
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.goto(f"http://127.0.0.1:{server.port}/")
        expect(a.locator("#people")).to_have_text("2 here")
        expect(cell(a, 1, 0)).to_have_text("Item 0001")

        # a click selects; the other browser sees the cursor in a's colour
        cell(a, 2, 1).click()
        expect(cell(a, 2, 1)).to_have_class("cell sel")
        expect(cell(b, 2, 1)).to_have_class("cell peer")
        expect(a.locator("#address b")).to_have_text("B3")

        # typing starts an edit with that key, Enter commits and moves down; b sees the value
        a.keyboard.type("Hello")
        expect(a.locator("#editor")).to_be_focused()
        a.keyboard.type(" there")
        expect(a.locator("#editor")).to_have_value("Hello there")
        a.keyboard.press("Enter")
        expect(cell(b, 2, 1)).to_have_text("Hello there")
        expect(cell(a, 3, 1)).to_have_class("cell sel")
        expect(a.locator("#editor")).to_have_count(0)

        # Escape cancels
        a.keyboard.type("oops")
        expect(a.locator("#editor")).to_have_value("oops")
        a.keyboard.press("Escape")
        expect(a.locator("#editor")).to_have_count(0)
        expect(cell(a, 3, 1)).not_to_have_text("oops")

        # arrows move; copy a value and paste it one cell to the right
        a.keyboard.press("ArrowUp")
        expect(cell(a, 2, 1)).to_have_class("cell sel")
        a.keyboard.press("Control+c")
        expect(a.locator("#clipboard code")).to_have_text("Hello there")
        a.keyboard.press("ArrowRight")
        expect(cell(a, 2, 2)).to_have_class("cell sel")  # moved before pasting
        a.keyboard.press("Control+v")
        expect(cell(b, 2, 2)).to_have_text("Hello there")
        expect(b.locator("#clipboard code")).to_have_text("")  # b's session has its own clipboard

        # Enter edits the current value
        a.keyboard.press("Enter")
        expect(a.locator("#editor")).to_have_value("Hello there")
        a.keyboard.type("!")
        a.keyboard.press("Enter")
        expect(cell(b, 2, 2)).to_have_text("Hello there!")

        # a double click edits the clicked cell's value
        cell(a, 1, 0).dblclick()
        expect(a.locator("#editor")).to_have_value("Item 0001")
        expect(cell(a, 1, 0).locator("#editor")).to_be_focused()
        a.keyboard.press("Escape")
        expect(a.locator("#editor")).to_have_count(0)

        # scrolling renders the rows around the new position
        b.locator("#viewport").evaluate("el => el.scrollTop = 28 * 1500")
        expect(cell(b, 1500, 0)).to_have_text("Item 1500")
        expect(cell(b, 1, 0)).to_have_count(0)
        b.locator("#viewport").evaluate("el => el.scrollTop = el.scrollHeight")
        expect(cell(b, 1999, 0)).to_have_text("Item 1999")
        expect(b.locator(".rh").last).to_have_text("2000")

        # moving the selection below the viewport scrolls it into view
        cell(a, 5, 0).click()
        expect(cell(a, 5, 0)).to_have_class("cell sel")
        for _ in range(30):
            a.keyboard.press("ArrowDown")
        expect(cell(a, 35, 0)).to_have_class("cell sel")
        expect(cell(a, 35, 0)).to_be_in_viewport()
        assert a.locator("#viewport").evaluate("el => el.scrollTop") > 0
        assert errors == []
    finally:
        context_a.close()
        context_b.close()
        server.stop()
