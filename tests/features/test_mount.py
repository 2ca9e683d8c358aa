"""Apps mounted in an app: each keeps its tabs and settings; every URL carries its prefix."""

from __future__ import annotations

import pytest

from pyvia import App, Context, RouteError
from pyvia.testing import TestClient


def counter_app() -> App:
    app = App(title="Inner")

    @app.page("/")
    def page(c: Context) -> None:
        n = c.signal(0, "n")

        @c.action
        def inc() -> None:
            n.value += 1

        c.view(lambda: f'<button id="inc" data-on:click="{inc}">{n.value}</button>')

    return app


def test_mounted_app_serves_under_its_prefix() -> None:
    site = App(title="Site")

    @site.page("/")
    def home(c: Context) -> None:
        c.view(lambda: "<h1>home</h1>")

    inner = counter_app()
    site.mount("/examples/counter", inner)
    with TestClient(site) as client:
        assert b"<h1>home</h1>" in client.get("/").body
        tab = client.open("/examples/counter/")
        assert "<title>Inner</title>" in tab.page
        assert "/examples/counter/_sse" in tab.page and "/examples/counter/datastar.js?v=" in tab.page
        assert "/examples/counter/_action/inc" in tab.html
        tab.click("#inc")
        assert tab.signals["_n"] == 1
        assert tab.id in inner.contexts and tab.id not in site.contexts
        assert client.get("/examples/counterx").status == 404
        client.clock.advance(3600)  # the mounted app runs on the same clock: a connected tab stays
        assert tab.id in inner.contexts


def test_bad_mounts_are_refused() -> None:
    site = App()
    with pytest.raises(RouteError):
        site.mount("examples", counter_app())
    with pytest.raises(RouteError):
        site.mount("/x/", counter_app())
    site.mount("/x", counter_app())
    with pytest.raises(RouteError):
        site.mount("/x", counter_app())
