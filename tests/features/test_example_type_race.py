"""The type race example: rooms as custom scopes, names in the session, the countdown driven by
the app timer, live progress, the ranking, and the next race.

Other tabs are brought up to date with ``app.flush_broadcasts()``, which sends what is marked at
once, instead of advancing the clock by the broadcast tick after every step.
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
from examples.type_race import COUNTDOWN, RACE_LIMIT, app

from pyvia import App
from pyvia.testing import Tab, TestClient


@pytest.fixture(autouse=True)
def no_tabs_left_over() -> Iterator[None]:
    """A closed TestClient leaves its tabs, and so its rooms, in the module's app: remove them."""
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


def named(client: TestClient, name: str, room: str = "lobby") -> Tab:
    tab = client.open(f"/room/{room}")
    tab.submit("#name-form", name=name)
    app.flush_broadcasts()  # the name reaches the session's tabs with the next flush
    return tab


def room(tab: Tab, signal: str, name: str = "lobby") -> object:
    return tab.signals[f"_race_{name}__{signal}"]


def bars(tab: Tab) -> dict[str, str]:
    """Each player's name and bar width, as rendered."""
    return dict(re.findall(r'<span class="who">(.*?)</span>\s*<div class="bar"><div style="width: (\d+)%', tab.html))


def advance(client: TestClient, seconds: float) -> None:
    """Let time pass (the app timer runs), then deliver what it changed."""
    client.clock.advance(seconds)
    app.flush_broadcasts()


def type_(tab: Tab, text: str) -> None:
    tab.type("#typed", text)
    tab.click("#typed", event="input")


def test_the_index_lists_rooms_with_their_players_and_goes_to_a_new_one() -> None:
    with TestClient(app) as client:
        index = client.open("/")
        assert re.findall(r'<a href="/room/(\w+)">', index.html) == ["lobby", "marathon", "sprint"]
        index.submit("#go-form", wanted="No Spaces!")
        assert index.signals["_problem"] == "A room name is 1 to 20 letters or digits."
        index.submit("#go-form", wanted=" Chess ")
        assert index.scripts == ['window.location.href = "/room/chess"']

        client.open("/room/chess")
        client.open("/room/lobby")
        app.flush_broadcasts()
        assert re.findall(r'<a href="/room/(\w+)">\w+</a> <span class="count">(\d+) here', index.html) == [
            ("chess", "1"),
            ("lobby", "1"),
            ("marathon", "0"),
            ("sprint", "0"),
        ]
        assert "No room here" in client.open("/room/Not-A-Room").html


def test_the_name_is_kept_for_the_session() -> None:
    with TestClient(app) as ann, TestClient(app) as bob:
        a1 = named(ann, "Ann")
        a2 = ann.open("/room/sprint")
        b = bob.open("/room/lobby")
        app.flush_broadcasts()
        assert a2.signals["_session__username"] == "Ann"
        assert b.signals["_session__username"] == ""
        assert 'id="start"' in a1.html and 'id="start"' not in b.html  # no name, no start
        assert "Set your name to race." in b.html
        b.action("start")  # even if posted anyway
        assert room(b, "phase") == "waiting"


