"""The test client's Tab acts as the page does: a click posts what Datastar would, then runs what follows."""

from __future__ import annotations

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
