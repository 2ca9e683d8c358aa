"""Issue 19, HTTP correctness: a client that pools connections, as Go's net/http does, never meets a
close the server did not announce (``connection: close``) — across a plain route's event stream
and the next request, and across every other way a response can end."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from pyvia import App
from pyvia import protocol as datastar
from pyvia.http import Request, Response, StreamResponse, StreamSink
from pyvia.server.http import ServerLimits
from tests.helpers import RawClient, RawResponse, ServerThread, running_server


def events_app() -> App:
    app = App()

    @app.route("GET", "/events")
    def events(request: Request) -> StreamResponse:
        def send(sink: StreamSink) -> None:
            sink.write(datastar.patch_elements('<div id="a">1</div>'))
            sink.write(datastar.patch_signals({"n": 1}))
            sink.close()  # a one-shot Datastar answer: the stream ends at once

        return StreamResponse(list(datastar.SSE_HEADERS), send, lambda: None)

    @app.route("GET", "/plain")
    def plain(request: Request) -> Response:
        return Response.text("plain")

    return app


class PooledClient:
    """Keeps connections for reuse unless a response said ``connection: close``, like Go's
    Transport; reports any EOF or reset on a connection the server had not announced closing."""

    def __init__(self, address: tuple[str, int]) -> None:
        self.address = address
        self.idle: list[RawClient] = []
        self.opened = 0
        self.unannounced: list[str] = []

    def request(self, path: str, extra: str = "") -> RawResponse:
        reused = bool(self.idle)
        conn = self.idle.pop() if reused else self._open()
        try:
            conn.send(f"GET {path} HTTP/1.1\r\nHost: localhost\r\n{extra}\r\n".encode())
            response = conn.read_response()
        except (EOFError, ConnectionResetError, BrokenPipeError) as exc:
            self.unannounced.append(f"{path} on a {'reused' if reused else 'new'} connection: {exc!r}")
            conn.close()
            raise
        if (response.header("connection") or "").lower() == "close":
            assert conn.is_closed_by_peer(), f"{path}: announced close, but the connection stayed open"
            conn.close()
        else:
            self.idle.append(conn)
        return response

    def check_idle(self, wait: float = 0.05) -> None:
        """What a pool's background read sees: an idle connection the server closed unannounced."""
        time.sleep(wait)
        for conn in self.idle:
            closed = conn.is_closed_by_peer(timeout=0.001)
            conn.sock.settimeout(5.0)
            if closed:
                self.unannounced.append("an idle pooled connection was closed without connection: close")

    def _open(self) -> RawClient:
        self.opened += 1
        return RawClient(*self.address)

    def close(self) -> None:
        for conn in self.idle:
            conn.close()


def test_a_pooled_connection_carries_a_plain_routes_stream_and_the_next_request() -> None:
    with running_server(events_app()) as address:
        client = PooledClient(address)
        try:
            for _ in range(20):
                stream = client.request("/events")
                client.check_idle()
                plain = client.request("/plain")
        finally:
            client.close()
    assert client.unannounced == []
    assert client.opened == 1  # one connection carried all 40 requests
    assert stream.status == 200 and b"datastar-patch-elements" in stream.body and plain.body == b"plain"
    # The headers the Datastar SDK spec asks of an SSE response (sdk/ADR.md, "Construction").
    assert stream.header("content-type") == "text/event-stream"
    assert stream.header("cache-control") == "no-cache"
    assert stream.header("connection") == "keep-alive"  # HTTP/1.1 only, and true: the connection stays


def test_a_stream_that_will_end_the_connection_says_so() -> None:
    with running_server(events_app()) as address:
        client = PooledClient(address)
        try:
            asked = client.request("/events", extra="Connection: close\r\n")
        finally:
            client.close()
        with RawClient(*address) as c:  # HTTP/1.0: unframed, so the end of the body is the close
            c.send(b"GET /events HTTP/1.0\r\n\r\n")
            old = c.read_head()
            c.read_all()
    assert client.unannounced == [] and asked.header("connection") == "close"
    assert old.header("connection") == "close" and old.header("transfer-encoding") is None


class Held:
    """``/hold`` opens a stream the test ends by stopping the server; other paths answer at once."""

    def __init__(self) -> None:
        self.sinks: list[StreamSink] = []

    async def startup(self) -> None:
        pass

    async def shutdown(self, budget: float) -> None:
        for sink in self.sinks:
            sink.close()

    def handle(self, request: Request) -> Any:
        if request.path == "/hold":
            return StreamResponse(list(datastar.SSE_HEADERS), self.sinks.append, lambda: None)
        if request.path == "/slow":
            return self._slow()
        return Response.text("ok")

    async def _slow(self) -> Response:
        await asyncio.sleep(0.3)
        return Response.text("slow")


def test_every_response_the_server_closes_after_announces_it() -> None:
    """Refusals, a full pipeline, a stream cap and a graceful stop: each last answer says close."""
    limits = ServerLimits(max_pipelined=2, max_streams=1, max_request_line=64)
    server = ServerThread(Held(), limits=limits, graceful_timeout=2.0)
    address = server.start()
    try:
        closing: dict[str, RawResponse] = {}
        with RawClient(*address) as c:
            c.send(b"GET /" + b"x" * 100 + b" HTTP/1.1\r\nHost: a\r\n\r\n")
            closing["414"] = c.read_response()
            assert c.is_closed_by_peer()
        with RawClient(*address) as c:  # deeper than max_pipelined: the last one answered says close
            c.send(b"".join(b"GET /slow HTTP/1.1\r\nHost: a\r\n\r\n" for _ in range(5)))
            answers = [c.read_response() for _ in range(3)]
            assert c.is_closed_by_peer()
            closing["pipeline"] = answers[-1]
            assert [a.header("connection") for a in answers[:-1]] == [None, None]
        with RawClient(*address) as holder, RawClient(*address) as second:
            holder.send(b"GET /hold HTTP/1.1\r\nHost: a\r\n\r\n")
            holder.read_head()
            second.send(b"GET /hold HTTP/1.1\r\nHost: a\r\n\r\n")
            closing["stream cap"] = second.read_response()
            with RawClient(*address) as busy:
                busy.send(b"GET /slow HTTP/1.1\r\nHost: a\r\n\r\n")
                time.sleep(0.1)
                server.stop()
                server = None  # type: ignore[assignment]
                closing["graceful stop"] = busy.read_response()
            assert holder.read_chunk() == b""  # the app ended its stream: a clean end of body…
            assert holder.is_closed_by_peer()  # …then the close of a stopping server
    finally:
        if server is not None:
            server.stop()
    assert {name: r.header("connection") for name, r in closing.items()} == dict.fromkeys(closing, "close")
    assert closing["stream cap"].status == 503 and closing["graceful stop"].body == b"slow"


@pytest.mark.parametrize("status", [400, 431])
def test_refusals_close_with_an_announcement(status: int) -> None:
    raw = (
        b"GET / HTTP/1.1\r\nHost: a\r\nBad Header: x\r\n\r\n"
        if status == 400
        else b"GET / HTTP/1.1\r\nHost: a\r\n" + b"X-Big: " + b"y" * 70_000 + b"\r\n\r\n"
    )
    with running_server(Held()) as address, RawClient(*address) as c:
        c.send(raw)
        response = c.read_response()
        assert c.is_closed_by_peer()
    assert response.status == status and response.header("connection") == "close"
