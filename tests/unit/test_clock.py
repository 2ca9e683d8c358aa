"""The manual clock that lets tests step timeouts instead of sleeping."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from pyvia.clock import LoopClock, ManualClock, until_tick


def recorder() -> tuple[list[Any], Callable[..., None]]:
    log: list[Any] = []

    def record(*args: Any) -> None:
        log.append(args[0] if len(args) == 1 else args)

    return log, record


def test_now_starts_at_the_given_time_and_moves_only_on_advance() -> None:
    clock = ManualClock(start=50.0)
    assert clock.now() == 50.0
    clock.call_later(1.0, lambda: None)
    assert clock.now() == 50.0
    clock.advance(2.5)
    assert clock.now() == 52.5


def test_timers_fire_in_time_order_not_scheduling_order() -> None:
    clock = ManualClock()
    log, record = recorder()
    clock.call_later(3.0, record, "c")
    clock.call_later(1.0, record, "a")
    clock.call_later(2.0, record, "b")
    clock.advance(10.0)
    assert log == ["a", "b", "c"]


def test_timers_due_at_the_same_moment_fire_in_scheduling_order() -> None:
    clock = ManualClock()
    log, record = recorder()
    for name in "xyz":
        clock.call_later(1.0, record, name)
    clock.advance(1.0)
    assert log == ["x", "y", "z"]


def test_timer_fires_only_once_its_moment_has_passed() -> None:
    clock = ManualClock()
    log, record = recorder()
    clock.call_later(5.0, record, "t")
    clock.advance(4.999)
    assert log == []
    clock.advance(0.001)
    assert log == ["t"]
    clock.advance(100.0)
    assert log == ["t"]


def test_callback_sees_its_own_due_time() -> None:
    clock = ManualClock(start=0.0)
    seen: list[float] = []
    clock.call_later(2.0, lambda: seen.append(clock.now()))
    clock.call_later(7.0, lambda: seen.append(clock.now()))
    clock.advance(10.0)
    assert seen == [2.0, 7.0]
    assert clock.now() == 10.0


def test_callback_gets_its_arguments() -> None:
    clock = ManualClock()
    log, record = recorder()
    clock.call_later(1.0, record, 1, "two")
    clock.advance(1.0)
    assert log == [(1, "two")]


def test_cancelled_timer_does_not_fire() -> None:
    clock = ManualClock()
    log, record = recorder()
    handle = clock.call_later(1.0, record, "cancelled")
    clock.call_later(2.0, record, "kept")
    handle.cancel()
    clock.advance(5.0)
    assert log == ["kept"]


def test_timer_cancelled_by_an_earlier_timer_does_not_fire() -> None:
    clock = ManualClock()
    log, record = recorder()
    later = clock.call_later(2.0, record, "later")
    clock.call_later(1.0, later.cancel)
    clock.advance(5.0)
    assert log == []


def test_timers_scheduled_by_timers_fire_within_the_same_advance() -> None:
    clock = ManualClock(start=0.0)
    fired: list[tuple[str, float]] = []

    def tick(n: int) -> None:
        fired.append((f"tick{n}", clock.now()))
        if n < 3:
            clock.call_later(1.0, tick, n + 1)

    clock.call_later(1.0, tick, 1)
    clock.advance(10.0)
    assert fired == [("tick1", 1.0), ("tick2", 2.0), ("tick3", 3.0)]


def test_timer_scheduled_by_a_timer_beyond_the_advance_waits() -> None:
    clock = ManualClock(start=0.0)
    log, record = recorder()
    clock.call_later(1.0, lambda: clock.call_later(5.0, record, "late"))
    clock.advance(3.0)
    assert log == []
    clock.advance(3.0)
    assert log == ["late"]


def test_timer_scheduled_by_a_timer_runs_in_time_order_with_existing_ones() -> None:
    clock = ManualClock(start=0.0)
    log, record = recorder()
    clock.call_later(1.0, lambda: clock.call_later(1.0, record, "child at 2"))
    clock.call_later(3.0, record, "existing at 3")
    clock.advance(5.0)
    assert log == ["child at 2", "existing at 3"]


def test_call_soon_runs_on_advance_zero_and_run_due() -> None:
    clock = ManualClock()
    log, record = recorder()
    clock.call_soon(record, "soon")
    clock.run_due()
    assert log == ["soon"]
    clock.call_soon(record, "again")
    clock.advance(0)
    assert log == ["soon", "again"]


def test_run_due_leaves_future_timers() -> None:
    clock = ManualClock()
    log, record = recorder()
    clock.call_later(1.0, record, "future")
    clock.run_due()
    assert log == []


def test_negative_delay_is_due_now() -> None:
    clock = ManualClock(start=10.0)
    log, record = recorder()
    clock.call_later(-5.0, record, "now")
    clock.run_due()
    assert log == ["now"]
    assert clock.now() == 10.0


def test_loop_clock_uses_the_loop_time_and_timers() -> None:
    loop = asyncio.new_event_loop()
    try:
        clock = LoopClock(loop)
        log, record = recorder()
        assert abs(clock.now() - loop.time()) < 1.0
        clock.call_soon(record, "soon")
        clock.call_later(0.0, record, "later").cancel()
        loop.run_until_complete(asyncio.sleep(0.01))
        assert log == ["soon"]
    finally:
        loop.close()


def test_step_runs_one_due_callback_as_one_loop_turn() -> None:
    clock = ManualClock()
    log, record = recorder()
    clock.call_soon(record, "a")
    clock.call_soon(record, "b")
    clock.call_later(1.0, record, "later")
    assert clock.step() and log == ["a"]
    assert clock.step() and log == ["a", "b"]
    assert not clock.step()  # the timer is not due yet
    clock.advance(1.0)
    assert log == ["a", "b", "later"]


def test_work_takes_no_time_on_the_manual_clock_and_real_time_on_the_loop() -> None:
    clock = ManualClock(start=7.0)
    assert clock.perf() == clock.now() == 7.0
    loop = asyncio.new_event_loop()
    try:
        real = LoopClock(loop)
        first = real.perf()
        sum(range(10_000))
        assert real.perf() > first
    finally:
        loop.close()


def test_periodic_timers_keep_to_one_grid_so_they_wake_the_loop_together() -> None:
    # a one-second sweep and a 250 ms probe started at different instants fall due at the same
    # ticks from their first period on, never sooner than half a period after they were armed
    for now in (0.0, 0.01, 0.3, 0.49, 0.51, 0.99, 12345.678):
        for period in (0.25, 1.0):
            delay = until_tick(now, period)
            due = now + delay
            assert period / 2 <= delay <= 1.5 * period
            assert abs(due / period - round(due / period)) < 1e-9
    assert until_tick(0.1, 1.0) == pytest.approx(0.9)
    assert until_tick(0.9, 1.0) == pytest.approx(1.1)  # 0.1 s would wake twice in a row
    assert until_tick(5.0, 0.0) == 0.0
