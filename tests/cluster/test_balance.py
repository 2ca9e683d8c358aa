"""``pyvia run --workers 2`` spreads new connections evenly over its workers, and a dead or stuck
worker makes nobody wait (:mod:`pyvia.server.balance`). Which worker answered is read from the
test app's ``/pid``."""

from __future__ import annotations

import os
import signal
import ssl
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster.test_supervisor import Cluster
from tests.helpers import RawClient, get


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    cluster = Cluster("tests.cluster.apps:app")
    try:
        yield cluster
    finally:
        cluster.stop()
        for pid in list(cluster.workers()):
            os.kill(pid, signal.SIGKILL)


def burst(port: int, count: int, tls: ssl.SSLContext | None = None) -> list[RawClient]:
    """``count`` connections made at once (all queued in the listen backlog before any is served),
    then one request on each; the connections stay open."""
    clients = [RawClient("127.0.0.1", port) for _ in range(count)]
    if tls is not None:
        for client in clients:
            client.sock = tls.wrap_socket(client.sock, server_hostname="localhost")
    for client in clients:
        client.send(get("/pid"))
    return clients


def answered_by(clients: list[RawClient]) -> list[int]:
    pids = []
    for client in clients:
        response = client.read_response()
        assert response.status == 200
        pids.append(int(response.body))
    return pids


def close(clients: list[RawClient]) -> None:
    for client in clients:
        client.close()


def test_64_connections_opened_at_once_are_split_evenly(cluster: Cluster) -> None:
    workers = set(cluster.workers())
    for _ in range(3):  # a shared socket alone gave 46/18 and 64/0 here
        clients = burst(cluster.port, 64)
        try:
            held = Counter(answered_by(clients))
        finally:
            close(clients)
        assert set(held) == workers
        assert all(28 <= count <= 36 for count in held.values()), held
        time.sleep(0.2)  # the closed connections leave both workers


def sequential(port: int, count: int, deadline: float) -> None:
    """``count`` connections opened one after another and held open; each must be answered
    before ``deadline`` (monotonic)."""
    clients: list[RawClient] = []
    try:
        for _ in range(count):
            client = RawClient("127.0.0.1", port, timeout=max(0.1, deadline - time.monotonic()))
            clients.append(client)
            client.send(get("/pid"))
            assert client.read_response().status == 200
        assert time.monotonic() < deadline
    finally:
        close(clients)


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGSTOP])
def test_a_dead_or_stuck_worker_does_not_stall_the_other(cluster: Cluster, how: signal.Signals) -> None:
    # the victim holds as many connections as the survivor, so the survivor, once it accepts
    # more, would wait for the victim if a dead or stopped worker still counted
    clients = burst(cluster.port, 20)
    try:
        held = Counter(answered_by(clients))
        victim = min(held, key=lambda pid: (held[pid], pid))
        os.kill(victim, how)
        try:
            sequential(cluster.port, 20, time.monotonic() + 5.0)  # one heartbeat timeout is 1 s
        finally:
            if how == signal.SIGSTOP:
                os.kill(victim, signal.SIGCONT)
    finally:
        close(clients)


def test_tls_connections_are_spread_too(certificate: tuple[str, str], tmp_path: Path) -> None:
    cert, key = certificate
    cluster = Cluster("tests.cluster.apps:app", 2, "--cert", cert, "--key", key)
    try:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        clients = burst(cluster.port, 16, tls=context)
        try:
            held = Counter(answered_by(clients))
        finally:
            close(clients)
        assert set(held) == set(cluster.workers())
        assert all(6 <= count <= 10 for count in held.values()), held
    finally:
        cluster.stop()
