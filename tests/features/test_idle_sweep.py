"""The periodic sweep visits only the tabs with something due: an idle tab costs it nothing.

The sweep counts what it looks at (``Registry.visits``): streams checked for a stall, for a
keep-alive, for an idle encoder, and streams whose unsent bytes are added up. These tests count
that work (never time) with many idle tabs open.
"""

from __future__ import annotations

from pyvia import App, Context, Scope
from pyvia.testing import TestClient

TABS = 40


def make_app(**options: object) -> App:
    app = App(**options)

    @app.page("/")
    def page(c: Context) -> None:
        c.scope(Scope.ROUTE)
        n = c.signal(0, "n", scope=Scope.ROUTE)

        @c.action
        def inc() -> None:
            n.increment()

        c.view(lambda: f"<p id='n'>{n.value}</p>")

    return app


def visits(app: App) -> dict[str, int]:
    return dict(app.runtime.registry.visits)


def test_idle_tabs_are_not_visited_between_their_keep_alives() -> None:
    app = make_app(keep_alive=15, encoder_idle_release=60, sweep_interval=1)
    with TestClient(app) as client:
        tabs = [client.open("/") for _ in range(TABS)]
        client.clock.advance(2.5)  # the sweeps after the connects: each stream written once, measured
        settled = visits(app)
        assert settled["unsent"] <= 2 * TABS  # each written stream is measured at most twice
        client.clock.advance(10)  # ten sweeps, and two passes over open streams, nothing due
        quiet = visits(app)
        assert quiet == settled  # no tab was looked at
        wire = [t.wire_bytes for t in tabs]
        client.clock.advance(5)  # 17.5 s after the connects: every keep-alive fell due once
        due = visits(app)
        assert due["keep_alive"] - quiet["keep_alive"] == TABS
        assert all(t.wire_bytes > w for t, w in zip(tabs, wire, strict=True))  # each got its comment
        assert due["stall"] == 0 and due["idle_release"] == 0
        client.clock.advance(12)  # until the next keep-alives: the pinged streams are measured, then left
        after = visits(app)
        assert after["keep_alive"] == due["keep_alive"]
        assert after["unsent"] - due["unsent"] <= 2 * TABS
        assert all(t.is_connected for t in tabs)


def test_a_tab_that_wrote_is_the_only_one_measured_and_is_not_pinged() -> None:
    app = make_app(keep_alive=15, sweep_interval=1)
    with TestClient(app) as client:
        tabs = [client.open("/") for _ in range(TABS)]
        client.clock.advance(3)
        before = visits(app)
        client.clock.advance(9)  # 12 s after the connects
        tabs[0].action("inc")  # a route broadcast: every tab's stream is written
        app.flush_broadcasts()
        client.clock.advance(3)
        measured = visits(app)["unsent"] - before["unsent"]
        assert TABS <= measured <= 2 * TABS
        wire = tabs[1].wire_bytes
        client.clock.advance(5)  # 20 s: the connect keep-alives fell due, but every tab wrote at 12 s
        assert tabs[1].wire_bytes == wire  # no comment: it wrote less than 15 s ago
        after = visits(app)
        assert after["keep_alive"] - before["keep_alive"] == TABS  # each visited once, and put off
        client.clock.advance(6)  # 26 s: 14 s since the write, nothing due yet
        assert visits(app)["keep_alive"] == after["keep_alive"]
        client.clock.advance(7)  # 33 s: due at 27 s, and a pass came since (one every 5 s)
        assert tabs[1].wire_bytes > wire
        assert visits(app)["keep_alive"] == after["keep_alive"] + TABS


def test_only_tabs_with_a_live_encoder_are_checked_for_an_idle_release() -> None:
    app = make_app(keep_alive=15, encoder_idle_release=30, sweep_interval=1)
    with TestClient(app, accept_encoding="zstd") as client:
        tabs = [client.open("/") for _ in range(TABS)]
        client.clock.advance(30)
        assert visits(app)["idle_release"] == 0  # connected zstd tabs hold no compressor yet
        a = tabs[0]
        a.action("inc")  # every tab of the route gets the event: each builds its compressor
        app.flush_broadcasts()
        assert app.compression.budget.count == TABS
        client.clock.advance(40)
        released = visits(app)["idle_release"]
        assert released > 0
        assert app.compression.budget.count == 0  # all released after 30 s idle
        client.clock.advance(60)
        assert visits(app)["idle_release"] == released  # nothing live: nothing looked at


def test_only_a_tab_over_its_buffer_is_checked_for_a_stall() -> None:
    app = make_app(max_stream_buffer=1000, slow_tab_timeout=10, keep_alive=3, sweep_interval=1)
    with TestClient(app) as client:
        tabs = [client.open("/") for _ in range(TABS)]
        slow = tabs[1]
        slow.pause()
        for _ in range(50):
            tabs[0].action("inc")
            app.flush_broadcasts()
            if slow.unread_bytes > 1000:
                break
        assert slow.is_connected and slow.unread_bytes > 1000
        client.clock.advance(5)
        checked = visits(app)["stall"]
        assert 0 < checked <= 5  # the one slow stream, once a pass
        client.clock.advance(10)
        assert not slow.is_connected  # stalled past its patience: ended
        assert all(t.is_connected for t in tabs if t is not slow)
        ended = visits(app)["stall"]
        client.clock.advance(10)
        assert visits(app)["stall"] == ended  # nothing over: nothing checked
