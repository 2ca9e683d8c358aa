"""The spreadsheet example: SQLite cells, a rendered window that follows the scroll, editing from
the keyboard, copy and paste through the session, and the cursors of the other tabs.

Other tabs are brought up to date with ``app.flush_broadcasts()``, which sends what is marked at
once, instead of advancing the clock by the broadcast tick after every step.
"""

from __future__ import annotations

import importlib.util
import re
import sqlite3
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from types import ModuleType

import pytest
from examples import spreadsheet
from examples.spreadsheet import COLS, ROW_H, ROWS, WINDOW, app

from pyvia import App
from pyvia.testing import Tab, TestClient


@pytest.fixture(autouse=True)
def database(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    path = tmp_path / "sheet.sqlite3"
    monkeypatch.setenv("PYVIA_SHEET_DB", str(path))
    yield path


@pytest.fixture(autouse=True)
def no_tabs_left_over(database: Path) -> Iterator[None]:
    """A closed TestClient leaves its tabs in the module's app: destroy them, so that their cursors
    are not in the next test."""
    yield
    with TestClient(app):
        for ctx in list(app.contexts.values()):
            app.destroy(ctx)


def fresh_copy(name: str) -> ModuleType:
    """Another copy of the example module, with its own App (the documentation site mounts one)."""
    path = Path(__file__).resolve().parents[2] / "examples" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"mounted_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def stored(path: Path, row: int, col: int) -> str | None:
    with closing(sqlite3.connect(path)) as conn:
        found = conn.execute("SELECT value FROM cells WHERE row = ? AND col = ?", (row, col)).fetchone()
    return found[0] if found else None


def row_numbers(tab: Tab) -> list[int]:
    return [int(n) for n in re.findall(r'<div class="rh">(\d+)</div>', tab.html)]


def cell(tab: Tab, row: int, col: int) -> str:
    """The rendered markup of one cell (its opening tag and content)."""
    found = re.search(rf'<div class="[^"]*"[^>]*data-cell="{row}:{col}">.*?</div>', tab.html)
    assert found, f"cell {row}:{col} is not rendered"
    return found.group(0)


def select(tab: Tab, row: int, col: int) -> None:
    tab.post(tab.context.actions["select"].url + f"?r={row}&k={col}")


def key(tab: Tab, name: str) -> None:
    tab.post(tab.context.actions["move"].url + f"?key=%22{name}%22")


def test_first_start_seeds_a_sparse_sheet_and_renders_one_window(database: Path) -> None:
    with TestClient(app) as client:
        with closing(sqlite3.connect(database)) as conn:
            count, rows, cols = conn.execute("SELECT COUNT(*), MAX(row) + 1, MAX(col) + 1 FROM cells").fetchone()
        assert (rows, cols) == (ROWS, COLS)
        assert ROWS * (COLS - 1) < count < ROWS * COLS  # the notes column is mostly empty: not stored
        assert stored(database, 0, 0) == "Item" and stored(database, 1, 7) is None

        tab = client.open("/")
        assert row_numbers(tab) == list(range(1, WINDOW + 1))
        assert tab.html.count('class="cell') == WINDOW * COLS
        assert "Item 0001" in cell(tab, 1, 0)
        assert f"height: {ROWS * ROW_H}px" in tab.page  # the spacer: the scrollbar is the whole sheet's


def test_a_later_start_keeps_the_edits(database: Path) -> None:
    with TestClient(app) as client:
        tab = client.open("/")
        select(tab, 0, 0)
        tab.action("edit", draft="Product")
        tab.action("commit")
    with TestClient(app) as client:
        assert stored(database, 0, 0) == "Product"
        assert "Product" in cell(client.open("/"), 0, 0)


def test_scrolling_renders_the_window_around_the_scroll_position() -> None:
    with TestClient(app) as client:
        tab = client.open("/")
        tab.signals["scroll_top"] = 1000 * ROW_H  # what the scroll listener writes
        tab.click("#viewport", event="scroll")
        numbers = row_numbers(tab)
        assert len(numbers) == WINDOW
        assert numbers[0] < 1001 < numbers[-1] - 15  # a few rows above the first visible one
        assert "Item 1000" in cell(tab, 1000, 0)
        assert 'data-cell="1:0"' not in tab.html

        tab.signals["scroll_top"] = 10**9  # past the end (or forged): the last window
        tab.click("#viewport", event="scroll")
        assert row_numbers(tab)[-1] == ROWS


def test_typing_commits_with_enter_and_everyone_sees_it(database: Path) -> None:
    with TestClient(app) as ann, TestClient(app) as bob:
        a, b = ann.open("/"), bob.open("/")
        select(a, 3, 5)
        assert (a.signals["_row"], a.signals["_col"]) == (3, 5)
        a.action("edit", draft="h")  # the first key: the browser holds it in the draft
        assert a.signals["_editing"] is True
        assert 'id="editor" data-bind="draft"' in cell(a, 3, 5)
        a.signals["draft"] = "hello <b>"  # typed in the editor
        a.action("commit")
        assert stored(database, 3, 5) == "hello <b>"
        assert a.signals["_editing"] is False and a.signals["draft"] == ""
        assert (a.signals["_row"], a.signals["_col"]) == (4, 5)  # Enter moves down
        app.flush_broadcasts()
        assert "hello &lt;b&gt;" in cell(b, 3, 5)
        assert 'id="editor"' not in a.html


def test_escape_cancels_and_enter_edits_the_current_value(database: Path) -> None:
    with TestClient(app) as client:
        tab = client.open("/")
        select(tab, 2, 1)
        before = stored(database, 2, 1)
        tab.action("edit", draft="x")
        tab.action("cancel", draft="xyz")
        assert stored(database, 2, 1) == before
        assert tab.signals["_editing"] is False and 'id="editor"' not in tab.html

        tab.post(tab.context.actions["edit"].url + "?keep=true")  # Enter or F2
        assert tab.signals["draft"] == before and tab.signals["_editing"] is True
        tab.action("commit", draft=f"{before}!")
        assert stored(database, 2, 1) == f"{before}!"


def test_clicking_another_cell_commits_the_edit(database: Path) -> None:
    with TestClient(app) as client:
        tab = client.open("/")
        select(tab, 5, 5)
        tab.action("edit", draft="first")
        select(tab, 5, 5)  # a click inside the cell being edited changes nothing
        assert tab.signals["_editing"] is True
        select(tab, 6, 6)
        assert stored(database, 5, 5) == "first"
        assert tab.signals["_editing"] is False and (tab.signals["_row"], tab.signals["_col"]) == (6, 6)


def test_arrows_move_stop_at_the_edges_and_keep_the_selection_in_view() -> None:
    with TestClient(app) as client:
        tab = client.open("/")
        select(tab, 0, 0)
        key(tab, "ArrowUp")
        key(tab, "ArrowLeft")
        assert (tab.signals["_row"], tab.signals["_col"]) == (0, 0)
        key(tab, "ArrowRight")
        key(tab, "ArrowDown")
        assert (tab.signals["_row"], tab.signals["_col"]) == (1, 1)
        for _ in range(25):
            key(tab, "ArrowDown")
        assert tab.signals["_row"] == 26
        assert tab.signals["scroll_top"] == (26 - spreadsheet.VISIBLE + 1) * ROW_H  # scrolled to show it
        app.flush_broadcasts()
        assert 'class="cell sel" data-cell="26:1"' in tab.html
        select(tab, ROWS - 1, COLS - 1)
        key(tab, "ArrowDown")
        key(tab, "ArrowRight")
        assert (tab.signals["_row"], tab.signals["_col"]) == (ROWS - 1, COLS - 1)
        key(tab, "ArrowUp")
        assert tab.signals["_row"] == ROWS - 2
        select(tab, 3, 0)
        assert tab.signals["scroll_top"] == 3 * ROW_H  # back up


def test_copy_and_paste_go_through_the_session_clipboard(database: Path) -> None:
    with TestClient(app) as ann, TestClient(app) as bob:
        a1, a2, b = ann.open("/"), ann.open("/"), bob.open("/")
        select(a1, 1, 0)
        a1.action("copy")
        app.flush_broadcasts()
        assert a2.signals["_session__clipboard"] == "Item 0001"  # every tab of ann's browser
        assert b.signals["_session__clipboard"] == ""
        select(a2, 10, 7)  # the other tab pastes it
        a2.action("paste")
        assert stored(database, 10, 7) == "Item 0001"
        select(b, 11, 7)
        b.action("paste")  # bob's clipboard is empty: pasting clears the cell
        assert stored(database, 11, 7) is None
        select(b, 1, 1)
        b.action("clear")  # Delete
        assert stored(database, 1, 1) is None


def test_the_other_tabs_cursors_are_drawn_in_their_session_colour() -> None:
    with TestClient(app) as ann, TestClient(app) as bob:
        a, b = ann.open("/"), bob.open("/")
        a_other = ann.open("/")
        select(b, 4, 2)
        select(a_other, 6, 3)
        app.flush_broadcasts()
        bob_color = spreadsheet.session_color(b.context.session_id)
        ann_color = spreadsheet.session_color(a.context.session_id)
        assert f'class="cell peer" style="--peer: {bob_color}" data-cell="4:2"' in a.html
        assert f'class="cell peer" style="--peer: {ann_color}" data-cell="6:3"' in a.html  # ann's other tab
        assert f'class="cell peer" style="--peer: {ann_color}" data-cell="6:3"' in b.html
        assert 'class="cell sel" data-cell="4:2"' in b.html  # bob's own selection is not a peer's
        assert len(b.signals["_route__cursors"]) == 3
        assert "3 here" in b.html

        b.expire()  # bob's tab is gone: its cursor goes with it
        app.flush_broadcasts()
        assert cell(a, 4, 2).startswith('<div class="cell" data-cell="4:2">')
        assert "2 here" in a.html


def test_the_markup_wires_keys_clicks_and_scrolling() -> None:
    with TestClient(app) as client:
        tab = client.open("/")
        (main,) = tab.find("main#sheet")
        keys = main.attrs["data-on:keydown__window"]
        for name in ("commit", "cancel", "copy", "paste", "move", "edit", "clear"):
            assert f"@post('{tab.context.actions[name].url}" in keys  # move's with its bound key
        assert "if ($_editing)" in keys and "$draft += k" in keys  # set ahead of the server's answer
        (rows,) = tab.find("#rows")
        assert "select" in rows.attrs["data-on:click"] and "keep=true" in rows.attrs["data-on:dblclick"]
        (viewport,) = tab.find("#viewport")
        assert viewport.attrs["data-effect"] == "el.scrollTop = $scroll_top"  # the server may scroll it


def test_mounted_below_a_prefix_every_url_carries_it(database: Path) -> None:
    site = App()
    site.mount("/examples/spreadsheet", fresh_copy("spreadsheet").app)  # as the documentation site does
    with TestClient(site) as client:
        tab = client.open("/examples/spreadsheet/")
        (main,) = tab.find("main#sheet")
        assert "@post('/examples/spreadsheet/_action/move?key=%22ArrowUp%22'" in main.attrs["data-on:keydown__window"]
        # The delegated click handler posts to the prefixed URL; the cell's r and k are added by the
        # browser, so without them the action is reached and refuses: 400 naming the argument, not 404.
        clicked = tab.click("#rows")
        assert clicked.status == 400 and clicked.body == b"action 'select' needs its argument 'r'"
        tab.post("/examples/spreadsheet/_action/select?r=7&k=7")
        tab.post("/examples/spreadsheet/_action/edit", draft="mounted")
        tab.post("/examples/spreadsheet/_action/commit")
        assert stored(database, 7, 7) == "mounted"
