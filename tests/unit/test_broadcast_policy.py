"""When a flush may start: the pure decisions of pyvia.broadcast, apart from any clock."""

from __future__ import annotations

from pyvia.broadcast import next_flush_time, settled_flush_time

TICK = 0.025


def test_an_idle_loop_flushes_at_once_and_a_busy_one_a_tick_after_the_last_start() -> None:
    assert next_flush_time(10.0, 9.0, 0.01, TICK) == 10.0
    assert next_flush_time(10.0, 9.99, 0.001, TICK) == 9.99 + TICK


def test_a_long_flush_leaves_as_long_a_pause_after_it() -> None:
    assert next_flush_time(10.0, 9.99, 0.04, TICK) == 9.99 + 0.08


def test_a_burst_flushes_once_its_marks_settle_but_no_later_than_a_tick_after_it_began() -> None:
    assert (
        settled_flush_time(
            10.0, last_mark=10.0, first_mark=9.99, settle=0.002, tick=TICK, last_start=9.99, last_duration=0.0003
        )
        == 10.002
    )
    capped = settled_flush_time(
        10.0, last_mark=10.0, first_mark=9.9765, settle=0.002, tick=TICK, last_start=9.9765, last_duration=0.0003
    )
    assert capped == 9.9765 + TICK


def test_a_burst_flush_still_waits_twice_the_last_flush_duration() -> None:
    assert (
        settled_flush_time(
            10.0, last_mark=10.0, first_mark=9.999, settle=0.002, tick=TICK, last_start=9.999, last_duration=0.003
        )
        == 9.999 + 0.006
    )
