"""What an idle tab holds: nothing of its own for what its page did not declare, and no copy
of what its route or session share (counted, not timed: bench/RESULTS.md has the RSS)."""

from __future__ import annotations

from pyvia import App, Context
from pyvia.protocol import PATCH_ELEMENTS
from pyvia.testing import TestClient


def make_app() -> App:
    app = App()

    @app.page("/")
    def page(c: Context) -> None:
        n = c.signal(0, "n")

        @c.action
        def inc() -> None:
            n.value += 1

        c.view(lambda: f"<p>{n.value}</p>")

    @app.page("/hooks")
    def hooks(c: Context) -> None:
        c.on_connect(lambda: None)
        c.on_cleanup(lambda: None)
        c.append_head("<meta name='a'>")
        c.set_cookie("k", "v")
        c.view(lambda: "<p>hooks</p>")

    return app


def test_an_idle_tab_shares_its_empty_declarations_and_its_route_and_session_strings() -> None:
    with TestClient(make_app()) as client:
        a, b = client.open("/"), client.open("/")
        ca, cb = a.context, b.context
        for name in (
            "cleanup_hooks",
            "disconnect_hooks",
            "connect_hooks",
            "_timers",
            "head_tags",
            "foot_tags",
            "cookies_out",
        ):
            assert getattr(ca, name) == () and getattr(ca, name) is getattr(cb, name), name
        assert ca._components is cb._components and ca._shared is cb._shared and not ca._components
        assert all(x is y for x, y in zip(ca.scope_names, cb.scope_names, strict=True))  # route, session, global
        assert ca.actions["inc"].url is cb.actions["inc"].url
        # nothing made for later: no replay buffer for the connect event (a page that lost it
        # reconnects to a full render), no list of events waiting for a stream, no tab state, no
        # deadline entry (the connect deadline is the waiting order's), no parse of the page's cookies
        assert ca.stream.replay is None and ca.stream.pending is None and ca.held_tab_state is None
        assert client.app.runtime.registry.deadlines == []
        assert cb.request._cookies is None and cb.request.session_cache is None
        assert cb.request.headers._packed is not None  # its headers as shared strings until read
        host = ca.request.headers._packed[ca.request.headers._packed_names.index("host")]
        assert host is cb.request.headers._packed[cb.request.headers._packed_names.index("host")]  # one string
        assert set(cb.request.cookies) == {client.app.session_cookie}  # parsed again when asked


def test_a_tab_that_lost_its_connect_event_reconnects_to_a_full_render_and_later_frames_resume() -> None:
    with TestClient(make_app()) as client:
        tab = client.open("/")
        connect_event = tab.last_event_id
        assert connect_event is not None
        tab.disconnect()
        tab.last_event_id = None  # as a page that never got the connect event
        tab.connect()
        assert [e for e in tab.new_events() if e.type == PATCH_ELEMENTS]  # brought back by a full render
        tab.action("inc")
        tab.disconnect()
        tab.connect()  # it had every frame: nothing is rendered again
        assert not [e for e in tab.new_events() if e.type == PATCH_ELEMENTS]


def test_what_a_page_declares_is_its_own() -> None:
    app = make_app()
    with TestClient(app) as client:
        one, two = client.open("/hooks"), client.open("/hooks")
        c1, c2 = one.context, two.context
        assert len(c1.connect_hooks) == 1 and len(c1.cleanup_hooks) == 1 and c1.connect_hooks is not c2.connect_hooks
        assert c1.head_tags == ["<meta name='a'>"] and c1.cookies_out == ()  # sent with the page, then dropped
        page = client.get("/hooks")
        assert any(k == "set-cookie" and v.startswith("k=v") for k, v in page.headers)
        assert client.open("/").context.connect_hooks == ()  # another tab's hooks did not land in the shared value
