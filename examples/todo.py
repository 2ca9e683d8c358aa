"""A todo list in SQLite, shared by everyone on the page.

The rows live in a SQLite file (``PYVIA_TODO_DB``, by default ``pyvia-todo.sqlite3`` in the
system's temp folder); each write opens a connection, runs one short statement, commits and
closes. After a write, ``c.broadcast()`` re-renders every tab on the page (the primary scope is
the route), so two tabs stay in sync. The filter (all / active / done) belongs to each tab.
"""

from __future__ import annotations

import os
import sqlite3
import tempfile
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path

from pyvia import App, Context, Markup, Scope, html, raw

app = App(
    title="Todo",
    head=[
        """<style>
  body { font-family: system-ui, sans-serif; margin: 2rem; max-width: 32rem; }
  #todos { list-style: none; padding: 0; }
  #todos li { display: flex; align-items: center; gap: .5rem; padding: .25rem 0; border-bottom: 1px solid #eee; }
  #todos li.done span { text-decoration: line-through; color: #999; }
  #todos li span { flex: 1; }
  .filters button[aria-pressed="true"] { font-weight: bold; }
  footer { display: flex; gap: 1rem; align-items: center; color: #666; }
</style>"""
    ],
)

FILTERS = ("all", "active", "done")
MAX_TITLE = 200


def db_path() -> Path:
    return Path(os.environ.get("PYVIA_TODO_DB") or Path(tempfile.gettempdir()) / "pyvia-todo.sqlite3")


@contextmanager
def db() -> Iterator[sqlite3.Connection]:
    """One short-lived connection: committed (or rolled back) and closed at the end of the block."""
    with closing(sqlite3.connect(db_path(), timeout=5)) as conn, conn:
        yield conn


@app.on_start
def create_table() -> None:
    with db() as conn:
        conn.execute(
            "CREATE TABLE IF NOT EXISTS todos ("
            " id INTEGER PRIMARY KEY AUTOINCREMENT, title TEXT NOT NULL, done INTEGER NOT NULL DEFAULT 0)"
        )


def load(show: str) -> tuple[list[tuple[int, str, bool]], int, int]:
    """The rows the filter shows, the number left to do, and the number done."""
    where = {"active": "WHERE done = 0", "done": "WHERE done = 1"}.get(show, "")
    with db() as conn:
        rows = conn.execute(f"SELECT id, title, done FROM todos {where} ORDER BY id").fetchall()
        total, done = conn.execute("SELECT COUNT(*), COALESCE(SUM(done), 0) FROM todos").fetchone()
    return [(i, t, bool(d)) for i, t, d in rows], total - done, done


@app.page("/")
def todo(c: Context) -> None:
    c.scope(Scope.ROUTE)  # c.broadcast() re-renders every tab on this page
    draft = c.signal("", "draft", writable=True, max_length=MAX_TITLE)  # the new item's title
    show = c.signal("all", "show")  # this tab's filter; a revived tab gets it back from its snapshot

    def write(sql: str, *params: object) -> None:
        with db() as conn:
            conn.execute(sql, params)
        c.broadcast()  # every tab on the page renders again at the next flush

    @c.action
    def add() -> None:
        title = draft.as_str().strip()[:MAX_TITLE]
        if title:  # the click cleared the box in the browser: the next title can be typed at once
            write("INSERT INTO todos (title) VALUES (?)", title)

    # ``item_id: int``: the view binds it (``toggle(item_id=3)``); anything else the browser posts
    # (``abc``, ``1e3``, a number past 2**53) is a 400 naming the argument, and the action does not
    # run. An id of no row (deleted by another tab meanwhile) changes nothing.
    @c.action
    def toggle(item_id: int) -> None:
        write("UPDATE todos SET done = 1 - done WHERE id = ?", item_id)

    @c.action
    def delete(item_id: int) -> None:
        write("DELETE FROM todos WHERE id = ?", item_id)

    @c.action
    def clear_done() -> None:
        write("DELETE FROM todos WHERE done = 1")

    @c.action
    def set_filter(wanted: str) -> None:
        show.value = wanted if wanted in FILTERS else "all"
        c.sync()  # only this tab

    def item(i: int, title: str, is_done: bool) -> Markup:
        return html(
            """
    <li id="todo-{i}"{done_class}>
      <input type="checkbox" id="toggle-{i}"{checked} data-on:change="{toggle}">
      <span>{title}</span>
      <button id="delete-{i}" title="Delete" data-on:click="{delete}">&times;</button>
    </li>""",
            i=i,
            title=title,
            toggle=toggle(item_id=i),
            delete=delete(item_id=i),
            done_class=raw(' class="done"') if is_done else "",
            checked=raw(" checked") if is_done else "",
        )

    def view() -> Markup:
        current = show.value if show.value in FILTERS else "all"
        rows, left, done = load(current)
        buttons = (
            html(
                '<button id="show-{f}" aria-pressed="{pressed}" data-on:click="{act}">{f}</button>',
                f=f,
                pressed=str(f == current).lower(),
                act=set_filter(wanted=f),
            )
            for f in FILTERS
        )
        return html(
            """
<main>
  <h1>Todo</h1>
  <form id="add-form" data-on:submit__prevent="{add}; {draft_ref} = ''">
    <input id="draft" placeholder="What needs doing?" autocomplete="off" maxlength="{max_title}" {bind}>
    <button>Add</button>
  </form>
  <ul id="todos">{items}</ul>
  <footer>
    <span id="left">{left} left</span>
    <span class="filters">{buttons}</span>
    <button id="clear-done" data-on:click="{clear_done}"{disabled}>Clear done ({done})</button>
  </footer>
</main>""",
            add=add,
            max_title=MAX_TITLE,
            bind=draft.bind(),
            draft_ref=draft.ref(),
            items=(item(*row) for row in rows),
            left=left,
            buttons=buttons,
            clear_done=clear_done,
            disabled="" if done else raw(" disabled"),
            done=done,
        )

    c.view(view)


if __name__ == "__main__":
    app.run(host="127.0.0.1", port=3000)
