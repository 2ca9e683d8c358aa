"""A pyvia App served by uvicorn through ``pyvia.asgi``, over real loopback sockets."""

from __future__ import annotations

import json
import logging
import re
import socket
import time
from collections.abc import Iterator
from urllib.parse import quote

import brotli
import pytest
from examples.counter import app as counter_app

from pyvia import App, Context, Request
from pyvia.asgi import ASGIApp, asgi
from pyvia.http import StreamResponse
from pyvia.lifecycle import State
from pyvia.protocol import SSE_HEADERS
from tests.asgi.servers import (
    ServerThread,
    open_page,
    open_stream,
    post_action,
    read_events,
    request,
    serving,
)
from tests.helpers import OPENING, RawClient, frame_body, signals_event

FIRST = OPENING


def hooked_app() -> tuple[App, list[str]]:
    """A page with a counter, recording the app's start, stop and disconnect hooks."""
    app = App()
    seen: list[str] = []
    app.on_start(lambda: seen.append("start"))
    app.on_stop(lambda: seen.append("stop"))
    app.on_disconnect(lambda c: seen.append("disconnect"))

    @app.page("/")
    def page(c: Context) -> None:
        n = c.signal(0, "n")

        @c.action
        def inc() -> None:
            n.value += 1

        c.view(lambda: f'<button data-on:click="{inc}">{n.value}</button>')

    @app.route("POST", "/size")
    def size(request: Request) -> dict[str, int]:
        return {"size": len(request.body)}

    return app, seen


@pytest.fixture(params=["httptools", "h11"])
def counter_server(request: pytest.FixtureRequest) -> Iterator[ServerThread]:
    with serving(asgi(counter_app), http=request.param) as server:
        yield server


def test_counter_page_stream_and_action_round_trip(counter_server: ServerThread) -> None:
    host, port = counter_server.host, counter_server.port
    page, seed, cookie = open_page(host, port)
    assert re.fullmatch(r"via_session_id=[0-9a-f]{64}", cookie)
    assert re.search(r'<script type="module" src="/datastar.js\?v=[0-9a-f]+"', page.body.decode())
    signals = {"via_ctx": seed["via_ctx"], "step": 1}
    stream, head = open_stream(host, port, signals, cookie)
    with stream:
        assert head.status == 200
        assert head.header("content-type") == "text/event-stream"
        assert head.header("cache-control") == "no-cache"
        assert head.header("x-accel-buffering") == "no"
        assert head.header("transfer-encoding") == "chunked"
        assert frame_body(stream.read_chunk()) == FIRST
        for n in range(3):
            response = post_action(host, port, "increment", signals, cookie)
            assert (response.status, response.body) == (200, b"")
            assert signals_event(stream.read_chunk())["_count"] == n + 1


def test_the_bundle_is_served_and_revalidates(counter_server: ServerThread) -> None:
    host, port = counter_server.host, counter_server.port
    page, _, _ = open_page(host, port)
    url = re.search(r'src="(/datastar.js\?v=[0-9a-f]+)"', page.body.decode()).group(1)  # type: ignore[union-attr]
    bundle = request(host, port, "GET", url)
    assert bundle.status == 200 and bundle.body.startswith(b"// Datastar v1.0")
    assert int(bundle.header("content-length") or 0) == len(bundle.body)
    again = request(host, port, "GET", url, headers=f"If-None-Match: {bundle.header('etag')}\r\n")
    assert again.status == 304 and again.body == b""


def test_closing_the_client_socket_disconnects_the_tab(counter_server: ServerThread) -> None:
    host, port = counter_server.host, counter_server.port
    _, seed, cookie = open_page(host, port)
    ctx_id = seed["via_ctx"]
    stream, _ = open_stream(host, port, {"via_ctx": ctx_id, "step": 1}, cookie)
    assert frame_body(stream.read_chunk()) == FIRST
    assert counter_server.call(lambda: counter_app.contexts[ctx_id].state) is State.CONNECTED
    stream.close()
    # The context's disconnect grace is 5 s, so it is still there, disconnected, right after.
    counter_server.wait_for(lambda: counter_app.contexts[ctx_id].state is State.DISCONNECTED, timeout=3)


