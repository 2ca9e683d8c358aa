"""The live poll example: one vote per session, atomic counts, live results for everyone."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from examples.live_poll import OPTIONS, app, votes

from pyvia.testing import Tab, TestClient


@pytest.fixture(autouse=True)
def fresh_poll() -> Iterator[None]:
    """The counts are held by the module's app for as long as it lives: start every test at zero."""
    for sig in votes.values():
        sig.value = 0
    yield


def counts(tab: Tab) -> dict[str, int]:
    return {key: int(n) for key, n in re.findall(r'id="count-(\w+)">(\d+)<', tab.html)}


def widths(tab: Tab) -> dict[str, int]:
    return {key: int(w) for key, w in re.findall(r'id="bar-(\w+)" style="width: (\d+)%"', tab.html)}


def test_votes_reach_everyone_and_each_browser_votes_once() -> None:
    with TestClient(app) as ann, TestClient(app) as bob, TestClient(app) as cy:
        a1, a2 = ann.open("/"), ann.open("/")
        b, c = bob.open("/"), cy.open("/")
        assert counts(c) == dict.fromkeys(OPTIONS, 0) and widths(c)["dark"] == 0

        a1.click("#vote-dark")
        app.flush_broadcasts()
        assert a2.signals["_session__choice"] == "dark"  # every tab of ann's browser knows
        assert "_session__choice" not in b.signals or b.signals["_session__choice"] == ""
        assert c.signals["_route__votes_dark"] == 1
        assert counts(c)["dark"] == 1 and widths(c) == {"dark": 100, "offline": 0, "export": 0, "api": 0}

        a2.click("#vote-api")  # the same browser again, from another tab: refused
        a1.click("#vote-dark")
        b.click("#vote-api")
        c.click("#vote-api")
        app.flush_broadcasts()
        assert {k: s.value for k, s in votes.items()} == {"dark": 1, "offline": 0, "export": 0, "api": 2}
        assert counts(a1) == counts(b) == {"dark": 1, "offline": 0, "export": 0, "api": 2}
        assert widths(a2) == {"dark": 33, "offline": 0, "export": 0, "api": 67}
        assert 'id="total">3<' in b.html
        assert a1.html == b.html  # one shared render: nothing in it belongs to one browser
        assert b.signals["_session__choice"] == "api" and a1.signals["_session__choice"] == "dark"


def test_the_vote_is_remembered_by_the_session_not_the_tab() -> None:
    with TestClient(app) as client:
        tab = client.open("/")
        tab.click("#vote-export")
        tab.expire()
        later = client.open("/")  # a new tab, once the others are gone
        assert later.signals["_session__choice"] == "export"
        later.click("#vote-offline")
        app.flush_broadcasts()
        assert votes["export"].value == 1 and votes["offline"].value == 0


def test_unknown_options_are_ignored() -> None:
    with TestClient(app) as client:
        tab = client.open("/")
        for url in ("/_action/vote?key=%22nope%22", "/_action/vote?key=%22__class__%22"):
            assert tab.post(url).status == 200
        for url in ("/_action/vote", "/_action/vote?key=nope", "/_action/vote?key=1"):  # no key, or not a str
            assert tab.post(url).status == 400
        tab.action(
            "vote",
            session__choice="",
            route__votes_dark=1000,  # what a tampered browser sends
            _session__choice="",
            _route__votes_dark=1000,
        )
        assert all(sig.value == 0 for sig in votes.values())
        assert tab.signals["_session__choice"] == ""
        tab.click("#vote-offline")  # a real vote still counts
        assert votes["offline"].value == 1


def test_the_bindings_for_your_vote() -> None:
    with TestClient(app) as client:
        tab = client.open("/")
        assert "data-class:mine=\"$_session__choice == 'dark'\"" in tab.html
        assert "data-attr:disabled=\"$_session__choice != ''\"" in tab.html
        assert "data-show=\"$_session__choice != ''\"" in tab.html
