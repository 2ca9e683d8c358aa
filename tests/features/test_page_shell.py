"""The page around a view: its shell is made once per route and app, and each view still gets
its own seed, nonce, error messages, cookies and the app's head, foot and dev panel."""

from __future__ import annotations

import html
import re

from pyvia import App, Context
from pyvia.testing import TestClient


def make_app(**options: object) -> App:
    settings: dict[str, object] = {
        "title": "Shell <app>",
        "head": ['<link rel="stylesheet" href="/app.css">'],
        "foot": ["<footer>app foot</footer>"],
    }
    app = App(**{**settings, **options})  # type: ignore[arg-type]
    views = iter(range(1_000_000))

    @app.page("/")
    def home(c: Context) -> None:
        n = next(views)
        c.signal(n, "n")
        c.set_cookie("seen", f"view{n}")
        c.view(lambda: f"<p>view {n}</p>")

    @app.page("/other", title="Other page", error_messages={"default": "Other route failed"})
    def other(c: Context) -> None:
        c.view(lambda: "<p>other</p>")

    return app


def _seed(body: str) -> str:
    return html.unescape(re.search(r'<meta id="via-boot" data-signals="([^"]*)"', body).group(1))  # type: ignore[union-attr]


def test_each_view_gets_its_own_seed_cookie_and_view_in_the_shared_shell() -> None:
    with TestClient(make_app()) as client:
        first, second = client.get("/"), client.get("/")
        a, b = first.body.decode(), second.body.decode()
        assert "<p>view " in a and a.count("<p>view ") == 1
        assert _seed(a) != _seed(b)  # its own context id and value
        assert [v for k, v in first.headers if k == "set-cookie" and v.startswith("seen=")] != [
            v for k, v in second.headers if k == "set-cookie" and v.startswith("seen=")
        ]
        assert any(k == "set-cookie" and v.startswith("seen=view") for k, v in second.headers)
        for body in (a, b):
            assert "<title>Shell &lt;app&gt;</title>" in body
            head, _, rest = body.partition("</head>")
            assert '<link rel="stylesheet" href="/app.css">' in head
            assert rest.index("</div>\n") < rest.index("<footer>app foot</footer>") < rest.index("</body>")


def test_each_route_has_its_own_title_and_alert() -> None:
    with TestClient(make_app()) as client:
        home, other = client.get("/").body.decode(), client.get("/other").body.decode()
        assert "<title>Other page</title>" in other and "<title>Shell &lt;app&gt;</title>" in home
        assert "Other route failed" in other and "Other route failed" not in home


def test_a_csp_nonce_is_fresh_in_each_view() -> None:
    with TestClient(make_app(content_security_policy=True)) as client:
        nonces = []
        for _ in range(2):
            page = client.get("/")
            nonce = re.search(r"'nonce-([^']+)'", dict(page.headers)["content-security-policy"]).group(1)  # type: ignore[union-attr]
            assert f'crossorigin="anonymous" nonce="{nonce}"></script>' in page.body.decode()
            nonces.append(nonce)
        assert nonces[0] != nonces[1]


def test_the_dev_panel_comes_after_the_app_foot_and_only_in_dev() -> None:
    with TestClient(make_app(dev=True)) as client:
        body = client.get("/").body.decode()
        assert body.index("<footer>app foot</footer>") < body.index('id="via-devtools"') < body.index("</body>")
    with TestClient(make_app()) as client:
        assert 'id="via-devtools"' not in client.get("/").body.decode()


def test_two_apps_with_other_settings_get_their_own_shells() -> None:
    with TestClient(make_app()) as one, TestClient(make_app(lang="de", title="Zwei")) as two:
        assert '<html lang="en">' in one.get("/other").body.decode()
        other = two.get("/").body.decode()
        assert '<html lang="de">' in other and "<title>Zwei</title>" in other
        assert '<html lang="en">' in one.get("/").body.decode()
