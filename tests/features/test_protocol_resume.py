"""A stream that reconnects resumes: it gets exactly the frames after the last id its page got,
from the tab's replay buffer, and a full render only when they are gone, the tab was revived or
the server restarted. No frame arrives twice."""

from __future__ import annotations

import asyncio
import json
import socket
import struct
import time
from collections.abc import Iterator
from urllib.parse import quote

import pytest

from pyvia import App, Context, Scope
from pyvia.protocol import parse_frame_id
from pyvia.testing import Tab, TestClient
from tests.features.wire import SseEvent, WireTab
from tests.helpers import RawClient, running_server
from tests.processes import ServerProcess, free_port

BURST = 100


def list_app(**options: object) -> App:
    """A page whose ``step`` appends an item (a patch that is wrong if applied twice or lost) and
    whose ``burst`` does it 100 times, one frame each, a millisecond apart."""
    app = App(**options)

    @app.page("/")
    def page(c: Context) -> None:
        items = c.signal(0, "items")

        def add() -> None:
            c.patch_elements(f'<li id="i{items.value}">{items.value}</li>', selector="#list", mode="append")
            items.value += 1

        @c.action
        def step() -> None:
            add()

        @c.action
        def rerender() -> None:
            add()
            c.sync()

        async def run_burst() -> None:
            for _ in range(BURST):
                add()
                c.sync_signals()
                await asyncio.sleep(0.001)

        @c.action
        def burst() -> None:
            c.spawn(run_burst())

        c.view(lambda: '<ul id="list">' + "".join(f'<li id="i{n}">{n}</li>' for n in range(items.value)) + "</ul>")

    return app


def applied(tab: Tab) -> list[tuple[str, str | None, str, str, dict[str, object]]]:
    """What the page applied: every event but those the stream opens with (each tab's snapshot is
    signed for its own id, so it is left out)."""
    return [
        (e.type, e.selector, e.mode, e.elements, {k: v for k, v in e.signals.items() if k != "_via_snap"})
        for e in tab.events
        if "_disconnected" not in e.signals
    ]


def frame_seqs(tab: Tab) -> list[int]:
    return [parse_frame_id(i)[1] for i in tab.event_ids]  # type: ignore[index]


# --- through the test client ---------------------------------------------------------------------


def test_a_tab_cut_off_mid_burst_gets_exactly_the_missing_frames() -> None:
    app = list_app()
    with TestClient(app) as client:
        tab, ref = client.open("/"), client.open("/")
        for i in range(BURST):
            if i == BURST // 2:
                tab.pause()  # from here on what is written to it piles up unread ...
            tab.action("step")
            ref.action("step")
        assert tab.unread_bytes > 0
        got = tab.last_event_id
        tab.disconnect()  # ... and is lost with the connection
        writes, before, ids_before = tab.writes, len(tab.events), len(tab.event_ids)
        tab.reconnect()
        assert tab.writes == writes + 2  # the missing frames in one write, then the connect event
        replayed = tab.events[before:]
        epoch, last = parse_frame_id(got)  # type: ignore[misc]
        assert tab.event_ids[ids_before] == f"{epoch}.{last + 1}"  # right after the last one the page got
        assert not any(e.view is not None for e in replayed), "no full render"
        assert len([e for e in replayed if e.selector == "#list"]) == BURST // 2
        assert applied(tab) == applied(ref)  # the same patches, in the same order: the same page
        assert frame_seqs(tab) == sorted(set(frame_seqs(tab)))  # no frame twice
        assert tab.context.stream.seq == frame_seqs(tab)[-1]
        assert app.replays.resumes == 1 and app.replays.replayed_frames == BURST // 2
        tab.action("step")
        assert applied(tab)[-2][3] == f'<li id="i{BURST}">{BURST}</li>'


def test_a_reconnect_that_missed_nothing_gets_nothing_again() -> None:
    with TestClient(list_app()) as client:
        tab = client.open("/")
        tab.action("step")
        tab.disconnect()
        before = len(tab.events)
        tab.reconnect()
        events = tab.events[before:]
        assert len(events) == 1 and events[0].signals["_disconnected"] is False  # the connect event alone
        assert not {"_items", "_via_snap"} & set(events[0].signals)


