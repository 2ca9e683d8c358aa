"""Scope names from user text: any room name works, distinct names stay distinct rooms."""

from __future__ import annotations

from urllib.parse import quote

import pytest

from pyvia import App, Context, DeclarationError, Scope, html
from pyvia.testing import TestClient

# the long ones are past the 200 characters of a scope, as such or once escaped (a newcomer's
# board of 250 characters, or of 66 ':', answered 500)
NAMES = ["lobby", "my-room", "a_b", "a b", "a-b", "café", "🐍", "a:b", "a*b", "50%", "X", "x"]
NAMES += ["b" * 194, "b" * 250, "c" * 250, ":" * 66, ":" * 67, "é" * 300]


def make_app() -> App:
    app = App()

    @app.page("/room/{name}")
    def room(c: Context, name: str) -> None:
        scope = Scope.custom("room", name)
        c.scope(scope)
        said = c.signal([], "said", scope=scope)

        @c.action
        def say(text: str) -> None:
            said.value = [*said.value, text]

        c.view(
            lambda: html(
                '<h1 id="name">{}</h1><ul>{}</ul><button id="hi" data-on:click="{}">hi</button>',
                name,
                (html("<li>{}</li>", t) for t in said.value),
                say(text=f"hi from {name}"),
            )
        )

    return app


def test_every_name_makes_its_own_room_and_a_message_reaches_only_it() -> None:
    app = make_app()
    with TestClient(app) as client:
        tabs = {name: client.open(f"/room/{quote(name, safe='')}") for name in NAMES}
        for name, tab in tabs.items():
            assert tab.find("#name") and html('<h1 id="name">{}</h1>', name) in tab.html
        ids = {next(k for k in tab.signals if k.endswith("__said")) for tab in tabs.values()}
        assert len(ids) == len(NAMES)  # one browser id per room: no two rooms merge
        for tab in tabs.values():
            tab.click("#hi")
        client.clock.advance(1)
        for name, tab in tabs.items():
            said_id = next(k for k in tab.signals if k.endswith("__said"))
            assert tab.signals[said_id] == [f"hi from {name}"], name


def test_a_path_is_percent_decoded_under_the_test_client_as_under_the_server() -> None:
    with TestClient(make_app()) as client:
        tab = client.open("/room/caf%C3%A9")
        assert '<h1 id="name">café</h1>' in tab.html


def test_a_star_in_a_concrete_scope_is_refused_with_the_way_out() -> None:
    app = App()

    @app.page("/")
    def page(c: Context) -> None:
        c.scope("room:a*b")

    with TestClient(app) as client, pytest.raises(DeclarationError, match=r"use Scope.custom\('room', name\)"):
        client.get("/")


def test_a_broadcast_pattern_reaches_every_room_of_a_kind() -> None:
    app = make_app()
    with TestClient(app) as client:
        a, b = client.open("/room/my-room"), client.open("/room/caf%C3%A9")
        for tab in (a, b):
            tab.new_events()
        app.broadcast("room:*")
        client.clock.advance(1)
        assert a.new_events() and b.new_events()


def test_a_long_name_makes_a_scope_of_a_bounded_length_and_short_names_keep_theirs() -> None:
    assert Scope.custom("room", "b" * 194) == "room:" + "b" * 194  # fits: as it is
    long = Scope.custom("room", "b" * 250)
    assert len(long) <= 200 and long.startswith("room:%~") and long == Scope.custom("room", "b" * 250)
    two = Scope.custom("game", "a" * 150, "b" * 150, "c")
    assert len(two) <= 200 and two.endswith(":c") and two.count(":") == 3


def test_a_kind_must_be_a_plain_word() -> None:
    for kind in ("", "room:x", "my room", "tab", "global"):
        with pytest.raises(DeclarationError, match="scope kind"):
            Scope.custom(kind, "x")
