"""The test client's Tab acts as the page does: a click posts what Datastar would, then runs what follows."""

from __future__ import annotations

from pathlib import Path

import pytest

from pyvia import App, Context
from pyvia.testing import TestClient


def notes_app(posted: list[str]) -> App:
    app = App()

    @app.page("/")
    def page(c: Context) -> None:
        note = c.signal("", "note", writable=True)
        picked = c.signal(0, "picked", writable=True)

        @c.action
        def add() -> None:
            posted.append(note.value)

        c.view(
            lambda: (
                f"""<input id="note" {note.bind()}>
<button id="add" data-on:click="{add}; {note.ref()} = ''; {picked.ref()} = 3">Add</button>
<button id="keep" data-on:click="{add}; {picked.ref()} = {note.ref()}">Keep</button>
<button class="x">one</button><button class="x">two</button>"""
            )
        )

    return app


def test_the_assignments_after_a_post_run_once_it_is_sent_and_the_post_has_the_values_before() -> None:
    posted: list[str] = []
    with TestClient(notes_app(posted)) as client:
        tab = client.open("/")
        tab.type("#note", "buy milk")
        assert tab.click("#add").status == 200
        assert posted == ["buy milk"]  # posted as typed
        assert tab.signals["note"] == "" and tab.signals["picked"] == 3  # cleared by the click
        tab.type("#note", "eggs")
        tab.click("#keep")  # an expression, not a literal: the client leaves it to a browser test
        assert posted == ["buy milk", "eggs"] and tab.signals["picked"] == 3


def test_a_click_names_what_it_could_not_find() -> None:
    with TestClient(notes_app([])) as client:
        tab = client.open("/")
        with pytest.raises(AssertionError, match=r"'\.x' matched 2 elements, expected 1"):
            tab.click(".x")
        with pytest.raises(AssertionError, match="'#note' has no data-on:click attribute"):
            tab.click("#note")


def test_a_submit_field_that_names_no_input_says_what_a_field_is() -> None:
    with TestClient(notes_app([])) as client:
        tab = client.open("/")
        with pytest.raises(AssertionError, match="no input with id 'title'; a field names the id of the input"):
            tab.submit("#add", title="x")


def monitor_app() -> App:
    """What a module declares once, at import: its tests each make a client of the same app."""
    app = App()
    hits = app.signal(0, "hits", scope="global")
    app.global_state["events"] = ["started"]

    @app.page("/rooms/{room}")
    def page(c: Context, room: str) -> None:
        topic = c.signal("", "topic", scope=f"room:{room}")
        c.signal(0, "hits", scope="global")

        @c.action
        def hit() -> None:
            hits.increment()
            topic.value = "busy"
            app.global_state.mutate("events", lambda events: [*events, "hit"])
            c.session_data["seen"] = True

        c.view(lambda: f'<p id="n">{hits.value} {topic.value}</p>')

    return app


def test_each_client_of_a_module_level_app_starts_as_a_new_process_would() -> None:
    app = monitor_app()
    for _ in range(2):  # two tests, in either order
        with TestClient(app) as client:
            tab = client.open("/rooms/lobby")
            assert tab.html == '<p id="n">0 </p>' and app.global_state["events"] == ["started"]
            tab.action("hit")
            assert tab.context is not None and tab.context.session_data["seen"] is True
            assert tab.html == '<p id="n">1 busy</p>' and app.global_state["events"] == ["started", "hit"]
    assert app.sessions.items() == []


def test_a_client_of_an_app_that_keeps_its_state_gets_it_back_at_its_start(tmp_path: Path) -> None:
    app = App(persist_path=str(tmp_path / "state.sqlite"))
    hits = app.signal(0, "hits", scope="global")
    with TestClient(app):
        hits.increment()
    with TestClient(app):  # the graceful stop saved it; this start restores it
        assert hits.value == 1
