"""``pyvia run --workers 2 --worker-ports PORT``: each worker also serves its own port, so a proxy
that keeps a browser on one worker (Caddy's ``lb_policy cookie``) has nothing forwarded between
them. Which worker answered is read from the test app's ``/pid``."""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster.test_shared_state import Tab, pid_of
from tests.cluster.test_supervisor import ROOT, Cluster
from tests.helpers import RawClient, get


def free_ports(count: int) -> int:
    """The first of ``count`` consecutive free ports."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    for _ in range(200):
        # below the kernel's ephemeral range: the ports beside one there are the clients' of
        # every connection the other tests have open
        base = random.randrange(10_000, max(10_001, low - count))
        try:
            taken = []
            for port in range(base, base + count):
                sock = socket.socket()
                taken.append(sock)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server binds: a
                sock.bind(("127.0.0.1", port))  # port a finished test's connection left in TIME_WAIT is free
        except OSError:
            continue
        finally:
            for sock in taken:
                sock.close()
        return base
    raise RuntimeError("no consecutive free ports")


@pytest.fixture
def cluster() -> Iterator[tuple[Cluster, int]]:
    base = free_ports(2)
    cluster = Cluster("tests.cluster.shared_app:app", 2, "--worker-ports", str(base))
    try:
        yield cluster, base
    finally:
        cluster.stop()
        for pid in list(cluster.workers()):
            os.kill(pid, signal.SIGKILL)


def test_each_worker_serves_its_own_port_and_its_successor_the_same(cluster: tuple[Cluster, int]) -> None:
    cluster_, base = cluster
    first, second = pid_of(base), pid_of(base + 1)
    assert {first, second} == set(cluster_.workers()), "one worker behind each port"
    assert [pid_of(base) for _ in range(5)] == [first] * 5
    os.kill(first, signal.SIGKILL)
    # what arrives while the worker restarts waits in its port's backlog, then its successor answers
    with RawClient("127.0.0.1", base, timeout=15) as client:
        client.send(get("/pid"))
        successor = int(client.read_response().body)
    assert successor not in (first, second) and successor in cluster_.workers()
    assert pid_of(base + 1) == second


def test_a_tab_kept_on_one_worker_is_served_there_alone(cluster: tuple[Cluster, int]) -> None:
    _, base = cluster
    own = pid_of(base + 1)
    tab = Tab(base + 1)
    tab.connect(base + 1)
    tab.wait_for(r'"_disconnected":false')
    for _ in range(3):
        assert tab.act(base + 1, "note") == 200
    tab.wait_for(rf'"_pid":{own},"_notes":1\b')
    tab.wait_for(r'"_notes":3\b')
    tab.close()


def test_a_port_range_past_the_last_port_is_refused() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pyvia",
            "run",
            "tests.cluster.shared_app:app",
            "--workers",
            "2",
            "--worker-ports",
            "65535",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "--worker-ports 65535 leaves no room for 2 ports" in done.stderr
