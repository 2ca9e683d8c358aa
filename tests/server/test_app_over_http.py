"""The real App on the native server, over raw sockets: the wire protocol as a browser sees it."""

from __future__ import annotations

import contextlib
import gc
import html
import itertools
import json
import re
import time
from collections.abc import Iterator
from urllib.parse import quote

import pytest
from examples.counter import app as counter_app

from pyvia import App, Context
from pyvia.asgi import asgi
from pyvia.server.connection import HttpProtocol
from tests.asgi.servers import serving
from tests.helpers import OPENING, RawClient, RawResponse, frame_body, running_server
from tests.processes import ServerProcess, free_port

SEED = re.compile(r'data-signals="([^"]*)"')


def injection_app() -> App:
    app = App()

    @app.page("/")
    def page(c: Context) -> None:
        text = c.signal("", "text", writable=True)

        @c.action
        def echo() -> None:
            c.patch_elements(f'<p id="echo">{text.value}</p>')
            c.sync()

        c.view(lambda: f'<div id="out">{text.value}</div>')

    return app


@contextlib.contextmanager
def front_end(app: App, kind: str) -> Iterator[tuple[str, int]]:
    """The app served by the native server or, through the ASGI adapter, by uvicorn."""
    if kind == "native":
        with running_server(app) as address:
            yield address
    else:
        with serving(asgi(app), "uvicorn") as server:
            yield server.host, server.port


FRONT_ENDS = pytest.mark.parametrize("kind", ["native", "uvicorn"])


@pytest.fixture(params=["native", "uvicorn"])
def counter_server(request: pytest.FixtureRequest) -> Iterator[tuple[str, int]]:
    with front_end(counter_app, request.param) as address:
        yield address


