"""Connect timeout, cleanup grace, reconnect timeout, hooks, intervals and keep-alives."""

from __future__ import annotations

import gc
import weakref

from pyvia import App, Context, protocol
from pyvia.lifecycle import State
from pyvia.testing import TestClient


def make_app(log: list[str]) -> App:
    app = App(connect_timeout=30, cleanup_delay=5, reconnect_timeout=60, keep_alive=15)

    @app.page("/")
    def page(c: Context) -> None:
        ticks = c.signal(0, "ticks")
        c.on_disconnect(lambda: log.append("disconnect"))
        c.on_cleanup(lambda ctx: log.append(f"cleanup {ctx.route.pattern}"))

        @c.action
        def start() -> None:
            def tick() -> None:
                ticks.value += 1

            c.set_interval(tick, 1.0)

        @c.action
        def bump() -> None:
            ticks.value += 100

        c.view(lambda: f'<p id="t">{ticks.value}</p>')

    return app


def test_page_whose_stream_never_connects_is_destroyed_after_connect_timeout() -> None:
    log: list[str] = []
    app = make_app(log)
    with TestClient(app) as client:
        client.get("/")
        assert len(app.contexts) == 1
        client.clock.advance(29)
        assert len(app.contexts) == 1
        client.clock.advance(2)
        assert app.contexts == {}
        assert log == ["cleanup /"]


def test_connected_tab_is_never_expired() -> None:
    app = make_app([])
    with TestClient(app) as client:
        tab = client.open("/")
        client.clock.advance(3600)
        assert tab.context is not None and tab.context.state is State.CONNECTED


def test_disconnect_runs_hook_and_cleanup_follows_after_grace() -> None:
    log: list[str] = []
    app = make_app(log)
    with TestClient(app) as client:
        tab = client.open("/")
        tab.disconnect()
        assert log == ["disconnect"]
        client.clock.advance(4)
        assert tab.context is not None
        client.clock.advance(2)
        assert tab.context is None
        assert log == ["disconnect", "cleanup /"]


def test_reconnect_within_grace_keeps_the_context() -> None:
    app = make_app([])
    with TestClient(app) as client:
        tab = client.open("/")
        ctx = tab.context
        tab.disconnect()
        client.clock.advance(3)
        tab.reconnect()
        client.clock.advance(10)
        assert tab.context is ctx and ctx.state is State.CONNECTED


def test_events_made_while_disconnected_wait_for_the_reconnect() -> None:
    app = make_app([])
    with TestClient(app) as client:
        tab = client.open("/")
        tab.disconnect()
        tab.action("bump")
        client.clock.advance(50)  # past the 5 s grace, within the 60 s reconnect timeout
        assert tab.context is not None
        tab.new_events()
        tab.reconnect()
        assert any(e.signals.get("_ticks") == 100 for e in tab.new_events())
        assert tab.signals["_ticks"] == 100


def test_reconnect_timeout_counts_from_the_last_action() -> None:
    app = make_app([])
    with TestClient(app) as client:
        tab = client.open("/")
        tab.disconnect()
        client.clock.advance(2)
        tab.action("bump")
        client.clock.advance(59)
        assert tab.context is not None
        client.clock.advance(3)
        assert tab.context is None


def test_interval_runs_sends_changes_and_stops_on_destroy() -> None:
    app = make_app([])
    with TestClient(app) as client:
        tab = client.open("/")
        tab.action("start")
        client.clock.advance(3.5)
        assert tab.signals["_ticks"] == 3
        ctx = tab.context
        app.destroy(ctx)
        client.clock.advance(5)
        assert ctx.signals == {}  # dropped at destroy


def test_idle_stream_gets_a_keep_alive_comment() -> None:
    app = make_app([])
    with TestClient(app) as client:
        tab = client.open("/")
        before = tab.writes
        client.clock.advance(10)
        assert tab.writes == before
        client.clock.advance(10)
        assert tab.writes == before + 1  # a comment: no event parsed
        assert tab.new_events()[-1].signals == {
            "_disconnected": False,
            "_via_filter": protocol.FILTER_OPEN,
            "_via_lost": False,
        }


def test_destroyed_context_leaves_no_reference_cycle() -> None:
    app = make_app([])
    with TestClient(app) as client:
        tab = client.open("/")
        tab.action("start")
        ref = weakref.ref(tab.context)
        tab.disconnect()
        client.clock.advance(61)  # the action holds it for the reconnect timeout
        assert not app.contexts
        gc.disable()
        try:
            del tab
            assert ref() is None
        finally:
            gc.enable()


def test_burst_of_expiries_is_destroyed_in_slices() -> None:
    app = make_app([])
    with TestClient(app) as client:
        for _ in range(300):
            client.get("/")
        client.clock.advance(31)
        assert app.contexts == {}
