"""HttpProtocol without a socket: write counts, flow control, the sweep, stream sinks."""

from __future__ import annotations

import asyncio
import socket
import sys
from typing import Any

import pytest
import uvloop

from pyvia.http import Request, Response, StreamResponse, StreamSink
from pyvia.server.http import ServerLimits
from tests.helpers import FakeLoop, get, make_protocol, post


class App:
    """Sync by default; ``/async`` answers after ``release`` is set; ``/stream`` records its sink."""

    def __init__(self) -> None:
        self.sinks: list[StreamSink] = []
        self.opened = 0
        self.closed = 0
        self.release: asyncio.Event | None = None
        self.seen: list[Request] = []
        self.responses: list[StreamResponse] = []

    def handle(self, request: Request) -> Any:
        self.seen.append(request)
        if request.path == "/async":
            return self._later(request)
        if request.path == "/stream":
            response = StreamResponse([("content-type", "text/event-stream")], self._open, self._close)
            self.responses.append(response)
            return response
        if request.path == "/stream-first-event":
            return StreamResponse([("content-type", "text/event-stream")], self._open_and_write, self._close)
        return Response(200, [("content-type", "text/plain")], request.path.encode())

    async def _later(self, request: Request) -> Response:
        assert self.release is not None
        await self.release.wait()
        return Response(200, [], b"async " + request.path.encode())

    def _open(self, sink: StreamSink) -> None:
        self.opened += 1
        self.sinks.append(sink)

    def _open_and_write(self, sink: StreamSink) -> None:
        self._open(sink)
        sink.write(b"data: first\n\n")

    def _close(self) -> None:
        self.closed += 1

    async def startup(self) -> None:
        pass

    async def shutdown(self, budget: float) -> None:
        pass


def test_tcp_nodelay_is_set_on_the_accepted_socket() -> None:
    _, transport, registry = make_protocol(App())
    assert (socket.IPPROTO_TCP, socket.TCP_NODELAY, 1) in transport.socket.options
    assert len(registry) == 1


def test_each_pipelined_response_is_one_write() -> None:
    protocol, transport, _ = make_protocol(App())
    protocol.data_received(get("/a") + get("/b") + get("/c"))
    assert len(transport.writes) == 3
    assert [w.rsplit(b"\r\n\r\n", 1)[1] for w in transport.writes] == [b"/a", b"/b", b"/c"]
    assert all(w.startswith(b"HTTP/1.1 200 OK\r\n") for w in transport.writes)


def test_a_request_split_anywhere_gives_the_same_answer() -> None:
    raw = post("/p?q=1", b"body bytes", extra="X-A: 1\r\n")
    protocol, whole, _ = make_protocol(App())
    protocol.data_received(raw)
    for split in range(1, len(raw)):
        protocol, transport, _ = make_protocol(App())
        protocol.data_received(raw[:split])
        protocol.data_received(raw[split:])
        assert transport.writes == whole.writes, split


def test_the_client_address_and_scheme_reach_the_request() -> None:
    app = App()
    protocol, _, _ = make_protocol(app, scheme="https")
    protocol.data_received(get("/"))
    assert (app.seen[0].client, app.seen[0].scheme) == ("192.0.2.7", "https")


def test_stream_head_and_first_event_share_one_write_then_one_write_per_event() -> None:
    app = App()
    protocol, transport, _ = make_protocol(app)
    protocol.data_received(get("/stream-first-event"))
    assert len(transport.writes) == 1
    assert transport.writes[0].endswith(b"transfer-encoding: chunked\r\n\r\nd\r\ndata: first\n\n\r\n")
    assert b"connection: keep-alive\r\n" in transport.writes[0]  # the Datastar SDK spec's SSE headers
    sink = app.sinks[0]
    sink.write(b"data: 2\n\n")
    sink.write(b"")  # nothing to send: no write, and above all no terminating empty chunk
    assert transport.writes[1:] == [b"9\r\ndata: 2\n\n\r\n"]
    transport.buffer_size = 12345
    assert sink.buffered == 12345
    sink.close()
    # The body ends with its last chunk and the connection stays open, as its head said.
    assert transport.writes[-1] == b"0\r\n\r\n" and not transport.closed
    assert sink.is_closed and sink.buffered == 12345  # still held for the peer: the core counts it
    protocol.data_received(get("/"))
    assert transport.writes[-1].startswith(b"HTTP/1.1 200") and sink.buffered == 0  # the next answer's now
    protocol.connection_lost(None)
    assert app.closed == 0  # the core closed it: no disconnect to report


def test_stream_head_is_written_alone_when_open_writes_nothing() -> None:
    app = App()
    protocol, transport, _ = make_protocol(app)
    protocol.data_received(get("/stream"))
    assert len(transport.writes) == 1 and transport.writes[0].endswith(b"chunked\r\n\r\n")


