"""Faults under ``pyvia run examples.shared_counter:app --workers 2`` while tabs watch and clicks
flow: a worker killed, the engine killed, a reload. Each runs on the engine the supervisor starts,
on an external NATS and on an external Redis (Debian's redis-server, append-only), each started
here. What must hold: every click answered 200 is in the count exactly once (none lost, none
counted twice), every tab shows the final count again without a reload, and a reload cuts no
answer. :mod:`tests.faults.load` says how each click is counted.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import secrets
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest

from pyvia.cluster import create_engine
from pyvia.cluster.nats_server import LocalNats
from tests.cluster.servers import RedisServer
from tests.cluster.test_shared_state import get
from tests.cluster.test_supervisor import Cluster, children, wait_until
from tests.cluster.test_worker_ports import free_ports
from tests.faults.load import Load, shown_count

APP = "examples.shared_counter:app"
ENGINES = ["supervisor", "nats", "redis"]


@dataclass
class Setup:
    cluster: Cluster
    ports: tuple[int, int]  # each worker's own port
    kill_engine: Callable[[], None]  # kill -9 of the engine; it is back (or restarted) once this returns
    engine_url: str = ""
    prefix: str = ""


@pytest.fixture(params=ENGINES)
def setup(request: pytest.FixtureRequest) -> Iterator[Setup]:
    engine = request.param
    external: LocalNats | RedisServer | None = None
    extra: list[str] = []
    if engine == "nats":
        external = LocalNats()
        extra = ["--engine", external.start()]
    elif engine == "redis":
        external = RedisServer(durable=True)
        extra = ["--engine", external.start()]
    base = free_ports(2)
    prefix = "f" + secrets.token_hex(6)
    # one client address clicks for ten tabs here: the per-address action rate would refuse most
    env = {"PYVIA_APP__ENGINE_PREFIX": prefix, "PYVIA_APP__ACTION_RATE": "100000", "PYVIA_APP__ACTION_BURST": "100000"}
    os.environ.update(env)
    try:
        cluster = Cluster(APP, 2, "--worker-ports", str(base), *extra)
    finally:
        for key in env:
            del os.environ[key]

    def kill_engine() -> None:
        if external is None:  # the supervisor's nats-server: it starts it again
            (pid,) = cluster.nats_pids()
            os.kill(pid, signal.SIGKILL)
            cluster.wait_for_log("nats-server started again", timeout=15)
            assert len(cluster.nats_pids()) == 1 and cluster.nats_pids()[0] != pid
            return
        assert external.proc is not None
        external.proc.kill()
        external.proc.wait()
        external.proc = None
        time.sleep(0.5)  # what an operator's restart takes at least
        external.start()  # the same port and data

    try:
        wait_until(lambda: all(get(port, "/_ready").status == 200 for port in (base, base + 1)), 20, "workers ready")
        yield Setup(cluster, (base, base + 1), kill_engine, extra[-1] if extra else "", prefix)
    finally:
        cluster.stop()
        for pid in list(children(cluster.proc.pid)):
            os.kill(pid, signal.SIGKILL)
        if external is not None:
            external.close()


def engines_healthy(ports: tuple[int, int]) -> bool:
    return all(get(port, "/_health").status == 200 for port in ports)


async def settled_count(ports: tuple[int, int], timeout: float = 15.0) -> int:
    """The count new visitors see once both workers show the same one for half a second."""
    deadline = time.monotonic() + timeout
    last: list[int] = []
    while True:
        shown = [await shown_count(port) for port in ports]
        if len(set(shown)) == 1 and shown == last:
            return shown[0]
        assert time.monotonic() < deadline, f"the workers never agreed: {shown}"
        last = shown
        await asyncio.sleep(0.5)


async def run_with(
    load: Load, setup: Setup, fault: Callable[[], None], recovered: Callable[[], bool]
) -> tuple[Load, int]:
    """Tabs and clicks for 1.5 s, the fault, clicks until recovered and 1.5 s more; the final count."""
    try:
        await load.open_tabs()
        assert await load.tabs_show(0, 10) == [0] * 10
        load.start_clicking()
        await asyncio.sleep(1.5)
        await asyncio.to_thread(fault)
        deadline = time.monotonic() + 20
        while not await asyncio.to_thread(recovered):
            assert time.monotonic() < deadline, "the cluster did not recover within 20 s"
            await asyncio.sleep(0.1)
        await asyncio.sleep(1.5)
        await load.stop_clicking()
        final = await settled_count(setup.ports)
        if setup.engine_url:  # what the engine holds, not only what the workers show
            engine = create_engine(setup.engine_url, prefix=setup.prefix)
            await engine.connect()
            try:
                held, _ = await engine.get("scopes", "route:/#count")
                assert held == str(final).encode(), (held, final)
            finally:
                await engine.close()
        await load.tabs_show(final, 15)
        return load, final
    finally:
        await load.close()


def report(name: str, setup: Setup, load: Load, final: int) -> None:
    tally = load.tally
    print(
        "FAULT-RESULT",
        json.dumps(
            {
                "fault": name,
                "engine": setup.cluster.log().split("engine ", 1)[-1].split("\n", 1)[0][:40],
                "acknowledged": tally.acknowledged,
                "refused": tally.refused,
                "unknown": tally.unknown,
                "cut_mid_answer": tally.cut_mid_answer,
                "retried": tally.retried,
                "final": final,
                "tabs_recovered": sum(tab.count == final for tab in load.tabs),
                "tabs": len(load.tabs),
                "reconnects": sum(tab.reconnects for tab in load.tabs),
            }
        ),
    )


def check(load: Load, final: int) -> None:
    tally = load.tally
    assert tally.acknowledged > 0
    assert final >= tally.acknowledged, f"acknowledged clicks lost: {tally}, count {final}"
    assert final <= tally.acknowledged + sum(tally.refused.values()) + tally.unknown, (
        f"clicks counted twice: {tally}, count {final}"
    )
    assert [tab.count for tab in load.tabs] == [final] * len(load.tabs), "every tab shows the count again"
    assert [tab.lost for tab in load.tabs] == [[]] * len(load.tabs), "no tab lost (its page would reload)"


def worker_pid(cluster: Cluster, worker_id: int) -> int:
    """The process of worker ``worker_id`` (the one behind its own port), from the supervisor's log."""
    found = re.findall(rf"worker {worker_id} started \(pid (\d+)\)", cluster.log())
    assert found, cluster.log()
    return int(found[-1])


