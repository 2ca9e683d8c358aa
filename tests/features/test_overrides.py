"""TestClient(app, settings=...) replaces some options for one test; the app keeps its own."""

from __future__ import annotations

from pathlib import Path

import pytest

from pyvia import App, ConfigError, Context, UsageError
from pyvia.db import NoDatabase
from pyvia.testing import TestClient


def make_app() -> App:
    app = App(title="Shop", keep_alive=9)

    @app.page("/")
    def home(c: Context) -> None:
        c.view(lambda: "<p>home</p>")

    return app


def test_settings_apply_to_one_client_run_and_are_put_back(tmp_path: Path) -> None:
    app = make_app()
    url = f"sqlite:///{tmp_path}/test.db"
    with TestClient(app, settings={"db_url": url, "base_path": "/live", "keep_alive": 3}) as client:
        assert app.config.base_path == "/live/" and app.config.keep_alive == 3
        assert app.config.title == "Shop"  # the app's own options stay
        assert not isinstance(app.db, NoDatabase) and app.db.config.display_url.endswith("test.db")
        assert app.db.metrics is app.metrics
        assert "/live/_sse" in client.get("/").body.decode()
    assert app.config.base_path == "/" and app.config.keep_alive == 9
    assert isinstance(app.db, NoDatabase)
    with TestClient(app) as client:  # the next test sees the app as declared
        page = client.get("/").body.decode()
        assert "/live/" not in page and "/_sse" in page


def test_routes_hooks_and_state_are_the_app_s_own() -> None:
    app = make_app()
    started: list[str] = []
    app.on_start(lambda: started.append(app.config.title))
    with TestClient(app, settings={"title": "Test shop"}) as client:
        assert "<title>Test shop</title>" in client.get("/").body.decode()
    assert started == ["Test shop"]


def test_unknown_and_bad_settings_are_refused_as_app_refuses_them() -> None:
    app = make_app()
    with pytest.raises(TypeError, match="did you mean 'keep_alive'"):
        TestClient(app, settings={"keep_alvie": 1})
    with pytest.raises(ConfigError, match="keep_alive=-1: must be a number >= 0"):
        TestClient(app, settings={"keep_alive": -1})
    with pytest.raises(ConfigError, match="error_view: read when pages are registered"):
        TestClient(app, settings={"error_view": lambda channel: ""})
    assert app.config.keep_alive == 9


def test_settings_need_a_stopped_app() -> None:
    app = make_app()
    with TestClient(app), pytest.raises(UsageError, match="second TestClient"):
        TestClient(app, settings={"keep_alive": 1})
