"""The nats-server that ``pyvia run --workers 2`` starts lets in only the app's workers.

Its clients log in with a password derived from the app secret, kept out of every command line
and log; the server listens on loopback. Even with the password, what the workers publish names
sessions by their hashes, never by the ids their cookies carry.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
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


async def refused(url: str) -> str:
    try:
        nc = await nats.connect(url, allow_reconnect=False, max_reconnect_attempts=0, connect_timeout=2)
    except Exception as exc:  # nats-py raises its own Error for an authorization violation
        return str(exc)
    await nc.close()
    return ""


def test_a_local_process_without_the_password_cannot_connect(cluster: tuple[Cluster, int]) -> None:
    running, port = cluster
    password = nats_password(SECRET.encode())
    for pid in [*running.nats_pids(), *running.workers()]:
        assert password not in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    assert "Authorization Violation" in asyncio.run(refused(f"nats://127.0.0.1:{port}"))
    assert "Authorization Violation" in asyncio.run(refused(f"nats://pyvia:guess@127.0.0.1:{port}"))
    assert asyncio.run(refused(f"nats://pyvia:{password}@127.0.0.1:{port}")) == ""  # the workers' way in


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
        rotated = await asyncio.to_thread(post_action, "127.0.0.1", running.port, "rotate", {"via_ctx": tab.ctx},
                                          tab.cookie)
        assert rotated.status == 200
        await asyncio.sleep(0.5)
        await nc.close()
        return tab.cookie.split("=", 1)[1] + " " + rotated.header("set-cookie").split(";", 1)[0].split("=", 1)[1]

    old, new = asyncio.run(listen_while_rotating()).split()
    assert old != new
    rotations = [m for m in messages if m.startswith(b"pyvia.rotated ")]
    assert rotations, [m[:60] for m in messages]
    assert not [m for m in messages if old.encode() in m or new.encode() in m]
