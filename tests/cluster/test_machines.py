"""Nodes on two machines: the direct channel over TCP (``--cluster-address``).

Two real ``pyvia run`` nodes share one real NATS and serve the direct channel on TCP at
127.0.0.1. They stand for two machines: their unix socket is off (``cluster_direct=false``; a
TMPDIR of its own would not hide it, the other node still finds the file), so a forwarded
request goes over TCP or through the engine. Which one is read off NATS itself: a subscriber to
the forwarding subjects counts every request sent to a node through the engine.
"""

from __future__ import annotations

import asyncio
import re
import secrets
import signal
import threading
import time
from collections.abc import Coroutine, Iterator
from typing import Any, TypeVar

import pytest

from pyvia.cluster import ENGINE_URL_ENV, create_engine
from pyvia.cluster.direct import DirectClient, Unreachable, channel_key
from pyvia.cluster.link import DIRECTORY
from tests.cluster.conftest import Backend
from tests.cluster.test_shared_state import APP, Tab, forwarded_by, kill, pid_of, serve
from tests.cluster.test_supervisor import wait_until
from tests.cluster.test_worker_ports import free_ports
from tests.processes import ServerProcess, free_port

T = TypeVar("T")
SECRET = "browser-test-secret"  # ServerProcess's


class EngineWatch:
    """A client of the nodes' engine in a thread of its own: counts the requests on ``fwd.*`` (the
    forwarding subjects; not with ``forwards=False``) and reads or writes the directory."""

    def __init__(self, url: str, prefix: str, *, forwards: bool = True) -> None:
        self.prefix = prefix
        self.forwarded = 0
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.engine = create_engine(url, prefix=prefix)
        self.call(self.engine.connect())
        if forwards:  # interest on NATS: a request to a gone worker then gets no "no responders"
            self.call(self.engine.subscribe("fwd.*", self._seen))

    def _seen(self, subject: str, payload: bytes) -> None:
        self.forwarded += 1

    def call(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(10)

    def entry(self, ctx: str) -> str:
        value = self.value(ctx)
        assert value is not None
        return value

    def value(self, ctx: str) -> str | None:
        value, _ = self.call(self.engine.get(DIRECTORY, ctx))
        return None if value is None else value.decode()

    def close(self) -> None:
        if self.loop.is_closed():
            return
        self.call(self.engine.close())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


class Machines:
    def __init__(self, nodes: list[ServerProcess], watch: EngineWatch) -> None:
        self.nodes = nodes
        self.a, self.b = (node.port for node in nodes)
        self.watch = watch

    def tab_on_a(self) -> Tab:
        """A tab whose page and stream are node A's."""
        tab = Tab(self.a)
        tab.connect(self.a)
        tab.wait_for(r'"_disconnected":false')
        return tab


@pytest.fixture
def machines(nats_url: str) -> Iterator[Machines]:
    prefix = "t" + secrets.token_hex(6)
    env = {"PYVIA_APP__ENGINE_PREFIX": prefix, "PYVIA_APP__CLUSTER_DIRECT": "false", ENGINE_URL_ENV: ""}
    nodes = [
        ServerProcess(APP, free_port(), SECRET, extra=("--engine", nats_url, "--cluster-address", "127.0.0.1"), env=env)
        for _ in range(2)
    ]
    watch = EngineWatch(nats_url, prefix)
    try:
        serve(nodes)
        yield Machines(nodes, watch)
    finally:
        for node in nodes:
            if node.proc is not None and node.proc.poll() is None:
                node.stop()
        watch.close()


def test_an_action_sent_to_another_machine_goes_over_tcp_and_updates_the_tab(machines: Machines) -> None:
    a, b = machines.a, machines.b
    tab = machines.tab_on_a()
    _, tcp, path = machines.watch.entry(tab.ctx).split(" ", 2)
    assert re.fullmatch(r"127\.0\.0\.1:\d+", tcp) and path == "-"
    for i in range(1, 4):
        assert tab.act(b, "note") == 200
        tab.wait_for(rf'"_pid":{pid_of(a)},"_notes":{i}\b')
    assert machines.watch.forwarded == 0, "the actions went through the engine"
    assert forwarded_by(b) == {"unix": 0, "tcp": 3, "engine": 0}
    tab.close()


def test_a_stream_moving_to_another_machine_takes_its_tab_over_tcp(machines: Machines) -> None:
    a, b = machines.a, machines.b
    tab = machines.tab_on_a()
    assert tab.act(a, "note") == 200 and tab.act(a, "note") == 200
    tab.wait_for(r'"_notes":2')
    tab.connect(b)  # b takes the tab and its tab state from a
    tab.wait_for(r'"_disconnected":false')
    assert tab.act(a, "note") == 200  # a no longer holds it: forwarded to b
    tab.wait_for(rf'"_pid":{pid_of(b)},"_notes":3\b')
    assert machines.watch.forwarded == 0, "the takeover or the action went through the engine"
    tab.close()


def test_only_a_peer_that_knows_the_secret_is_served(machines: Machines) -> None:
    tab = Tab(machines.a)
    host, port = machines.watch.entry(tab.ctx).split(" ")[1].split(":")

    async def ask(secret: bytes) -> bytes:
        client = DirectClient((host, int(port)), channel_key(secret, machines.watch.prefix))
        try:
            return await client.request(b'{"op":"ping"}', 5)
        finally:
            client.close()

    with pytest.raises(Unreachable):
        asyncio.run(ask(b"not the secret"))
    assert asyncio.run(ask(SECRET.encode())) == b"{}"
    tab.connect(machines.a)
    assert tab.act(machines.b, "note") == 200  # the node serves on as before
    tab.wait_for(r'"_notes":1\b')


def test_an_action_whose_tcp_channel_is_refused_goes_through_the_engine(machines: Machines) -> None:
    a, b = machines.a, machines.b
    tab = machines.tab_on_a()
    # as if a firewall refused b: a's entry names a port where nothing listens
    node, _, path = machines.watch.entry(tab.ctx).split(" ", 2)
    refused = f"{node} 127.0.0.1:{free_port()} {path}"
    machines.watch.call(machines.watch.engine.put(DIRECTORY, tab.ctx, refused.encode()))
    assert tab.act(b, "note") == 200
    tab.wait_for(rf'"_pid":{pid_of(a)},"_notes":1\b')
    # the watch's own connection may get the forwarded request after the tab got its answer
    wait_until(lambda: machines.watch.forwarded >= 1, 5, "the first action seen on the engine")
    assert machines.watch.forwarded == 1
    assert tab.act(b, "note") == 200  # not tried again for a while: straight to the engine
    tab.wait_for(r'"_notes":2\b')
    wait_until(lambda: machines.watch.forwarded >= 2, 5, "the second action seen on the engine")
    assert machines.watch.forwarded == 2
    assert forwarded_by(b) == {"unix": 0, "tcp": 0, "engine": 2}
    tab.close()


def test_a_tab_whose_machine_died_is_revived_where_its_action_lands(machines: Machines) -> None:
    b = machines.b
    tab = machines.tab_on_a()
    assert tab.act(b, "note") == 200  # b's channel to a is open now
    tab.wait_for(r'"_notes":1\b')
    tab.close()
    machines.watch.close()  # a listener on fwd.* is interest: NATS would not say "no responders" for a
    kill(machines.nodes[0])
    assert tab.act(b, "note") == 200
    tab.connect(b)
    tab.wait_for(rf'"_pid":{pid_of(b)}')
    tab.close()


def test_a_killed_workers_directory_entries_are_swept_once_its_revival_window_is_over(
    server_backend: Backend,
) -> None:
    prefix = "t" + secrets.token_hex(6)
    env = {
        ENGINE_URL_ENV: server_backend.url,
        "PYVIA_APP__ENGINE_PREFIX": prefix,
        "PYVIA_APP__CLUSTER_DIRECT": "false",
        "PYVIA_APP__REVIVAL_WINDOW": "2",
    }
    nodes = [ServerProcess(APP, free_port(), env=env) for _ in range(2)]
    reader = EngineWatch(server_backend.url, prefix, forwards=False)
    try:
        serve(nodes)
        a, b = nodes[0].port, nodes[1].port
        on_a, on_b = Tab(a), Tab(b)
        on_a.connect(a)
        on_b.connect(b)
        on_b.wait_for(r'"_disconnected":false')
        assert reader.value(on_a.ctx) is not None and reader.value(on_b.ctx) is not None
        kill(nodes[0])
        killed = time.monotonic()
        while reader.value(on_a.ctx) is not None:
            assert time.monotonic() - killed < 40, "the killed worker's entry stayed"
            time.sleep(0.2)
        assert time.monotonic() - killed >= 2, "swept within the revival window"
        assert reader.value(on_b.ctx) is not None, "a live worker's entry is kept"
        on_b.close()
    finally:
        for node in nodes:
            if node.proc is not None and node.proc.poll() is None:
                node.stop()
        reader.close()


def _ping(port: int, prefix: str) -> bool:
    """Whether a node's worker answers on ``port`` over the TCP channel."""

    async def ask() -> bytes:
        client = DirectClient(("127.0.0.1", port), channel_key(SECRET.encode(), prefix))
        try:
            return await client.request(b'{"op":"ping"}', 5)
        finally:
            client.close()

    try:
        return asyncio.run(ask()) == b"{}"
    except ConnectionError:
        return False


def test_with_a_port_each_worker_serves_its_own_and_a_reload_takes_the_next_ones(nats_url: str) -> None:
    prefix = "t" + secrets.token_hex(6)
    port = free_port()
    base = free_ports(4)
    while port in range(base, base + 4):
        port = free_port()
    node = ServerProcess(
        APP,
        port,
        SECRET,
        env={"PYVIA_APP__ENGINE_PREFIX": prefix, ENGINE_URL_ENV: ""},
        extra=("--engine", nats_url, "--workers", "2", "--cluster-address", f"127.0.0.1:{base}"),
    )
    try:
        serve([node])
        deadline = time.monotonic() + 20
        while not (_ping(base, prefix) and _ping(base + 1, prefix)):  # worker 0 and worker 1
            assert time.monotonic() < deadline, "the workers do not serve their ports"
            time.sleep(0.1)
        assert node.proc is not None
        node.proc.send_signal(signal.SIGHUP)  # a reload: the new workers start while the old ones serve on
        while not (_ping(base + 2, prefix) and _ping(base + 3, prefix)):
            assert time.monotonic() < deadline + 20, "the new workers do not serve the next ports"
            time.sleep(0.1)
    finally:
        node.stop()
