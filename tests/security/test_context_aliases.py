"""Issue 21 item 10: only the canonical spelling of a context id is that id.

On main, an id with ``=`` appended or a group of characters base64 skips (``!!!!``) inserted in
its signature still verified, and each spelling made another context of the same tab. Over real
sockets: every alias of a live tab, or of one waiting for revival, is refused and creates nothing;
the canonical id still works (the control).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from pyvia import App, Context
from tests.helpers import RawClient, ServerThread
from tests.server.test_app_over_http import open_page, open_stream, post_action


def counter_app() -> App:
    app = App(action_rate=0)

    @app.page("/")
    def page(c: Context) -> None:
        count = c.signal(0, "count")

        @c.action
        def inc() -> None:
            count.value += 1

        c.view(lambda: f"<p id='n'>{count.value}</p>")

    return app


def aliases(cid: str) -> list[str]:
    body, sig = cid.split(".")
    return [
        cid + "=",
        cid + "==",
        cid + "====",
        body + "=." + sig,
        body + "." + sig[:4] + "!!!!" + sig[4:],
        body + "." + sig[:8] + "%%%%" + sig[8:],
        body[:4] + "****" + body[4:] + "." + sig,
        body + "." + sig[:12] + "\t" + sig[12:],
        body + "." + sig.replace("-", "+").replace("_", "/") + ("" if "-" in sig or "_" in sig else "+"),
        body + ".." + sig,
    ]


@pytest.fixture
def served() -> Iterator[tuple[App, ServerThread]]:
    app = counter_app()
    server = ServerThread(app)
    server.start()
    try:
        yield app, server
    finally:
        server.stop()


def on_loop(server: ServerThread, fn: object) -> None:
    done = threading.Event()
    server.call(lambda: (fn(), done.set()))  # type: ignore[operator]  # a callable
    assert done.wait(5)


def test_an_alias_of_a_live_tab_is_refused_and_makes_no_context(served: tuple[App, ServerThread]) -> None:
    app, server = served
    host, port = server.host, server.port
    _, seed, cookie = open_page(host, port)
    cid = seed["via_ctx"]
    assert post_action(host, port, "inc", {"via_ctx": cid}, cookie).status == 200
    contexts = set(app.contexts)
    for alias in aliases(cid):
        response = post_action(host, port, "inc", {"via_ctx": alias}, cookie)
        assert response.status in (400, 403), alias  # an unknown tab that cannot be revived
        stream, head = open_stream(host, port, {"via_ctx": alias}, cookie)
        try:
            assert head.status == 200
            assert b"window.location.reload()" in stream.read_until(b"\n\n") or b"via-boot" in stream.buffer
        finally:
            stream.close()
    assert set(app.contexts) == contexts
    assert app.contexts[cid].signals["count"].value == 1
    assert post_action(host, port, "inc", {"via_ctx": cid}, cookie).status == 200  # the control


def test_an_alias_of_a_destroyed_tab_does_not_revive_it(served: tuple[App, ServerThread]) -> None:
    app, server = served
    host, port = server.host, server.port
    _, seed, cookie = open_page(host, port)
    cid = seed["via_ctx"]
    on_loop(server, lambda: app.destroy(app.contexts[cid]))
    deadline = time.monotonic() + 5
    while cid in app.contexts and time.monotonic() < deadline:
        time.sleep(0.01)
    assert cid not in app.contexts
    snapshot = seed["_via_snap"]  # a page whose stream is down sends its snapshot with its actions
    for alias in aliases(cid):
        signals = {"via_ctx": alias, "_via_snap": snapshot}
        assert post_action(host, port, "inc", signals, cookie).status in (400, 403), alias
    assert app.contexts == {}
    signals = {"via_ctx": cid, "_via_snap": snapshot}
    assert post_action(host, port, "inc", signals, cookie).status == 200  # the canonical id revives
    assert list(app.contexts) == [cid]


def test_a_form_post_with_an_alias_is_refused_too(served: tuple[App, ServerThread]) -> None:
    app, server = served
    host, port = server.host, server.port
    _, seed, cookie = open_page(host, port)
    cid = seed["via_ctx"]
    contexts = set(app.contexts)
    for alias in aliases(cid)[:4]:
        body = f"via_ctx={alias.replace('=', '%3D')}".encode()
        with RawClient(host, port) as client:
            client.send(
                f"POST /_action/inc HTTP/1.1\r\nHost: {host}:{port}\r\nOrigin: http://{host}:{port}\r\n"
                f"Cookie: {cookie}\r\nContent-Type: application/x-www-form-urlencoded\r\n"
                f"Content-Length: {len(body)}\r\n\r\n".encode()
                + body
            )
            assert client.read_response().status in (400, 403), alias
    assert set(app.contexts) == contexts
    assert app.contexts[cid].signals["count"].value == 0