def test_an_open_stream_lets_its_request_go() -> None:
    app = App()
    protocol, transport, _ = make_protocol(app)
    protocol.data_received(get("/stream"))
    request = app.seen.pop()
    exchange = protocol._exchange
    assert app.opened == 1 and exchange is not None and exchange.sink is not None
    assert exchange.request is None and exchange.path == request.path  # only what the logs name is kept
    assert sys.getrefcount(request) == 2  # nothing else holds it: this name and the call's argument
    # Nor the response: its head and on_open are done with; on_close is what the server keeps.
    response = app.responses.pop()
    assert sys.getrefcount(response) == 2 and exchange.stream_ended == app._close
    app.sinks[0].write(b"data: 1\n\n")
    app.sinks[0].close()
    protocol.data_received(get("/"))  # the connection goes on to its next request
    assert transport.writes[-1].startswith(b"HTTP/1.1 200")


def test_an_open_stream_holds_no_parser_and_its_connection_still_reads_what_follows() -> None:
    app = App()
    protocol, transport, _ = make_protocol(app)
    protocol.data_received(get("/stream"))
    assert protocol.reader._parser is None  # ~0.9 KB an idle tab does not need
    protocol.data_received(get("/next"))  # pipelined behind the open stream: read, queued
    app.sinks[0].close()
    assert transport.writes[-1].startswith(b"HTTP/1.1 200") and transport.writes[-1].endswith(b"/next")

    # A request already begun behind the stream's keeps the parser that holds its first bytes.
    app2 = App()
    protocol2, transport2, _ = make_protocol(app2)
    protocol2.data_received(get("/stream") + b"GET /after HTTP/1.1\r\nHo")
    assert protocol2.reader._parser is not None
    protocol2.data_received(b"st: localhost\r\n\r\n")
    app2.sinks[0].close()
    assert transport2.writes[-1].endswith(b"/after")


def test_peer_disconnect_is_reported_once_and_later_writes_are_dropped() -> None:
    app = App()
    protocol, transport, registry = make_protocol(app)
    protocol.data_received(get("/stream"))
    protocol.data_received(get("/ignored"))  # a streaming connection reads no requests
    assert [r.path for r in app.seen] == ["/stream"]
    assert protocol.eof_received() is None  # the transport closes and reports the loss
    protocol.connection_lost(None)
    sink = app.sinks[0]
    assert app.closed == 1 and sink.is_closed and len(registry) == 0
    sink.write(b"data: late\n\n")
    sink.close()
    assert len(transport.writes) == 1 and app.closed == 1


def test_head_of_a_stream_sends_the_head_only_and_never_opens_it() -> None:
    app = App()
    protocol, transport, _ = make_protocol(app)
    protocol.data_received(b"HEAD /stream HTTP/1.1\r\nHost: x\r\n\r\n")
    assert app.opened == 0 and app.closed == 1
    assert transport.writes[0].endswith(b"\r\n\r\n") and not transport.closed
    protocol.data_received(get("/next"))
    assert transport.writes[1].endswith(b"/next")


def test_the_sweep_answers_slow_heads_with_408_and_closes_idle_connections_silently() -> None:
    limits = ServerLimits(header_timeout=5, keep_alive_timeout=20)
    loop = FakeLoop()
    slow, slow_transport, registry = make_protocol(App(), limits=limits, loop=loop)
    idle = type(slow)(App(), registry, limits)
    idle_transport = type(slow_transport)()
    idle.connection_made(idle_transport)
    streaming = type(slow)(App(), registry, limits)
    streaming_transport = type(slow_transport)()
    streaming.connection_made(streaming_transport)
    streaming.data_received(get("/stream"))
    slow.data_received(b"GET / HTTP/1.1\r\nHost")

    loop.now += 4.9
    registry.sweep(loop.now)
    assert slow_transport.writes == [] and not idle_transport.closed

    loop.now += 0.2
    registry.sweep(loop.now)
    assert slow_transport.writes[0].startswith(b"HTTP/1.1 408 ") and slow_transport.eof_written
    assert not idle_transport.closed

    loop.now += 15
    registry.sweep(loop.now)
    assert idle_transport.closed and idle_transport.writes == []
    assert not streaming_transport.closed  # streams are never timed out by the server

    slow.data_received(b": more\r\n\r\n")  # lingering: read and dropped
    assert len(slow_transport.writes) == 1


