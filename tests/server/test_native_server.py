"""The native server over real loopback sockets, byte by byte."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import select
import socket
import ssl
import subprocess
import threading
import time
from typing import Any

import pytest
import uvloop

from pyvia.http import Request, Response, StreamResponse, StreamSink
from pyvia.server import ServedApp
from pyvia.server.http import ServerLimits
from pyvia.server.runner import serve
from tests.helpers import RawClient, ServerThread, get, post, running_server

EVENTS = [b'event: datastar-patch-signals\ndata: signals {"n":1}\n\n', b": keep-alive\n\n", b"data: x\n\n"]
SSE_HEADERS = [("content-type", "text/event-stream"), ("cache-control", "no-cache")]


class EchoApp:
    """Echoes requests as JSON; a few paths exercise async, failure and streaming."""

    def __init__(self) -> None:
        self.started = False
        self.shutdown_budgets: list[float] = []
        self.ignore_shutdown = False
        self.sinks: list[StreamSink] = []
        self.stream_opened = threading.Event()
        self.stream_closed = threading.Event()
        self.closed_calls = 0

    async def startup(self) -> None:
        self.started = True

    async def shutdown(self, budget: float) -> None:
        self.shutdown_budgets.append(budget)
        if not self.ignore_shutdown:
            for sink in self.sinks:
                sink.close()

    def handle(self, request: Request) -> Any:
        path = request.path
        if path == "/boom":
            raise RuntimeError("secret detail that must not leak")
        if path == "/slow":
            return self._slow(request, float(request.query.get("s", "0.1")))
        if path == "/async-boom":
            return self._async_boom()
        if path == "/not-a-response":
            return 42
        if path == "/bad-header":
            return Response(200, [("x-evil", "a\r\nset-cookie: stolen=1")], b"never sent")
        if path == "/stream":
            return StreamResponse(SSE_HEADERS, self._write_events, lambda: None)
        if path == "/hold":
            return StreamResponse(SSE_HEADERS, self._hold, self._on_stream_closed)
        if path == "/async-stream":
            return self._async_stream()
        if path == "/big":
            return Response(200, [("content-type", "text/plain")], b"x" * int(request.query["n"]))
        return self._echo(request)

    def _echo(self, request: Request) -> Response:
        return Response.json(
            {
                "method": request.method,
                "path": request.path,
                "query": request.query_string,
                "body": request.body.decode("latin-1"),
                "headers": [list(h) for h in request.headers],
                "client": request.client,
                "scheme": request.scheme,
            }
        )

    async def _slow(self, request: Request, seconds: float) -> Response:
        await asyncio.sleep(seconds)
        return self._echo(request)

    async def _async_boom(self) -> Response:
        await asyncio.sleep(0)
        raise ValueError("async secret")

    async def _async_stream(self) -> StreamResponse:
        await asyncio.sleep(0.01)
        return StreamResponse(SSE_HEADERS, self._write_events, lambda: None)

    def _write_events(self, sink: StreamSink) -> None:
        for event in EVENTS:
            sink.write(event)
        sink.close()

    def _hold(self, sink: StreamSink) -> None:
        self.sinks.append(sink)
        sink.write(EVENTS[0])
        self.stream_opened.set()

    def _on_stream_closed(self) -> None:
        self.closed_calls += 1
        self.stream_closed.set()


def echoed(response: Any) -> dict[str, Any]:
    assert response.status == 200, (response.status, response.body)
    return json.loads(response.body)


@pytest.fixture
def app() -> EchoApp:
    return EchoApp()


@pytest.fixture
def server(app: EchoApp) -> Any:
    with running_server(app, graceful_timeout=1.0) as address:
        yield address


FAST = ServerLimits(header_timeout=0.3, body_timeout=0.3, keep_alive_timeout=0.3, sweep_interval=0.05)


def test_echo_app_implements_served_app() -> None:
    assert isinstance(EchoApp(), ServedApp)


def test_startup_runs_before_serving_and_request_fields_are_filled(app: EchoApp, server: Any) -> None:
    assert app.started
    with RawClient(*server) as c:
        c.send(get("/caf%C3%A9/a%20b?x=%20y&z=1", extra="X-Custom: One\r\n"))
        data = echoed(c.read_response())
    assert data["method"] == "GET"
    assert data["path"] == "/café/a b"
    assert data["query"] == "x=%20y&z=1"
    assert ["x-custom", "One"] in data["headers"]
    assert data["client"] == "127.0.0.1"
    assert data["scheme"] == "http"


def test_listening_line_is_logged(app: EchoApp, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="pyvia.server"), running_server(app) as (host, port):
        pass
    assert f"pyvia listening on http://{host}:{port}" in caplog.messages


def test_keep_alive_serves_two_requests_on_one_connection(server: Any) -> None:
    with RawClient(*server) as c:
        c.send(get("/one"))
        first = c.read_response()
        c.send(get("/two"))
        second = c.read_response()
    assert echoed(first)["path"] == "/one" and echoed(second)["path"] == "/two"
    assert first.header("connection") is None  # HTTP/1.1 default: kept alive


def test_pipelined_requests_are_answered_in_order(server: Any) -> None:
    with RawClient(*server) as c:
        c.send(get("/first") + get("/slow?s=0.1") + get("/third"))
        paths = [echoed(c.read_response())["path"] for _ in range(3)]
    assert paths == ["/first", "/slow", "/third"]


def test_many_pipelined_async_requests_keep_their_order(server: Any) -> None:
    with RawClient(*server) as c:
        c.send(b"".join(get(f"/slow?s=0.001&i={i}") for i in range(30)))
        queries = [echoed(c.read_response())["query"] for _ in range(30)]
    assert queries == [f"s=0.001&i={i}" for i in range(30)]


def test_pipelining_deeper_than_the_limit_answers_the_queue_then_closes(app: EchoApp) -> None:
    """RFC 9112 9.3.2: the client retries what was not answered; the server's memory stays bounded."""
    with running_server(app, limits=ServerLimits(max_pipelined=4)) as address, RawClient(*address) as c:
        c.send(b"".join(get(f"/slow?s=0.01&i={i}") for i in range(10)))
        answered = []
        while True:
            try:
                answered.append(echoed(c.read_response())["query"])
            except EOFError:
                break
    assert answered == [f"s=0.01&i={i}" for i in range(5)]  # the one in flight and four queued