def test_frames_queued_while_down_follow_the_replayed_ones() -> None:
    with TestClient(list_app()) as client:
        tab, ref = client.open("/"), client.open("/")
        tab.action("step"), ref.action("step")
        tab.pause()
        tab.action("step"), ref.action("step")
        tab.disconnect()
        tab.action("step"), ref.action("step")  # no stream: it waits in the outbox
        tab.reconnect()
        assert applied(tab) == applied(ref)


def test_a_buffer_that_overflowed_gives_one_full_render() -> None:
    app = list_app(replay_tab_bytes=2048)
    with TestClient(app) as client:
        tab = client.open("/")
        for i in range(BURST):
            if i == BURST // 2:
                tab.pause()
            tab.action("step")
        assert tab.context.stream.replay.first > tab.context.stream.seq - BURST // 2  # the oldest were dropped
        tab.disconnect()
        before = len(tab.events)
        tab.reconnect()
        views = [e for e in tab.events[before:] if e.view is not None]
        assert len(views) == 1, "one full render"
        items = "".join(f'<li id="i{n}">{n}</li>' for n in range(BURST))
        assert views[0].view == '<ul id="list">' + items + "</ul>"
        assert not any(e.selector == "#list" for e in tab.events[before:]), "nothing replayed besides"
        assert app.replays.full_renders == 1 and app.replays.resumes == 0


def test_missed_frames_larger_than_a_view_give_a_full_render_instead() -> None:
    # every frame of this page is a new view: one full render is smaller than ten of them
    app = list_app()
    with TestClient(app) as client:
        tab, ref = client.open("/"), client.open("/")
        tab.action("rerender"), ref.action("rerender")
        tab.pause()
        for _ in range(10):
            tab.action("rerender"), ref.action("rerender")
        tab.disconnect()
        before = len(tab.events)
        tab.reconnect()
        assert sum(e.view is not None for e in tab.events[before:]) == 1 and tab.html == ref.html
        assert app.replays.full_renders == 1
        tab.pause()
        tab.action("step"), ref.action("step")  # one small frame missed: cheaper than a view
        tab.disconnect()
        tab.reconnect()
        assert app.replays.resumes == 1


def board_app() -> App:
    """A broadcast board: every ``inc`` of the route's count re-renders each tab's whole view (one
    render shared by the tabs), and ``note`` appends to one tab's own list, outside that view."""
    app = App(action_rate=0)

    @app.page("/")
    def page(c: Context) -> None:
        c.scope(Scope.ROUTE)
        n = c.signal(0, "n", scope=Scope.ROUTE)
        notes = c.signal(0, "notes")

        @c.action
        def inc() -> None:
            n.increment()

        @c.action
        def note() -> None:
            c.patch_elements(f'<li id="k{notes.value}">{notes.value}</li>', selector="#notes", mode="append")
            notes.value += 1

        c.view(lambda: f"<p id='n'>{n.value}</p>" + "x" * 1000, share_render=True)

    return app


def test_a_tab_whose_frames_are_views_keeps_none_of_them_and_still_resumes_after_the_last() -> None:
    """A frame with the whole view is never replayed (it is larger than the view), nor anything
    before it: no buffer holds such frames, they carry no id (the page keeps the id of the frame
    before, and a full render is what it gets if it names it), and what comes after the last view
    from the next frame with an id on is resumed exactly."""
    app = board_app()
    with TestClient(app) as client:
        tab, other = client.open("/"), client.open("/")
        opened = tab.last_event_id
        for _ in range(20):
            client.clock.advance(0.2)
            other.action("inc")
            app.flush_broadcasts()
        assert "<p id='n'>20</p>" in tab.html
        assert tab.context.stream.replay is None, "twenty broadcast views, none kept"
        assert tab.last_event_id == opened, "a view frame carries no id"
        tab.action("note")  # a small frame after the last view: kept, with its id, and read
        after_view = tab.last_event_id
        assert after_view != opened
        tab.pause()
        tab.action("note")  # and another one, missed
        assert tab.context.stream.replay is not None and len(tab.context.stream.replay.frames) == 2
        tab.disconnect()
        before = len(tab.events)
        tab.reconnect()
        assert app.replays.resumes == 1 and app.replays.full_renders == 0
        assert not any(e.view is not None for e in tab.events[before:])
        assert [e.elements for e in tab.events[before:] if e.selector == "#notes"] == ['<li id="k1">1</li>']
        client.clock.advance(0.2)
        other.action("inc")
        app.flush_broadcasts()  # a newer view: the notes' frames before it are not kept either
        assert tab.context.stream.replay is None
        tab.disconnect()
        tab.last_event_id = after_view  # the id before the view: the page may have missed it
        before = len(tab.events)
        tab.reconnect()
        assert app.replays.full_renders == 1
        views = [e.view for e in tab.events[before:] if e.view is not None]
        assert len(views) == 1 and views[0].startswith("<p id='n'>21</p>")


