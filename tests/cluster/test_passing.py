"""Passing a browser's connection to the worker holding its tab (pyvia.cluster.passing).

Real sockets throughout: a TCP connection really changes process, and the nodes are real
``pyvia run`` processes sharing a real engine, with the direct channel of one machine on.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httptools
import pytest

from pyvia.cluster import ENGINE_URL_ENV
from pyvia.cluster.passing import MAX_PREFACE, ConnectionPost, request_bytes
from pyvia.http import Headers, Request
from tests.cluster.conftest import Backend, run
from tests.cluster.test_shared_state import HOST, Tab, _hammer, forwarded_by, get_text, pid_of, start_nodes
from tests.cluster.test_supervisor import children
from tests.helpers import RawClient
from tests.processes import ServerProcess


def test_request_bytes_rebuild_what_the_owner_parses() -> None:
    request = Request(
        "POST",
        "/_action/say hi",
        "x=1&y=%20",
        Headers([("Host", "h:1"), ("Transfer-Encoding", "chunked"), ("Cookie", "a=b"), ("Expect", "100-continue")]),
        b'{"via_ctx":"c"}',
        "10.0.0.1",
    )
    data = request_bytes(request)
    assert data is not None
    seen: dict[str, object] = {"headers": []}

    class Sink:
        def on_url(self, url: bytes) -> None:
            seen["url"] = url

        def on_header(self, name: bytes, value: bytes) -> None:
            seen["headers"].append((name.decode().lower(), value.decode()))  # type: ignore[union-attr]

        def on_body(self, body: bytes) -> None:
            seen["body"] = body

        def on_message_complete(self) -> None:
            seen["done"] = True

    parser = httptools.HttpRequestParser(Sink())
    parser.feed_data(data)
    assert seen["done"] and parser.get_method() == b"POST"
    assert seen["url"] == b"/_action/say%20hi?x=1&y=%20"
    assert seen["body"] == b'{"via_ctx":"c"}'
    # the body is whole now: its framing is given anew, and a continue was already settled
    assert seen["headers"] == [("host", "h:1"), ("cookie", "a=b"), ("content-length", "15")]
    assert request_bytes(Request("POST", "/", body=b"x" * (MAX_PREFACE + 1))) is None


def _connected_pair(listener: socket.socket) -> tuple[socket.socket, socket.socket]:
    client = socket.create_connection(listener.getsockname())
    server_side, _ = listener.accept()
    return client, server_side


def test_a_connection_moves_once_the_receiver_took_it(tmp_path: Path) -> None:
    async def scenario() -> None:
        got: asyncio.Queue[tuple[socket.socket, bytes]] = asyncio.Queue()
        receiver = ConnectionPost(str(tmp_path / "a.pass"), lambda sock, preface: got.put_nowait((sock, preface)))
        sender = ConnectionPost(str(tmp_path / "b.pass"), None)
        receiver.start()
        sender.start()
        assert os.stat(receiver.path).st_mode & 0o777 == 0o600
        listener = socket.create_server((HOST, 0))
        client, server_side = _connected_pair(listener)
        answer = sender.send(receiver.path, server_side.fileno(), b"GET / HTTP/1.1\r\n\r\n")
        assert answer is not None and await asyncio.wait_for(answer, 5) is True
        server_side.close()  # the sender lets go: the connection lives on in the receiver's socket
        moved, preface = await asyncio.wait_for(got.get(), 5)
        assert preface == b"GET / HTTP/1.1\r\n\r\n"
        moved.sendall(b"from the new owner")
        assert client.recv(100) == b"from the new owner"
        moved.close()
        assert client.recv(100) == b""  # closed by its last holder
        client.close()

        # a worker that takes no connections (not served over plain HTTP) refuses: the sender keeps it
        client, server_side = _connected_pair(listener)
        answer = receiver.send(sender.path, server_side.fileno(), b"x")
        assert answer is not None and await asyncio.wait_for(answer, 5) is False
        server_side.sendall(b"still here")
        assert client.recv(100) == b"still here"

        receiver.stop()
        assert not os.path.exists(receiver.path)
        assert sender.send(receiver.path, server_side.fileno(), b"z") is None  # gone: nothing sent

        # a receiver killed before it answered: its channel closes, and the sender keeps the connection
        dying = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        dying.bind(str(tmp_path / "c.pass"))
        dying.listen()
        answer = sender.send(str(tmp_path / "c.pass"), server_side.fileno(), b"w")
        assert answer is not None and not answer.done()
        dying.close()
        assert await asyncio.wait_for(answer, 5) is False
        server_side.sendall(b"kept")
        assert client.recv(100) == b"kept"
        sender.stop()
        for sock in (server_side, client, listener):
            sock.close()

    run(scenario())


def test_many_offers_at_once_are_all_answered(tmp_path: Path) -> None:
    """More offers than a datagram queue holds (net.unix.max_dgram_qlen is 10 by default)."""

    async def scenario() -> None:
        adopted: list[socket.socket] = []
        receiver = ConnectionPost(str(tmp_path / "a.pass"), lambda sock, preface: adopted.append(sock))
        sender = ConnectionPost(str(tmp_path / "b.pass"), None)
        receiver.start()
        sender.start()
        listener = socket.create_server((HOST, 0), backlog=64)
        pairs = [_connected_pair(listener) for _ in range(50)]
        answers = [sender.send(receiver.path, server_side.fileno(), b"x") for _, server_side in pairs]
        assert all(answer is not None for answer in answers)
        assert await asyncio.wait_for(asyncio.gather(*answers), 5) == [True] * 50  # type: ignore[arg-type]
        assert len(adopted) == 50
        receiver.stop()
        sender.stop()
        for sock in [*adopted, *(s for pair in pairs for s in pair), listener]:
            sock.close()

    run(scenario())


def test_a_busier_receiver_refuses_a_balanced_offer(tmp_path: Path) -> None:
    """A stream is offered balanced: a receiver holding more connections than the sender (by more
    than one) refuses it, and the sender takes the tab over instead."""

    async def scenario() -> None:
        adopted: list[socket.socket] = []
        loads = {"receiver": 10, "sender": 5}
        receiver = ConnectionPost(
            str(tmp_path / "a.pass"), lambda sock, preface: adopted.append(sock), lambda: loads["receiver"]
        )
        sender = ConnectionPost(str(tmp_path / "b.pass"), None, lambda: loads["sender"])
        receiver.start()
        sender.start()
        listener = socket.create_server((HOST, 0))
        pairs = [_connected_pair(listener) for _ in range(3)]

        async def offer(fd: int, balanced: bool) -> bool:
            answer = sender.send(receiver.path, fd, b"x", balanced=balanced)
            assert answer is not None
            return await asyncio.wait_for(answer, 5)

        assert await offer(pairs[0][1].fileno(), True) is False  # 10 > 5 + 1
        assert await offer(pairs[1][1].fileno(), False) is True  # an action's connection: taken anyway
        loads["sender"] = 9
        assert await offer(pairs[2][1].fileno(), True) is True  # 10 <= 9 + 1
        assert len(adopted) == 2
        receiver.stop()
        sender.stop()
        for sock in [*adopted, *(s for pair in pairs for s in pair), listener]:
            sock.close()

    run(scenario())


def test_a_stopping_receiver_refuses_what_is_still_queued(tmp_path: Path) -> None:
    async def scenario() -> None:
        adopted: list[bytes] = []
        receiver = ConnectionPost(str(tmp_path / "a.pass"), lambda sock, preface: adopted.append(preface))
        sender = ConnectionPost(str(tmp_path / "b.pass"), None)
        receiver.start()
        sender.start()
        listener = socket.create_server((HOST, 0))
        client, server_side = _connected_pair(listener)
        answer = sender.send(receiver.path, server_side.fileno(), b"queued")
        receiver.stop()  # before its loop read the offer
        assert answer is not None and await asyncio.wait_for(answer, 5) is False
        assert adopted == []
        sender.stop()
        for sock in (server_side, client, listener):
            sock.close()

    run(scenario())


@pytest.fixture
def local_nodes(server_backend: Backend, request: pytest.FixtureRequest) -> Iterator[list[ServerProcess]]:
    """Two nodes of one machine: the direct channel between them is on, so connections can move.
    ``@pytest.mark.parametrize("local_nodes", [{...}], indirect=True)`` adds to their environment."""
    env = {
        ENGINE_URL_ENV: server_backend.url,
        "PYVIA_APP__ENGINE_PREFIX": "t" + secrets.token_hex(6),
        **getattr(request, "param", {}),
    }
    nodes: list[ServerProcess] = start_nodes(env)
    try:
        yield nodes
    finally:
        for node in nodes:
            if node.proc is not None and node.proc.poll() is None:
                node.stop()


@pytest.fixture
def two_local_nodes(local_nodes: list[ServerProcess]) -> tuple[int, int]:
    return local_nodes[0].port, local_nodes[1].port


def _action(client: RawClient, port: int, tab: Tab, name: str, extra: str = "") -> int:
    body = json.dumps(tab.payload()).encode()
    client.send(
        f"POST /_action/{name} HTTP/1.1\r\nHost: {HOST}:{port}\r\nOrigin: http://{HOST}:{port}\r\n"
        f"Cookie: {tab.cookie}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        f"{extra}\r\n".encode()
        + body
    )
    return client.read_response().status


def _pid(client: RawClient) -> int:
    client.send(f"GET /pid HTTP/1.1\r\nHost: {HOST}\r\n\r\n".encode())
    return int(client.read_response().body)


def _passed(port: int, expected: int | None = None) -> int:
    """How many requests this node passed on with their connection (its /metrics), waiting a
    moment for ``expected``: a passed request is counted once the answer is read (within 5 ms)."""
    deadline = time.monotonic() + 2
    while True:
        count = _count_passed(port)
        if expected is None or count == expected or time.monotonic() > deadline:
            return count
        time.sleep(0.01)


def _count_passed(port: int) -> int:
    total = 0
    for line in get_text(port, "/metrics").splitlines():
        if line.startswith("pyvia_requests_total{") and 'kind="passed"' in line:
            total += int(float(line.rsplit(" ", 1)[1]))
    return total


def test_an_action_landing_on_another_node_moves_its_connection_to_the_owner(two_local_nodes) -> None:
    a, b = two_local_nodes
    pid_a, pid_b = pid_of(a), pid_of(b)
    tab_a, tab_b = Tab(a), Tab(b)
    tab_a.connect(a)
    tab_b.connect(b)
    tab_a.wait_for(r'"_disconnected":false')
    with RawClient(HOST, b) as client:  # one keep-alive connection, as a browser keeps it
        assert _pid(client) == pid_b
        assert _action(client, b, tab_a, "note") == 200  # landed on b, answered by a
        tab_a.wait_for(rf'"_pid":{pid_a},"_notes":1\b')
        assert _pid(client) == pid_a, "the connection now belongs to the tab's worker"
        assert _action(client, b, tab_a, "note") == 200  # local there: nothing passed
        tab_a.wait_for(r'"_notes":2')
        # the other tab: its action is forwarded; a connection moves once (tabs of one browser
        # share its connections, which would otherwise move back and forth)
        assert _action(client, b, tab_b, "note") == 200
        tab_b.wait_for(rf'"_pid":{pid_b},"_notes":1\b')
        assert _pid(client) == pid_a
    assert (_passed(a), _passed(b, 1)) == (0, 1)
    tab_a.close()
    tab_b.close()


def test_a_proxy_connection_is_forwarded_not_passed(two_local_nodes) -> None:
    """A proxy's connection carries the requests of many browsers: it stays where it is."""
    a, b = two_local_nodes
    pid_a, pid_b = pid_of(a), pid_of(b)
    tab = Tab(a)
    tab.connect(a)
    tab.wait_for(r'"_disconnected":false')
    with RawClient(HOST, b) as client:
        assert _action(client, b, tab, "note", "X-Forwarded-For: 203.0.113.9\r\n") == 200
        tab.wait_for(rf'"_pid":{pid_a},"_notes":1\b')
        assert _pid(client) == pid_b
    assert _passed(b) == 0
    tab.close()


