"""Replay buffers (pyvia.replay): consecutive frames only, bounded per tab, in total and by the
encoders' budget, the least recently written dropped first."""

from __future__ import annotations

from dataclasses import dataclass

from pyvia.replay import Replays, TabReplay, process_epoch


class Owner:
    __slots__ = ("last_event", "replay")

    def __init__(self) -> None:
        self.replay: TabReplay | None = None
        self.last_event = 0.0


@dataclass
class Budget:
    limit: int
    total: int = 0


def test_after_gives_the_frames_after_a_seq_or_none_when_any_is_gone() -> None:
    replay = TabReplay(5)
    replay.frames.extend([b"5", b"6", b"7"])
    assert replay.after(4) == [b"5", b"6", b"7"]
    assert replay.after(6) == [b"7"]
    assert replay.after(7) == []
    assert replay.after(3) is None  # frame 4 is gone
    assert replay.after(8) is None  # from the future


def test_a_tab_s_buffer_drops_its_oldest_frames_past_its_bound() -> None:
    replays = Replays(tab_limit=10, limit=1000)
    owner = Owner()
    for seq in range(1, 6):
        replays.keep(owner, seq, b"abcd")  # 4 bytes each
    assert owner.replay is not None and owner.replay.first == 4 and list(owner.replay.frames) == [b"abcd"] * 2
    assert replays.total == 8


def test_a_busy_tab_s_buffer_is_trimmed_to_three_quarters_of_its_bound_once_per_many_frames() -> None:
    replays = Replays(tab_limit=100, limit=1000)
    owner = Owner()
    for seq in range(1, 12):  # the 11th frame passes the bound: trimmed to 70 bytes (<= 75)
        replays.keep(owner, seq, b"x" * 10)
    assert owner.replay is not None and owner.replay.first == 5 and owner.replay.size == 70
    for seq in range(12, 15):  # room for three more before the next trim
        replays.keep(owner, seq, b"x" * 10)
    assert owner.replay.first == 5 and owner.replay.size == 100 and replays.total == 100
    assert owner.replay.after(4) == [b"x" * 10] * 10  # consecutive, nothing lost in between


def test_a_frame_larger_than_the_bound_empties_the_buffer_rather_than_leave_a_gap() -> None:
    replays = Replays(tab_limit=10, limit=1000)
    owner = Owner()
    replays.keep(owner, 1, b"ab")
    replays.keep(owner, 2, b"x" * 11)
    assert owner.replay is None and replays.total == 0 and len(replays) == 0
    replays.keep(owner, 3, b"cd")
    assert owner.replay is not None and owner.replay.after(1) is None and owner.replay.after(2) == [b"cd"]


def test_over_the_total_the_least_recently_written_buffers_go_first() -> None:
    replays = Replays(tab_limit=100, limit=25)
    a, b, c = Owner(), Owner(), Owner()
    replays.keep(a, 1, b"x" * 10)
    replays.keep(b, 1, b"x" * 10)
    replays.keep(a, 2, b"x" * 1)  # a is now the most recent
    replays.keep(c, 1, b"x" * 10)
    assert a.replay is not None and b.replay is None and c.replay is not None
    assert replays.total == 21 and replays.evicted == 1


def test_the_buffers_give_way_to_the_encoders() -> None:
    encoders = Budget(limit=100, total=80)
    replays = Replays(tab_limit=100, encoders=encoders)
    assert replays.limit == 25  # a quarter of the encoders' budget by default
    owner, other = Owner(), Owner()
    replays.keep(owner, 1, b"x" * 15)
    replays.keep(other, 1, b"x" * 10)  # 25 > what the encoders leave (20): the older one goes
    assert owner.replay is None and other.replay is not None
    encoders.total = 95
    replays.sweep(now=0.0)
    assert other.replay is None and replays.total == 0


def test_a_quiet_buffer_is_dropped_by_the_sweep() -> None:
    replays = Replays(idle=30.0)
    quiet, busy = Owner(), Owner()
    replays.keep(quiet, 1, b"a")
    replays.keep(busy, 1, b"b")
    quiet.last_event, busy.last_event = 10.0, 35.0
    replays.sweep(now=50.0)
    assert quiet.replay is None and busy.replay is not None and replays.dropped == 1


def test_no_buffer_when_replay_is_off() -> None:
    replays = Replays(tab_limit=0)
    owner = Owner()
    replays.keep(owner, 1, b"a")
    assert owner.replay is None and replays.total == 0


def test_the_process_epoch_is_stable_within_a_process() -> None:
    assert process_epoch() == process_epoch() and len(process_epoch()) == 12