def test_content_length_body_is_passed_whole(server: Any) -> None:
    with RawClient(*server) as c:
        c.send(b"POST /p HTTP/1.1\r\nHost: x\r\nContent-Length: 15\r\n\r\nhello=wor")
        time.sleep(0.05)
        c.send(b"ld&x=1")
        data = echoed(c.read_response())
    assert data["method"] == "POST" and data["body"] == "hello=world&x=1"


def test_chunked_request_body_is_decoded(server: Any) -> None:
    with RawClient(*server) as c:
        c.send(b"POST /c HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n")
        c.send(b"6;ext=1\r\n world\r\n0\r\nX-Trailer: t\r\n\r\n")
        data = echoed(c.read_response())
    assert data["body"] == "hello world"
    assert not any(name == "x-trailer" for name, _ in data["headers"])


def test_head_has_the_get_headers_and_no_body(server: Any) -> None:
    with RawClient(*server) as c:
        c.send(b"GET /big?n=1000 HTTP/1.1\r\nHost: x\r\n\r\n")
        got = c.read_response()
        c.send(b"HEAD /big?n=1000 HTTP/1.1\r\nHost: x\r\n\r\n")
        head = c.read_response(method="HEAD")
        c.send(get("/after"))  # a stray body would be read as this response
        after = c.read_response()
    assert head.status == 200 and head.header("content-length") == "1000" == got.header("content-length")
    assert echoed(after)["path"] == "/after"


def test_expect_100_continue_is_answered_before_the_body(server: Any) -> None:
    with RawClient(*server) as c:
        c.send(b"POST /e HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n")
        interim = c.read_head()
        assert interim.status == 100
        c.send(b"body")
        data = echoed(c.read_response())
    assert data["body"] == "body"


def test_expect_100_continue_with_a_too_large_body_gets_413_and_close(app: EchoApp) -> None:
    with running_server(app, limits=ServerLimits(max_body=100)) as address, RawClient(*address) as c:
        c.send(b"POST /e HTTP/1.1\r\nHost: x\r\nContent-Length: 101\r\nExpect: 100-continue\r\n\r\n")
        response = c.read_response()
        assert c.is_closed_by_peer()
    assert response.status == 413 and response.header("connection") == "close"


