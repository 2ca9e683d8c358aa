"""The capacity pieces without a socket: ServerLimits validation, the host and peer policies, the
derived caps, and the registry's O(1) accounting driven through HttpProtocol on FakeTransports."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest

from pyvia.http import Request, Response, StreamResponse, StreamSink
from pyvia.server import http as wire
from pyvia.server.connection import _QUEUE_SAMPLE, ConnectionRegistry, HttpProtocol
from pyvia.server.http import HostPolicy, PeerExemption, ServerLimits, derive_max_connections, derive_max_streams
from pyvia.server.runner import effective_caps
from tests.helpers import FakeLoop, FakeTransport, get


class App:
    def __init__(self) -> None:
        self.sinks: list[StreamSink] = []
        self.closed = 0
        self.handled = 0

    def handle(self, request: Request) -> Any:
        self.handled += 1
        if request.path == "/stream":
            return StreamResponse([("content-type", "text/event-stream")], self.sinks.append, self._closed)
        if request.path == "/async":
            return self._later()
        return Response(200, [("content-type", "text/plain")], b"ok")

    async def _later(self) -> Response:
        await asyncio.sleep(0)
        return Response(200, [], b"later")

    def _closed(self) -> None:
        self.closed += 1

    async def startup(self) -> None:
        pass

    async def shutdown(self, budget: float) -> None:
        pass


def connect(app: Any, registry: ConnectionRegistry, ip: str) -> tuple[HttpProtocol, FakeTransport]:
    protocol = HttpProtocol(app, registry, registry.limits)
    transport = FakeTransport(peer=(ip, 40000))
    protocol.connection_made(transport)
    return protocol, transport


# --- ServerLimits -----------------------------------------------------------------------------------


def test_defaults_are_valid_and_documented() -> None:
    limits = ServerLimits()
    assert limits.max_connections is None and limits.max_streams is None
    assert limits.max_connections_per_ip is None and limits.max_streams_per_ip is None
    assert limits.per_ip_exempt == ("127.0.0.0/8", "::1")
    assert limits.allowed_hosts is None and limits.shed_after == 0.18 and limits.stream_send_buffer == 128 * 1024
    assert "Capacity defaults and why" in (ServerLimits.__doc__ or "")


@pytest.mark.parametrize(
    "bad",
    [
        {"max_connections": 0},
        {"max_streams_per_ip": -1},
        {"max_in_flight": 0},
        {"shed_after": 0.0},
        {"min_body_rate": 0},
        {"retry_after": 0},
        {"per_ip_exempt": ("not-an-ip",)},
        {"per_ip_exempt": "127.0.0.1"},
        {"allowed_hosts": ("exa mple.com",)},
        {"allowed_hosts": ("a.*.com",)},
        {"allowed_hosts": ("example.com:80",)},
        {"max_connections_per_ip": True},
    ],
)
def test_invalid_limits_are_refused(bad: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        ServerLimits(**bad)


def test_lists_are_taken_as_tuples_and_none_turns_optional_caps_off() -> None:
    limits = ServerLimits(allowed_hosts=["a.com"], per_ip_exempt=[], shed_after=None)  # type: ignore[arg-type]
    assert limits.allowed_hosts == ("a.com",) and limits.per_ip_exempt == () and limits.shed_after is None


def test_derived_caps_keep_headroom_below_the_fd_limit() -> None:
    assert derive_max_connections(20_000) == 18_000  # 10,000 local tabs fit
    assert derive_max_connections(1024) == 922
    assert derive_max_connections(100) == 68  # at least 32 kept
    assert derive_max_connections(10) == 1
    assert derive_max_connections(-1) > 900_000  # RLIM_INFINITY
    assert derive_max_streams(18_000) == 16_200
    assert effective_caps(ServerLimits(), 20_000) == (18_000, 16_200, 4_500, 4_050)
    assert effective_caps(ServerLimits(max_connections=100, max_streams=500), 20_000) == (100, 100, 25, 25)
    assert effective_caps(ServerLimits(max_connections=50_000), 1024) == (922, 830, 230, 207)
    assert effective_caps(ServerLimits(max_connections_per_ip=7, max_streams_per_ip=3), 1024)[2:] == (7, 3)


# --- host and peer policies ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "ok"),
    [
        ("example.com", True),
        ("EXAMPLE.com.", True),
        ("example.com:8443", True),
        ("a.example.com", True),
        ("a.b.example.com:1", True),
        ("example.com.evil.net", False),
        ("evilexample.com", False),
        ("evil.com", False),
        ("", False),
        ("example.com:x", False),
        ("user@example.com", False),
        ("example.com/x", False),
        ("a b", False),
    ],
)
def test_allowed_hosts_match_names_and_subdomains(value: str, ok: bool) -> None:
    assert HostPolicy(("example.com", "*.example.com"))(value) is ok


def test_without_allowed_hosts_any_valid_host_passes_and_invalid_ones_do_not() -> None:
    policy = HostPolicy(None)
    for good in ("localhost", "localhost:3000", "[::1]:3000", "127.0.0.1", "my_host", ""):
        assert policy(good), good
    for bad in ("a/b", "a@b", "a b", "[zz]", "a\\b", "x:80:80"):
        assert not policy(bad), bad
    assert HostPolicy(("*",))("anything.example")


def test_peer_exemption_covers_networks_mapped_addresses_and_nothing_else() -> None:
    exempt = PeerExemption(("127.0.0.0/8", "::1", "10.1.0.0/16"))
    assert exempt("127.0.0.1") and exempt("127.9.9.9") and exempt("::1") and exempt("::ffff:127.0.0.1")
    assert exempt("10.1.2.3") and not exempt("10.2.0.1") and not exempt("192.0.2.1") and not exempt("")
    assert not PeerExemption(())("127.0.0.1")


# --- registry accounting ------------------------------------------------------------------------------


def test_per_ip_connection_cap_refuses_with_503_and_frees_on_close() -> None:
    registry = ConnectionRegistry(FakeLoop(), limits=ServerLimits(max_connections_per_ip=2, per_ip_exempt=()))  # type: ignore[arg-type]
    app = App()
    a1, _ = connect(app, registry, "192.0.2.1")
    a2, _ = connect(app, registry, "192.0.2.1")
    refused, refused_t = connect(app, registry, "192.0.2.1")
    other, other_t = connect(app, registry, "192.0.2.2")
    assert refused_t.output.startswith(b"HTTP/1.1 503 ") and b"retry-after: 1\r\n" in refused_t.output
    assert b"connection: close" in refused_t.output and refused_t.eof_written
    refused.data_received(get("/"))  # what a refused client sends is dropped
    assert app.handled == 0
    other.data_received(get("/"))
    assert other_t.output.startswith(b"HTTP/1.1 200 ")  # another address is served
    assert registry.connections == 3 and registry.by_ip == {"192.0.2.1": 2, "192.0.2.2": 1}
    assert registry.refused_connections == 1 and registry.lingering_refusals == 1
    refused.connection_lost(None)
    a1.connection_lost(None)
    assert registry.by_ip == {"192.0.2.1": 1, "192.0.2.2": 1} and registry.lingering_refusals == 0
    again, again_t = connect(app, registry, "192.0.2.1")
    assert not again_t.output  # admitted: the slot freed by a1
    for conn in (a2, other, again):
        conn.connection_lost(None)
    assert registry.connections == 0 and registry.by_ip == {} and len(registry) == 0


def test_exempt_peers_are_not_counted_per_ip_but_count_in_the_total() -> None:
    limits = ServerLimits(max_connections=3, max_connections_per_ip=1)
    registry = ConnectionRegistry(FakeLoop(), limits=limits)  # type: ignore[arg-type]
    conns = [connect(App(), registry, "127.0.0.1") for _ in range(3)]
    assert all(not t.output for _, t in conns) and registry.by_ip == {}
    _, fourth = connect(App(), registry, "127.0.0.2")
    assert fourth.output.startswith(b"HTTP/1.1 503 ")  # the process-wide cap applies to everyone


def test_stream_caps_refuse_with_503_and_call_closed() -> None:
    limits = ServerLimits(max_streams=3, max_streams_per_ip=2, per_ip_exempt=())
    registry = ConnectionRegistry(FakeLoop(), limits=limits)  # type: ignore[arg-type]
    app = App()
    opened = []
    for ip in ("192.0.2.1", "192.0.2.1", "192.0.2.1", "192.0.2.2", "192.0.2.3"):
        conn, transport = connect(app, registry, ip)
        conn.data_received(get("/stream"))
        opened.append((conn, transport))
    statuses = [t.output[9:12] for _, t in opened]
    assert statuses == [b"200", b"200", b"503", b"200", b"503"]
    assert app.closed == 2 and len(app.sinks) == 3  # refused streams were never opened, but closed
    assert all(t.closed for _, t in opened[2::2])
    assert registry.streams == 3 and registry.streams_by_ip == {"192.0.2.1": 2, "192.0.2.2": 1}
    app.sinks[0].close()  # the core ends a stream: its slot is free at once
    assert registry.streams == 2 and registry.streams_by_ip == {"192.0.2.1": 1, "192.0.2.2": 1}
    opened[3][0].connection_lost(None)  # a peer goes away
    assert registry.streams == 1 and registry.streams_by_ip == {"192.0.2.1": 1}
    conn, transport = connect(app, registry, "192.0.2.1")
    conn.data_received(get("/stream"))
    assert transport.output.startswith(b"HTTP/1.1 200 ")
    for c, _ in opened:
        c.connection_lost(None)
    conn.connection_lost(None)
    assert registry.streams == 0 and registry.streams_by_ip == {} and registry.connections == 0
    assert registry.refused_streams == 2


def test_a_head_request_for_a_stream_takes_no_stream_slot() -> None:
    registry = ConnectionRegistry(FakeLoop(), limits=ServerLimits(max_streams=1))  # type: ignore[arg-type]
    conn, transport = connect(App(), registry, "192.0.2.1")
    conn.data_received(b"HEAD /stream HTTP/1.1\r\nHost: a\r\n\r\n")
    assert transport.output.startswith(b"HTTP/1.1 200 ") and registry.streams == 0


def test_shedding_answers_503_without_the_app_and_keeps_the_connection() -> None:
    registry = ConnectionRegistry(FakeLoop(), limits=ServerLimits())  # type: ignore[arg-type]
    app = App()
    conn, transport = connect(app, registry, "192.0.2.1")
    registry.shedding = True
    conn.data_received(get("/") + get("/_health") + b"HEAD / HTTP/1.1\r\nHost: a\r\n\r\n")
    first, health, head = transport.writes
    assert first.startswith(b"HTTP/1.1 503 ") and b"retry-after: 1\r\n" in first and b"connection" not in first
    assert health.startswith(b"HTTP/1.1 200 ")  # probes are never shed
    assert head.startswith(b"HTTP/1.1 503 ") and head.endswith(b"\r\n\r\n")  # HEAD: no body
    assert app.handled == 1 and registry.shed_requests == 2 and not transport.closed
    registry.shedding = False
    conn.data_received(get("/"))
    assert transport.writes[-1].startswith(b"HTTP/1.1 200 ")


def test_probe_sheds_only_while_the_loop_stays_late() -> None:
    registry = ConnectionRegistry(FakeLoop(), limits=ServerLimits(shed_after=0.5))  # type: ignore[arg-type]
    registry.loop_probe.due = 10.0
    registry.loop_probe.probe(10.2)
    assert not registry.shedding and registry.lag == pytest.approx(0.2)
    registry.loop_probe.due = 20.0
    registry.loop_probe.probe(20.7)  # one late probe: a pause (a GC pass), not overload
    assert not registry.shedding
    registry.loop_probe.probe(registry.loop_probe.due + 0.01)
    assert not registry.shedding
    registry.loop_probe.probe(registry.loop_probe.due + 0.8)
    registry.loop_probe.probe(registry.loop_probe.due + 0.9)  # late twice, but by less than twice shed_after
    assert not registry.shedding
    registry.loop_probe.probe(registry.loop_probe.due + 1.1)
    registry.loop_probe.probe(registry.loop_probe.due + 1.2)  # late by twice shed_after, twice in a row
    assert registry.shedding and registry.lagging
    registry.loop_probe.probe(registry.loop_probe.due + 0.01)
    assert not registry.shedding


def test_in_flight_cap_sheds_until_a_task_finishes() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        registry = ConnectionRegistry(loop, limits=ServerLimits(max_in_flight=2))
        app = App()
        conns = [connect(app, registry, "192.0.2.1") for _ in range(3)]
        for conn, _ in conns:
            conn.data_received(get("/async"))
        assert registry.in_flight == 2 and registry.shedding
        assert conns[2][1].output.startswith(b"HTTP/1.1 503 ")
        await asyncio.sleep(0.01)
        assert registry.in_flight == 0 and not registry.shedding
        assert all(t.output.endswith(b"later") for _, t in conns[:2])
        conns[2][0].data_received(get("/async"))
        await asyncio.sleep(0.01)
        assert conns[2][1].writes[-1].endswith(b"later")

    asyncio.run(main())


def test_a_closed_connection_whose_peer_does_not_read_is_aborted() -> None:
    registry = ConnectionRegistry(FakeLoop(), limits=ServerLimits(keep_alive_timeout=5.0))  # type: ignore[arg-type]
    conn, transport = connect(App(), registry, "192.0.2.1")
    transport.buffer_size = 1 << 20  # the response is still in the transport
    conn.data_received(get("/", extra="Connection: close\r\n"))
    assert transport.closed and not transport.aborted and conn.deadline == pytest.approx(1005.0)
    registry.sweep(1006.0)
    assert transport.aborted


def test_refusals_past_the_linger_budget_close_at_once() -> None:
    registry = ConnectionRegistry(FakeLoop(), limits=ServerLimits(max_connections=1))  # type: ignore[arg-type]
    connect(App(), registry, "192.0.2.1")
    registry.lingering_refusals = 256
    _, transport = connect(App(), registry, "192.0.2.2")
    assert transport.output.startswith(b"HTTP/1.1 503 ") and transport.closed and not transport.eof_written


def test_stats_report_what_is_held() -> None:
    registry = ConnectionRegistry(FakeLoop(), limits=ServerLimits(per_ip_exempt=()), max_connections=10)  # type: ignore[arg-type]
    _, transport = connect(App(), registry, "192.0.2.1")
    transport.buffer_size = 123
    stats = registry.stats()
    assert stats["connections"] == 1 and stats["max_connections"] == 10 and stats["addresses"] == 1
    assert stats["buffered_bytes"] == 123 and stats["shedding"] == 0


def test_service_unavailable_is_a_well_formed_response() -> None:
    data = wire.service_unavailable(7, connection=wire.CONNECTION_CLOSE)
    assert data.startswith(b"HTTP/1.1 503 Service Unavailable\r\n") and b"retry-after: 7\r\n" in data
    assert data.endswith(b"\r\n\r\nService Unavailable")


class _InfoSocket:
    """A socket whose TCP_INFO says its last bytes arrived ``waited_ms`` ago."""

    def __init__(self, waited_ms: int) -> None:
        self.waited_ms = waited_ms
        self.calls = 0

    def getsockopt(self, level: int, option: int, size: int) -> bytes:
        self.calls += 1
        return bytes(52) + self.waited_ms.to_bytes(4, "little") + bytes(size - 56)

    def setsockopt(self, *args: object) -> None:
        pass


def test_the_backlog_is_overloaded_only_when_a_whole_window_waited_too_long() -> None:
    # shed_after 0.5: overloaded once a window's least wait is over 0.25 s; then what waited over a
    # quarter of it, 0.125 s, is refused; back to normal once a window saw a wait of 0.125 s or less.
    registry = ConnectionRegistry(FakeLoop(), limits=ServerLimits(shed_after=0.5))  # type: ignore[arg-type]
    registry.loop_probe.probe(0.0)  # opens the first window, until 0.5
    clock = [0.0]

    def advance(to: float) -> None:  # the probe runs on time (every 25 ms): the loop itself is not late
        while clock[0] < to - 1e-9:
            clock[0] = min(to, clock[0] + 0.025)
            registry.loop_probe.probe(clock[0])
        assert not registry.busy

    def accept(waited_ms: int) -> bool:
        return registry.late_accept(_InfoSocket(waited_ms)) >= 0

    def sampled(*waits: int) -> list[int]:  # each wait for a whole sampling period
        return [ms for ms in waits for _ in range(_QUEUE_SAMPLE)]

    # A pause leaves a backlog that drains by itself: old and young waits in one window.
    assert not any(accept(ms) for ms in sampled(900, 800, 700, 400, 100, 10, 5, 1))
    advance(0.6)
    assert not registry.queue_late and registry.shed_requests == 0
    # A few connections that waited through a cold start are not a queue…
    assert not any(accept(ms) for ms in sampled(700, 800))
    advance(1.2)
    assert not registry.queue_late
    # …a standing queue is: every sample of a window (four at least) waited past half the target.
    assert not any(accept(ms) for ms in sampled(700, 350, 800, 600))
    advance(1.7)
    assert registry.queue_late
    probe = _InfoSocket(900)
    assert registry.late_accept(probe) >= 0 and probe.calls == 1  # every accept is measured now…
    assert accept(300)  # …and each one that waited too long is refused
    assert not any(accept(ms) for ms in [120, 60])  # younger ones are served: waits stay under it
    assert registry.shed_requests == 0  # counted when the request is answered (a health probe is not shed)
    advance(2.3)
    assert not registry.queue_late  # the window saw a wait of under a quarter of the target: drained
    assert not accept(300)  # not overloaded: served, however long it waited
    off = ConnectionRegistry(FakeLoop(), limits=ServerLimits(shed_after=None))  # type: ignore[arg-type]
    off.queue_late = True
    assert off.late_accept(_InfoSocket(10_000)) < 0


def test_requests_on_open_connections_do_not_hide_a_standing_listen_queue() -> None:
    # The overload run: actions on keep-alive connections were read at once while new visitors
    # waited seconds in the listen queue; their waits in one window kept its least wait near 0.
    registry = ConnectionRegistry(FakeLoop(), limits=ServerLimits(shed_after=0.5))  # type: ignore[arg-type]
    registry.loop_probe.probe(0.0)
    now = 0.0
    for _ in range(_QUEUE_SAMPLE * 6):
        registry.late_request(_InfoSocket(1))  # an action read as soon as it came
        registry.late_accept(_InfoSocket(700))  # a new visitor that waited 0.7 s to be accepted
    while now < 0.6:
        now += 0.025
        registry.loop_probe.probe(now)
    assert registry.queue_late
    assert registry.late_accept(_InfoSocket(700)) == pytest.approx(0.7)  # refused at once now
    assert registry.late_request(_InfoSocket(1)) < 0  # a young request is still served


def test_a_late_accept_is_answered_503_and_the_request_never_reaches_the_app() -> None:
    registry = ConnectionRegistry(FakeLoop(), limits=ServerLimits(shed_after=0.5))  # type: ignore[arg-type]
    registry.queue_late = True
    app = App()
    protocol = HttpProtocol(app, registry, registry.limits)
    transport = FakeTransport()
    transport.socket = _InfoSocket(2000)  # type: ignore[assignment]
    protocol.connection_made(transport)
    protocol.data_received(get("/"))
    assert transport.output.startswith(b"HTTP/1.1 503 ") and b"retry-after: 1" in transport.output
    assert app.handled == 0 and transport.eof_written
    protocol.connection_lost(None)
    assert registry.connections == 0 and registry.lingering_refusals == 0


def test_long_loop_turns_in_a_row_shed_requests_that_waited_too_long_and_not_first_requests() -> None:
    # shed_after 0.5: probes more than 0.125 s late for a whole 0.5 s, behind turns that carried
    # many requests, make the server busy; a request on an open connection that waited over
    # 0.125 s is then answered 503; one that did not is served.
    loop = FakeLoop()
    registry = ConnectionRegistry(loop, limits=ServerLimits(shed_after=0.5))  # type: ignore[arg-type]
    registry.loop_probe.probe(loop.now)  # the first probe sets when the next one is due
    loop.now += 0.025
    registry.loop_probe.probe(loop.now)  # on time
    app = App()
    protocol = HttpProtocol(app, registry, registry.limits)
    transport = FakeTransport()
    sock = _InfoSocket(0)
    transport.socket = sock  # type: ignore[assignment]
    protocol.connection_made(transport)
    protocol.data_received(get("/"))  # the first request is the accept's to judge
    loop.now += 0.6
    registry.dispatched += 20
    registry.loop_probe.probe(loop.now)  # one long turn: a pause (a collection), nothing changes
    assert not registry.busy
    for _ in range(3):
        loop.now += 0.3
        registry.dispatched += 2
        registry.loop_probe.probe(loop.now)  # long turns of a request or two: a slow handler, a cold start
    assert not registry.busy
    for _ in range(2):
        loop.now += 0.3
        registry.dispatched += 20
        registry.loop_probe.probe(loop.now)  # long turns full of requests for a whole shed_after: overloaded
    assert registry.busy
    sock.waited_ms = 400
    protocol.data_received(get("/"))
    sock.waited_ms = 100
    protocol.data_received(get("/"))
    statuses = [int(code) for code in re.findall(rb"HTTP/1.1 (\d{3}) ", transport.output)]
    assert statuses == [200, 503, 200] and app.handled == 2
    assert registry.unavailable["queued"] == 1 and b"retry-after: 1" in transport.output
    for _ in range(25):  # on time again: busy lasts twice shed_after after the last long pair
        loop.now += 0.05
        registry.loop_probe.probe(loop.now)
    assert not registry.busy


def test_a_long_turn_after_another_makes_the_server_busy_before_the_next_probe() -> None:
    loop = FakeLoop()
    registry = ConnectionRegistry(loop, limits=ServerLimits(shed_after=0.5))  # type: ignore[arg-type]
    registry.loop_probe.probe(loop.now)  # the first probe sets when the next one is due
    loop.now += 0.025
    registry.loop_probe.probe(loop.now)  # on time
    for _ in range(2):
        loop.now += 0.175
        registry.dispatched += 20
        registry.loop_probe.probe(
            loop.now
        )  # two long turns full of requests, 0.3 s together: not yet a whole shed_after
    assert not registry.busy
    assert registry.late_request(_InfoSocket(900)) == pytest.approx(0.9)  # over shed_after, in a third one
    assert registry.busy
    for _ in range(_QUEUE_SAMPLE):
        assert registry.late_request(_InfoSocket(900)) == pytest.approx(0.9)  # every request is measured now


def test_an_overloaded_server_drains_its_listen_queue_refusing_at_once_what_waited_too_long() -> None:
    import socket
    import time

    loop = asyncio.new_event_loop()
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    listener.setblocking(False)
    clients = []
    handed: list[socket.socket] = []
    registry = ConnectionRegistry(loop, limits=ServerLimits(shed_after=0.2))
    try:
        registry.listen(listener, handed.append)
        for _ in range(3):
            c = socket.create_connection(listener.getsockname())
            c.sendall(get("/"))
            clients.append(c)
        time.sleep(0.15)  # these three waited 150 ms in the queue
        silent = socket.create_connection(listener.getsockname())  # connected, its request not sent yet
        clients.append(silent)
        time.sleep(0.01)
        registry.busy = True  # overloaded: what waits in the queue with its request sent is refused
        assert registry.drain_backlog() == 3
        assert len(handed) == 1  # the one that sent nothing yet is served
        for c in clients[:3]:
            c.settimeout(2)
            answer = c.recv(4096)
            assert answer.startswith(b"HTTP/1.1 503 ") and b"retry-after: 1" in answer
            assert b"connection: close" in answer
        assert registry.unavailable["backlog"] == 3 and registry.shed_requests == 3
        # Not overloaded: a queue that waits is taken over and served, nothing refused.
        registry.busy = False
        late = socket.create_connection(listener.getsockname())
        clients.append(late)
        time.sleep(0.1)
        assert registry.drain_backlog() == 0 and len(handed) == 2
        registry.stop_listening()
        assert registry.drain_backlog() == 0
    finally:
        registry.stop()  # ends the refused connections' lingering close
        for c in clients:
            c.close()
        for conn in handed:
            conn.close()
        listener.close()
        loop.close()


class _TimerLoop(FakeLoop):
    """A clock that records the delay of each timer armed."""

    def __init__(self) -> None:
        super().__init__()
        self.delays: list[float] = []

    def call_later(self, delay: float, callback: object) -> _Handle:
        self.delays.append(delay)
        return _Handle()


class _Handle:
    cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


def test_an_idle_server_probes_its_loop_once_a_second_and_fast_again_once_requests_come() -> None:
    # Issue 22 item 4: idle CPU. The loop probe ran every shed_after / 20 (80 times a second at the
    # defaults), a wake-up and a failed accept each, with nothing connected.
    loop = _TimerLoop()
    registry = ConnectionRegistry(loop, limits=ServerLimits(shed_after=0.25))  # type: ignore[arg-type]
    fast, quiet = 0.25 / 20, 1.0

    def next_probe() -> float:
        """The period of the next probe: it is due at the next tick of that period's grid."""
        loop.now += loop.delays[-1]
        registry.loop_probe.run()
        return period_of(loop.delays[-1])

    def period_of(delay: float) -> float:
        due = loop.now + delay
        for period in (fast, quiet):
            if period / 2 <= delay <= 1.5 * period and abs(due / period - round(due / period)) < 1e-6:
                return period
        raise AssertionError(f"a probe in {delay} s, at {due}, is on neither grid")

    registry.start()
    assert period_of(loop.delays[-1]) == fast
    assert next_probe() == quiet  # nothing came: the next one waits shed_after
    assert next_probe() == quiet and registry.lag == 0.0  # on time by its own due time
    registry.dispatched += 1  # a request
    assert next_probe() == fast
    assert next_probe() == quiet
    registry.accepted += 1  # a connection
    assert next_probe() == fast
    registry.in_flight = 1  # an answer still owed
    assert next_probe() == fast
    registry.in_flight = 0
    registry.busy = True
    registry.overload.busy_until = loop.now + 10
    assert next_probe() == fast
    registry.busy = False
    registry.overload.busy_until = 0.0
    assert next_probe() == quiet and registry.idle
    waiting = registry.loop_probe.handle
    assert isinstance(waiting, _Handle)
    registry.wake()  # a connection or a request came: the idle wait is cut short
    assert waiting.cancelled and not registry.idle and period_of(loop.delays[-1]) == fast
