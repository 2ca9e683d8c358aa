"""The todo example: SQLite storage, writes broadcast to every tab, a filter per tab.

Other tabs are brought up to date with ``app.flush_broadcasts()`` rather than by advancing the
clock 25 ms: every test starts the module's app again on a new clock that begins at the same
time, and the broadcaster still holds the time of the previous test's last flush.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest
from examples.todo import app

from pyvia.testing import Tab, TestClient


@pytest.fixture(autouse=True)
def database(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    path = tmp_path / "todo.sqlite3"
    monkeypatch.setenv("PYVIA_TODO_DB", str(path))
    yield path


def rows(path: Path) -> list[tuple[int, str, int]]:
    with closing(sqlite3.connect(path)) as conn:
        return conn.execute("SELECT id, title, done FROM todos ORDER BY id").fetchall()


def titles(tab: Tab) -> list[str]:
    return re.findall(r"<span>(.*?)</span>", tab.html.split('id="todos"')[1].split("</ul>")[0])


def test_the_table_is_created_on_start(database: Path) -> None:
    assert not database.exists()
    with TestClient(app) as client:
        assert database.exists() and rows(database) == []
        assert 'id="left">0 left' in client.open("/").html


def test_add_toggle_delete_are_stored_and_reach_every_browser(database: Path) -> None:
    with TestClient(app) as ann, TestClient(app) as bob:
        a, b = ann.open("/"), bob.open("/")
        a.submit("#add-form", draft="  buy milk  ")
        app.flush_broadcasts()
        a.new_events()
        a.submit("#add-form", draft="<script>x</script>")
        assert a.signals["draft"] == ""  # the click cleared the box in the browser; the server leaves it be
        assert not [e for e in a.new_events() if e.signals and "draft" in e.signals]
        a.submit("#add-form", draft="   ")  # blank: nothing stored
        app.flush_broadcasts()
        assert rows(database) == [(1, "buy milk", 0), (2, "<script>x</script>", 0)]
        assert titles(b) == ["buy milk", "&lt;script&gt;x&lt;/script&gt;"]  # escaped
        assert 'id="left">2 left' in b.html

        b.click("#toggle-1", event="change")
        app.flush_broadcasts()
        assert rows(database)[0] == (1, "buy milk", 1)
        assert '<li id="todo-1" class="done">' in a.html
        assert 'id="toggle-1" checked' in a.html
        assert 'id="left">1 left' in a.html and "Clear done (1)" in a.html

        b.click("#toggle-1", event="change")  # and back
        app.flush_broadcasts()
        assert rows(database)[0] == (1, "buy milk", 0)
        assert '<li id="todo-1">' in a.html

        a.click("#delete-2")
        app.flush_broadcasts()
        assert rows(database) == [(1, "buy milk", 0)]
        assert titles(b) == ["buy milk"]


def test_clear_done_removes_only_done_rows(database: Path) -> None:
    with TestClient(app) as client:
        a, b = client.open("/"), client.open("/")
        for title in ("one", "two", "three"):
            a.submit("#add-form", draft=title)
        app.flush_broadcasts()
        assert 'id="clear-done" data-on:click="@post(&#39;/_action/clear_done&#39;' in a.html
        assert "disabled>Clear done (0)" in a.html
        a.click("#toggle-1", event="change")
        a.click("#toggle-3", event="change")
        app.flush_broadcasts()
        b.click("#clear-done")
        app.flush_broadcasts()
        assert rows(database) == [(2, "two", 0)]
        assert titles(a) == ["two"]


def test_the_filter_belongs_to_each_tab() -> None:
    with TestClient(app) as client:
        a, b = client.open("/"), client.open("/")
        for title in ("one", "two", "three"):
            a.submit("#add-form", draft=title)
        app.flush_broadcasts()
        a.click("#toggle-2", event="change")
        app.flush_broadcasts()

        a.click("#show-active")
        assert a.signals["_show"] == "active"
        assert titles(a) == ["one", "three"]
        assert 'id="show-active" aria-pressed="true"' in a.html
        a.click("#show-done")
        assert titles(a) == ["two"]
        assert titles(b) == ["one", "two", "three"]  # the other tab still shows all

        b.click("#toggle-1", event="change")  # a broadcast keeps each tab's filter
        app.flush_broadcasts()
        assert titles(a) == ["one", "two"]
        assert titles(b) == ["one", "two", "three"]

        a.post("/_action/set_filter?wanted=%22bogus%22")
        assert a.signals["_show"] == "all"
        assert titles(a) == ["one", "two", "three"]


def test_bad_ids_change_nothing(database: Path) -> None:
    with TestClient(app, raise_server_exceptions=False) as client:
        tab = client.open("/")
        tab.submit("#add-form", draft="keep")
        assert tab.post("/_action/delete?item_id=99").status == 200  # gone already (another tab): nothing to do
        assert tab.post("/_action/toggle?item_id=-1").status == 200  # no such row: nothing to do
        for url in (
            "/_action/toggle?item_id=abc",
            "/_action/delete",
            "/_action/toggle?item_id=1.5",
            "/_action/toggle?item_id=" + "9" * 23,
            "/_action/delete?item_id=%C2%B2",
            "/_action/toggle?id=1",
        ):
            response = tab.post(url)
            assert response.status == 400 and "'item_id'" in response.body.decode(), url
        assert rows(database) == [(1, "keep", 0)]


def test_a_revived_tab_keeps_its_filter_and_reads_the_database() -> None:
    with TestClient(app) as client:
        tab = client.open("/")
        tab.submit("#add-form", draft="one")
        tab.submit("#add-form", draft="two")
        app.flush_broadcasts()
        tab.click("#toggle-1", event="change")
        tab.click("#show-done")
        tab.revive()
        assert tab.context is not None
        assert titles(tab) == ["one"]