def test_a_proxy_connection_follows_its_tabs_and_revives_one_whose_worker_died(local_nodes) -> None:
    """The actions after a tab's first on a proxy's connection go to its known owner at once;
    when that worker dies, the next one revives the tab where it landed."""
    a, b = local_nodes[0].port, local_nodes[1].port
    pid_a, pid_b = pid_of(a), pid_of(b)
    tab = Tab(a)
    tab.connect(a)
    tab.wait_for(r'"_disconnected":false')
    proxied = "X-Forwarded-For: 203.0.113.9\r\n"
    with RawClient(HOST, b) as client:
        assert [_action(client, b, tab, "note", proxied) for _ in range(5)] == [200] * 5
        tab.wait_for(rf'"_pid":{pid_a},"_notes":5\b')
        supervisor = local_nodes[0].proc
        assert supervisor is not None
        for pid in children(supervisor.pid):  # the worker dies before its supervisor can stop it
            os.kill(pid, signal.SIGKILL)
        supervisor.send_signal(signal.SIGKILL)
        supervisor.wait(10)
        tab.close()  # the page sees its stream end: its actions carry its snapshot
        assert _action(client, b, tab, "note", proxied) == 200
        assert _action(client, b, tab, "note", proxied) == 200  # held by b now
        assert _pid(client) == pid_b
    tab.connect(b)
    tab.wait_for(rf'"_pid":{pid_b},"_notes":2\b')  # revived from the page's snapshot, without tab_state
    assert _passed(b) == 0
    tab.close()


