"""asgi(app, base_path=..., db_url=...) serves the app with those options for its run only."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from pyvia import App, ConfigError, Context
from pyvia.asgi import asgi
from pyvia.db import NoDatabase
from tests.asgi.test_adapter import Peer, body, call, http_scope


def make_app() -> App:
    app = App(title="Shop")

    @app.page("/")
    def home(c: Context) -> None:
        c.view(lambda: "<p>home</p>")

    return app


def test_a_mount_serves_the_app_with_its_own_base_path_and_database(tmp_path: Path) -> None:
    app = make_app()
    adapter = asgi(app, base_path="/live", db_url=f"sqlite:///{tmp_path}/mount.db")
    assert adapter.root_path == "/live"  # the prefix it strips, from its base_path
    assert app.config.base_path == "/" and isinstance(app.db, NoDatabase)  # nothing changed yet

    async def main() -> bytes:
        await adapter.startup()
        try:
            assert app.config.base_path == "/live/" and not isinstance(app.db, NoDatabase)
            assert app.db.is_open
            peer = Peer(body())
            await call(adapter, http_scope("/live/"), peer)
            assert peer.status == 200
            return peer.body
        finally:
            await adapter.shutdown()

    page = asyncio.run(main()).decode()
    assert "/live/_sse" in page
    assert app.config.base_path == "/" and isinstance(app.db, NoDatabase)  # the app's own again


def test_mount_settings_are_checked_when_the_adapter_is_made() -> None:
    app = make_app()
    with pytest.raises(ConfigError, match="base_path='live'"):
        asgi(app, base_path="live")
    with pytest.raises(TypeError, match="did you mean 'title'"):
        asgi(app, settings={"titel": "x"})
    assert asgi(app).settings == {}
