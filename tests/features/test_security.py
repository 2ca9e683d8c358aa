"""Attacks on the core, each beside a control that succeeds without the attack."""

from __future__ import annotations

import asyncio
import json
import re

import pytest

from pyvia import App, Context, Scope
from pyvia.http import Headers, Request
from pyvia.security import RateLimiter, TrustedProxies
from pyvia.testing import TestClient


def make_app(**options: object) -> App:
    app = App(**options)

    @app.page("/")
    def page(c: Context) -> None:
        n = c.signal(0, "n")
        role = c.signal("guest", "role")
        name = c.signal("", "name", writable=True)
        note = c.signal(0, "note", writable=True)

        @c.action
        def inc() -> None:
            n.value += 1

        @c.action
        def add() -> None:
            note.value += 1

        @c.action
        def login() -> None:
            role.value = "member"
            c.session_data["user"] = name.value
            c.regenerate_session()

        @c.action
        async def hang() -> None:
            await asyncio.sleep(10)

        c.view(lambda: f"<p>{n.value}</p>")

    return app


def post(client: TestClient, tab_id: str, *, headers: dict[str, str], body: dict | None = None) -> int:
    payload = json.dumps(body or {"via_ctx": tab_id}).encode()
    return client.request(
        "POST", "/_action/inc", body=payload, headers={"content-type": "application/json", **headers}
    ).status


def test_cross_origin_and_origin_less_actions_are_refused() -> None:
    with TestClient(make_app(), origin="http://evil.example") as client:
        tab = client.open("/")
        assert tab.action("inc").status == 403
        client.origin = "http://testserver"
        assert tab.action("inc").status == 200  # control
    app = make_app()
    with TestClient(app) as client:
        tab = client.open("/")
        req = Request(
            "POST",
            "/_action/inc",
            headers=Headers(
                [
                    ("host", "testserver"),
                    ("content-type", "application/json"),
                    ("cookie", f"via_session_id={client.cookies['via_session_id']}"),
                ]
            ),
            body=json.dumps({"via_ctx": tab.id}).encode(),
        )
        assert app.handle(req).status == 403  # no Origin at all
    with TestClient(make_app(dev=True)) as client:
        tab = client.open("/")
        req_ok = Request(
            "POST",
            "/_action/inc",
            headers=Headers(
                [
                    ("host", "testserver"),
                    ("content-type", "application/json"),
                    ("cookie", f"via_session_id={client.cookies['via_session_id']}"),
                ]
            ),
            body=json.dumps({"via_ctx": tab.id}).encode(),
        )
        assert client.app.handle(req_ok).status == 200  # dev mode accepts it


def test_trusted_origin_is_accepted() -> None:
    with TestClient(make_app(trusted_origins=["https://app.example"]), origin="https://app.example") as client:
        assert client.open("/").action("inc").status == 200


def test_close_beacon_needs_the_origin_too() -> None:
    with TestClient(make_app(), origin="http://evil.example") as client:
        tab = client.open("/")
        assert client.post("/_session/close", body=tab.id.encode()).status == 403
        client.origin = "http://testserver"
        assert client.post("/_session/close", body=tab.id.encode()).status == 200


def test_tab_signals_are_server_owned_unless_declared_writable() -> None:
    with TestClient(make_app()) as client:
        tab = client.open("/")
        tab.action("inc", n=100, _n=100)  # what a tampered browser could send, under either id
        assert tab.context.signals["n"].value == 1
        tab.action("add", note=100)
        assert tab.context.signals["note"].value == 101  # control: a writable one takes the value


def test_oversized_and_deeply_nested_signals_are_refused() -> None:
    with TestClient(make_app()) as client:
        tab = client.open("/")
        deep: object = 1
        for _ in range(100):
            deep = {"a": deep}
        assert tab.action("inc", deep=deep).status == 400
        assert tab.action("inc", big="x" * (5 << 20)).status == 413
        del tab.signals["deep"], tab.signals["big"]
        assert tab.action("inc", fine={"a": {"b": 1}}).status == 200  # control


def test_action_rate_limit_answers_429_with_retry_after() -> None:
    with TestClient(make_app(action_rate=10, action_burst=3)) as client:
        tab = client.open("/")
        assert [tab.action("inc").status for _ in range(4)] == [200, 200, 200, 429]
        response = tab.action("inc")
        assert response.status == 429 and ("retry-after", "1") in response.headers
        client.clock.advance(0.2)
        assert tab.action("inc").status == 200


