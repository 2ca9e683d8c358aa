"""One naming scheme for hooks: app.on_connect / c.on_connect; the old app names warn."""

from __future__ import annotations

import pytest

from pyvia import App, Context
from pyvia.testing import TestClient


def test_the_app_and_the_tab_hooks_share_their_names() -> None:
    for name in ("on_connect", "on_disconnect"):
        assert callable(getattr(App, name)) and callable(getattr(Context, name))


def test_app_and_tab_connect_hooks_run_for_a_stream() -> None:
    app = App()
    log: list[str] = []
    app.on_connect(lambda c: log.append("app+"))
    app.on_disconnect(lambda c: log.append("app-"))

    @app.page("/")
    def page(c: Context) -> None:
        c.on_connect(lambda: log.append("tab+"))
        c.on_disconnect(lambda: log.append("tab-"))
        c.view(lambda: "<p></p>")

    with TestClient(app) as client:
        tab = client.open("/")
        tab.disconnect()
    assert sorted(log) == ["app+", "app-", "tab+", "tab-"]


def test_the_old_app_names_are_deprecated_aliases() -> None:
    app = App()
    log: list[str] = []
    with pytest.warns(DeprecationWarning, match="use app.on_connect"):
        app.on_client_connect(lambda c: log.append("+"))
    with pytest.warns(DeprecationWarning, match="use app.on_disconnect"):
        app.on_client_disconnect(lambda c: log.append("-"))

    @app.page("/")
    def page(c: Context) -> None:
        c.view(lambda: "<p></p>")

    with TestClient(app) as client:
        client.open("/").disconnect()
    assert log == ["+", "-"]