def test_a_worker_killed_while_clicks_flow(setup: Setup) -> None:
    victim = worker_pid(setup.cluster, 0)
    assert victim in setup.cluster.workers()
    workers = setup.cluster.workers

    def kill() -> None:
        os.kill(victim, signal.SIGKILL)

    def recovered() -> bool:
        return victim not in workers() and len(workers()) == 2 and get(setup.ports[0], "/_ready").status == 200

    async def scenario() -> tuple[Load, int]:
        load = Load(setup.cluster.port, list(setup.ports))
        load.retry_closed = False  # the killed worker may have run what it did not answer
        return await run_with(load, setup, kill, recovered)

    load, final = asyncio.run(scenario())
    report("kill -9 a worker", setup, load, final)
    check(load, final)


def test_the_engine_killed_while_clicks_flow(setup: Setup) -> None:
    def recovered() -> bool:
        return engines_healthy(setup.ports)

    async def scenario() -> tuple[Load, int]:
        return await run_with(Load(setup.cluster.port, list(setup.ports)), setup, setup.kill_engine, recovered)

    load, final = asyncio.run(scenario())
    report("kill -9 the engine", setup, load, final)
    check(load, final)


def test_a_reload_under_load_loses_and_cuts_nothing(setup: Setup) -> None:
    before = set(setup.cluster.workers())

    def reload() -> None:
        setup.cluster.proc.send_signal(signal.SIGHUP)
        setup.cluster.wait_for_log("reload done", timeout=30)

    def recovered() -> bool:
        after = set(setup.cluster.workers())
        return len(after) == 2 and not after & before

    async def scenario() -> tuple[Load, int]:
        return await run_with(Load(setup.cluster.port, list(setup.ports)), setup, reload, recovered)

    load, final = asyncio.run(scenario())
    report("SIGHUP reload", setup, load, final)
    check(load, final)
    assert (load.tally.unknown, load.tally.cut_mid_answer) == (0, 0), load.tally
    # 409 only: a click for a tab between its old worker and its new one, before its stream
    # revived it there (the page shows "try again"); never a 5xx
    assert set(load.tally.refused) <= {409}, load.tally
    assert final == load.tally.acknowledged