def test_an_id_from_another_stream_is_never_resumed_from() -> None:
    with TestClient(list_app()) as client:
        tab = client.open("/")
        tab.action("step")
        seq = tab.context.stream.seq
        tab.disconnect()
        tab.last_event_id = f"{'0' * 12}1.{seq}"  # the right number, another epoch (another process)
        before = len(tab.events)
        tab.reconnect()
        assert sum(e.view is not None for e in tab.events[before:]) == 1


def test_a_revived_tab_gets_a_full_render_whatever_id_it_sends() -> None:
    with TestClient(list_app()) as client:
        tab = client.open("/")
        tab.action("step")
        got = tab.last_event_id
        tab.expire()
        tab.last_event_id = got
        before = len(tab.events)
        tab.reconnect()
        assert sum(e.view is not None for e in tab.events[before:]) == 1


def test_a_quiet_tab_holds_no_buffer_and_a_destroyed_one_none_either() -> None:
    app = list_app(replay_idle=10.0)
    with TestClient(app) as client:
        tab = client.open("/")
        stream = tab.context.stream
        assert stream.replay is None and app.replays.total == 0  # the connect event starts no buffer
        tab.action("step")
        assert stream.replay is not None and app.replays.total > 0
        client.clock.advance(11.0)
        assert stream.replay is None and app.replays.total == 0 and len(app.replays) == 0
        tab.action("step")
        assert stream.replay is not None
        tab.expire()
        assert app.replays.total == 0 and len(app.replays) == 0


def test_the_buffers_together_stay_within_their_budget_oldest_first() -> None:
    app = list_app(replay_budget=4096)
    with TestClient(app) as client:
        tabs = [client.open("/") for _ in range(10)]
        for _ in range(3):
            for tab in tabs:
                tab.action("step")
        assert app.replays.total <= 4096
        assert tabs[-1].context.stream.replay is not None  # the tab written last keeps its buffer
        kept = [len(tab.context.stream.replay.frames) for tab in tabs if tab.context.stream.replay is not None]
        assert sum(kept) < 4 * len(tabs) and app.replays.evicted > 0  # 4 frames each were written
        tabs[0].pause()
        tabs[0].action("step")
        tabs[0].disconnect()
        tabs[0].reconnect()  # its one missed frame is in its new buffer
        assert app.replays.resumes == 1


def test_replay_counts_in_metrics() -> None:
    app = list_app()
    with TestClient(app) as client:
        tab = client.open("/")
        tab.pause()
        tab.action("step")
        tab.disconnect()
        tab.reconnect()
        text = client.get("/metrics").body.decode()
    for line in (
        "pyvia_stream_resumes_total 1",
        "pyvia_stream_replayed_frames_total 1",
        "pyvia_replay_buffers 1",
        "pyvia_stream_full_renders_total 0",
    ):
        assert line in text.splitlines(), line
    assert any(
        line.startswith("pyvia_replay_buffer_bytes ") and float(line.split()[1]) > 0 for line in text.splitlines()
    )


