"""Issue 21 item 1, session fixation: an attacker who plants a session id the server never issued
shares nothing with the victim. Then the controls: the ids the server did issue stay sessions
after a restart with the same secret and on every worker, and a planted id gets no further.

The attack of the issue, in Chromium against ``examples/file_upload.py``: the attacker plants a
well-formed id in the victim's ``via_session_id`` cookie (a sibling subdomain or a plain-HTTP
page can write it), the victim uploads ``VICTIM-PRIVATE-DATA``, the attacker opens the page with
the planted id. On main the id was adopted and the attacker downloaded the file.
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
from playwright.sync_api import Browser, expect

from pyvia.session import SessionIds
from tests.browser.conftest import browser  # noqa: F401  # the Chromium fixture
from tests.cluster.test_worker_ports import free_ports
from tests.helpers import RawClient, RawResponse
from tests.processes import ServerProcess, free_port, wait_for_port
from tests.server.test_app_over_http import open_page, open_stream

SECRET = "fixation-test-secret"
COOKIE = "via_session_id"


def planted_ids() -> list[str]:
    """What an attacker can write: the unsigned shape of earlier versions, the current shape with
    a made-up signature, and an id signed with another app's secret."""
    return [secrets.token_hex(16), secrets.token_hex(32), SessionIds(b"another-apps-secret").make()]


@pytest.fixture
def upload_server() -> Iterator[ServerProcess]:
    server = ServerProcess("examples.file_upload:app", free_port(), secret=SECRET)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def session_cookie_of(response_cookie: str) -> str:
    name, _, value = response_cookie.partition("=")
    assert name == COOKIE, response_cookie
    return value


@pytest.mark.parametrize("kind", ["unsigned-32", "forged-64", "other-secret"])
def test_a_planted_session_id_is_never_adopted_and_the_attacker_reads_nothing(
    browser: Browser,  # noqa: F811  # the fixture imported above
    upload_server: ServerProcess,
    kind: str,
) -> None:
    planted = dict(zip(["unsigned-32", "forged-64", "other-secret"], planted_ids(), strict=True))[kind]
    base = f"http://127.0.0.1:{upload_server.port}"
    context = browser.new_context(accept_downloads=True)
    try:
        context.add_cookies([{"name": COOKIE, "value": planted, "url": base}])
        page = context.new_page()
        page.goto(base + "/")
        expect(page.locator("#files")).to_have_text("No files yet.")
        victims = [c["value"] for c in context.cookies() if c["name"] == COOKIE]
        assert victims and planted not in victims  # the server gave the victim a fresh id
        page.set_input_files(
            "#picker", {"name": "secret.txt", "mimeType": "text/plain", "buffer": b"VICTIM-PRIVATE-DATA"}
        )
        page.click("#send")
        expect(page.locator("#status")).to_have_text("Uploaded 1 file (19 B).")
        expect(page.locator("#files td.name")).to_have_text(["secret.txt"])

        # the attacker, with the id they planted: a fresh session again, and nothing of the victim's
        response, seed, cookie = open_page("127.0.0.1", upload_server.port, cookie=f"{COOKIE}={planted}")
        attacker = session_cookie_of(cookie)
        assert attacker != planted and attacker not in victims
        assert "secret.txt" not in response.body.decode() and "No files yet." in response.body.decode()
        # the attacker's own tab streams their own (empty) list, never the victim's
        stream, head = open_stream("127.0.0.1", upload_server.port, {"via_ctx": seed["via_ctx"]}, f"{COOKIE}={planted}")
        try:
            assert head.status == 403  # a tab of the attacker's fresh session, not of the planted id
        finally:
            stream.close()
        # and the victim's session still has the file, behind the victim's cookie only
        page.reload()
        expect(page.locator("#files td.name")).to_have_text(["secret.txt"])
        with page.expect_download() as download:
            page.locator("#files button.download").click()
        assert Path(download.value.path()).read_bytes() == b"VICTIM-PRIVATE-DATA"
    finally:
        context.close()


def test_a_page_view_never_sets_a_cookie_the_server_did_not_issue(upload_server: ServerProcess) -> None:
    issued = SessionIds(SECRET.encode())
    for planted in planted_ids():
        _, _, cookie = open_page("127.0.0.1", upload_server.port, cookie=f"{COOKIE}={planted}")
        value = session_cookie_of(cookie)
        assert value != planted and issued.is_issued(value)


# --- controls: what the server issued stays a session --------------------------------------------


def cookie_after(port: int, cookie: str | None) -> str:
    """The session cookie a page view of the counter example answers with."""
    with RawClient("127.0.0.1", port) as client:
        extra = f"Cookie: {cookie}\r\n" if cookie else ""
        client.send(f"GET / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{extra}\r\n".encode())
        response = client.read_response()
    assert response.status == 200
    return session_cookie_of((response.header("set-cookie") or "").split(";", 1)[0])


def revival_answer(port: int, ctx: str, cookie: str) -> RawResponse:
    """What a tab's stream request gets from a server that does not hold the tab: a request for
    its snapshot (its id is this session's), or a stream that reloads the page (it is not)."""
    with RawClient("127.0.0.1", port) as client:
        query = quote(json.dumps({"via_ctx": ctx}))
        client.send(
            f"GET /_sse?datastar={query} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nCookie: {cookie}\r\n\r\n".encode()
        )
        return client.read_response()


def test_an_issued_session_survives_a_restart_with_the_same_secret_only(tmp_path: Path) -> None:
    env = {"XDG_STATE_HOME": str(tmp_path)}
    server = ServerProcess("examples.counter:app", free_port(), secret=SECRET, env=env)
    server.start()
    try:
        _, seed, cookie = open_page("127.0.0.1", server.port)
        session = session_cookie_of(cookie)
        server.restart()
        assert cookie_after(server.port, cookie) == session  # recognised with no record kept
        asked = revival_answer(server.port, seed["via_ctx"], cookie)
        assert asked.header("content-type") == "application/json"  # its tab is this session's:
        assert "_via_revive" in json.loads(asked.body)  # the server asks for its snapshot to revive it
        server.stop()
        server.env["PYVIA_SECRET"] = "another-secret"
        server.start()
        assert cookie_after(server.port, cookie) != session  # another secret never issued it
        assert b"window.location.reload()" in revival_answer(server.port, seed["via_ctx"], cookie).body
    finally:
        server.stop()


def test_an_issued_session_is_a_session_on_every_worker(tmp_path: Path) -> None:
    """``pyvia run --workers 2`` with no ``PYVIA_SECRET``: the supervisor gives both workers one."""
    base = free_ports(2)
    env = {"XDG_STATE_HOME": str(tmp_path), "HOME": str(tmp_path)}
    server = ServerProcess(
        "examples.counter:app", free_port(), secret="", env=env, extra=("--workers", "2", "--worker-ports", str(base))
    )
    server.start()
    try:
        for port in (base, base + 1):
            wait_for_port(port, timeout=20)
        first = cookie_after(base, None)
        assert re.fullmatch(r"[0-9a-f]{64}", first)
        assert cookie_after(base + 1, f"{COOKIE}={first}") == first
        second = cookie_after(base + 1, None)
        assert cookie_after(base, f"{COOKIE}={second}") == second
        forged = secrets.token_hex(32)
        assert cookie_after(base, f"{COOKIE}={forged}") != forged
        assert cookie_after(base + 1, f"{COOKIE}={forged}") != forged
    finally:
        server.stop()
