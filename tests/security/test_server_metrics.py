"""Attacks on the native server move the right ``pyvia_server_*`` counter of ``/metrics``, and the
same requests without the attack move none (a real App, real sockets, the Prometheus text parsed)."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest

from pyvia import App
from pyvia.http import Request, StreamResponse, StreamSink
from pyvia.ops import metrics as ops_metrics
from pyvia.server import connection
from pyvia.server.http import ServerLimits
from tests.helpers import RawClient, get, running_server
from tests.ops.promtext import parse
from tests.security.servers import Client
from tests.security.test_limits import trickle

SSE = [("content-type", "text/event-stream"), ("cache-control", "no-cache")]


def holding_app() -> App:
    app = App()

    @app.route("GET", "/hold")
    def hold(request: Request) -> StreamResponse:
        def opened(sink: StreamSink) -> None:
            sink.write(b": open\n\n")

        return StreamResponse(SSE, opened, lambda: None)

    return app


@pytest.fixture
def app() -> Iterator[App]:
    yield holding_app()


def scrape(address: tuple[str, int]) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    with RawClient(*address) as client:
        client.send(get("/metrics"))
        response = client.read_response()
    assert response.status == 200
    return parse(response.body.decode())[1]


def server_counts(address: tuple[str, int]) -> dict[str, float]:
    """Every ``pyvia_server_*`` sample, as ``name{label=value}`` -> value."""
    out = {}
    for (name, labels), value in scrape(address).items():
        if name.startswith("pyvia_server_"):
            label = ",".join(f"{k}={v}" for k, v in sorted(labels))
            out[f"{name}{{{label}}}" if label else name] = value
    return out


def moved(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """The counters (``_total``) that changed, and by how much."""
    return {k: after[k] - before.get(k, 0) for k in after if "_total" in k and after[k] != before.get(k, 0)}


def test_the_label_sets_are_the_servers() -> None:
    assert ops_metrics.UNAVAILABLE_REASONS == connection.UNAVAILABLE_REASONS
    assert ops_metrics.TIMEOUT_PHASES == connection.TIMEOUT_PHASES
    assert tuple(str(s) for s in connection.REFUSAL_STATUSES) == ops_metrics.REFUSAL_STATUSES


def test_slow_headers_move_the_header_timeout_and_a_prompt_request_moves_nothing(app: App) -> None:
    limits = ServerLimits(header_timeout=1.0, sweep_interval=0.1)
    with running_server(app, limits=limits) as address:
        before = server_counts(address)
        with RawClient(*address) as c:  # control
            c.send(get("/nothing-here"))
            assert c.read_response().status == 404
        assert moved(before, server_counts(address)) == {"pyvia_server_connections_accepted_total": 2}
        before = server_counts(address)
        with RawClient(*address) as c:
            answer, _ = trickle(c, b"GET / HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 50, every=0.3, limit=6.0)
        assert answer.startswith(b"HTTP/1.1 408 ")
        assert moved(before, server_counts(address)) == {
            "pyvia_server_connections_accepted_total": 2,  # the attacker's and the scrape's
            "pyvia_server_timeouts_total{phase=header}": 1,
        }


def test_a_slow_body_and_an_idle_connection_move_their_phases(app: App) -> None:
    limits = ServerLimits(body_timeout=0.5, keep_alive_timeout=0.5, sweep_interval=0.1)
    with running_server(app, limits=limits) as address:
        before = server_counts(address)
        with RawClient(*address) as c:
            c.send(b"POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nab")
            assert c.read_all().startswith(b"HTTP/1.1 408 ")
        with RawClient(*address) as c:  # connects, says nothing
            assert c.is_closed_by_peer(timeout=3.0)
        changed = moved(before, server_counts(address))
    assert changed["pyvia_server_timeouts_total{phase=body}"] == 1
    assert changed["pyvia_server_timeouts_total{phase=idle}"] >= 1  # the scrape's own connection may idle too
    assert "pyvia_server_timeouts_total{phase=header}" not in changed


def test_too_many_streams_from_one_address_move_the_streams_per_ip_sheds(app: App) -> None:
    limits = ServerLimits(per_ip_exempt=(), max_streams_per_ip=2)
    with running_server(app, limits=limits) as address:
        before = server_counts(address)
        held = [Client(*address, source="127.0.0.2") for _ in range(3)]
        try:
            statuses = []
            for c in held:
                c.send(get("/hold"))
                statuses.append(c.read_head().status)
            other = Client(*address, source="127.0.0.3")  # control: another address still gets a stream
            other.send(get("/hold"))
            assert other.read_head().status == 200
            after = server_counts(address)
            other.close()
        finally:
            for c in held:
                c.close()
    assert statuses == [200, 200, 503]
    assert moved(before, after)["pyvia_server_unavailable_total{reason=streams_per_ip}"] == 1
    assert after["pyvia_server_streams_open"] == 3
    assert after["pyvia_server_capacity{cap=max_streams_per_ip}"] == 2
    assert not any("reason=streams}" in k or "reason=connections" in k for k in moved(before, after))


def test_too_many_connections_from_one_address_move_the_connections_per_ip_sheds(app: App) -> None:
    limits = ServerLimits(per_ip_exempt=(), max_connections_per_ip=3)
    with running_server(app, limits=limits) as address:
        before = server_counts(address)
        held = [Client(*address, source="127.0.0.4") for _ in range(3)]
        try:
            time.sleep(0.2)  # let the server accept them
            with Client(*address, source="127.0.0.4") as extra:
                assert extra.read_response().status == 503
            after = server_counts(address)
        finally:
            for c in held:
                c.close()
    assert moved(before, after)["pyvia_server_unavailable_total{reason=connections_per_ip}"] == 1
    assert after["pyvia_server_connections_open"] >= 4  # three held and the scrape


SMUGGLING = {
    "Content-Length and Transfer-Encoding": b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n"
    b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\n",
    "two Content-Length": b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 40\r\n\r\nhello",
    "Transfer-Encoding over HTTP/1.0": b"POST / HTTP/1.0\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    "Transfer-Encoding with a second coding": b"POST / HTTP/1.1\r\nHost: x\r\n"
    b"Transfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n",
}


@pytest.mark.parametrize("attack", list(SMUGGLING))
def test_a_smuggling_attempt_over_raw_sockets_moves_the_smuggling_counter(app: App, attack: str) -> None:
    with running_server(app) as address:
        before = server_counts(address)
        with RawClient(*address) as c:  # control: the same body, framed once
            c.send(b"POST /nothing HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello")
            assert c.read_response().status == 404
        with RawClient(*address) as c:
            c.send(SMUGGLING[attack])
            answer = c.read_all()
        changed = moved(before, server_counts(address))
    assert answer.startswith(b"HTTP/1.1 400 ") and answer.count(b"HTTP/1.1") == 1
    assert changed == {
        "pyvia_server_connections_accepted_total": 3,
        "pyvia_server_refused_requests_total{status=400}": 1,
        "pyvia_server_smuggling_refused_total": 1,
    }


def test_malformed_and_oversized_requests_move_their_status_but_not_smuggling(app: App) -> None:
    limits = ServerLimits(max_header_count=5, max_body=100, max_request_line=64)
    with running_server(app, limits=limits) as address:
        before = server_counts(address)
        for request in (
            b"GET / HTTP/1.1\r\nHost: x\r\nBad Header: 1\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: x\r\n" + b"".join(b"H%d: v\r\n" % i for i in range(6)) + b"\r\n",
            b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 101\r\n\r\n",
            get("/" + "a" * 80),
            b"GET / HTTP/2.0\r\nHost: x\r\n\r\n",
        ):
            with RawClient(*address) as c:
                c.send(request)
                c.read_all()
        changed = moved(before, server_counts(address))
    assert changed["pyvia_server_refused_requests_total{status=431}"] == 1
    assert changed["pyvia_server_refused_requests_total{status=413}"] == 1
    assert changed["pyvia_server_refused_requests_total{status=414}"] == 1
    assert changed["pyvia_server_refused_requests_total{status=400}"] >= 1  # the space in a name, maybe the version
    assert "pyvia_server_smuggling_refused_total" not in changed


def test_a_host_outside_allowed_hosts_moves_the_host_counter(app: App) -> None:
    limits = ServerLimits(allowed_hosts=("shop.example",))
    with running_server(app, limits=limits) as address:

        def ask(host: str) -> int:
            with RawClient(*address) as c:
                c.send(f"GET /metrics HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
                return c.read_response().status

        def counts() -> dict[str, float]:
            with RawClient(*address) as c:
                c.send(b"GET /metrics HTTP/1.1\r\nHost: shop.example\r\n\r\n")
                samples = parse(c.read_response().body.decode())[1]
            return {n: v for (n, labels), v in samples.items() if n == "pyvia_server_host_refused_total"}

        before = counts()
        assert ask("shop.example:443") == 200
        assert ask("evil.example") == 400
        assert counts()["pyvia_server_host_refused_total"] - before["pyvia_server_host_refused_total"] == 1


def test_a_peer_that_stops_reading_moves_the_send_timeout() -> None:
    app = App()

    @app.route("GET", "/big")
    def big(request: Request) -> object:
        from pyvia.http import Response

        return Response(200, [("content-type", "application/octet-stream")], b"x" * (8 << 20))

    limits = ServerLimits(keep_alive_timeout=0.5, sweep_interval=0.1)
    with running_server(app, limits=limits) as address:
        before = server_counts(address)
        sock = socket.create_connection(address)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.sendall(b"GET /big HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        time.sleep(2.0)  # read nothing: the server's buffer never drains
        changed = moved(before, server_counts(address))
        sock.close()
    assert changed.get("pyvia_server_timeouts_total{phase=send}") == 1