def test_a_race_from_countdown_to_ranking() -> None:
    with TestClient(app) as ann_browser, TestClient(app) as bob_browser, TestClient(app) as eve_browser:
        ann, bob = named(ann_browser, "Ann"), named(bob_browser, "Bob")
        eve = eve_browser.open("/room/lobby")  # watches without a name
        ann.click("#start")
        app.flush_broadcasts()
        assert room(bob, "phase") == "countdown" and room(bob, "countdown") == COUNTDOWN
        assert '<div id="countdown">3</div>' in bob.html
        bob.click("#start")  # joins during the countdown
        app.flush_broadcasts()
        assert [p["name"] for p in room(ann, "players")] == ["Ann", "Bob"]
        assert 'id="start"' not in ann.html  # already in

        type_(ann, "The")  # too early: ignored
        advance(ann_browser, 1.05)
        assert room(eve, "countdown") == 2
        assert '<div id="countdown">2</div>' in eve.html
        advance(ann_browser, COUNTDOWN - 1)  # 3.05 s after the start
        assert room(eve, "phase") == "racing"
        assert bars(eve) == {"Ann": "0", "Bob": "0"}
        assert re.search(r'<input id="typed" data-bind="typed" data-init="el.focus\(\)"', ann.html)
        assert re.search(r'<input id="typed" data-bind="typed" disabled', eve.html)  # a spectator

        sentence = str(room(ann, "sentence"))
        half = len(sentence) // 2
        type_(ann, sentence[:half] + "#")  # a typo: only the right prefix counts
        app.flush_broadcasts()
        assert room(bob, "players")[0]["done"] == half
        assert bars(bob)["Ann"] == str(100 * half // len(sentence))
        assert f'<span class="done">{sentence[:half]}</span>' in ann.html.replace("&#x27;", "'")

        advance(ann_browser, 4.45)  # 4.5 s after the race started
        type_(ann, sentence)
        advance(ann_browser, 1.5)
        type_(bob, sentence)
        app.flush_broadcasts()
        assert room(eve, "phase") == "finished"
        times = {p["name"]: p["time"] for p in room(eve, "players")}
        assert times == {"Ann": 4.5, "Bob": 6.0}
        ranking = re.findall(r"<li>(\w+): ([\d.]+) s, (\d+) wpm</li>", eve.html)
        words = len(sentence) / 5
        assert ranking == [("Ann", "4.50", f"{words / 4.5 * 60:.0f}"), ("Bob", "6.00", f"{words / 6 * 60:.0f}")]

        # anyone with a name starts the next race, with another sentence and a new field
        bob.click("#start")
        app.flush_broadcasts()
        assert room(ann, "phase") == "countdown"
        assert room(ann, "sentence") != sentence
        assert [p["name"] for p in room(ann, "players")] == ["Bob"]


def test_a_race_ends_when_the_players_left_are_done_or_at_the_limit() -> None:
    with TestClient(app) as ann_browser, TestClient(app) as bob_browser:
        ann, bob = named(ann_browser, "Ann", "sprint"), named(bob_browser, "Bob", "sprint")
        ann.click("#start")
        bob.click("#start")
        advance(ann_browser, COUNTDOWN + 0.1)
        assert room(ann, "phase", "sprint") == "racing"
        bob.disconnect()  # bob leaves; ann finishing is enough now
        type_(ann, str(room(ann, "sentence", "sprint")))
        app.flush_broadcasts()
        assert room(ann, "phase", "sprint") == "finished"
        assert "Did not finish: Bob" in ann.html

        ann.click("#start")
        advance(ann_browser, COUNTDOWN + RACE_LIMIT + 1)  # nobody types
        assert room(ann, "phase", "sprint") == "finished"


def test_each_room_is_its_own_race() -> None:
    with TestClient(app) as client:
        lobby = named(client, "Ann")
        marathon = client.open("/room/marathon")
        lobby.click("#start")
        advance(client, 0.1)
        assert room(lobby, "phase") == "countdown"
        assert room(marathon, "phase", "marathon") == "waiting"
        assert "_race_lobby__phase" not in marathon.signals


def test_mounted_below_a_prefix_every_url_carries_it() -> None:
    site, mounted = App(), fresh_copy("type_race").app
    site.mount("/examples/type_race", mounted)  # as the documentation site does
    with TestClient(site) as client:
        index = client.open("/examples/type_race/")
        assert '<a href="/examples/type_race/room/lobby">lobby</a>' in index.html
        index.submit("#go-form", wanted="chess")
        assert index.scripts == ['window.location.href = "/examples/type_race/room/chess"']
        tab = client.open("/examples/type_race/room/chess")
        assert '<a href="/examples/type_race/">All rooms</a>' in tab.html
        tab.submit("#name-form", name="Ann")
        (name_form,) = tab.find("#name-form")
        assert "'/examples/type_race/_action/set_name'" in name_form.attrs["data-on:submit__prevent"]
        mounted.flush_broadcasts()
        assert tab.signals["_session__username"] == "Ann"
