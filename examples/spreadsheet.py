"""A spreadsheet of 2,000 rows by 8 columns in SQLite, edited by everyone on the page at once.

The cells live in a SQLite file (``PYVIA_SHEET_DB``, by default ``pyvia-sheet.sqlite3`` in the
system's temp folder), one row per non-empty cell, so an empty cell costs nothing. The first
start seeds the sheet.

- **Virtual scrolling**: the viewport scrolls over a spacer as tall as the whole sheet, and only
  the 30 rows around what is visible are rendered. A scroll writes the tab's ``scroll_top``
  signal and posts ``scroll`` (throttled, with a trailing call so the last position counts);
  the server renders the window for that position.
- **Keyboard**: one ``keydown`` listener on the window. Arrows move the selection, typing starts
  an edit (Enter commits, Escape cancels), Enter or F2 edits the current value, Delete clears,
  Ctrl+C / Ctrl+V copy and paste through a clipboard kept on the server for the session (the
  Clipboard API needs permissions a headless browser does not grant by default).
- **Live cursors**: every tab's selected cell is in a ROUTE-scoped signal, drawn in the other
  tabs' views in a colour per session. A commit broadcasts the route, so every tab renders its
  own window again.
"""

from __future__ import annotations

import hashlib
import os
import random
import secrets
import sqlite3
import tempfile
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path

from pyvia import App, Context, Markup, Scope, html

ROWS, COLS = 2000, 8
COLUMNS = "ABCDEFGH"
ROW_H = 28  # px: the height of one row, in the CSS and in the scroll arithmetic
VISIBLE = 20  # rows the viewport shows
OVERSCAN = 5  # rows rendered above and below them
WINDOW = VISIBLE + 2 * OVERSCAN
MAX_VALUE = 500
PALETTE = ["#e6194b", "#3cb44b", "#f58231", "#911eb4", "#008080", "#f032e6", "#9a6324", "#4363d8"]

app = App(
    title="Spreadsheet",
    head=[
        f"""<style>
  #sheet {{ font: 14px system-ui, sans-serif; }}
  .head, .row {{ display: grid; grid-template-columns: 3rem repeat({COLS}, 6.5rem); }}
  .head div {{ background: #f1f3f4; text-align: center; font-weight: 600; border: 1px solid #ddd; }}
  #viewport {{ height: {VISIBLE * ROW_H}px; overflow-y: auto; width: max-content; border: 1px solid #ccc; }}
  #rows {{ position: relative; height: {ROWS * ROW_H}px; width: calc(3rem + {COLS} * 6.5rem); }}
  #window {{ position: absolute; left: 0; right: 0; }}
  .row {{ height: {ROW_H}px; }}
  .row > div {{ box-sizing: border-box; border: solid #e5e5e5; border-width: 0 1px 1px 0; padding: 0 .3rem;
                line-height: {ROW_H - 1}px; white-space: nowrap; overflow: hidden; text-overflow: ellipsis; }}
  .row .rh {{ background: #f1f3f4; text-align: right; color: #666; }}
  .cell {{ cursor: cell; }}
  .cell.peer {{ box-shadow: inset 0 0 0 2px var(--peer); }}
  .cell.sel {{ box-shadow: inset 0 0 0 2px #1a73e8; background: #e8f0fe; }}
  #editor {{ width: 100%; border: 0; padding: 0; font: inherit; background: transparent; outline: none; }}
  .bar {{ display: flex; gap: 1.5rem; align-items: center; margin: .4rem 0; }}
  .dot {{ display: inline-block; width: .8rem; height: .8rem; border-radius: 50%; margin-right: .2rem; }}
</style>"""
    ],
)


# --- storage -------------------------------------------------------------------------------------


def db_path() -> Path:
    return Path(os.environ.get("PYVIA_SHEET_DB") or Path(tempfile.gettempdir()) / "pyvia-sheet.sqlite3")


@contextmanager
def db() -> Iterator[sqlite3.Connection]:
    """One short-lived connection: committed (or rolled back) and closed at the end of the block."""
    with closing(sqlite3.connect(db_path(), timeout=5)) as conn, conn:
        yield conn


def seed_cells() -> Iterator[tuple[int, int, str]]:
    """A header row and 1,999 rows of made-up orders; the notes column is mostly empty."""
    rng = random.Random(2000)
    yield from enumerate_row(0, ["Item", "Category", "Qty", "Price", "Region", "Rep", "Status", "Notes"])
    for r in range(1, ROWS):
        yield from enumerate_row(
            r,
            [
                f"Item {r:04d}",
                rng.choice(["Hardware", "Software", "Services", "Books", "Garden"]),
                str(rng.randint(1, 500)),
                f"{rng.uniform(1, 999):.2f}",
                rng.choice(["North", "South", "East", "West"]),
                rng.choice(["Ada", "Grace", "Linus", "Guido", "Barbara"]),
                rng.choice(["open", "shipped", "paid", "returned"]),
                "check stock" if r % 7 == 0 else "",
            ],
        )


