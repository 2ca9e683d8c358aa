"""The login example: the area's middleware on every kind of request, session rotation at login,
logout, and the refusal of a still-open tab's actions."""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from urllib.parse import urlencode

import pytest
from examples.login import app

from pyvia import App
from pyvia.http import Response
from pyvia.testing import Tab, TestClient

SESSION_COOKIE = "via_session_id"


@pytest.fixture(autouse=True)
def no_tabs_left_over() -> Iterator[None]:
    """A closed TestClient leaves its tabs in the module's app: start each test without them."""
    yield
    with TestClient(app):
        for ctx in list(app.contexts.values()):
            app.destroy(ctx)


def fresh_copy(name: str) -> ModuleType:
    """Another copy of the example module, with its own App (the documentation site mounts one)."""
    path = Path(__file__).resolve().parents[2] / "examples" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"mounted_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def log_in(tab: Tab, username: str, password: str) -> Response:
    """Post the login form as Datastar does (``contentType: 'form'``): fields, not signals."""
    (form,) = tab.find("form#login-form")
    posted = re.fullmatch(
        r"@post\('([^']+)', \{contentType: 'form', requestCancellation: 'disabled'\}\)",
        form.attrs["data-on:submit__prevent"],
    )
    assert posted, form.attrs
    (ctx_field,) = tab.find("input[name=via_ctx]")
    body = urlencode({"via_ctx": ctx_field.attrs["value"], "username": username, "password": password}).encode()
    return tab.apply(
        tab.client.post(posted.group(1), body=body, headers={"content-type": "application/x-www-form-urlencoded"})
    )


def test_the_area_redirects_to_the_login_page_without_a_user() -> None:
    with TestClient(app) as client:
        for path in ("/area", "/area/profile"):
            response = client.get(path)
            assert response.status == 303 and ("location", "/") in response.headers
        assert 'id="login-form"' in client.open("/").html


def test_a_wrong_password_is_refused() -> None:
    with TestClient(app) as client:
        tab = client.open("/")
        assert log_in(tab, "ann", "nope").status == 200
        assert tab.signals["_error"] == "Wrong user name or password."
        assert tab.scripts == []
        assert log_in(tab, "   ", "pyvia").status == 200  # no name
        assert tab.scripts == []
        assert client.get("/area").status == 303
        assert "password" not in tab.signals  # the password never becomes a signal


def test_login_rotates_the_session_and_opens_the_area() -> None:
    with TestClient(app) as client:
        tab = client.open("/")
        before = client.cookies[SESSION_COOKIE]
        answer = log_in(tab, "  ann  ", "pyvia")
        assert tab.scripts == ['window.location.href = "/area"']  # once: the answer's, none on the stream
        # the navigation is in the login's own answer, after its Set-Cookie, not on the stream: it
        # must not leave the page before the browser has the new session (with several workers the
        # stream's event came first and the login was lost, cookie and all)
        assert "set-cookie" in dict(answer.headers) and b'window.location.href = "/area"' in answer.body
        after = client.cookies[SESSION_COOKIE]
        assert after != before

        area = client.open("/area")
        assert '<span id="user">ann</span>' in area.html
        assert "Only logged-in users see this page" in area.html
        assert "<b>ann</b>, logged in since" in client.open("/area/profile").html
        assert "You are logged in as <b>ann</b>" in client.open("/").html

        # the id from before login is honoured for 2 s (requests in flight), then it is nobody's
        client.cookies[SESSION_COOKIE] = before
        client.clock.advance(3)
        assert client.get("/area").status == 303
        client.cookies[SESSION_COOKIE] = after
        assert client.get("/area").status == 200


def test_actions_of_the_area_work_for_the_user_and_are_refused_after_logout() -> None:
    with TestClient(app) as client, TestClient(app) as stranger:
        log_in(client.open("/"), "ann", "pyvia")
        dashboard = client.open("/area")
        profile = client.open("/area/profile")
        dashboard.type("#draft", "buy <milk>")
        assert dashboard.submit("#note-form").status == 200
        assert "<li>buy &lt;milk&gt;</li>" in dashboard.html
        (form,) = dashboard.find("#note-form")  # the click clears the input in the browser, not the server
        assert form.attrs["data-on:submit__prevent"].endswith("; $draft = ''")

        # another browser has no user: its own page views are redirected
        assert stranger.get("/area").status == 303

        profile.click("#logout")  # in the other tab
        assert profile.scripts[-1] == 'window.location.href = "/"'
        assert client.get("/area").status == 303

        dashboard.type("#draft", "too late")
        dashboard.new_events()
        response = dashboard.submit("#note-form")
        assert response.status == 403  # the middleware runs around actions too
        assert "too late" not in dashboard.html
        (told,) = [e.signals for e in dashboard.new_events() if e.signals]  # in the alert, its words,
        assert told == {"draft": "too late", "_via_error": "Log in first"}  # and the text the click cleared
        (nav,) = dashboard.find("nav")
        assert "argsRaw.status === '403'" in nav.attrs["data-on:datastar-fetch"]  # the page says so

        dashboard.revive()  # a revival goes through the middleware as well: refused, so it reloads
        assert dashboard.scripts[-1] == "window.location.reload()"
        assert 'id="login-form"' in client.open("/").html


def test_a_new_login_does_not_see_the_previous_users_notes() -> None:
    with TestClient(app) as client:
        log_in(client.open("/"), "ann", "pyvia")
        dashboard = client.open("/area")
        dashboard.type("#draft", "ann's secret")
        dashboard.submit("#note-form")
        dashboard.click("#logout")
        log_in(client.open("/"), "bob", "pyvia")
        page = client.open("/area")
        assert '<span id="user">bob</span>' in page.html and "secret" not in page.html


def test_mounted_below_a_prefix_every_url_carries_it() -> None:
    site = App()
    site.mount("/examples/login", fresh_copy("login").app)  # as the documentation site does
    with TestClient(site) as client:
        response = client.get("/examples/login/area")
        assert response.status == 303 and ("location", "/examples/login/") in response.headers
        tab = client.open("/examples/login/")
        assert log_in(tab, "ann", "pyvia").status == 200
        assert tab.scripts == ['window.location.href = "/examples/login/area"']
        area = client.open("/examples/login/area")
        assert 'href="/examples/login/area/profile"' in area.html
        area.click("#logout")
        assert area.scripts[-1] == 'window.location.href = "/examples/login/"'