def test_rate_limit_uses_the_forwarded_address_only_from_trusted_proxies() -> None:
    proxies = TrustedProxies(["10.0.0.0/8"])
    chain = Headers([("x-forwarded-for", "198.51.100.7, 10.9.9.9")])
    via_proxy = Request("POST", "/", client="10.1.2.3", headers=chain)
    assert proxies.client_address(via_proxy) == "198.51.100.7"
    forged = Request("POST", "/", client="203.0.113.5", headers=Headers([("x-forwarded-for", "1.2.3.4")]))
    assert proxies.client_address(forged) == "203.0.113.5"
    rfc = Request("POST", "/", client="10.0.0.1", headers=Headers([("forwarded", 'for="[2001:db8::1]:4711"')]))
    assert proxies.client_address(rfc) == "2001:db8::1"
    limiter = RateLimiter(rate=1, burst=1, max_addresses=2)
    assert limiter.check("a", 0) == 0 and limiter.check("a", 0) > 0
    limiter.check("b", 0)
    limiter.check("c", 0)
    assert limiter.evictions == 1


def test_regenerate_session_rotates_the_cookie_and_keeps_the_tabs() -> None:
    app = make_app()
    with TestClient(app) as client:
        tab = client.open("/")
        other_tab = client.open("/")
        old = client.cookies["via_session_id"]
        tab.action("login", name="ann")
        new = client.cookies["via_session_id"]
        assert new != old and re.fullmatch(r"[0-9a-f]{64}", new)
        assert tab.action("inc").status == 200
        assert other_tab.action("inc").status == 200  # the other tab moved with the session
        assert app.session_data(new)["user"] == "ann"
        assert app.sessions.peek(old) is None
        client.cookies["via_session_id"] = old
        assert tab.action("inc").status == 200  # in-flight grace
        client.clock.advance(3)
        assert tab.action("inc").status == 403  # the old cookie no longer owns the tab


def test_session_scoped_signals_go_on_under_the_new_session_id() -> None:
    app = App()

    @app.page("/")
    def page(c: Context) -> None:
        cart = c.signal(0, "cart", scope=Scope.SESSION)

        @c.action
        def buy() -> None:
            cart.increment()

        @c.action
        def login() -> None:
            c.regenerate_session()

        c.view(lambda: f"<p>{cart.value}</p>")

    with TestClient(app) as client:
        tab, other_tab = client.open("/"), client.open("/")
        tab.action("buy")
        tab.action("login")
        other_tab.action("buy")  # a tab declared before the new id: its signal is the session's still
        client.clock.advance(1)
        assert tab.signals["_session__cart"] == other_tab.signals["_session__cart"] == 2
        assert client.open("/").signals["_session__cart"] == 2  # a tab opened with the new cookie


def test_hung_async_action_times_out_with_504() -> None:
    with TestClient(make_app(action_timeout=0.05), raise_server_exceptions=False) as client:
        tab = client.open("/")
        response = tab.action("hang")
        assert response.status == 504
        assert tab.action("inc").status == 200


def test_security_headers_and_csp_nonce() -> None:
    with TestClient(make_app(content_security_policy=True)) as client:
        page = client.get("/")
        headers = dict(page.headers)
        assert headers["x-content-type-options"] == "nosniff"
        nonce = re.search(r"'nonce-([^']+)'", headers["content-security-policy"]).group(1)
        assert f'nonce="{nonce}"' in page.body.decode()
        assert client.get("/").headers != page.headers  # a fresh nonce per page


@pytest.mark.parametrize("cookie", ["../../etc", "ABCDEF0123456789ABCDEF0123456789", "x" * 32])
def test_malformed_session_cookies_get_a_fresh_session(cookie: str) -> None:
    with TestClient(make_app()) as client:
        client.cookies["via_session_id"] = cookie
        client.get("/")
        assert client.cookies["via_session_id"] != cookie


def test_tabs_revive_after_the_session_was_rotated() -> None:
    app = make_app()
    with TestClient(app) as client:
        tab = client.open("/")
        tab.action("login", name="ann")
        tab.action("inc")
        tab.revive()  # the id was signed for the first session; the new cookie still revives it
        assert tab.context is not None and tab.context.signals["n"].value == 1