def enumerate_row(r: int, values: list[str]) -> Iterator[tuple[int, int, str]]:
    return ((r, k, v) for k, v in enumerate(values) if v)  # empty cells are not stored


@app.on_start
def create_and_seed() -> None:
    with db() as conn:
        conn.execute(
            "CREATE TABLE IF NOT EXISTS cells (row INTEGER NOT NULL, col INTEGER NOT NULL,"
            " value TEXT NOT NULL, PRIMARY KEY (row, col)) WITHOUT ROWID"
        )
        if conn.execute("PRAGMA user_version").fetchone()[0] == 0:  # the first start
            conn.executemany("INSERT OR REPLACE INTO cells VALUES (?, ?, ?)", seed_cells())
            conn.execute("PRAGMA user_version = 1")


def load_window(first: int, count: int) -> dict[tuple[int, int], str]:
    with db() as conn:
        found = conn.execute("SELECT row, col, value FROM cells WHERE row >= ? AND row < ?", (first, first + count))
        return {(r, k): v for r, k, v in found}


def read_cell(r: int, k: int) -> str:
    with db() as conn:
        found = conn.execute("SELECT value FROM cells WHERE row = ? AND col = ?", (r, k)).fetchone()
    return found[0] if found else ""


def write_cell(r: int, k: int, value: str) -> None:
    with db() as conn:
        if value:
            conn.execute(
                "INSERT INTO cells VALUES (?, ?, ?) ON CONFLICT (row, col) DO UPDATE SET value = excluded.value",
                (r, k, value),
            )
        else:
            conn.execute("DELETE FROM cells WHERE row = ? AND col = ?", (r, k))


# --- the page ------------------------------------------------------------------------------------


def session_color(session_id: str) -> str:
    """One colour per browser session (from a hash: the session id itself never leaves the server)."""
    return PALETTE[int(hashlib.sha256(session_id.encode()).hexdigest()[:8], 16) % len(PALETTE)]


