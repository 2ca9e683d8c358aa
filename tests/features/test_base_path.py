"""An app mounted below "/" makes every URL it hands the browser under its base path."""

from __future__ import annotations

import pytest

from pyvia import App, ConfigError, Context
from pyvia.testing import TestClient


def make_app() -> App:
    app = App(base_path="/live")

    @app.page("/")
    def page(c: Context) -> None:
        n = c.signal(0, "n")

        @c.action
        def inc() -> None:
            n.value += 1

        @c.action
        def export() -> None:
            c.exec_script(c.download(b"x", "x.txt"))

        c.view(lambda: f'<button id="inc" data-on:click="{inc}">{n.value}</button>')

    return app


def test_generated_urls_carry_the_base_path() -> None:
    app = make_app()
    with TestClient(app) as client:
        tab = client.open("/live/")
        assert "@get('/live/_sse'" in tab.page
        assert 'src="/live/datastar.js?v=' in tab.page
        assert "sendBeacon('/live/_session/close'" in tab.page
        assert "/live/_action/inc" in tab.html
        tab.click("#inc")
        assert tab.signals["_n"] == 1
        tab.action("export")
        assert tab.scripts[-1].startswith("/live/_download/")


@pytest.mark.parametrize("bad", ["live", "/live//x", "/../x", "/li ve"])
def test_bad_base_paths_are_refused(bad: str) -> None:
    with pytest.raises(ConfigError, match="base_path"):
        App(base_path=bad)
