"""The table of :mod:`pyvia.server.balance`: who waits for whom, and whom it wakes (the process
tests are in tests/cluster/test_balance.py)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from pyvia.server.balance import SLACK, STALE_MS, BalanceTable

NOW = 10_000_000


@pytest.fixture
def table() -> Iterator[BalanceTable]:
    table = BalanceTable.create(4)
    try:
        yield table
    finally:
        table.close()


def live(table: BalanceTable, slot: int, count: int, beat: int = NOW) -> None:
    table.set_count(slot, count)
    table.beat(slot, beat)


def test_a_worker_waits_only_while_it_holds_more_than_the_least_loaded_live_peer(table: BalanceTable) -> None:
    live(table, 0, 5)
    live(table, 1, 5)
    live(table, 2, 9)
    assert table.wait_for(0, NOW) is None  # equal: both accept
    table.set_count(0, 5 + SLACK)
    assert table.wait_for(0, NOW) is None  # within the slack
    table.set_count(0, 6 + SLACK)
    assert table.wait_for(0, NOW) == []  # slot 1 holds fewer and is accepting: nobody to wake
    assert table.wait_for(1, NOW) is None
    assert table.wait_for(2, NOW) == []
    table.set_count(1, 6)
    assert table.wait_for(0, NOW) is None  # the least loaded peer is no longer below


def test_a_waiting_peer_is_woken_rather_than_waited_for(table: BalanceTable) -> None:
    live(table, 0, 9)
    live(table, 1, 2)
    live(table, 2, 3)
    table.set_paused(1, True)
    assert table.wait_for(0, NOW) == []  # slot 2 is less loaded and accepting
    table.set_paused(2, True)
    assert table.wait_for(0, NOW) == [1, 2]  # both less loaded ones wait: ring them
    table.ring(1)
    table.ring(1)  # twice before it looked: one wake
    assert os.eventfd_read(table.bells[1]) == 2
    with pytest.raises(BlockingIOError):
        os.eventfd_read(table.bells[2])  # not rung


def test_a_stuck_or_cleared_peer_makes_nobody_wait(table: BalanceTable) -> None:
    live(table, 0, 9)
    live(table, 1, 0, NOW - STALE_MS)
    assert table.wait_for(0, NOW) == []  # a heartbeat STALE_MS old still counts
    live(table, 1, 0, NOW - STALE_MS - 1)
    assert table.wait_for(0, NOW) is None  # older: its loop is stuck
    live(table, 1, 0)
    table.set_paused(1, True)
    table.clear(1)  # its process exited, or it stopped accepting
    assert table.wait_for(0, NOW) is None
    assert table.live(NOW) == {0: 9}


def test_a_slot_that_never_beat_is_not_a_peer(table: BalanceTable) -> None:
    live(table, 0, 3, 500)  # a clock near its start: still not 0
    assert table.live(500) == {0: 3}
    assert table.wait_for(0, 500) is None  # slots 1-3 are zero: free, or a worker still starting


def test_the_table_is_shared_through_its_descriptors(table: BalanceTable) -> None:
    other = BalanceTable.from_env(",".join(str(os.dup(fd)) for fd in table.fds()))  # what a worker does
    try:
        assert other.slots == table.slots == 4
        live(other, 2, 11, 42_000)
        assert table.count(2) == 11 and table.live(42_000) == {2: 11}
        table.clear(2)
        assert other.live(42_000) == {}
        other.ring(3)
        assert os.eventfd_read(table.bells[3]) == 1
    finally:
        other.close()


def test_a_descriptor_of_another_size_is_refused(table: BalanceTable) -> None:
    with pytest.raises(ValueError, match="not a balance table of 3 slots"):
        BalanceTable(table.fd, table.bells[:3])
