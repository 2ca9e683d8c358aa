"""``pyvia run --workers 2`` with the engine the supervisor starts: app state is one state.

App signals declared at import time (before any engine link exists) and written by an app timer
or by actions read the same on every worker's tabs; session data too; app timers tick once per
period for the whole cluster, and move within a period and a second when their worker is
killed. Each worker also serves its own port (``--worker-ports``), so a test puts a tab on the
worker it wants; what a tab shows is read from the view on its stream.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import signal
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.cluster.test_shared_state import Tab, get, pid_of
from tests.cluster.test_supervisor import Cluster, wait_until
from tests.cluster.test_worker_ports import free_ports

APP = "tests.cluster.app_state_app:app"
SHOWN = re.compile(r"ticks (\d+) clicks (\d+) last ([^<]*?) worker")


def start(period_ms: int) -> tuple[Cluster, int, int]:
    base = free_ports(2)
    os.environ["PYVIA_TEST_TICK_MS"] = str(period_ms)
    try:
        cluster = Cluster(APP, 2, "--worker-ports", str(base))
    finally:
        del os.environ["PYVIA_TEST_TICK_MS"]
    wait_until(lambda: all(get(port, "/_ready").status == 200 for port in (base, base + 1)), 20, "both workers ready")
    return cluster, base, base + 1


@pytest.fixture
def slow_ticks() -> Iterator[tuple[Cluster, int, int]]:
    yield from _running(500)


@pytest.fixture
def fast_ticks() -> Iterator[tuple[Cluster, int, int]]:
    yield from _running(200)


def _running(period_ms: int) -> Iterator[tuple[Cluster, int, int]]:
    cluster, a, b = start(period_ms)
    try:
        yield cluster, a, b
    finally:
        cluster.stop()
        for pid in list(cluster.workers()):
            os.kill(pid, signal.SIGKILL)


def get_json(port: int, path: str, cookie: str | None = None) -> Any:
    return json.loads(get(port, path, cookie).body)


def shown(tab: Tab) -> tuple[int, int, str]:
    """What the tab's view shows last: (ticks, clicks, last)."""
    found = SHOWN.findall(tab.received.decode(errors="replace"))
    assert found, tab.received[-400:]
    ticks, clicks, last = found[-1]
    return int(ticks), int(clicks), last


def test_app_signals_and_session_data_read_the_same_on_every_workers_tabs(slow_ticks) -> None:
    _, a, b = slow_ticks
    assert pid_of(a) != pid_of(b)
    first, second = Tab(a), Tab(b)
    first.connect(a)
    second.connect(b)
    assert [first.act(a, "click") for _ in range(3)] + [second.act(b, "click") for _ in range(2)] == [200] * 5
    for tab in (first, second):
        tab.wait_for(rf"clicks 5 last clicked by {pid_of(b)} worker")
    # the timer's value: each one stands for its 500 ms period, so the other tab shows it too
    first.wait_for(r"ticks [3-9]\d* clicks 5 ")
    ticks = shown(first)[0]
    second.wait_for(rf"ticks {ticks} clicks 5 ")
    states = [get_json(port, "/state") for port in (a, b)]
    assert [(s["clicks"], s["last"], s["tabs"], s["local_tabs"]) for s in states] == [
        (5, f"clicked by {pid_of(b)}", 2, 1)
    ] * 2
    # session data: written on one worker, read on the other, by either tab of the session
    other = Tab(b, cookie=first.cookie)
    for visits, (tab, port) in enumerate([(first, a), (other, b), (first, a)], 1):
        assert tab.act(port, "remember") == 200
        wait_until(
            lambda n=visits: [get_json(p, "/state", first.cookie)["visits"] for p in (a, b)] == [n] * 2,
            5,
            f"{visits} visits read on both workers",
        )
    first.close()
    second.close()


def tick_log(port: int) -> list[tuple[int, float]]:
    return [(int(pid), float(at)) for pid, at in get_json(port, "/ticks")]


def test_an_app_timer_ticks_once_per_period_for_the_whole_cluster(fast_ticks) -> None:
    cluster, a, b = fast_ticks
    wait_until(lambda: len(tick_log(a)) >= 5, 10, "the timer ticking")
    time.sleep(2.0)
    log = tick_log(b)
    recent = [entry for entry in log if entry[1] >= log[-1][1] - 2.0]
    assert 7 <= len(recent) <= 12, recent  # 2 s of a 200 ms timer: 10 ticks, not 20
    gaps = [later[1] - earlier[1] for earlier, later in itertools.pairwise(recent)]
    assert min(gaps) >= 0.1, gaps  # never two workers in one period
    assert len({pid for pid, _ in recent}) == 1
    # the timer keeps ticking between the two reads: they agree once no tick falls between them
    wait_until(lambda: get_json(a, "/state")["ticks"] == get_json(b, "/state")["ticks"], 5, "the same count on both")
    assert get_json(b, "/state")["ticks"] >= len(log)
    # the log names the one worker that runs them (two such lines read as two timers running)
    assert cluster.log().count("runs the app timers now") == 1, cluster.log()


def test_killing_the_timer_workers_moves_the_timer_within_a_period_and_a_second(fast_ticks) -> None:
    cluster, a, b = fast_ticks
    wait_until(lambda: len(tick_log(a)) >= 5, 10, "the timer ticking")
    holder = tick_log(a)[-1][0]
    assert holder in cluster.workers()
    survivor_port = b if pid_of(a) == holder else a
    os.kill(holder, signal.SIGKILL)
    killed_at = time.time()
    wait_until(
        lambda: any(pid != holder for pid, at in tick_log(survivor_port) if at > killed_at),
        10,
        "a tick from another worker",
    )
    log = tick_log(survivor_port)
    last_before = max(at for pid, at in log if pid == holder)
    first_after = min(at for pid, at in log if pid != holder and at > killed_at)
    assert first_after - last_before <= 0.2 + 1.0, (last_before, killed_at, first_after)
    time.sleep(1.0)
    after = [at for pid, at in tick_log(survivor_port) if at >= first_after]
    gaps = [later - earlier for earlier, later in itertools.pairwise(after)]
    assert gaps and min(gaps) >= 0.1, gaps  # one worker took over, not two
    taking = [line for line in cluster.log().splitlines() if "runs the app timers now" in line]
    assert len(taking) >= 2 and taking[0] != taking[1], taking  # the first holder, then another