def test_content_length_with_transfer_encoding_is_refused(server: Any) -> None:
    smuggle = (
        b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n"
    )
    with RawClient(*server) as c:
        c.send(smuggle)
        response = c.read_response()
        rest = c.read_all()
    assert response.status == 400 and response.header("connection") == "close"
    assert rest == b""  # the smuggled request was not answered


@pytest.mark.parametrize("encoding", [b"gzip", b"chunked, gzip"])
def test_unknown_transfer_coding_is_refused(server: Any, encoding: bytes) -> None:
    with RawClient(*server) as c:
        c.send(b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: " + encoding + b"\r\n\r\n")
        response = c.read_response()
    assert response.status in (400, 501) and response.header("connection") == "close"


def test_too_long_url_gets_414(server: Any) -> None:
    with RawClient(*server) as c:
        c.send(get("/" + "a" * (8 * 1024 + 1)))
        response = c.read_response()
        assert c.is_closed_by_peer()
    assert response.status == 414 and response.header("connection") == "close"


def test_url_at_the_limit_is_served(server: Any) -> None:
    with RawClient(*server) as c:
        c.send(get("/" + "a" * (8 * 1024 - 1)))
        assert c.read_response().status == 200


def test_too_many_headers_get_431(server: Any) -> None:
    many = "".join(f"X-H{i}: v\r\n" for i in range(100))  # + Host = 101
    with RawClient(*server) as c:
        c.send(get("/", extra=many))
        response = c.read_response()
    assert response.status == 431 and response.header("connection") == "close"


def test_too_large_headers_get_431(server: Any) -> None:
    with RawClient(*server) as c:
        c.send(get("/", extra="Cookie: " + "c" * (64 * 1024) + "\r\n"))
        response = c.read_response()
    assert response.status == 431


def test_a_header_line_that_never_ends_is_cut_off(server: Any) -> None:
    """httptools buffers a header until its CRLF: the server bounds that too."""
    with RawClient(*server) as c:
        c.send(b"GET / HTTP/1.1\r\nHost: x\r\nCookie: ")
        for _ in range(40):
            if select.select([c.sock], [], [], 0.005)[0]:
                break
            c.send(b"c" * 8192)
        response = c.read_response()
        assert c.is_closed_by_peer()
    assert response.status == 431


def test_too_large_body_gets_413(app: EchoApp) -> None:
    with running_server(app, limits=ServerLimits(max_body=10)) as address:
        with RawClient(*address) as c:
            c.send(post("/", b"x" * 11))
            declared = c.read_response()
        with RawClient(*address) as c:
            c.send(b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n8\r\n12345678\r\n")
            c.send(b"8\r\n12345678\r\n0\r\n\r\n")
            streamed = c.read_response()
        with RawClient(*address) as c:
            c.send(post("/", b"x" * 10))
            fits = c.read_response()
    assert declared.status == 413 and streamed.status == 413
    assert echoed(fits)["body"] == "x" * 10


@pytest.mark.parametrize(
    "request_bytes",
    [
        b"GET / HTTP/1.1\r\nHost : x\r\n\r\n",
        b"GET /a b HTTP/1.1\r\nHost: x\r\n\r\n",
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",  # a TLS hello on the plain port
        b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
        b"GET / HTTP/1.1\r\n\r\n",  # HTTP/1.1 without Host (RFC 9112 3.2)
        b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",  # RFC 9112 6.1
        b"GET example.com HTTP/1.1\r\nHost: x\r\n\r\n",
    ],
)
def test_malformed_request_gets_400_and_close(server: Any, request_bytes: bytes) -> None:
    with RawClient(*server) as c:
        c.send(request_bytes)
        response = c.read_response()
        assert c.is_closed_by_peer()
    assert response.status == 400 and response.header("connection") == "close"
    assert response.body == b"Bad Request"


def test_unsupported_http_version_gets_505(server: Any) -> None:
    with RawClient(*server) as c:
        c.send(b"GET / HTTP/2.0\r\nHost: x\r\n\r\n")
        assert c.read_response().status == 505


def test_http10_closes_unless_keep_alive_is_asked(server: Any) -> None:
    with RawClient(*server) as c:
        c.send(b"GET /a HTTP/1.0\r\n\r\n")
        closing = c.read_response()
        assert c.is_closed_by_peer()
    with RawClient(*server) as c:
        c.send(b"GET /a HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
        kept = c.read_response()
        c.send(b"GET /b HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
        again = c.read_response()
    assert closing.header("connection") == "close"
    assert kept.header("connection") == "keep-alive" and echoed(again)["path"] == "/b"


def test_connection_close_from_the_client_is_honoured(server: Any) -> None:
    with RawClient(*server) as c:
        c.send(get("/", extra="Connection: close\r\n") + get("/ignored"))
        response = c.read_response()
        rest = c.read_all()
    assert response.header("connection") == "close" and rest == b""


def test_slow_headers_get_408_then_close(app: EchoApp) -> None:
    with running_server(app, limits=FAST) as address, RawClient(*address) as c:
        c.send(b"GET / HTTP/1.1\r\nHost: x\r\n")
        began = time.monotonic()
        response = c.read_response()
        waited = time.monotonic() - began
        assert c.is_closed_by_peer()
    assert response.status == 408 and response.header("connection") == "close"
    assert 0.2 <= waited < 1.5


def test_slow_body_gets_408(app: EchoApp) -> None:
    with running_server(app, limits=FAST) as address, RawClient(*address) as c:
        c.send(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc")
        response = c.read_response()
    assert response.status == 408


def test_a_body_that_keeps_arriving_is_not_timed_out(app: EchoApp) -> None:
    # No silence reaches body_timeout, and the rate rule is relaxed (test_security_limits covers it).
    with running_server(app, limits=dataclasses.replace(FAST, min_body_rate=1.0)) as address, RawClient(*address) as c:
        c.send(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 6\r\n\r\n")
        for byte in b"abcdef":
            time.sleep(0.12)
            c.send(bytes([byte]))
        assert echoed(c.read_response())["body"] == "abcdef"


def test_idle_keep_alive_connection_is_closed_silently(app: EchoApp) -> None:
    with running_server(app, limits=FAST) as address, RawClient(*address) as c:
        c.send(get("/"))
        assert c.read_response().status == 200
        began = time.monotonic()
        assert c.is_closed_by_peer(timeout=3.0)
        assert 0.2 <= time.monotonic() - began < 1.5


def test_handler_exception_gives_500_and_the_connection_keeps_serving(
    server: Any, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR, logger="pyvia.server"), RawClient(*server) as c:
        c.send(get("/boom"))
        failed = c.read_response()
        c.send(get("/after"))
        after = c.read_response()
    assert failed.status == 500 and b"secret" not in failed.head + failed.body
    assert failed.header("connection") is None
    assert echoed(after)["path"] == "/after"
    assert any(r.name == "pyvia.server" and r.exc_info for r in caplog.records)


@pytest.mark.parametrize("path", ["/async-boom", "/not-a-response", "/bad-header"])
def test_other_application_failures_give_a_plain_500(server: Any, path: str) -> None:
    with RawClient(*server) as c:
        c.send(get(path))
        failed = c.read_response()
        c.send(get("/after"))
        after = c.read_response()
    assert failed.status == 500 and failed.body == b"Internal Server Error"
    assert failed.header("x-evil") is None and failed.header("set-cookie") is None
    assert echoed(after)["path"] == "/after"


def test_async_handler_is_awaited(server: Any) -> None:
    with RawClient(*server) as c:
        c.send(post("/slow?s=0.05", b"payload"))
        data = echoed(c.read_response())
    assert data["path"] == "/slow" and data["body"] == "payload"


@pytest.mark.parametrize("path", ["/stream", "/async-stream"])
def test_stream_events_are_framed_as_chunks_and_ended(server: Any, path: str) -> None:
    with RawClient(*server) as c:
        c.send(get(path))
        head = c.read_head()
        chunks = []
        while chunk := c.read_chunk():
            chunks.append(chunk)
        c.send(get("/after"))  # the stream ended cleanly: the connection serves the next request
        after = echoed(c.read_response())
    assert head.status == 200
    assert head.header("transfer-encoding") == "chunked" and head.header("content-length") is None
    assert head.header("content-type") == "text/event-stream" and head.header("connection") == "keep-alive"
    assert chunks == EVENTS
    assert after["path"] == "/after"


def test_stream_disconnect_is_reported_once(app: EchoApp, server: Any) -> None:
    c = RawClient(*server)
    c.send(get("/hold"))
    head = c.read_head()
    assert c.read_chunk() == EVENTS[0] and head.status == 200
    assert app.stream_opened.wait(2)
    c.send(get("/ignored"))  # data on a streaming connection is not read
    c.close()
    assert app.stream_closed.wait(2)
    time.sleep(0.05)
    assert app.closed_calls == 1
    assert app.sinks[0].is_closed


def test_stream_over_http10_is_unframed_and_ends_with_the_connection(server: Any) -> None:
    with RawClient(*server) as c:
        c.send(b"GET /stream HTTP/1.0\r\n\r\n")
        head = c.read_head()
        body = c.read_all()
    assert head.header("transfer-encoding") is None
    assert body == b"".join(EVENTS)


def test_tls_serves_https_with_alpn_http11(app: EchoApp, certificate: tuple[str, str]) -> None:
    cert, key = certificate
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    context.set_alpn_protocols(["h2", "http/1.1"])
    with running_server(app, certfile=cert, keyfile=key) as address, RawClient(*address, tls=context) as c:
        assert isinstance(c.sock, ssl.SSLSocket) and c.sock.selected_alpn_protocol() == "http/1.1"
        c.send(get("/secure"))
        first = echoed(c.read_response())
        c.send(get("/stream"))
        head = c.read_head()
        chunks = [c.read_chunk() for _ in EVENTS]
    assert first["scheme"] == "https" and first["path"] == "/secure"
    assert head.status == 200 and chunks == EVENTS


def test_graceful_shutdown_lets_the_app_end_its_streams(app: EchoApp) -> None:
    server = ServerThread(app, graceful_timeout=1.0)
    address = server.start()
    with RawClient(*address) as streaming, RawClient(*address) as idle:
        streaming.send(get("/hold"))
        streaming.read_head()
        assert streaming.read_chunk() == EVENTS[0]
        idle.send(get("/"))
        idle.read_response()
        took = server.stop()
        assert streaming.read_chunk() == b""  # the app closed the sink: a clean end of body
        assert streaming.is_closed_by_peer() and idle.is_closed_by_peer()
    assert app.shutdown_budgets == [0.5]
    assert took < 0.5  # nothing left in flight, so no need to wait out the budget


def test_graceful_shutdown_closes_streams_the_app_leaves_open_within_the_budget(app: EchoApp) -> None:
    app.ignore_shutdown = True
    server = ServerThread(app, graceful_timeout=0.6)
    address = server.start()
    with RawClient(*address) as streaming:
        streaming.send(get("/hold"))
        streaming.read_head()
        assert streaming.read_chunk() == EVENTS[0]
        took = server.stop()
        assert streaming.is_closed_by_peer()
    assert 0.5 <= took < 1.2
    assert app.closed_calls == 1  # the core hears about the forced close once


def test_graceful_shutdown_finishes_requests_in_flight(app: EchoApp) -> None:
    server = ServerThread(app, graceful_timeout=2.0)
    address = server.start()
    with RawClient(*address) as c:
        c.send(get("/slow?s=0.3"))
        time.sleep(0.05)
        took = server.stop()
        response = c.read_response()
        assert c.is_closed_by_peer()
    assert echoed(response)["path"] == "/slow" and response.header("connection") == "close"
    assert 0.2 < took < 1.5


def test_listen_backlog_is_at_least_4096(server: Any) -> None:
    _, port = server
    out = subprocess.run(["ss", "-Hltn", f"sport = :{port}"], check=True, capture_output=True, text=True).stdout
    send_q = int(out.split()[2])  # for a listening socket ss shows the backlog as Send-Q
    with open("/proc/sys/net/core/somaxconn") as f:
        somaxconn = int(f.read())
    assert send_q == min(4096, somaxconn)


def test_a_socket_bound_by_the_caller_is_served(app: EchoApp) -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    with running_server(app, sock=sock), RawClient("127.0.0.1", port) as c:
        c.send(get("/shared"))
        assert echoed(c.read_response())["path"] == "/shared"


def test_serve_sets_a_ready_event_stops_on_its_stop_event_and_refuses_a_key_without_a_certificate(
    app: EchoApp,
) -> None:
    async def main() -> None:
        ready, stop = asyncio.Event(), asyncio.Event()
        task = asyncio.create_task(serve(app, port=0, ready=ready, stop=stop))
        await asyncio.wait_for(ready.wait(), 5)
        stop.set()
        await asyncio.wait_for(task, 5)
        with pytest.raises(ValueError, match="keyfile given without certfile"):
            await serve(app, port=0, keyfile="key.pem")

    uvloop.run(main())
    assert app.started and app.shutdown_budgets == [1.5]