@pytest.mark.parametrize(
    "local_nodes", [{"PYVIA_APP__ACTION_RATE": "0.01", "PYVIA_APP__ACTION_BURST": "4"}], indirect=True
)
def test_a_relayed_action_is_checked_and_counted_once_where_it_runs(local_nodes) -> None:
    """Behind a proxy, a tab's actions after its first go straight to its worker: the rate limit
    happens there, and each action takes one token, not one on each worker. A forged Origin is
    refused where it lands, before its body is read or relayed (issue 21's cheap checks first)."""
    a, b = local_nodes[0].port, local_nodes[1].port
    pid_a = pid_of(a)
    tab = Tab(a)
    tab.connect(a)
    tab.wait_for(r'"_disconnected":false')
    proxied = "X-Forwarded-For: 203.0.113.9\r\n"
    with RawClient(HOST, b) as client:
        assert _action(client, b, tab, "note", proxied) == 200  # the owner is found: later ones are relayed
        tab.wait_for(rf'"_pid":{pid_a},"_notes":1\b')
        foreign = proxied.replace("X-Forwarded-For", "Origin: https://evil.example\r\nX-Forwarded-For")
        body = json.dumps({"via_ctx": tab.ctx}).encode()
        client.send(
            f"POST /_action/note HTTP/1.1\r\nHost: {HOST}:{b}\r\nCookie: {tab.cookie}\r\n"
            f"Content-Type: application/json\r\n{foreign}Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        assert client.read_response().status == 403
        statuses = [_action(client, b, tab, "note", proxied) for _ in range(4)]
        assert statuses == [200, 200, 200, 429], "4 tokens: the first action and 3 more"
        assert _pid(client) == pid_of(b)
    assert forwarded_by(b) == {"unix": 5, "tcp": 0, "engine": 0}, "each action went on to a, but the forged one"
    assert forwarded_by(a) == {"unix": 0, "tcp": 0, "engine": 0}
    tab.wait_for(r'"_notes":4\b')
    assert '"_notes":5' not in tab.received.decode(errors="replace")
    tab.close()


@pytest.mark.parametrize("local_nodes", [{"PYVIA_APP__ACTION_TIMEOUT": "1.0"}], indirect=True)
def test_a_relayed_action_whose_worker_does_not_answer_in_time_is_answered_504(local_nodes) -> None:
    a, b = local_nodes[0].port, local_nodes[1].port
    tab = Tab(a)
    tab.connect(a)
    tab.wait_for(r'"_disconnected":false')
    proxied = "X-Forwarded-For: 203.0.113.9\r\n"
    with RawClient(HOST, b, timeout=10) as client:
        assert _action(client, b, tab, "note", proxied) == 200
        started = time.monotonic()
        assert _action(client, b, tab, "stall", proxied) == 504  # a's loop is held for 3 s
        assert 0.9 < time.monotonic() - started < 2.8
        time.sleep(max(0.0, started + 3.3 - time.monotonic()))  # a serves again
        assert _action(client, b, tab, "note", proxied) == 200  # the late answer was dropped: this is its own
    tab.wait_for(r'"_notes":2\b')
    tab.close()


def test_many_new_connections_landing_on_another_node_are_all_answered(two_local_nodes) -> None:
    a, b = two_local_nodes
    tab = Tab(a)
    tab.connect(a)
    tab.wait_for(r'"_disconnected":false')
    statuses = asyncio.run(_hammer(b, [tab], 300, 16))  # each on its own connection, passed to a
    assert statuses == [200] * 300
    tab.wait_for(r'"_route__count":300\b')
    assert _passed(b, 300) == 300
    tab.close()


def test_a_stream_opened_on_another_node_is_passed_to_the_tab_not_the_tab_to_it(two_local_nodes) -> None:
    a, b = two_local_nodes
    pid_a = pid_of(a)
    tab = Tab(a)  # the page rendered on a: a holds the tab
    tab.connect(b)  # its stream lands on b, which passes the connection to a (no takeover)
    tab.wait_for(r'"_disconnected":false')
    assert _passed(b, 1) == 1
    assert tab.act(a, "note") == 200  # local on a: the tab never moved
    tab.wait_for(rf'"_pid":{pid_a},"_notes":1\b')
    assert _passed(a) == 0
    tab.close()
