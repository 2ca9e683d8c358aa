"""What an idle tab holds: nothing of its own for what its page did not declare, and no copy
of what its route or session share (counted, not timed: bench/RESULTS.md has the RSS)."""

from __future__ import annotations

from pyvia import App, Context
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
        replay = ca.stream.replay  # the connect event, kept for a reconnect: a list, not a deque
        assert replay is not None and type(replay.frames) is list and len(replay.frames) == 1


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
