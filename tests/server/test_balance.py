"""The table of :mod:`pyvia.server.balance`: who defers to whom (the process tests are in
tests/cluster/test_balance.py)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from pyvia.server.balance import STALE_MS, BalanceTable


@pytest.fixture
def table() -> Iterator[BalanceTable]:
    table = BalanceTable.create(4)
    try:
        yield table
    finally:
        table.close()


def live(table: BalanceTable, slot: int, count: int, beat: int) -> None:
    table.set_count(slot, count)
    table.beat(slot, beat)


def test_a_worker_defers_only_while_it_holds_more_than_the_least_loaded_live_peer(table: BalanceTable) -> None:
    now = 10_000_000
    live(table, 0, 5, now)
    live(table, 1, 5, now)
    live(table, 2, 7, now)
    assert not table.busier(0, now)  # equal: both accept
    table.set_count(0, 6)
    assert table.busier(0, now)  # slot 1 holds fewer
    assert not table.busier(1, now)
    assert table.busier(2, now)
    table.set_count(1, 6)
    assert not table.busier(0, now)  # the least loaded peer is no longer below


def test_a_stuck_or_cleared_peer_makes_nobody_wait(table: BalanceTable) -> None:
    now = 10_000_000
    live(table, 0, 9, now)
    live(table, 1, 0, now - STALE_MS)
    assert table.busier(0, now)  # a heartbeat STALE_MS old still counts
    live(table, 1, 0, now - STALE_MS - 1)
    assert not table.busier(0, now)  # older: its loop is stuck
    live(table, 1, 0, now)
    assert table.busier(0, now)
    table.clear(1)  # its process exited, or it stopped accepting
    assert not table.busier(0, now)
    assert table.live(now) == {0: 9}


def test_a_slot_that_never_beat_is_not_a_peer(table: BalanceTable) -> None:
    table.set_count(0, 3)
    table.beat(0, 500)  # a clock near its start: still not 0
    assert table.live(500) == {0: 3}
    assert not table.busier(0, 500)  # slots 1-3 are zero: free, or a worker still starting


def test_the_table_is_shared_through_its_descriptor(table: BalanceTable) -> None:
    other = BalanceTable(os.dup(table.fd))  # what a worker does with the inherited descriptor
    try:
        assert other.slots == table.slots == 4
        live(other, 2, 11, 42_000)
        assert table.count(2) == 11 and table.live(42_000) == {2: 11}
        table.clear(2)
        assert other.live(42_000) == {}
    finally:
        other.close()


def test_a_descriptor_of_another_size_is_refused(tmp_path: os.PathLike[str]) -> None:
    path = os.path.join(tmp_path, "odd")
    with open(path, "wb") as file:
        file.write(b"x" * 12)
    fd = os.open(path, os.O_RDWR)
    try:
        with pytest.raises(ValueError, match="not a balance table"):
            BalanceTable(fd)
    finally:
        os.close(fd)
