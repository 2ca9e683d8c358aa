"""The direct channel between the workers of one machine, over a real unix socket."""

from __future__ import annotations

import asyncio
import os
import stat
import time
from pathlib import Path

import pytest

from pyvia.cluster.direct import DirectClient, DirectServer, socket_path
from tests.cluster.conftest import run


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
        assert stat.S_IMODE(os.stat(server.path).st_mode) == 0o600
        client = DirectClient(server.path)
        replies = await asyncio.gather(client.request(b"later-1", 2), client.request(b"abc", 2),
                                       client.request(b"x" * 200_000, 2))
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
        client = DirectClient(server.path)
        started = time.monotonic()
        with pytest.raises(TimeoutError):
            await client.request(b"first", 0.3)
        assert 0.3 <= time.monotonic() - started < 2
        with pytest.raises(TimeoutError):
            await client.request(b"second", 0.3)
        assert client.pending == {} and len(waiting) == 2
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
