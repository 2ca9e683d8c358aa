"""The nats-server that ``pyvia run --workers 2`` starts lets in only the app's workers.

Its clients log in with a password derived from the app secret, kept out of every command line
and log; the server listens on loopback. Even with the password, what the workers publish names
sessions by their hashes, never by the ids their cookies carry.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
from collections.abc import Iterator
from pathlib import Path

import nats
import nats.aio.msg
import pytest

from pyvia.cluster.nats_server import nats_password
from tests.cluster.test_shared_state import Tab, get
from tests.cluster.test_supervisor import Cluster, wait_until
from tests.server.test_app_over_http import post_action

SECRET = "engine-access-test-secret"


@pytest.fixture
def cluster() -> Iterator[tuple[Cluster, int]]:
    os.environ["PYVIA_SECRET"] = SECRET
    try:
        running = Cluster("tests.cluster.shared_app:app", 2)
    finally:
        del os.environ["PYVIA_SECRET"]
    try:
        found = re.search(r"started nats-server \(pid \d+\) for the workers at (\S+)", running.log())
        assert found, running.log()
        url = found.group(1)
        assert url.startswith("nats://pyvia:***@127.0.0.1:"), url  # the password is not logged
        wait_until(lambda: get(running.port, "/_ready").status == 200, 20, "workers ready")
        yield running, int(url.rsplit(":", 1)[1])
    finally:
        running.stop()
        for pid in list(running.workers()):
            os.kill(pid, signal.SIGKILL)


def refused(port: int, login: dict[str, str]) -> str:
    """What the server answers a client that logs in with ``login`` (NATS's own protocol): an
    ``-ERR`` line, or ``PONG`` when it let the client in."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        reader = sock.makefile("rb")
        assert reader.readline().startswith(b"INFO ")
        sock.sendall(
            b"CONNECT " + json.dumps({"verbose": False, "pedantic": False, **login}).encode() + b"\r\nPING\r\n"
        )
        answer = reader.readline().decode().strip()
        reader.close()
        return "" if answer == "PONG" else answer


def test_a_local_process_without_the_password_cannot_connect(cluster: tuple[Cluster, int]) -> None:
    running, port = cluster
    password = nats_password(SECRET.encode())
    for pid in [*running.nats_pids(), *running.workers()]:
        assert password not in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    assert "Authorization Violation" in refused(port, {})
    assert "Authorization Violation" in refused(port, {"user": "pyvia", "pass": "guess"})
    assert refused(port, {"user": "pyvia", "pass": password}) == ""  # the workers' way in


def test_a_new_session_id_never_travels_through_the_engine(cluster: tuple[Cluster, int]) -> None:
    running, port = cluster
    messages: list[bytes] = []

    async def listen_while_rotating() -> str:
        nc = await nats.connect(f"nats://pyvia:{nats_password(SECRET.encode())}@127.0.0.1:{port}")

        async def seen(msg: nats.aio.msg.Msg) -> None:
            messages.append(msg.subject.encode() + b" " + msg.data)

        await nc.subscribe(">", cb=seen)
        await nc.flush()
        tab = Tab(running.port)
        rotated = await asyncio.to_thread(
            post_action, "127.0.0.1", running.port, "rotate", {"via_ctx": tab.ctx}, tab.cookie
        )
        assert rotated.status == 200
        await asyncio.sleep(0.5)
        await nc.close()
        return tab.cookie.split("=", 1)[1] + " " + rotated.cookie("via_session_id").split("=", 1)[1]

    old, new = asyncio.run(listen_while_rotating()).split()
    assert old != new
    rotations = [m for m in messages if m.startswith(b"pyvia.rotated ")]
    assert rotations, [m[:60] for m in messages]
    assert not [m for m in messages if old.encode() in m or new.encode() in m]


@pytest.mark.parametrize("kind", ["nats", "redis"])
def test_an_external_engine_that_asks_for_a_password_takes_it_from_the_url(kind: str) -> None:
    from pyvia.cluster.nats_server import LocalNats
    from tests.cluster.servers import RedisServer

    server = LocalNats(password="s3cret-pass") if kind == "nats" else RedisServer(password="s3cret-pass")
    url = server.start()
    assert "s3cret-pass@" in url
    try:
        running = Cluster("tests.cluster.apps:app", 2, "--engine", url)
        try:
            wait_until(lambda: get(running.port, "/_health").status == 200, 20, "both workers on the engine")
            hits = [int(get(running.port, "/hit").body.split()[1]) for _ in range(3)]
            assert hits == sorted(hits) and len(set(hits)) == 3  # one counter in the engine
            assert "s3cret-pass" not in running.log() and ":***@127.0.0.1:" in running.log()
        finally:
            running.stop()
            for pid in list(running.workers()):
                os.kill(pid, signal.SIGKILL)
        if kind == "nats":
            assert "Authorization Violation" in refused(int(url.rsplit(":", 1)[1]), {"user": "pyvia", "pass": "wrong"})
    finally:
        server.close()