def window_start(scroll_top: int) -> int:
    """The first rendered row for a scroll position: a few rows above the first visible one."""
    return max(0, min(ROWS - WINDOW, scroll_top // ROW_H - OVERSCAN))


MOVES = {"ArrowUp": (-1, 0), "ArrowDown": (1, 0), "ArrowLeft": (0, -1), "ArrowRight": (0, 1)}


@app.page("/")
def sheet(c: Context) -> None:
    c.scope(Scope.ROUTE)  # c.broadcast() re-renders every tab of the sheet
    cursors = c.signal([], "cursors", scope=Scope.ROUTE)  # [{tab, row, col, color}], one per open tab
    clipboard = c.signal(c.session_data.get("clipboard", ""), "clipboard", scope=Scope.SESSION)
    scroll_top = c.signal(0, "scroll_top", writable=True)  # px; the browser writes it on scroll
    draft = c.signal("", "draft", writable=True, max_length=MAX_VALUE)  # the editor's text
    editing = c.signal(False, "editing")
    row = c.signal(1, "row")
    col = c.signal(0, "col")
    me = secrets.token_hex(4)  # this tab among the cursors
    color = session_color(c.session_id)

    def publish() -> None:
        """Put this tab's cursor in the route's list: every tab renders it at the next flush."""
        mine = {"tab": me, "row": row.value, "col": col.value, "color": color}
        cursors.mutate(lambda cs: [*(x for x in cs if x["tab"] != me), mine])

    publish()
    c.on_cleanup(lambda: cursors.mutate(lambda cs: [x for x in cs if x["tab"] != me]))

    def select_cell(r: int, k: int) -> None:
        row.value, col.value = max(0, min(ROWS - 1, r)), max(0, min(COLS - 1, k))
        top = scroll_top.as_int() // ROW_H
        if row.value < top:  # keep the selection in view: the browser scrolls to the new value
            scroll_top.value = row.value * ROW_H
        elif row.value >= top + VISIBLE:
            scroll_top.value = (row.value - VISIBLE + 1) * ROW_H
        publish()

    def store(value: str) -> None:
        write_cell(row.value, col.value, value[:MAX_VALUE])
        c.broadcast()

    @c.action
    def scroll() -> None:
        c.sync()  # the window for the scroll_top the browser just sent

    @c.action
    def select(r: int, k: int) -> None:  # the cell clicked: select_cell keeps it on the sheet
        if (r, k) == (row.value, col.value):
            return
        if editing.value:  # clicking elsewhere commits the edit, as spreadsheets do
            store(draft.as_str())
            editing.value = False
        select_cell(r, k)

    @c.action
    def move(key: str) -> None:
        dr, dk = MOVES.get(key, (0, 0))
        select_cell(row.value + dr, col.value + dk)

    @c.action
    def edit(keep: bool = False) -> None:
        if keep:  # Enter, F2 or a double click: edit the current value
            draft.value = read_cell(row.value, col.value)
        editing.value = True  # otherwise the browser already holds the first key in the draft
        c.sync()

    @c.action
    def commit() -> None:
        if editing.value:
            store(draft.as_str())
            editing.value, draft.value = False, ""
            select_cell(row.value + 1, col.value)

    @c.action
    def cancel() -> None:
        editing.value, draft.value = False, ""
        c.sync()

    @c.action
    def clear() -> None:
        store("")

    @c.action
    def copy() -> None:
        clipboard.value = c.session_data["clipboard"] = read_cell(row.value, col.value)

    @c.action
    def paste() -> None:
        store(c.session_data.get("clipboard", ""))

    move_by_key = " else ".join(f"if (k === '{name}') {{ {move(key=name)} }}" for name in MOVES)
    edit_current = edit(keep=True)
    select_clicked = select.js(r="+r", k="+k")  # the cell clicked, computed in the browser
    is_editing = editing.ref()  # server-owned: the page sets it here ahead of the server's answer
    keys = f"""
      const k = evt.key, mod = evt.ctrlKey || evt.metaKey;
      if (evt.altKey || evt.isComposing) return;
      if ({is_editing}) {{
        if (k === 'Enter') {{ evt.preventDefault(); {commit} }}
        else if (k === 'Escape') {{ {is_editing} = false; {cancel} }}
        else if (k.length === 1 && !mod && evt.target.id !== 'editor') {{ evt.preventDefault(); {draft.ref()} += k }}
      }}
      else if (mod && k === 'c') {{ {copy} }}
      else if (mod && k === 'v') {{ evt.preventDefault(); {paste} }}
      else if (mod) {{ }}
      else if (k.startsWith('Arrow')) {{ evt.preventDefault(); {move_by_key} }}
      else if (k === 'Enter' || k === 'F2') {{ evt.preventDefault(); {is_editing} = true; {edit_current} }}
      else if (k === 'Delete' || k === 'Backspace') {{ evt.preventDefault(); {clear} }}
      else if (k.length === 1) {{ evt.preventDefault(); {is_editing} = true; {draft.ref()} = k; {edit} }}"""
    click = f"""
      const cell = evt.target.closest('[data-cell]');
      if (cell && evt.target.id !== 'editor') {{
        const [r, k] = cell.dataset.cell.split(':');
        {select_clicked}
      }}"""
    double_click = f"if (evt.target.closest('[data-cell]')) {{ {is_editing} = true; {edit_current} }}"

    def render_cell(r: int, k: int, value: str, peers: dict[tuple[int, int], str]) -> Markup:
        if (r, k) == (row.value, col.value):
            if editing.value:
                inner = html(
                    '<input id="editor" {} maxlength="{}" autocomplete="off" data-init="el.focus()">',
                    draft.bind(),
                    MAX_VALUE,
                )
            else:
                inner = html("{}", value)
            return html('<div class="cell sel" data-cell="{}:{}">{}</div>', r, k, inner)
        if (r, k) in peers:
            return html(
                '<div class="cell peer" style="--peer: {}" data-cell="{}:{}">{}</div>', peers[(r, k)], r, k, value
            )
        return html('<div class="cell" data-cell="{}:{}">{}</div>', r, k, value)

    def view() -> Markup:
        first = window_start(scroll_top.as_int())
        values = load_window(first, WINDOW)
        peers = {(x["row"], x["col"]): x["color"] for x in cursors.value if x["tab"] != me}
        rows = (
            html(
                '<div class="row"><div class="rh">{}</div>{}</div>',
                r + 1,
                (render_cell(r, k, values.get((r, k), ""), peers) for k in range(COLS)),
            )
            for r in range(first, min(first + WINDOW, ROWS))
        )
        people = (html('<span class="dot" style="background: {}"></span>', x["color"]) for x in cursors.value)
        return html(
            """
<main id="sheet" data-on:keydown__window="{keys}">
  <h1>Spreadsheet</h1>
  <div class="bar">
    <span id="address"><b>{address}</b> {current}</span>
    <span id="clipboard">Clipboard: <code data-text="{clipboard_ref}">{clipboard}</code></span>
    <span id="people">{people} {here} here</span>
  </div>
  <div class="head"><div></div>{columns}</div>
  <div id="viewport"
       data-on:scroll__throttle.60ms.trailing="{scroll_top} = Math.round(el.scrollTop); {scroll}"
       data-effect="el.scrollTop = {scroll_top}">
    <div id="rows" data-on:click="{click}" data-on:dblclick="{double_click}">
      <div id="window" style="top: {top}px">{rows}</div>
    </div>
  </div>
  <p><small>Click a cell, type, Enter to commit, Escape to cancel; arrows move; Ctrl+C / Ctrl+V copy and paste.
  Open a second browser to see its cursor.</small></p>
</main>""",
            keys=keys,
            address=f"{COLUMNS[col.value]}{row.value + 1}",
            current=read_cell(row.value, col.value),
            clipboard_ref=clipboard.ref(),
            clipboard=clipboard.value,
            people=people,
            here=len(cursors.value),
            columns=(html("<div>{}</div>", name) for name in COLUMNS),
            scroll_top=scroll_top.ref(),
            scroll=scroll,
            click=click,
            double_click=double_click,
            top=first * ROW_H,
            rows=rows,
        )

    c.view(view)


if __name__ == "__main__":
    app.run(host="127.0.0.1", port=3000)
