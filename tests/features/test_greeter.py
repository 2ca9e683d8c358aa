"""The greeter example through pyvia.testing."""

from __future__ import annotations

from examples.greeter import app

from pyvia.testing import TestClient


def test_submitting_the_form_greets_by_the_bound_name() -> None:
    with TestClient(app) as client:
        tab = client.open("/")
        tab.type("#name", "  Ada ")
        tab.submit("#form")
        assert tab.signals["_greeting"] == "Hello, Ada!"


def test_empty_name_gets_a_hint_and_greeting_is_not_client_writable() -> None:
    with TestClient(app) as client:
        tab = client.open("/")
        tab.action("greet", greeting="forged", _greeting="forged")
        assert tab.context is not None and tab.context.signals["greeting"].value == "Tell me your name first."
        assert tab.new_events()[-1].signals["_greeting"] == "Tell me your name first."
