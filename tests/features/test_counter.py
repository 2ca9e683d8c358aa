"""The counter example end to end through pyvia.testing."""

from __future__ import annotations

from examples.counter import app as counter_app

from pyvia import protocol
from pyvia.testing import TestClient


def test_page_seeds_context_id_and_signals() -> None:
    with TestClient(counter_app) as client:
        tab = client.open("/")
        assert tab.signals["_count"] == 0
        assert tab.signals["step"] == 1
        assert tab.id in counter_app.contexts
        assert "Count: <strong" in tab.html


def test_clicks_count_and_step_is_client_writable() -> None:
    with TestClient(counter_app) as client:
        tab = client.open("/")
        tab.click("#inc")
        tab.click("#inc")
        assert tab.signals["_count"] == 2
        tab.type("#step", 5)
        tab.click("#dec")
        assert tab.signals["_count"] == -3
        tab.click("#reset")
        assert tab.signals["_count"] == 0


def test_tabs_are_private() -> None:
    with TestClient(counter_app) as client:
        a = client.open("/")
        b = client.open("/")
        a.click("#inc")
        assert a.signals["_count"] == 1
        assert b.signals["_count"] == 0
        assert not [e for e in b.new_events() if e.signals.get("_count")]


def test_action_changes_go_out_on_the_stream_not_the_response() -> None:
    with TestClient(counter_app) as client:
        tab = client.open("/")
        tab.new_events()
        response = tab.click("#inc")
        assert response.status == 200
        assert response.body == b""
        events = tab.new_events()
        assert [e.type for e in events] == [protocol.PATCH_SIGNALS]
        assert events[0].signals["_count"] == 1
        assert set(events[0].signals) == {"_count", protocol.SNAPSHOT_SIGNAL}  # the step was not echoed
