"""The settle rule of broadcasting: an isolated change goes out at once; a burst that begins while
that flush is written cuts it short and is flushed once, when its changes stop coming."""

from __future__ import annotations

from pyvia import App, Context
from pyvia.ops.health import metrics_response
from pyvia.testing import Tab, TestClient

ROOM = "room:a"
SETTLE = 0.002
TICK = 0.025


def make_app(**options: object) -> App:
    app = App(broadcast_tick=TICK, **options)

    @app.page("/room")
    def room(c: Context) -> None:
        c.scope(ROOM)
        count = c.signal(0, "count", scope=ROOM)
        mine = c.signal(0, "mine")

        @c.action
        def bump() -> None:
            count.increment()
            mine.value += 1

        c.view(lambda: f'<p id="n">{count.value}</p>', share_render=True)

    return app


def open_room(client: TestClient, n: int) -> list[Tab]:
    tabs = [client.open("/room") for _ in range(n)]
    client.clock.advance(1)  # the loop is idle: the last flush is long past
    for tab in tabs:
        tab.new_events()
    return tabs


def counts(tabs: list[Tab]) -> list[list[object]]:
    return [[e.signals["_room_a__count"] for e in t.new_events() if "_room_a__count" in e.signals] for t in tabs]


def slices_of_16(app: App) -> None:
    """Make every flush that may be cut short yield after 16 tabs, however fast this machine is."""
    app.broadcaster.slice_seconds = 0.0


def test_an_isolated_change_reaches_every_tab_at_once() -> None:
    app = make_app()
    slices_of_16(app)
    with TestClient(app) as client:
        tabs = open_room(client, 40)
        app.signal(0, "count", scope=ROOM).increment()
        client.clock.run_due()  # loop turns only: no time passes
        assert counts(tabs) == [[1]] * 40
        assert app.broadcaster.stats()["flushes_cut_short"] == 0


def test_a_burst_cuts_the_first_flush_short_and_is_flushed_once_settled() -> None:
    app = make_app()
    slices_of_16(app)
    with TestClient(app) as client:
        tabs = open_room(client, 40)
        count = app.signal(0, "count", scope=ROOM)
        count.increment()  # the first change finds the loop idle: its flush starts at once
        assert client.clock.step()  # the first slice: 16 tabs
        assert counts(tabs) == [[1]] * 16 + [[]] * 24
        for _ in range(9):  # the burst goes on while that flush is written
            count.increment()
        client.clock.run_due()
        assert counts(tabs) == [[]] * 40  # the rest of the first flush was dropped
        assert app.broadcaster.stats()["flushes_cut_short"] == 1
        assert "pyvia_broadcast_flushes_cut_short_total 1" in metrics_response(app).body.decode()
        client.clock.advance(SETTLE * 0.75)
        count.increment()  # still coming: the flush waits for them to stop
        client.clock.advance(SETTLE * 0.75)
        assert counts(tabs) == [[]] * 40
        client.clock.advance(SETTLE * 0.5)
        assert counts(tabs) == [[11]] * 40  # one frame with the final value, every tab
        before = [t.writes for t in tabs]
        count.increment()  # after the burst's flush, the tick rules again
        client.clock.advance(TICK / 2)
        assert [t.writes for t in tabs] == before
        client.clock.advance(TICK / 2)
        assert counts(tabs) == [[12]] * 40


def test_a_burst_that_never_settles_is_flushed_a_tick_after_it_began() -> None:
    app = make_app()
    slices_of_16(app)
    with TestClient(app) as client:
        tabs = open_room(client, 40)
        count = app.signal(0, "count", scope=ROOM)
        began = client.clock.now()
        count.increment()
        client.clock.step()
        counts(tabs)
        seen: list[tuple[float, list[list[object]]]] = []
        for _ in range(30):  # a change every millisecond: never 2 ms of quiet
            count.increment()
            client.clock.advance(0.001)
            seen.append((client.clock.now() - began, counts(tabs)))
        flushed = [(i, at, got) for i, (at, got) in enumerate(seen) if any(got)]
        i, at, got = flushed[0]
        assert TICK <= at < TICK + 0.001  # the first millisecond step that reaches a tick after the burst began
        assert got == [[i + 2]] * 40  # every tab at once, with the value of that moment


def test_the_cut_short_flush_gives_back_its_signal_changes() -> None:
    app = make_app()
    slices_of_16(app)
    with TestClient(app) as client:
        tabs = open_room(client, 40)
        app.signal(0, "count", scope=ROOM).increment()
        client.clock.step()
        app.broadcast(ROOM)  # a new mark without a new value: the tabs not written still need count=1
        client.clock.advance(0.1)
        got = counts(tabs)
        assert got[16:] == [[1]] * 24
        assert got[:16] == [[1, 1]] * 16  # the slice already written gets the state again, the same


def test_an_actions_own_patches_come_before_the_burst_frame() -> None:
    app = make_app()
    slices_of_16(app)
    with TestClient(app) as client:
        tabs = open_room(client, 40)
        app.signal(0, "count", scope=ROOM).increment()
        client.clock.step()
        last = tabs[-1]
        last.action("bump")  # its own signal goes out now; the scope's frame after the settle
        events = last.new_events()
        assert [e.signals["_mine"] for e in events] == [1]
        client.clock.advance(SETTLE)
        assert [e.signals.get("_room_a__count") for e in last.new_events() if e.signals] == [2]


def test_settle_zero_keeps_the_plain_tick_policy() -> None:
    app = make_app(broadcast_settle=0)
    slices_of_16(app)
    with TestClient(app) as client:
        tabs = open_room(client, 40)
        count = app.signal(0, "count", scope=ROOM)
        count.increment()
        assert client.clock.step()  # one callback writes every tab
        assert counts(tabs) == [[1]] * 40
        count.increment()
        client.clock.advance(TICK - 0.001)
        assert counts(tabs) == [[]] * 40
        client.clock.advance(0.001)
        assert counts(tabs) == [[2]] * 40


def test_a_throttled_scope_is_never_cut_short() -> None:
    app = make_app()
    slices_of_16(app)
    app.broadcast_throttle(ROOM, 0.1)
    with TestClient(app) as client:
        tabs = open_room(client, 40)
        count = app.signal(0, "count", scope=ROOM)
        count.increment()
        assert client.clock.step()
        assert counts(tabs) == [[1]] * 40
        count.increment()
        client.clock.advance(0.099)
        assert counts(tabs) == [[]] * 40
        client.clock.advance(0.001)
        assert counts(tabs) == [[2]] * 40


def test_flush_broadcasts_finishes_a_flush_being_written() -> None:
    app = make_app()
    slices_of_16(app)
    with TestClient(app) as client:
        tabs = open_room(client, 40)
        app.signal(0, "count", scope=ROOM).increment()
        client.clock.step()
        assert app.flush_broadcasts() == 24
        assert counts(tabs) == [[1]] * 16 + [[1]] * 24
        client.clock.advance(1)
        assert counts(tabs) == [[]] * 40


def test_a_tab_destroyed_between_two_slices_is_skipped() -> None:
    app = make_app()
    slices_of_16(app)
    with TestClient(app) as client:
        tabs = open_room(client, 40)
        app.signal(0, "count", scope=ROOM).increment()
        client.clock.step()
        gone = tabs[30].context
        assert gone is not None
        app.destroy(gone)
        client.clock.run_due()
        got = counts(tabs)
        assert got[:30] == [[1]] * 30 and got[31:] == [[1]] * 9
        assert app.broadcaster.stats()["tab_frames"] == 39
