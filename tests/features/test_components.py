"""Components: namespaced signals and actions, their own patches, stable ids across revival."""

from __future__ import annotations

import pytest

from pyvia import App, Context, DeclarationError
from pyvia.components import Component
from pyvia.testing import TestClient


def counter(comp: Component) -> None:
    n = comp.signal(0, "n")

    @comp.action
    def inc() -> None:
        n.value += 1
        comp.sync()

    comp.view(lambda: f'<b>{comp.name}: {n.value}</b><button id="{comp.name}-inc" data-on:click="{inc}">+</button>')


def make_app() -> App:
    app = App()

    @app.page("/")
    def page(c: Context) -> None:
        left = c.component(counter, "left")
        right = c.component(counter, "right")
        c.view(lambda: f"<main id='page'>{left}{right}</main>")

    return app


def test_components_have_namespaced_ids_and_patch_only_themselves() -> None:
    with TestClient(make_app()) as client:
        tab = client.open("/")
        assert tab.signals["_left__n"] == 0 and tab.signals["_right__n"] == 0
        assert '<div id="c-left"><b>left: 0</b>' in tab.html
        tab.new_events()
        tab.click("#left-inc")
        events = tab.new_events()
        assert events[0].selector is None and events[0].elements.startswith('<div id="c-left">')
        assert events[1].signals["_left__n"] == 1 and "_right__n" not in events[1].signals
        assert "left: 1" in tab.html and "right: 0" in tab.html
        tab.click("#right-inc")
        tab.click("#right-inc")
        assert tab.signals["_right__n"] == 2


def test_named_components_keep_their_ids_and_values_across_revival() -> None:
    with TestClient(make_app()) as client:
        tab = client.open("/")
        tab.click("#left-inc")
        tab.revive()
        ctx = tab.context
        assert ctx is not None and ctx.signals["left__n"].value == 1
        assert "left: 1" in tab.html
        tab.click("#left-inc")
        assert tab.signals["_left__n"] == 2


def test_component_names_are_checked() -> None:
    app = App()

    @app.page("/twice")
    def twice(c: Context) -> None:
        c.component(counter, "a")
        c.component(counter, "a")

    @app.page("/bad")
    def bad(c: Context) -> None:
        c.component(counter, "has__double")

    with TestClient(app) as client:
        with pytest.raises(DeclarationError, match="declared twice"):
            client.get("/twice")
        with pytest.raises(DeclarationError, match="component name"):
            client.get("/bad")
