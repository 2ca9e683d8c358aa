"""Issue 7's app-level defences attacked over real sockets on the native server, each next to its
positive control: the ``__Host-`` cookie option, the client address behind trusted proxies, signal
payload limits, a hung action's timeout, and a graceful stop that drains."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import threading
import time
from typing import Any

import pytest

from pyvia import App, Context
from pyvia.server.http import ServerLimits
from tests.helpers import RawClient, RawResponse, ServerThread, running_server
from tests.security.servers import Client
from tests.server.test_app_over_http import open_page, open_stream, post_action


def counter_app(**options: Any) -> App:
    app = App(**options)

    @app.page("/")
    def page(c: Context) -> None:
        count = c.signal(0, "count")
        c.signal(None, "blob", writable=True)  # any shape: the payload limits are the guard

        @c.action
        def inc() -> None:
            count.value += 1

        @c.action
        async def hang() -> None:
            await asyncio.sleep(30)

        @c.action
        async def slow() -> None:
            await asyncio.sleep(0.6)
            count.value += 100

        c.view(lambda: f"<p id='n'>{count.value}</p>")

    return app


def action_from(
    address: tuple[str, int],
    source: str,
    name: str,
    ctx: str,
    cookie: str,
    headers: str = "",
    body: bytes | None = None,
) -> RawResponse:
    """POST an action from the loopback address ``source`` (a different peer to the server)."""
    host, port = address
    body = body if body is not None else json.dumps({"via_ctx": ctx}).encode()
    with Client(host, port, source=source) as client:
        client.send(
            f"POST /_action/{name} HTTP/1.1\r\nHost: {host}:{port}\r\nOrigin: http://{host}:{port}\r\n"
            f"Cookie: {cookie}\r\n{headers}Content-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        return client.read_response()


# --- the __Host- session cookie -----------------------------------------------------------------------


def test_secure_cookie_is_host_prefixed_and_a_planted_plain_cookie_is_no_session() -> None:
    with running_server(counter_app(secure_cookie=True)) as (host, port):
        page, seed, cookie = open_page(host, port)
        set_cookie = page.header("set-cookie") or ""
        assert re.fullmatch(r"__Host-via_session_id=[0-9a-f]{64}", cookie)
        attributes = {a.strip().split("=")[0].lower() for a in set_cookie.split(";")[1:]}
        assert {"path", "secure", "httponly", "samesite"} <= attributes and "domain" not in attributes
        assert "Path=/;" in set_cookie
        session = cookie.split("=", 1)[1]
        ctx = seed["via_ctx"]
        # control: the __Host- cookie is the session
        assert post_action(host, port, "inc", {"via_ctx": ctx}, cookie).status == 200
        # attack: the same id in a plain cookie (what a sibling subdomain or plain HTTP can plant) is not read
        assert post_action(host, port, "inc", {"via_ctx": ctx}, f"via_session_id={session}").status == 403
        stream, head = open_stream(host, port, {"via_ctx": ctx}, f"via_session_id={session}")
        stream.close()
        assert head.status == 403
        # a page view with only the planted cookie gets a fresh __Host- session, not the planted one
        _, _, fresh = open_page(host, port, cookie="via_session_id=" + "a" * 32)
        assert fresh.startswith("__Host-via_session_id=") and fresh.split("=", 1)[1] != "a" * 32


# --- the client address: Forwarded / X-Forwarded-For only from trusted proxies ---------------------------


def test_forwarded_addresses_count_only_from_a_trusted_proxy() -> None:
    # 127.0.0.2 is "the proxy"; every other loopback address is a client talking to us directly.
    app = counter_app(action_rate=0.01, action_burst=2, trusted_proxies=["127.0.0.2"])
    with running_server(app) as address:
        _, seed, cookie = open_page(*address)
        ctx = seed["via_ctx"]

        def status(source: str, headers: str = "") -> int:
            return action_from(address, source, "inc", ctx, cookie, headers).status

        # attack: a direct client cannot get fresh buckets by naming other addresses
        spoofed = [
            status("127.0.0.3", f"X-Forwarded-For: 198.51.100.{i}\r\nForwarded: for=198.51.100.{i}\r\n")
            for i in range(4)
        ]
        assert spoofed == [200, 200, 429, 429]
        # control: behind the trusted proxy each forwarded client has its own bucket
        via_proxy = [status("127.0.0.2", "X-Forwarded-For: 203.0.113.1\r\n") for _ in range(3)]
        assert via_proxy == [200, 200, 429]
        assert status("127.0.0.2", "X-Forwarded-For: 203.0.113.2\r\n") == 200
        # a Forwarded header the browser sent, passed on by a proxy that appends to X-Forwarded-For:
        # X-Forwarded-For is read first, so the client cannot choose its address with it
        assert status("127.0.0.2", "Forwarded: for=192.0.2.99\r\nX-Forwarded-For: 203.0.113.1\r\n") == 429
        # a forged address at the head of the chain is not taken: the nearest untrusted one is
        assert status("127.0.0.2", "X-Forwarded-For: 192.0.2.50, 203.0.113.1\r\n") == 429
        # a proxy that speaks only RFC 7239 is read too
        assert status("127.0.0.2", 'Forwarded: for="[2001:db8::7]:4711"\r\n') == 200


# --- signal payload limits: clear 400 / 413 ---------------------------------------------------------------


def nested(depth: int) -> object:
    value: object = 1
    for _ in range(depth - 1):
        value = {"a": value}
    return value


PAYLOADS = {
    # name: (control blob, attack blob, attack status, what the log line says)
    "depth": (nested(16), nested(17), 400, "signal 'blob' is nested deeper than 16"),
    "keys": (
        {f"k{i}": 0 for i in range(10_000)},
        {f"k{i}": 0 for i in range(10_001)},
        400,
        "signal 'blob' holds an object of more than 10,000 keys",
    ),
    "items": (list(range(10_000)), list(range(10_001)), 400, "signal 'blob' holds a list of more than 10,000 items"),
    "string length": (
        "x" * (1 << 18),
        "x" * ((1 << 18) + 1),
        413,
        "signal 'blob' got 262,145 characters; it takes at most 262,144",
    ),
    "bytes": ("x" * 1000, ["y" * 200_000] * 22, 413, "exceeds 4194304"),
}


@pytest.mark.parametrize("limit", list(PAYLOADS))
def test_signal_payloads_past_a_limit_get_a_clear_400_or_413(limit: str, caplog: pytest.LogCaptureFixture) -> None:
    control, attack, code, reason = PAYLOADS[limit]
    caplog.set_level(logging.INFO, logger="pyvia")
    with running_server(counter_app()) as address:
        _, seed, cookie = open_page(*address)
        ctx = seed["via_ctx"]

        def send(blob: object) -> RawResponse:
            body = json.dumps({"via_ctx": ctx, "blob": blob}).encode()
            return action_from(address, "127.0.0.1", "inc", ctx, cookie, body=body)

        refused = send(attack)
        served = send(control)
        after = send(0)  # nothing of the refused request stays behind: the next action is served
    assert (served.status, after.status) == (200, 200)
    assert refused.status == code
    if limit == "string length":  # a writable signal's own limit: the answer names it for the user
        assert refused.body.decode() == reason
    else:
        assert refused.body in (b"Bad Request", b"Content Too Large")  # the status text, nothing leaked
    logged = [r.getMessage() for r in caplog.records if f"-> {code} " in r.getMessage()]
    assert len(logged) == 1 and reason in logged[0]  # one line naming the limit
    assert not any(r.exc_info for r in caplog.records)  # and no traceback


# --- a hung action ------------------------------------------------------------------------------------------


def test_a_hung_async_action_times_out_with_504_while_others_are_served() -> None:
    app = counter_app(action_timeout=1.0)
    with running_server(app) as address:
        _, seed, cookie = open_page(*address)
        _, other_seed, other_cookie = open_page(*address)
        hung: dict[str, Any] = {}

        def call_hang() -> None:
            began = time.monotonic()
            hung["response"] = post_action(*address, "hang", {"via_ctx": seed["via_ctx"]}, cookie)
            hung["took"] = time.monotonic() - began

        worker = threading.Thread(target=call_hang)
        worker.start()
        time.sleep(0.2)
        served = post_action(*address, "inc", {"via_ctx": other_seed["via_ctx"]}, other_cookie)  # meanwhile
        assert served.status == 200 and "response" not in hung
        worker.join(10)
        again = post_action(*address, "inc", {"via_ctx": seed["via_ctx"]}, cookie)  # the tab lives on
    assert hung["response"].status == 504 and 0.9 <= hung["took"] < 5
    assert b"Traceback" not in hung["response"].body
    assert again.status == 200


# --- a graceful stop drains -----------------------------------------------------------------------------


def test_a_graceful_stop_finishes_the_action_in_flight_and_ends_the_streams_cleanly() -> None:
    server = ServerThread(counter_app(), limits=ServerLimits(), graceful_timeout=3.0)
    host, port = server.start()
    try:
        _, seed, cookie = open_page(host, port)
        stream, head = open_stream(host, port, {"via_ctx": seed["via_ctx"]}, cookie)
        assert head.status == 200
        stream.read_chunk()
        answer: dict[str, RawResponse] = {}
        worker = threading.Thread(
            target=lambda: answer.setdefault(
                "slow", post_action(host, port, "slow", {"via_ctx": seed["via_ctx"]}, cookie)
            )
        )
        worker.start()
        time.sleep(0.2)  # the action is running
        took = server.stop()
        worker.join(5)
        rest = stream.read_all()
        stream.close()
    finally:
        if server._thread is not None and server._thread.is_alive():
            server.stop()
    assert answer["slow"].status == 200  # answered, not cut off
    assert answer["slow"].header("connection") == "close"  # and told the connection ends
    assert rest.endswith(b"0\r\n\r\n")  # the stream's chunked body was ended, not reset
    assert took < 3.0
    with pytest.raises(OSError):
        RawClient(host, port, timeout=1.0)


# --- fault isolation ------------------------------------------------------------------------------------


def faulty_app() -> App:
    """Every kind of user code fails on demand: a page, an action, a component's action, a render
    during a broadcast, a tab timer; the ``/ok`` page is the control that must keep working."""
    from pyvia import Scope
    from pyvia.components import Component

    app = App()

    @app.page("/boom")
    def boom(c: Context) -> None:
        raise RuntimeError("page broke: password=hunter2")

    @app.page("/ok")
    def ok(c: Context) -> None:
        c.scope(Scope.ROUTE)
        broken = c.signal(False, "broken", scope=Scope.ROUTE)
        n = c.signal(0, "n")

        def widget(comp: Component) -> None:
            @comp.action
            def fail() -> None:
                raise RuntimeError("component broke")

            comp.view(lambda: "<i>w</i>")

        w = c.component(widget, "w")

        def tick() -> None:
            raise RuntimeError("timer broke")

        c.set_interval(tick, 0.05)

        @c.action
        def fail() -> None:
            raise ValueError("action broke")

        @c.action
        def break_views() -> None:
            broken.value = not broken.value  # every tab of the route renders again

        @c.action
        def inc() -> None:
            n.value += 1
            c.sync()

        def view() -> str:
            if broken.value and n.value == 0:  # only the tabs that never counted fail to render
                raise RuntimeError("render broke")
            return f"<p id='n'>{n.value}</p>{w}"

        c.view(view)

    return app


def test_failing_user_code_never_takes_down_the_worker_or_the_other_tabs(caplog: pytest.LogCaptureFixture) -> None:
    app = faulty_app()
    with running_server(app) as (host, port):
        with RawClient(host, port) as client:
            client.send(f"GET /boom HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode())
            boom = client.read_response()
        _, seed, cookie = open_page(host, port, "/ok")
        _, victim_seed, victim_cookie = open_page(host, port, "/ok")
        ctx = seed["via_ctx"]
        stream, head = open_stream(host, port, {"via_ctx": ctx, "n": 0}, cookie)
        victim, _ = open_stream(host, port, {"via_ctx": victim_seed["via_ctx"], "n": 0}, victim_cookie)
        with stream, victim:
            assert head.status == 200
            stream.read_chunk()
            assert post_action(host, port, "inc", {"via_ctx": ctx, "n": 0}, cookie).status == 200
            failed = post_action(host, port, "fail", {"via_ctx": ctx}, cookie)
            component = post_action(host, port, "w__fail", {"via_ctx": ctx}, cookie)
            flipped = post_action(host, port, "break_views", {"via_ctx": ctx}, cookie)  # the victim's render fails
            time.sleep(0.3)  # timers fire and fail a few times
            control = post_action(host, port, "inc", {"via_ctx": ctx, "n": 1}, cookie)
            received = b""
            deadline = time.monotonic() + 3
            while b"<p id='n'>2</p>" not in received and time.monotonic() < deadline:
                received += stream.read_chunk()
    assert boom.status == 500 and b"hunter2" not in boom.body and b"Traceback" not in boom.body
    assert failed.status == 500 and b"action broke" not in failed.body
    assert component.status == 500 and flipped.status == 200
    assert control.status == 200 and b"<p id='n'>2</p>" in received  # the tab still works end to end
    failures = {str(r.exc_info[1]) for r in caplog.records if r.exc_info}
    assert {"timer broke", "render broke", "component broke", "action broke"} <= failures  # each logged