def test_a_quiet_stream_learns_of_the_disconnect_at_once() -> None:
    app, seen = hooked_app()
    with serving(asgi(app)) as server:
        _, seed, cookie = open_page(server.host, server.port)
        stream, _ = open_stream(server.host, server.port, {"via_ctx": seed["via_ctx"]}, cookie)
        stream.read_chunk()
        began = time.monotonic()
        stream.sock.shutdown(socket.SHUT_RDWR)
        stream.close()
        server.wait_for(lambda: "disconnect" in seen, timeout=3)
        assert time.monotonic() - began < 1.0  # not at the next keep-alive, 15 s later


def test_lifespan_starts_the_app_before_the_first_request_and_stops_it() -> None:
    app, seen = hooked_app()
    server = ServerThread(asgi(app), lifespan="on").start()
    try:
        assert server.call(lambda: list(seen)) == ["start"]
        assert server.call(lambda: app.clock is not None)
        open_page(server.host, server.port)
    finally:
        server.stop()
    assert seen == ["start", "stop"]


def test_without_lifespan_the_app_starts_on_the_first_request() -> None:
    app, seen = hooked_app()
    adapter = asgi(app)
    with serving(adapter, lifespan="off") as server:
        assert server.call(lambda: list(seen)) == []
        assert server.call(lambda: adapter.is_started) is False
        open_page(server.host, server.port)
        assert server.call(lambda: list(seen)) == ["start"]
        assert server.call(lambda: adapter.is_started) is True
        open_page(server.host, server.port)
        assert server.call(lambda: list(seen)) == ["start"]  # once
    assert seen == ["start"]  # no lifespan, no shutdown message: the app is not stopped


def ends_and_closes(stream: RawClient, timeout: float = 2.0) -> bool:
    """The server ends the chunked body (its last chunk) and closes the connection within ``timeout``."""
    stream.sock.settimeout(timeout)
    data = bytes(stream.buffer)
    try:
        while chunk := stream.sock.recv(65536):
            data += chunk
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True
    return data == b"" or data.endswith(b"0\r\n\r\n")


def test_stopping_with_an_open_stream_ends_it_and_runs_shutdown() -> None:
    # uvicorn waits for open responses before the lifespan shutdown; timeout_graceful_shutdown
    # bounds that wait and cancels the stream's task, which tells the core the tab left.
    app, seen = hooked_app()
    server = ServerThread(asgi(app), timeout_graceful_shutdown=1).start()
    _, seed, cookie = open_page(server.host, server.port)
    ctx_id = seed["via_ctx"]
    stream, _ = open_stream(server.host, server.port, {"via_ctx": ctx_id}, cookie)
    with stream:
        stream.read_chunk()
        took = server.stop()
        assert took < 5
        assert ends_and_closes(stream)
    assert seen == ["start", "disconnect", "stop"]
    assert app.contexts[ctx_id].state is State.DISCONNECTED


