"""The outbound policy of one tab: send, hold, coalesce or queue, decided from the sink's backlog."""

from __future__ import annotations

import pytest

from pyvia.stream import Stream
from pyvia.view_frame import ViewFrame

MAX_BUFFER = 1000


class FakeSink:
    """Records writes; ``buffered`` is set by the test to play a slow client."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.buffered = 0
        self.is_closed = False
        self.close_calls = 0

    def write(self, data: bytes) -> None:
        assert not self.is_closed, "write after close"
        self.writes.append(data)

    def close(self) -> None:
        self.close_calls += 1
        self.is_closed = True


@pytest.fixture
def stream() -> Stream:
    return Stream(MAX_BUFFER)


def test_connected_stream_writes_each_send_at_once(stream: Stream) -> None:
    sink = FakeSink()
    stream.attach(sink, now=1.0)
    stream.send(b"sig1", None, now=2.0)
    stream.send(b"sig2", ViewFrame(b"view1"), now=3.0)
    assert sink.writes == [b"sig1", b"view1sig2"]
    assert stream.last_write == 3.0


def test_empty_send_writes_nothing(stream: Stream) -> None:
    sink = FakeSink()
    stream.attach(sink, now=1.0)
    stream.send(b"", None, now=5.0)
    assert sink.writes == []
    assert stream.last_write == 1.0


def test_view_without_data_is_written_alone(stream: Stream) -> None:
    sink = FakeSink()
    stream.attach(sink, now=0.0)
    stream.send(b"", ViewFrame(b"view"), now=1.0)
    assert sink.writes == [b"view"]


def test_events_wait_while_disconnected_and_flush_on_attach_in_one_write(stream: Stream) -> None:
    stream.send(b"a", None, now=1.0)
    stream.send(b"b", None, now=2.0)
    stream.send(b"c", None, now=3.0)
    assert not stream.is_connected
    sink = FakeSink()
    stream.attach(sink, now=4.0)
    assert sink.writes == [b"abc"]
    assert stream.pending is None
    assert stream.last_write == 4.0


def test_attach_with_nothing_pending_writes_nothing(stream: Stream) -> None:
    sink = FakeSink()
    stream.attach(sink, now=1.0)
    assert sink.writes == []
    assert stream.is_connected


def test_view_frames_are_coalesced_to_the_latest_while_disconnected(stream: Stream) -> None:
    stream.send(b"", ViewFrame(b"view1"), now=1.0)
    stream.send(b"sig", ViewFrame(b"view2"), now=2.0)
    stream.send(b"", ViewFrame(b"view3"), now=3.0)
    sink = FakeSink()
    stream.attach(sink, now=4.0)
    assert sink.writes == [b"view3sig"]


def test_backlog_is_flushed_only_once(stream: Stream) -> None:
    stream.send(b"a", ViewFrame(b"v"), now=1.0)
    first = FakeSink()
    stream.attach(first, now=2.0)
    second = FakeSink()
    stream.attach(second, now=3.0)
    assert first.writes == [b"va"]
    assert second.writes == []


def test_send_to_a_closed_sink_is_kept_for_the_next_stream(stream: Stream) -> None:
    sink = FakeSink()
    stream.attach(sink, now=1.0)
    sink.close()
    stream.send(b"sig", ViewFrame(b"view"), now=2.0)
    assert sink.writes == []
    fresh = FakeSink()
    stream.attach(fresh, now=3.0)
    assert fresh.writes == [b"viewsig"]


def test_view_is_held_while_the_client_is_slow_but_signals_go_out(stream: Stream) -> None:
    sink = FakeSink()
    stream.attach(sink, now=0.0)
    sink.buffered = MAX_BUFFER + 1
    stream.send(b"sig1", ViewFrame(b"view1"), now=1.0)
    assert sink.writes == [b"sig1"]
    assert stream.held_view is not None and stream.held_view.wrapped == b"view1"


def test_only_the_latest_held_view_is_kept(stream: Stream) -> None:
    sink = FakeSink()
    stream.attach(sink, now=0.0)
    sink.buffered = MAX_BUFFER + 1
    stream.send(b"", ViewFrame(b"view1"), now=1.0)
    stream.send(b"", ViewFrame(b"view2"), now=2.0)
    assert sink.writes == []
    sink.buffered = 0
    stream.send(b"sig", None, now=3.0)
    assert sink.writes == [b"view2sig"]
    assert stream.held_view is None


def test_held_view_goes_out_with_the_next_send_that_fits(stream: Stream) -> None:
    sink = FakeSink()
    stream.attach(sink, now=0.0)
    sink.buffered = MAX_BUFFER + 1
    stream.send(b"s1", ViewFrame(b"view1"), now=1.0)
    stream.send(b"s2", None, now=2.0)  # still slow: the view stays held
    assert sink.writes == [b"s1", b"s2"]
    sink.buffered = MAX_BUFFER  # at the limit counts as fitting
    stream.send(b"s3", None, now=3.0)
    assert sink.writes == [b"s1", b"s2", b"view1s3"]
    stream.send(b"s4", None, now=4.0)
    assert sink.writes[-1] == b"s4"


def test_held_view_goes_out_even_on_an_empty_send_once_it_fits(stream: Stream) -> None:
    sink = FakeSink()
    stream.attach(sink, now=0.0)
    sink.buffered = MAX_BUFFER + 1
    stream.send(b"", ViewFrame(b"view1"), now=1.0)
    sink.buffered = 0
    stream.send(b"", None, now=2.0)
    assert sink.writes == [b"view1"]


def test_new_view_that_fits_replaces_a_held_one(stream: Stream) -> None:
    sink = FakeSink()
    stream.attach(sink, now=0.0)
    sink.buffered = MAX_BUFFER + 1
    stream.send(b"", ViewFrame(b"old"), now=1.0)
    sink.buffered = 0
    stream.send(b"", ViewFrame(b"new"), now=2.0)
    assert sink.writes == [b"new"]
    assert stream.held_view is None
    stream.send(b"x", None, now=3.0)
    assert sink.writes == [b"new", b"x"]


def test_held_view_waits_for_the_next_stream_after_a_disconnect(stream: Stream) -> None:
    sink = FakeSink()
    stream.attach(sink, now=0.0)
    sink.buffered = MAX_BUFFER + 1
    stream.send(b"", ViewFrame(b"view1"), now=1.0)
    assert stream.detach(sink)
    fresh = FakeSink()
    stream.attach(fresh, now=2.0)
    assert fresh.writes == [b"view1"]


def test_attaching_a_new_sink_closes_the_old_one(stream: Stream) -> None:
    old, new = FakeSink(), FakeSink()
    stream.attach(old, now=1.0)
    stream.attach(new, now=2.0)
    assert old.is_closed
    assert not new.is_closed
    stream.send(b"x", None, now=3.0)
    assert old.writes == []
    assert new.writes == [b"x"]


def test_attaching_the_same_sink_again_does_not_close_it(stream: Stream) -> None:
    sink = FakeSink()
    stream.attach(sink, now=1.0)
    stream.attach(sink, now=2.0)
    assert sink.close_calls == 0


def test_an_already_closed_old_sink_is_not_closed_twice(stream: Stream) -> None:
    old = FakeSink()
    stream.attach(old, now=1.0)
    old.close()
    stream.attach(FakeSink(), now=2.0)
    assert old.close_calls == 1


def test_detach_of_a_replaced_sink_keeps_the_current_one(stream: Stream) -> None:
    old, new = FakeSink(), FakeSink()
    stream.attach(old, now=1.0)
    stream.attach(new, now=2.0)
    assert stream.detach(old) is False
    assert stream.is_connected
    assert stream.detach(new) is True
    assert not stream.is_connected


def test_events_after_detach_are_queued(stream: Stream) -> None:
    sink = FakeSink()
    stream.attach(sink, now=1.0)
    stream.detach(sink)
    stream.send(b"later", None, now=2.0)
    assert sink.writes == []
    assert stream.pending == [b"later"]


def test_close_closes_the_sink_and_disconnects(stream: Stream) -> None:
    sink = FakeSink()
    stream.attach(sink, now=1.0)
    stream.close()
    assert sink.is_closed
    assert not stream.is_connected
    stream.close()
    assert sink.close_calls == 1


# --- which form of a view the page can take (ViewFrame) -------------------------------------------


def _view(root: str | None, n: int = 0) -> ViewFrame:
    return ViewFrame(b"W%d" % n, root, b"B%d" % n if root else None)


def test_a_view_with_the_root_the_page_shows_goes_bare(stream: Stream) -> None:
    sink = FakeSink()
    stream.attach(sink, now=1.0)
    stream.send(b"", _view("board", 1), now=2.0)  # the page's root is not known yet: wrapped
    stream.send(b"s", _view("board", 2), now=3.0)  # it is now "board": bare
    stream.send(b"", _view("other", 3), now=4.0)  # another root is not on the page: wrapped
    stream.send(b"", _view(None, 4), now=5.0)  # not one element: wrapped, root unknown after
    stream.send(b"", _view("other", 5), now=6.0)
    assert sink.writes == [b"W1", b"B2s", b"W3", b"W4", b"W5"]


def test_a_new_stream_forgets_the_root_the_last_one_wrote(stream: Stream) -> None:
    first = FakeSink()
    stream.attach(first, now=1.0)
    stream.send(b"", _view("board", 1), now=2.0)
    stream.detach(first)
    fresh = FakeSink()
    stream.attach(fresh, now=3.0)  # the page may not have got the last write
    stream.send(b"", _view("board", 2), now=4.0)
    stream.send(b"", _view("board", 3), now=5.0)
    assert fresh.writes == [b"W2", b"B3"]


def test_a_view_held_for_the_next_stream_goes_wrapped(stream: Stream) -> None:
    sink = FakeSink()
    stream.attach(sink, now=1.0)
    stream.send(b"", _view("board", 1), now=2.0)
    sink.buffered = MAX_BUFFER + 1
    stream.send(b"", _view("board", 2), now=3.0)  # held: the client is slow
    sink.buffered = 0
    stream.send(b"s", None, now=4.0)  # the held view goes out: the page shows "board", bare
    assert sink.writes == [b"W1", b"B2s"]
    sink.buffered = MAX_BUFFER + 1
    stream.send(b"", _view("board", 3), now=5.0)
    stream.detach(sink)
    fresh = FakeSink()
    stream.attach(fresh, now=6.0)
    assert fresh.writes == [b"W3"]


def test_a_component_frame_keeps_the_root_the_page_shows(stream: Stream) -> None:
    sink = FakeSink()
    stream.attach(sink, now=1.0)
    stream.send(b"", _view("board", 1), now=2.0)
    stream.send(b"", ViewFrame(b"C", whole=False), now=3.0)
    stream.send(b"", _view("board", 2), now=4.0)
    assert sink.writes == [b"W1", b"C", b"B2"]


def test_a_view_sent_without_a_stream_goes_wrapped(stream: Stream) -> None:
    stream.send(b"", _view("board", 1), now=1.0)
    sink = FakeSink()
    stream.attach(sink, now=2.0)
    assert stream.pick(_view("board", 2)) == b"W2"  # the held one went wrapped: root still unknown
    assert stream.pick(_view("board", 3)) == b"B3"
