"""Shared state across a graceful restart, and the process-wide cap on unsent bytes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pyvia import App, Context, Scope
from pyvia.testing import TestClient


def make_app(path: Path, **options: object) -> App:
    app = App(persist_path=str(path), **options)

    @app.page("/")
    def page(c: Context) -> None:
        votes = c.signal(0, "votes", scope=Scope.GLOBAL)
        room = c.signal([], "log", scope="room:lobby")

        @c.action
        def vote() -> None:
            votes.increment()
            room.mutate(lambda xs: [*xs, "vote"])
            app.global_state.increment("total")
            c.session_data["voted"] = True

        c.view(lambda: f"<p id='v'>{votes.value}</p>")

    return app


def test_shared_state_survives_a_graceful_restart(tmp_path: Path) -> None:
    db = tmp_path / "state.sqlite"
    first = make_app(db)
    with TestClient(first) as client:
        tab = client.open("/")
        tab.action("vote")
        tab.action("vote")
        cookie = client.cookies["via_session_id"]
    second = make_app(db)  # a new process: only the file carries the state
    with TestClient(second) as client:
        client.cookies["via_session_id"] = cookie
        tab = client.open("/")
        assert tab.signals["_global__votes"] == 2
        assert tab.signals["_room_lobby__log"] == ["vote", "vote"]
        assert second.global_state["total"] == 2
        assert second.session_data(cookie)["voted"] is True
        tab.action("vote")
        assert tab.signals["_global__votes"] == 3


def test_a_restart_saves_who_is_online_without_the_tabs_that_are_leaving(tmp_path: Path) -> None:
    """Connect and disconnect hooks count the open tabs; at a stop the disconnect hooks run before
    the save, so the tab that reconnects to the next process is counted once, not twice."""
    calls: list[str] = []

    def board() -> tuple[App, Any]:
        app = App(persist_path=str(tmp_path / "state.sqlite"))
        online = app.signal(0, "online", scope=Scope.GLOBAL)
        app.on_connect(lambda: online.increment())
        app.on_disconnect(lambda: (calls.append(f"disconnect {online.value}"), online.increment(-1)))
        app.on_stop(lambda: calls.append(f"stop {online.value}"))

        @app.page("/")
        def page(c: Context) -> None:
            c.signal(0, "online", scope=Scope.GLOBAL)
            c.view(lambda: "<p>board</p>")

        return app, online

    first, online = board()
    with TestClient(first) as client:
        tab = client.open("/")
        assert online.value == 1
        cookies = dict(client.cookies)
    assert calls == ["disconnect 1", "stop 0"]  # the tab left before the stop hooks and the save
    second, online = board()
    with TestClient(second) as client:
        client.cookies.update(cookies)
        tab.client = client
        tab.reconnect()  # the page's retry reaches the new process: revived, counted once
        assert online.value == 1 and tab.signals["_global__online"] == 1


def test_a_signal_declared_at_import_takes_its_saved_value_and_is_saved_again(tmp_path: Path) -> None:
    # ``app.signal`` runs when the module is imported, before the start reads the file: it must
    # still get the saved value (it kept its initial one, and the next stop failed on the
    # duplicate, keeping nothing: found by a newcomer's poll).
    db = tmp_path / "state.sqlite"

    def poll() -> tuple[App, Any]:
        app = App(persist_path=str(db))
        total = app.signal(0, "total", scope=Scope.GLOBAL)

        @app.page("/")
        def page(c: Context) -> None:
            shared = c.signal(0, "total", scope=Scope.GLOBAL)

            @c.action
            def hit() -> None:
                shared.increment()

            c.view(lambda: f"<p id='t'>{shared.value}</p>")

        return app, total

    for run in range(3):
        app, total = poll()
        with TestClient(app) as client:
            assert total.value == 2 * run
            tab = client.open("/")
            assert f"<p id='t'>{2 * run}</p>" in tab.html
            tab.action("hit")
            tab.action("hit")
            assert total.value == 2 * run + 2
        assert total.value == 0  # as a new process of the code holds it: the next start restores it


def test_values_that_cannot_be_saved_are_skipped_not_fatal(tmp_path: Path) -> None:
    db = tmp_path / "state.sqlite"
    app = make_app(db)
    with TestClient(app):
        app.global_state["fine"] = {"a": [1, 2]}
        app.global_state["odd"] = object()
    again = make_app(db)
    with TestClient(again):
        assert again.global_state["fine"] == {"a": [1, 2]}
        assert "odd" not in again.global_state


def test_process_wide_cap_on_unsent_bytes_holds_views_everywhere(tmp_path: Path) -> None:
    app = App(max_unsent_bytes=3000, max_stream_buffer=10_000)

    @app.page("/")
    def page(c: Context) -> None:
        c.scope(Scope.ROUTE)
        n = c.signal(0, "n", scope=Scope.ROUTE)

        @c.action
        def inc() -> None:
            n.increment()

        c.view(lambda: f"<p id='n'>{n.value}</p>" + "x" * 1000, share_render=True)

    with TestClient(app) as client:
        tabs = [client.open("/") for _ in range(3)]
        for t in tabs[:2]:
            t.pause()  # two stalled tabs, each well under its own 10 KB limit
        for _ in range(2):
            tabs[2].action("inc")
            app.flush_broadcasts()
        client.clock.advance(1.1)  # the sweep adds up the unsent bytes: over 3,000 together
        assert app.outflow.congested
        held_before = tabs[0].unread_bytes
        tabs[2].action("inc")
        app.flush_broadcasts()
        assert tabs[0].unread_bytes - held_before < 200  # only the signals patch, the view was held
        assert "<p id='n'>3</p>" in tabs[2].html  # a drained socket still gets its views
        for t in tabs[:2]:
            t.resume()
        client.clock.advance(1.1)
        assert not app.outflow.congested