def test_the_sweep_walks_no_open_stream_and_takes_a_connection_back_when_its_stream_ends() -> None:
    limits = ServerLimits(keep_alive_timeout=20)
    loop = FakeLoop()
    app = App()
    first, first_transport, registry = make_protocol(app, limits=limits, loop=loop)
    others = [type(first)(app, registry, limits) for _ in range(99)]
    transports = [type(first_transport)() for _ in others]
    for conn, transport in zip(others, transports, strict=True):
        conn.connection_made(transport)
    for conn in [first, *others]:
        conn.data_received(get("/stream"))
    assert len(registry) == 100 and app.opened == 100
    assert registry.deadlines.watched == set()  # a hundred idle tabs: the sweep walks nothing

    app.sinks[0].close()  # the first stream ends; its connection waits for a next request
    assert registry.deadlines.watched == {first}
    loop.now += 21
    registry.sweep(loop.now)
    assert first_transport.closed and not any(t.closed for t in transports)
    first.connection_lost(None)  # as the transport calls it once closed
    assert registry.deadlines.watched == set() and len(registry) == 99


def test_pipelined_requests_wait_for_an_async_answer_and_reading_pauses_when_the_queue_is_full() -> None:
    async def scenario() -> tuple[Any, Any, App]:
        app = App()
        app.release = asyncio.Event()
        limits = ServerLimits(max_pipelined=2)
        protocol, transport, _ = make_protocol(app, limits=limits, loop=asyncio.get_running_loop())
        protocol.data_received(get("/async") + get("/b"))
        assert transport.writes == [] and not transport.reading_paused
        protocol.data_received(get("/c"))
        assert transport.reading_paused  # two queued behind the one in flight
        app.release.set()
        for _ in range(5):
            await asyncio.sleep(0)
        return protocol, transport, app

    _, transport, app = uvloop.run(scenario())
    assert [w.rsplit(b"\r\n\r\n", 1)[1] for w in transport.writes] == [b"async /async", b"/b", b"/c"]
    assert not transport.reading_paused
    assert [r.path for r in app.seen] == ["/async", "/b", "/c"]


def test_no_response_is_written_while_the_peer_is_not_reading() -> None:
    protocol, transport, _ = make_protocol(App())
    protocol.data_received(get("/a"))
    protocol.pause_writing()
    assert transport.reading_paused
    protocol.data_received(get("/b"))  # already in flight from the kernel: parsed, kept
    assert len(transport.writes) == 1
    protocol.resume_writing()
    assert len(transport.writes) == 2 and transport.writes[1].endswith(b"/b")
    assert not transport.reading_paused


def test_eof_after_a_request_still_gets_the_async_answer() -> None:
    async def scenario() -> Any:
        app = App()
        app.release = asyncio.Event()
        protocol, transport, _ = make_protocol(app, loop=asyncio.get_running_loop())
        protocol.data_received(get("/async"))
        assert protocol.eof_received() is True  # keep the write side open
        app.release.set()
        for _ in range(5):
            await asyncio.sleep(0)
        return transport

    transport = uvloop.run(scenario())
    assert transport.writes[0].endswith(b"async /async") and transport.closed


def test_shutdown_closes_idle_connections_and_lets_busy_ones_finish_with_close() -> None:
    async def scenario() -> tuple[Any, Any]:
        app = App()
        app.release = asyncio.Event()
        loop = asyncio.get_running_loop()
        idle, idle_transport, registry = make_protocol(app, loop=loop)
        busy = type(idle)(app, registry, ServerLimits())
        busy_transport = type(idle_transport)()
        busy.connection_made(busy_transport)
        busy.data_received(get("/async"))
        registry.shutdown()
        assert idle_transport.closed and not busy_transport.closed
        app.release.set()
        for _ in range(5):
            await asyncio.sleep(0)
        return idle_transport, busy_transport

    idle_transport, busy_transport = uvloop.run(scenario())
    assert idle_transport.writes == []
    assert b"connection: close\r\n" in busy_transport.writes[0] and busy_transport.closed


def test_expect_100_continue_behind_a_pending_answer_waits_its_turn() -> None:
    async def scenario() -> Any:
        app = App()
        app.release = asyncio.Event()
        protocol, transport, _ = make_protocol(app, loop=asyncio.get_running_loop())
        protocol.data_received(
            get("/async") + b"POST /e HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nExpect: 100-continue\r\n\r\n"
        )
        assert transport.writes == []  # a 100 now would be read as the answer to /async
        app.release.set()
        for _ in range(5):
            await asyncio.sleep(0)
        protocol.data_received(b"ok")
        return transport

    transport = uvloop.run(scenario())
    assert transport.writes[0].endswith(b"async /async")
    assert transport.writes[1] == b"HTTP/1.1 100 Continue\r\n\r\n"
    assert transport.writes[2].endswith(b"/e")


@pytest.mark.parametrize(
    "raw",
    [
        b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n",
    ],
)
def test_smuggling_attempts_are_refused_without_reaching_the_app(raw: bytes) -> None:
    app = App()
    protocol, transport, _ = make_protocol(app)
    protocol.data_received(raw)
    assert app.seen == []
    assert transport.writes[0].startswith(b"HTTP/1.1 400 ")