@pytest.mark.parametrize("coding", ["zstd", "br", "gzip"])
def test_a_compressed_stream_resumes_with_a_fresh_encoder(coding: str) -> None:
    with TestClient(list_app(), accept_encoding=coding) as client:
        tab, ref = client.open("/"), client.open("/")
        for i in range(20):
            if i == 10:
                tab.pause()
            tab.action("step"), ref.action("step")
        tab.disconnect()
        tab.reconnect()  # the test client decodes the new body from its start: a new encoder
        assert tab.stream_coding == coding and applied(tab) == applied(ref)


# --- over the native server ----------------------------------------------------------------------


@pytest.fixture
def server() -> Iterator[tuple[str, int]]:
    with running_server(list_app()) as address:
        yield address


def burst_items(events: list[SseEvent]) -> list[str]:
    return [line for e in events for line in e.data if line.startswith("elements <li")]


def read_until_items(tab: WireTab, count: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while len(burst_items(tab.received)) < count:
        assert time.monotonic() < deadline, f"{len(burst_items(tab.received))} of {count} items"
        tab.read_frame()


def test_a_socket_cut_mid_burst_resumes_with_only_the_missing_frames(server: tuple[str, int]) -> None:
    tab, ref = WireTab(*server), WireTab(*server)
    for t in (tab, ref):
        t.open_stream()
        t.read_frame()
        assert t.action("burst") == 200
    read_until_items(tab, BURST // 2)
    assert tab.stream is not None
    tab.stream.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    tab.close_stream()  # a reset, while the burst goes on: what was in flight is lost
    first_stream = len(tab.received)
    got = tab.last_event_id
    assert tab.open_stream(last_event_id=got) == 200
    read_until_items(tab, BURST)
    read_until_items(ref, BURST)
    ref.close_stream()
    tab.close_stream()
    resumed = tab.received[first_stream:]
    epoch, last = parse_frame_id(got)  # type: ignore[misc]
    ids = [parse_frame_id(e.id) for e in resumed if e.id]
    assert ids[0] == (epoch, last + 1), "the resumed stream starts right after the page's last frame"
    assert [seq for _, seq in ids] == list(range(last + 1, last + 1 + len(ids)))  # none twice, none skipped
    assert not any('data: elements <div id="via-view">' in e.data for e in resumed), "no full render"
    assert (
        burst_items(tab.received)
        == burst_items(ref.received)
        == [f'elements <li id="i{n}">{n}</li>' for n in range(BURST)]
    )


def test_after_a_restart_the_tab_is_revived_as_before() -> None:
    server = ServerProcess("tests.features.test_protocol_resume:restart_app", free_port())
    server.start()
    try:
        tab = WireTab("127.0.0.1", server.port)
        tab.open_stream()
        tab.read_frame()
        tab.action("step")
        snapshot = next(
            json.loads(line[len("signals ") :])
            for e in tab.read_frame()
            for line in e.data
            if line.startswith("signals ")
        )["_via_snap"]
        got = tab.last_event_id
        tab.close_stream()
        server.restart()
        # Datastar's retry carries the last id: the new process does not know the tab, so it asks
        # for the snapshot, and the page reopens its stream with a POST (no id: a new request).
        with RawClient("127.0.0.1", server.port) as client:
            query = quote(json.dumps({"via_ctx": tab.ctx}))
            client.send(
                f"GET /_sse?datastar={query} HTTP/1.1\r\nHost: x\r\nCookie: {tab.cookie}\r\n"
                f"last-event-id: {got}\r\n\r\n".encode()
            )
            answer = client.read_response()
        assert answer.header("content-type") == "application/json" and "_via_revive" in json.loads(answer.body)
        body = json.dumps({"via_ctx": tab.ctx, "_via_snap": snapshot}).encode()
        with RawClient("127.0.0.1", server.port) as client:
            client.send(
                f"POST /_sse HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\nCookie: {tab.cookie}\r\n"
                f"Origin: http://127.0.0.1:{server.port}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\n\r\n".encode()
                + body
            )
            assert client.read_head().status == 200
            text = client.read_chunk().decode()
        assert 'data: elements <div id="via-view"><ul id="list"><li id="i0">0</li></ul></div>' in text  # revived
        epoch, _ = parse_frame_id(got)  # type: ignore[misc]
        assert f"id: {epoch}." not in text  # the new process numbers its frames anew
    finally:
        server.stop()


restart_app = list_app()
