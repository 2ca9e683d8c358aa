"""The direct channel between workers and nodes, over a real unix socket and real TCP."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import os
import socket
import stat
import time
from pathlib import Path

import pytest

from pyvia.cluster import direct
from pyvia.cluster.direct import DirectClient, DirectServer, Unreachable, channel_key, socket_path
from tests.cluster.conftest import run

KEY = channel_key(b"the app secret", "app")


def handler(body: bytes) -> bytes | asyncio.Future[bytes]:
    if body == b"fail":
        raise ValueError("no")
    if body.startswith(b"later"):

        async def later() -> bytes:
            await asyncio.sleep(0.01)
            return body.upper()

        return asyncio.ensure_future(later())
    return body[::-1]


def test_requests_are_answered_in_any_order_and_failures_come_back(tmp_path: Path) -> None:
    async def scenario() -> None:
        server = DirectServer(str(tmp_path / "w.sock"), handler)
        await server.start()
        assert stat.S_IMODE(os.stat(str(server.address)).st_mode) == 0o600
        client = DirectClient(server.address)
        replies = await asyncio.gather(
            client.request(b"later-1", 2), client.request(b"abc", 2), client.request(b"x" * 200_000, 2)
        )
        assert replies == [b"LATER-1", b"cba", b"x" * 200_000]
        with pytest.raises(RuntimeError, match="ValueError"):
            await client.request(b"fail", 2)
        assert await client.request(b"ok", 2) == b"ko"  # the connection survives a failure
        await server.stop()
        await asyncio.sleep(0.05)
        with pytest.raises(ConnectionError):
            await client.request(b"gone", 2)
        client.close()

    run(scenario())


def test_a_request_left_unanswered_times_out_and_is_forgotten(tmp_path: Path) -> None:
    waiting: list[asyncio.Future[bytes]] = []

    def never(body: bytes) -> asyncio.Future[bytes]:
        waiting.append(asyncio.get_running_loop().create_future())
        return waiting[-1]

    async def scenario() -> None:
        server = DirectServer(str(tmp_path / "w.sock"), never)
        await server.start()
        client = DirectClient(server.address)
        try:
            started = time.monotonic()
            with pytest.raises(TimeoutError):
                await client.request(b"first", 0.3)
            assert 0.25 <= time.monotonic() - started < 3  # the loop's timers have 1 ms steps
            with pytest.raises(TimeoutError):
                await client.request(b"second", 0.3)
            assert client.pending == {} and len(waiting) == 2
        finally:  # a server left open would hang the loop's closing instead of showing the failure
            await server.stop()
            client.close()

    run(scenario())


def test_requests_sent_without_a_task_time_out_each_at_its_own_deadline(tmp_path: Path) -> None:
    """One timer serves all of a channel's requests: each still fails at its own deadline, and
    an answer that comes before it is delivered once."""
    waiting: list[asyncio.Future[bytes]] = []

    def later(body: bytes) -> asyncio.Future[bytes]:
        waiting.append(asyncio.get_running_loop().create_future())
        return waiting[-1]

    async def scenario() -> None:
        server = DirectServer(str(tmp_path / "w.sock"), later)
        await server.start()
        client = DirectClient(server.address)
        try:
            with pytest.raises(TimeoutError):
                await client.request(b"opens the connection", 0.05)
            loop = asyncio.get_running_loop()
            started = loop.time()
            got: dict[str, tuple[float, object]] = {}

            def keep(name: str) -> direct.Reply:
                return lambda result: got.setdefault(name, (loop.time() - started, result))

            assert client.send(b"a", 0.2, keep("short")) and client.send(b"b", 0.6, keep("long"))
            assert client.send(b"c", 0.6, keep("answered"))
            while len(waiting) < 4:
                await asyncio.sleep(0.01)
            waiting[3].set_result(b"done")  # the server answers the third one
            while len(got) < 3:
                await asyncio.sleep(0.01)
            assert got["answered"][1] == b"done" and got["answered"][0] < 0.2
            short, long = got["short"], got["long"]
            assert isinstance(short[1], TimeoutError) and isinstance(long[1], TimeoutError)
            assert 0.19 <= short[0] < 0.45 and 0.59 <= long[0] < 0.85, (short[0], long[0])
            assert client.pending == {}
        finally:
            await server.stop()
            client.close()

    run(scenario())


def test_a_socket_file_left_by_a_killed_worker_reads_as_gone(tmp_path: Path) -> None:
    import socket

    path = str(tmp_path / "dead.sock")
    dead = socket.socket(socket.AF_UNIX)
    dead.bind(path)  # a file nobody listens on, as a SIGKILL leaves it
    dead.close()

    async def scenario() -> None:
        with pytest.raises(ConnectionError):
            await DirectClient(path).request(b"x", 1)
        server = DirectServer(path, handler)  # a new worker may reuse the name: the old file goes
        await server.start()
        assert await DirectClient(path).request(b"ab", 1) == b"ba"
        await server.stop()

    run(scenario())


def test_the_socket_folder_is_private() -> None:
    path = Path(socket_path("app", "n1"))
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700 and path.parent.stat().st_uid == os.getuid()


def test_over_tcp_a_peer_that_proves_the_secret_is_served() -> None:
    async def scenario() -> None:
        server = DirectServer(("127.0.0.1", 0), handler, KEY)
        await server.start()
        host, port = server.address
        assert port != 0
        client = DirectClient((host, port), channel_key(b"the app secret", "app"))
        replies = await asyncio.gather(
            client.request(b"later-1", 2), client.request(b"abc", 2), client.request(b"x" * 200_000, 2)
        )
        assert replies == [b"LATER-1", b"cba", b"x" * 200_000]
        assert client._conn is not None
        sock = client._conn.transport.get_extra_info("socket")
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
        await server.stop()
        await asyncio.sleep(0.05)
        with pytest.raises(Unreachable):  # the node is gone: the caller asks the engine, which knows
            await client.request(b"gone", 2)
        client.close()

    run(scenario())


def test_over_tcp_a_wrong_secret_is_refused_once_then_not_tried_for_a_while(caplog: pytest.LogCaptureFixture) -> None:
    async def scenario() -> None:
        server = DirectServer(("127.0.0.1", 0), handler, KEY)
        await server.start()
        client = DirectClient(server.address, channel_key(b"another secret", "app"))
        with pytest.raises(Unreachable):
            await client.request(b"abc", 2)
        with pytest.raises(Unreachable):  # not tried again: no second connection, no second warning
            await client.request(b"abc", 2)
        other_app = DirectClient(server.address, channel_key(b"the app secret", "another-app"))
        with pytest.raises(Unreachable):
            await other_app.request(b"abc", 2)
        assert await DirectClient(server.address, KEY).request(b"abc", 2) == b"cba"
        await server.stop()

    with caplog.at_level(logging.WARNING, logger="pyvia.cluster"):
        run(scenario())
    refused = [r.getMessage() for r in caplog.records if r.getMessage().startswith("refused")]
    assert len(refused) == 2 and all(m.endswith("wrong secret") for m in refused), refused
    told = [r.getMessage() for r in caplog.records if r.getMessage().startswith("no direct channel")]
    assert len(told) == 2, told
    assert not any("the app secret" in r.getMessage() or KEY.hex() in r.getMessage() for r in caplog.records)


async def _raw_peer(address: object, sent: bytes) -> tuple[bytes, bool]:
    """What a raw TCP peer that sends ``sent`` receives before the server closes (and whether it did)."""
    host, port = address  # type: ignore[misc]
    reader, writer = await asyncio.open_connection(host, port)
    writer.write(sent)
    received = b""
    try:
        while chunk := await asyncio.wait_for(reader.read(65536), 3):
            received += chunk
    except ConnectionResetError:
        pass  # closed with bytes unread: the kernel resets the connection
    except TimeoutError:
        return received, False
    finally:
        writer.close()
    return received, True


@pytest.mark.parametrize(
    ("sent", "why"),
    [
        (b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", "not a pyvia direct channel"),
        (b"pyvia-d1" + b"n" * 16 + b"p" * 32, "wrong secret"),
        (b"pyvia-d1" + b"n" * 16 + b"p" * 33, "more bytes than a handshake"),
        (b"pyvia-d1" + b"n" * 16 + b"p" * 1_000_000, "more bytes than a handshake"),
        (b"pyvia-d1", "no handshake in time"),
    ],
)
def test_over_tcp_the_server_cuts_off_what_is_not_a_handshake(
    sent: bytes, why: str, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(direct, "HANDSHAKE_TIMEOUT", 0.3)

    async def scenario() -> None:
        server = DirectServer(("127.0.0.1", 0), handler, KEY)
        await server.start()
        try:
            received, closed = await _raw_peer(server.address, sent)
        finally:
            await server.stop()
        assert closed, "the server keeps the connection"
        assert len(received) <= 24 and b"pyvia-d1".startswith(received[:8]), "the server proves nothing to a stranger"

    with caplog.at_level(logging.WARNING, logger="pyvia.cluster"):
        run(scenario())
    assert [r.getMessage().rsplit(": ", 1)[1] for r in caplog.records] == [why]


def test_over_tcp_the_proof_is_an_hmac_of_both_nonces_under_the_derived_key() -> None:
    """A peer written from the module docstring alone gets in: the handshake is what it says."""

    async def scenario() -> None:
        server = DirectServer(("127.0.0.1", 0), handler, KEY)
        await server.start()
        reader, writer = await asyncio.open_connection(*server.address)
        mine = os.urandom(16)
        writer.write(b"pyvia-d1" + mine)
        hello = await reader.readexactly(24)
        theirs = hello[8:]
        writer.write(hmac.new(KEY, b"client" + mine + theirs, hashlib.sha256).digest())
        proof = await reader.readexactly(32)
        assert proof == hmac.new(KEY, b"server" + mine + theirs, hashlib.sha256).digest()
        body = b"abc"
        writer.write(len(body).to_bytes(4, "big") + (7).to_bytes(8, "big") + b"\0" + body)
        assert await reader.readexactly(13 + 3) == (3).to_bytes(4, "big") + (7).to_bytes(8, "big") + b"\0cba"
        writer.close()
        await server.stop()

    run(scenario())


def test_over_tcp_a_silent_or_foreign_listener_is_unreachable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(direct, "HANDSHAKE_TIMEOUT", 0.3)
    listener = socket.create_server(("127.0.0.1", 0))  # accepts (the kernel does) and never answers

    async def scenario() -> None:
        with pytest.raises(Unreachable):
            await DirectClient(listener.getsockname(), KEY).request(b"abc", 2)
        closed = socket.create_server(("127.0.0.1", 0))
        address = closed.getsockname()
        closed.close()
        with pytest.raises(Unreachable):  # nobody listens
            await DirectClient(address, KEY).request(b"abc", 2)

    try:
        run(scenario())
    finally:
        listener.close()


def test_a_tcp_server_needs_a_key() -> None:
    with pytest.raises(ValueError, match="needs a key"):
        DirectServer(("127.0.0.1", 0), handler)