def test_a_stop_that_ends_open_streams_at_uvicorns_graceful_timeout_logs_no_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A deploy with tabs open: uvicorn cancels the streams' tasks when its graceful timeout runs
    out, as docs/asgi.md says it should. That is the way a pyvia stream ends under uvicorn, so it
    is not an "Exception in ASGI application" with a traceback for every open tab."""
    app, _ = hooked_app()
    server = ServerThread(asgi(app), timeout_graceful_shutdown=1).start()
    streams = []
    for _ in range(3):
        _, seed, cookie = open_page(server.host, server.port)
        stream, _ = open_stream(server.host, server.port, {"via_ctx": seed["via_ctx"]}, cookie)
        stream.read_chunk()
        streams.append(stream)
    with caplog.at_level(logging.INFO):
        server.stop()
    for stream in streams:
        assert ends_and_closes(stream)
        stream.close()
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR and "Cancel" not in r.getMessage()]
    assert errors == [], [r.getMessage() for r in errors]


def test_a_body_over_the_limit_is_refused_with_413_before_it_is_read() -> None:
    app, _ = hooked_app()
    with serving(asgi(app)) as server, RawClient(server.host, server.port) as client:
        client.send(f"POST /size HTTP/1.1\r\nHost: x\r\nContent-Length: {16 * 1024 * 1024 + 1}\r\n\r\n".encode())
        response = client.read_response()
        assert (response.status, response.body) == (413, b"Content Too Large")
        assert response.header("connection") == "close"
        assert client.is_closed_by_peer()


def test_a_body_of_exactly_the_limit_reaches_the_app() -> None:
    app, _ = hooked_app()
    body = b"x" * (16 * 1024 * 1024)
    with serving(asgi(app)) as server:
        response = request(server.host, server.port, "POST", "/size", body=body)
        assert (response.status, response.body) == (200, b'{"size":16777216}')


def test_a_chunked_body_is_cut_off_at_the_limit() -> None:
    app, _ = hooked_app()
    with serving(ASGIApp(app, max_body=1000)) as server, RawClient(server.host, server.port) as client:
        chunk = b"y" * 600
        client.send(
            b"POST /size HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
            + b"%x\r\n%b\r\n" % (len(chunk), chunk) * 2
            + b"0\r\n\r\n"
        )
        assert client.read_response().status == 413
    with serving(ASGIApp(app, max_body=1200)) as server, RawClient(server.host, server.port) as client:
        client.send(
            b"POST /size HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
            + b"%x\r\n%b\r\n" % (len(chunk), chunk) * 2
            + b"0\r\n\r\n"
        )
        assert client.read_response().body == b'{"size":1200}'


def test_head_requests_get_heads_only_and_keep_the_connection(counter_server: ServerThread) -> None:
    host, port = counter_server.host, counter_server.port
    page, _, _ = open_page(host, port)
    url = re.search(r'src="(/datastar.js\?v=[0-9a-f]+)"', page.body.decode()).group(1)  # type: ignore[union-attr]
    with RawClient(host, port) as client:
        client.send(f"HEAD / HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
        head = client.read_response(method="HEAD")
        assert head.status == 200 and head.header("content-type") == "text/html; charset=utf-8"
        client.send(f"HEAD {url} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
        bundle = client.read_response(method="HEAD")
        assert bundle.status == 200 and int(bundle.header("content-length") or 0) > 10_000
        client.send(f"GET {url} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())  # same connection, still usable
        got = client.read_response()
        assert got.status == 200 and len(got.body) == int(bundle.header("content-length") or 0)


def test_head_of_a_stream_sends_its_head_and_never_opens_it() -> None:
    app = App()
    calls: list[str] = []

    @app.route("GET", "/events")
    def events() -> StreamResponse:
        return StreamResponse(
            list(SSE_HEADERS), on_open=lambda sink: calls.append("open"), on_close=lambda: calls.append("close")
        )

    with serving(asgi(app)) as server, RawClient(server.host, server.port) as client:
        client.send(b"HEAD /events HTTP/1.1\r\nHost: x\r\n\r\n")
        head = client.read_response(method="HEAD")
        assert head.status == 200 and head.header("content-type") == "text/event-stream"
        client.send(b"HEAD /events HTTP/1.1\r\nHost: x\r\n\r\n")
        assert client.read_response(method="HEAD").status == 200
        assert server.call(lambda: list(calls)) == ["close", "close"]


def test_websocket_handshakes_are_refused() -> None:
    app, _ = hooked_app()
    with serving(asgi(app), ws="wsproto") as server, RawClient(server.host, server.port) as client:
        client.send(
            b"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
        )
        assert client.read_head().status == 403


def test_the_adapter_runs_on_the_plain_asyncio_loop_too() -> None:
    with serving(asgi(counter_app), loop="asyncio") as server:
        _, seed, cookie = open_page(server.host, server.port)
        signals = {"via_ctx": seed["via_ctx"], "step": 2}
        stream, _ = open_stream(server.host, server.port, signals, cookie)
        with stream:
            stream.read_chunk()
            assert post_action(server.host, server.port, "increment", signals, cookie).status == 200
            assert b'{"_count":2,' in read_events(stream, b'{"_count":2,')  # the server's count, plus step 2


def test_a_compressed_stream_is_flushed_event_by_event(counter_server: ServerThread) -> None:
    # The core compresses a stream the browser accepts (br here) and flushes each event; the
    # adapter passes the coding and every flushed piece through as it is.
    host, port = counter_server.host, counter_server.port
    _, seed, cookie = open_page(host, port)
    signals = {"via_ctx": seed["via_ctx"], "step": 1}
    client = RawClient(host, port)
    client.send(
        f"GET /_sse?datastar={quote(json.dumps(signals))} HTTP/1.1\r\nHost: {host}:{port}\r\n"
        f"Cookie: {cookie}\r\nAccept-Encoding: br\r\n\r\n".encode()
    )
    with client:
        head = client.read_head()
        assert head.header("content-encoding") == "br"
        decoder = brotli.Decompressor()
        assert frame_body(decoder.process(client.read_chunk())) == FIRST
        assert post_action(host, port, "increment", signals, cookie).status == 200
        assert signals_event(decoder.process(client.read_chunk()))["_count"] == 1


def test_a_tab_that_stops_reading_is_cut_off_by_the_core() -> None:
    # The client reads nothing: the kernel buffers fill, uvicorn holds the adapter's send, the
    # queue grows, and ``buffered`` tells the core, which ends the stream past 4 x max_stream_buffer.
    app = App(max_stream_buffer=64 * 1024)
    big = "x" * (256 * 1024)

    @app.page("/")
    def page(c: Context) -> None:
        @c.action
        def flood() -> None:
            c.patch_elements(f'<p id="big">{big}</p>')

        c.view(lambda: f'<button data-on:click="{flood}">flood</button>')

    with serving(asgi(app)) as server:
        host, port = server.host, server.port
        _, seed, cookie = open_page(host, port)
        ctx_id = seed["via_ctx"]
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect((host, port))
        client = RawClient.__new__(RawClient)
        client.sock, client.buffer = sock, b""
        client.send(
            f"GET /_sse?datastar={quote(json.dumps({'via_ctx': ctx_id}))} HTTP/1.1\r\n"
            f"Host: {host}:{port}\r\nCookie: {cookie}\r\n\r\n".encode()
        )
        server.wait_for(lambda: app.contexts[ctx_id].state is State.CONNECTED)
        floods = 0
        while floods < 60 and not server.call(lambda: app.contexts[ctx_id].stream.sink is None):
            assert post_action(host, port, "flood", {"via_ctx": ctx_id}, cookie).status == 200
            floods += 1
        assert server.call(lambda: app.contexts[ctx_id].stream.sink is None), "the core never ended the stream"
        assert floods < 60
        with client:
            client.sock.settimeout(5)
            assert client.read_head().status == 200
            events = b""
            while chunk := client.read_chunk():  # once the client reads again, the body ends properly
                events += chunk
        # Events are never dropped (only view frames are): what was written before the cut arrives whole.
        *blocks, rest = events.split(b"\n\n")
        blocks = [block for block in blocks if not block.startswith(b"id: ")]  # the frame ids
        assert rest == b"" and all(block.startswith(b"event: datastar-patch-") for block in blocks)
        assert sum(block.endswith(b"</p>") for block in blocks) >= 1
