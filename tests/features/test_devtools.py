"""Dev mode: the signals panel, the server page and error pages that show the error."""

from __future__ import annotations

from pyvia import App, Context
from pyvia.testing import TestClient


def make_app(dev: bool) -> App:
    app = App(dev=dev)

    @app.page("/")
    def page(c: Context) -> None:
        n = c.signal(0, "n")

        @c.action
        def inc() -> None:
            n.value += 1

        c.view(lambda: f"<p>{n.value}</p>")

    @app.page("/broken")
    def broken(c: Context) -> None:
        raise ValueError("the database is down")

    return app


def test_dev_mode_shows_the_panel_the_server_page_and_errors() -> None:
    app = make_app(dev=True)
    with TestClient(app, raise_server_exceptions=False) as client:
        tab = client.open("/")
        assert 'id="via-devtools"' in tab.page and "data-json-signals" in tab.page
        tab.action("inc")
        server = client.get("/_via").body.decode()
        assert "1 tabs, 1 streams open" in server and "<td>inc</td>" in server
        broken = client.get("/broken")
        assert broken.status == 500 and b"ValueError" in broken.body and b"the database is down" in broken.body


def test_without_dev_mode_nothing_shows() -> None:
    app = make_app(dev=False)
    with TestClient(app, raise_server_exceptions=False) as client:
        tab = client.open("/")
        assert "via-devtools" not in tab.page
        assert client.get("/_via").status == 404
        broken = client.get("/broken")
        assert broken.status == 500 and b"database" not in broken.body


def test_dev_mode_says_when_a_view_names_a_signal_by_a_wrong_id(caplog) -> None:
    """``$count`` for the tab's ``$_count`` shows nothing in the browser and says nothing: in dev
    mode the page view says which reference is wrong and what to write, once per route."""
    app = App(dev=True)

    @app.page("/")
    def page(c: Context) -> None:
        count = c.signal(0, "count")
        draft = c.signal("", "draft", writable=True)
        c.view(
            lambda: (
                f'<p data-text="$count"></p><p data-text="{count.ref()}"></p>'
                f'<input data-bind="{draft.ref().lstrip("$")}"><p data-show="$draft && $nothing"></p>'
            )
        )

    with TestClient(app) as client, caplog.at_level("WARNING", logger="pyvia"):
        client.open("/")
        client.open("/")
    warnings = [r.getMessage() for r in caplog.records if "no signal of the tab" in r.getMessage()]
    assert len(warnings) == 1, warnings  # $count once; $_count, $draft and an unknown $nothing not
    assert "$count" in warnings[0] and "$_count" in warnings[0] and "count.ref()" in warnings[0]
