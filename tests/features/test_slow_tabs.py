"""A tab that stops reading never delays the others and never holds more than its limit."""

from __future__ import annotations

from pyvia import App, Context, Scope
from pyvia.testing import TestClient


def make_app(**options: object) -> App:
    app = App(**options)

    @app.page("/")
    def page(c: Context) -> None:
        c.scope(Scope.ROUTE)
        n = c.signal(0, "n", scope=Scope.ROUTE)

        @c.action
        def inc() -> None:
            n.increment()

        @c.action
        def ping() -> None:
            c.exec_script("console.log('ping')")

        c.view(lambda: f"<p id='n'>{n.value}</p>" + "x" * 2000, share_render=True)

    return app


def test_stalled_tab_gets_view_frames_coalesced_while_others_get_every_frame() -> None:
    app = make_app(max_stream_buffer=5000)
    with TestClient(app) as client:
        fast, slow = client.open("/"), client.open("/")
        slow.pause()
        for _ in range(20):
            fast.action("inc")
            app.flush_broadcasts()
        assert fast.signals["_route__n"] == 20
        assert "<p id='n'>20</p>" in fast.html
        # the stalled tab's socket holds at most a few frames over its limit, not twenty renders
        assert slow.unread_bytes < 5000 + 2 * 2200
        slow.resume()
        assert slow.signals["_route__n"] == 20  # signal events are never dropped
        fast.action("inc")
        app.flush_broadcasts()
        assert "<p id='n'>21</p>" in slow.html  # the held view comes with the next frame that fits


def test_scripts_are_never_dropped_for_a_slow_tab() -> None:
    app = make_app(max_stream_buffer=3000)
    with TestClient(app) as client:
        tab = client.open("/")
        tab.pause()
        tab.action("inc")
        app.flush_broadcasts()
        tab.action("ping")
        tab.resume()
        assert tab.scripts == ["console.log('ping')"]


def test_tab_over_the_limit_for_long_is_disconnected_and_reconnects_to_a_full_render() -> None:
    app = make_app(max_stream_buffer=3000, slow_tab_timeout=30, keep_alive=3)
    with TestClient(app) as client:
        other, slow = client.open("/"), client.open("/")
        slow.pause()
        other.action("inc")
        app.flush_broadcasts()
        other.action("inc")
        app.flush_broadcasts()
        assert slow.unread_bytes > 3000
        client.clock.advance(20)
        assert slow.is_connected
        client.clock.advance(15)
        assert not slow.is_connected
        slow.new_events()
        slow.reconnect()
        assert "<p id='n'>2</p>" in slow.html


def test_far_behind_tab_is_cut_at_once() -> None:
    app = make_app(max_stream_buffer=1000)
    with TestClient(app) as client:
        other, slow = client.open("/"), client.open("/")
        slow.pause()
        for _ in range(200):  # signal events are always written: they pile up past 4x the limit
            other.action("inc")
            app.flush_broadcasts()
        assert not slow.is_connected
        assert slow.unread_bytes < 4 * 1000 + 100


def test_a_tab_the_server_cut_off_and_that_never_returns_is_cleaned_up() -> None:
    app = make_app(max_stream_buffer=1000)
    with TestClient(app) as client:
        other, slow = client.open("/"), client.open("/")
        slow.pause()
        for _ in range(200):
            other.action("inc")
            app.flush_broadcasts()
        assert not slow.is_connected
        client.clock.advance(1.1)
        assert app.count_clients("route:/") == 1  # no longer counted as connected
        client.clock.advance(70)
        assert slow.context is None  # destroyed after its timeouts, like any disconnected tab
        assert other.context is not None