def open_page(host: str, port: int, path: str = "/", cookie: str | None = None) -> tuple[RawResponse, dict, str]:
    with RawClient(host, port) as client:
        extra = f"Cookie: {cookie}\r\n" if cookie else ""
        client.send(f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\n{extra}\r\n".encode())
        response = client.read_response()
    seed = json.loads(html.unescape(SEED.search(response.body.decode()).group(1)))
    set_cookie = response.header("set-cookie") or ""
    return response, seed, set_cookie.split(";", 1)[0]


def open_stream(host: str, port: int, signals: dict, cookie: str, method: str = "GET") -> tuple[RawClient, RawResponse]:
    """Open a tab's stream as the page does: a GET with the context id in the URL, or (reviving) a
    POST with the writable signals and the snapshot in its body."""
    client = RawClient(host, port)
    if method == "GET":
        query = quote(json.dumps(signals))
        client.send(f"GET /_sse?datastar={query} HTTP/1.1\r\nHost: {host}:{port}\r\nCookie: {cookie}\r\n\r\n".encode())
    else:
        body = json.dumps(signals).encode()
        client.send(
            f"POST /_sse HTTP/1.1\r\nHost: {host}:{port}\r\nCookie: {cookie}\r\nOrigin: http://{host}:{port}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
    return client, client.read_head()


def patch_of(chunk: bytes) -> dict:
    """The signals of one ``datastar-patch-signals`` event (the frame id that ends it aside)."""
    head, _, data = frame_body(chunk).decode().partition("\ndata: signals ")
    assert head == "event: datastar-patch-signals", chunk
    return json.loads(data)


def post_action(
    host: str, port: int, name: str, signals: dict, cookie: str, origin: str | None = None, method: str = "POST"
) -> RawResponse:
    body = json.dumps(signals).encode()
    origin = origin if origin is not None else f"http://{host}:{port}"
    with RawClient(host, port) as client:
        client.send(
            f"{method} /_action/{name} HTTP/1.1\r\nHost: {host}:{port}\r\nOrigin: {origin}\r\n"
            f"Cookie: {cookie}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        return client.read_response()


def test_page_stream_and_action_round_trip(counter_server: tuple[str, int]) -> None:
    host, port = counter_server
    page, seed, cookie = open_page(host, port)
    assert page.status == 200
    assert re.fullmatch(r"via_session_id=[0-9a-f]{64}", cookie)
    assert "HttpOnly" in page.header("set-cookie") and "SameSite=Lax" in page.header("set-cookie")
    m = re.search(
        r'<script type="module" src="(/datastar.js\?v=[0-9a-f]{10})" integrity="(sha384-[^"]+)"', page.body.decode()
    )
    assert m, "the page loads the hashed bundle with SRI"
    stream, head = open_stream(host, port, {"via_ctx": seed["via_ctx"]}, cookie)
    with stream:
        assert head.status == 200
        assert head.header("content-type") == "text/event-stream"
        assert head.header("cache-control") == "no-cache"
        assert head.header("x-accel-buffering") == "no"
        first = frame_body(stream.read_chunk())
        assert first == OPENING
        response = post_action(host, port, "increment", {"via_ctx": seed["via_ctx"], "step": 1}, cookie)
        assert (response.status, response.body) == (200, b"")
        patch = patch_of(stream.read_chunk())
        assert patch["_count"] == 1 and set(patch) == {"_count", "_via_snap"}


def test_a_tab_keeps_its_page_view_but_not_the_connection_it_came_on() -> None:
    """A tab keeps its page view's request (``c.request``) while it waits for its stream and after:
    the connection that request came on, closed since, must not stay in memory with it."""
    app = App()

    @app.page("/")
    def page(c: Context) -> None:
        c.view(lambda: f"<p id='who'>{c.request.headers.get('user-agent')}</p>")

    with running_server(app) as (host, port):
        for i in range(20):
            with RawClient(host, port) as client:
                client.send(f"GET / HTTP/1.1\r\nHost: {host}:{port}\r\nUser-Agent: tab-{i}\r\n\r\n".encode())
                assert client.read_response().status == 200
        waiting = list(app.contexts.values())
        assert sorted(ctx.request.headers.get("user-agent") for ctx in waiting) == sorted(f"tab-{i}" for i in range(20))
        deadline = time.monotonic() + 5
        while True:
            gc.collect()
            alive = sum(isinstance(o, HttpProtocol) for o in gc.get_objects())
            if not alive or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert alive == 0, f"{alive} closed connections kept by the 20 waiting tabs"


def test_bundle_is_immutable_and_revalidates(counter_server: tuple[str, int]) -> None:
    host, port = counter_server
    page, _, _ = open_page(host, port)
    url = re.search(r'src="(/datastar.js\?v=[0-9a-f]+)"', page.body.decode()).group(1)
    with RawClient(host, port) as client:
        client.send(f"GET {url} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        bundle = client.read_response()
        assert bundle.status == 200 and bundle.body.startswith(b"// Datastar v1.0")
        assert bundle.header("cache-control") == "public, max-age=31536000, immutable"
        client.send(f"GET {url} HTTP/1.1\r\nHost: x\r\nIf-None-Match: {bundle.header('etag')}\r\n\r\n".encode())
        assert client.read_response().status == 304


def test_action_refusals(counter_server: tuple[str, int]) -> None:
    host, port = counter_server
    _, seed, cookie = open_page(host, port)
    signals = {"via_ctx": seed["via_ctx"], "count": 0, "step": 1}
    get = post_action(host, port, "increment", signals, cookie, method="GET")
    assert get.status == 405 and get.header("allow") == "POST"
    assert post_action(host, port, "increment", {"count": 1}, cookie).status == 400
    assert post_action(host, port, "increment", {**signals, "via_ctx": "nope"}, cookie).status == 400
    _, _, other_cookie = open_page(host, port)
    assert post_action(host, port, "increment", signals, other_cookie).status == 403
    assert post_action(host, port, "increment", signals, cookie, origin="http://evil.example").status == 403
    assert post_action(host, port, "increment", signals, cookie).status == 200


def test_stream_of_another_session_is_forbidden(counter_server: tuple[str, int]) -> None:
    host, port = counter_server
    _, seed, _ = open_page(host, port)
    _, _, other_cookie = open_page(host, port)
    stream, head = open_stream(host, port, {"via_ctx": seed["via_ctx"]}, other_cookie)
    stream.close()
    assert head.status == 403


@FRONT_ENDS
def test_user_text_cannot_forge_events(kind: str) -> None:
    attack = "x\n\nevent: datastar-patch-elements\ndata: elements <script>alert(1)</script>\r\ndata: mode remove\rz"
    with front_end(injection_app(), kind) as (host, port):
        _, seed, cookie = open_page(host, port)
        stream, _ = open_stream(host, port, {"via_ctx": seed["via_ctx"], "text": ""}, cookie)
        with stream:
            stream.read_chunk()
            post_action(host, port, "echo", {"via_ctx": seed["via_ctx"], "text": attack}, cookie)
            received = b""
            while received.count(b"\n\n") < 2:
                received += stream.read_chunk()
    events = [e for e in received.decode().split("\n\n") if not e.startswith("id: ")]  # the frame ids aside
    assert events[2:] == [""]  # exactly two events: the patch and the view
    for event in events[:2]:
        lines = event.split("\n")
        assert lines[0] == "event: datastar-patch-elements"
        framing = [line for line in lines[1:] if not line.startswith("data: elements ")]
        assert framing == [], framing  # the view patches its element by id: no selector, no mode
    echo = next(e for e in events if 'id="echo"' in e)
    assert echo.split("\n")[1:] == [
        'data: elements <p id="echo">x',
        "data: elements ",
        "data: elements event: datastar-patch-elements",
        "data: elements data: elements <script>alert(1)</script>",
        "data: elements data: mode remove",
        "data: elements z</p>",
    ]


def test_revival_after_the_server_process_restarts() -> None:
    server = ServerProcess("examples.counter:app", free_port())
    server.start()
    try:
        host, port = "127.0.0.1", server.port
        _, seed, cookie = open_page(host, port)
        ctx = {"via_ctx": seed["via_ctx"]}
        stream, _ = open_stream(host, port, ctx, cookie)
        with stream:
            stream.read_chunk()
            for _ in range(3):
                assert post_action(host, port, "increment", {**ctx, "step": 1}, cookie).status == 200
                snapshot = patch_of(stream.read_chunk())["_via_snap"]  # what the browser keeps
        server.restart()
        # the restarted server holds no record: it asks the page for its snapshot ...
        with RawClient(host, port) as client:
            client.send(
                f"GET /_sse?datastar={quote(json.dumps(ctx))} HTTP/1.1\r\nHost: {host}:{port}\r\n"
                f"Cookie: {cookie}\r\n\r\n".encode()
            )
            asked = client.read_response()
        assert asked.status == 200 and asked.header("content-type") == "application/json"
        assert "_via_revive" in json.loads(asked.body)
        # ... and an action before the stream revived the tab is refused, not run on the handler's values
        assert post_action(host, port, "increment", {**ctx, "step": 1}, cookie).status == 409
        stream, head = open_stream(host, port, {**ctx, "step": 1, "_via_snap": snapshot}, cookie, method="POST")
        with stream:
            assert head.status == 200
            received = b""
            deadline = time.monotonic() + 5
            while b'"_count":3' not in received and time.monotonic() < deadline:
                received += stream.read_chunk()
            text = received.decode()
            assert 'data: elements   <section id="counter">' in text  # a full render of the rebuilt view
            assert '<strong id="count" data-text="$_count">3</strong>' in text
            response = post_action(host, port, "increment", {**ctx, "step": 1}, cookie)
            assert response.status == 200
            assert patch_of(stream.read_chunk())["_count"] == 4
    finally:
        server.stop()


@FRONT_ENDS
def test_a_path_parameter_never_holds_a_slash_over_http(kind: str) -> None:
    """``/r/..%2F..%2Fetc`` is not the room ``../../etc`` on either server: a parameter is one
    segment of the decoded path, so a handler joining it to a folder cannot be walked out of it."""
    from tests.features.test_routes import room_app

    with front_end(room_app(), kind) as (host, port):
        for path in ("/r/..%2F..%2Fetc%2Fpasswd", "/r/%2Fetc%2Fpasswd", "/r/a%2fb"):
            with RawClient(host, port) as client:
                client.send(f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode())
                assert client.read_response().status == 404, path
        with RawClient(host, port) as client:
            client.send(f"GET /r/caf%C3%A9 HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode())
            assert client.read_response().status == 200


def test_an_app_timer_keeps_its_rate_when_its_work_takes_part_of_the_period() -> None:
    """A 10 Hz game tick whose work takes 40 ms still runs 10 times a second: the next call is
    due a period after the last was due, not a period after it ran (which made it 7 Hz)."""
    app = App()
    calls: list[float] = []

    def tick() -> None:
        calls.append(time.monotonic())
        busy_until = time.perf_counter() + 0.04
        while time.perf_counter() < busy_until:
            pass

    app.set_interval(tick, 0.1)
    with running_server(app):
        time.sleep(2.2)
    window = [t for t in calls if calls[0] + 0.05 <= t <= calls[0] + 2.05]  # 2 s after the first call
    assert len(window) >= 18, (len(window), [round(b - a, 3) for a, b in itertools.pairwise(calls)])


def test_a_tab_timer_keeps_its_rate_when_its_work_takes_part_of_the_period() -> None:
    app = App()
    calls: list[float] = []

    @app.page("/")
    def page(c: Context) -> None:
        def tick() -> None:
            calls.append(time.monotonic())
            busy_until = time.perf_counter() + 0.04
            while time.perf_counter() < busy_until:
                pass

        c.set_interval(tick, 0.1)
        c.view(lambda: "<p id='p'>ticking</p>")

    with running_server(app) as (host, port):
        _, seed, cookie = open_page(host, port)
        client, head = open_stream(host, port, {"via_ctx": seed["via_ctx"]}, cookie)
        assert head.status == 200
        time.sleep(2.2)
        client.close()
    window = [t for t in calls if calls[0] + 0.05 <= t <= calls[0] + 2.05]
    assert len(window) >= 18, (len(window), [round(b - a, 3) for a, b in itertools.pairwise(calls)])
