"""Scopes and broadcasting: who receives what, and who must not."""

from __future__ import annotations

import pytest

from pyvia import App, Context, DeclarationError, Scope, protocol
from pyvia.testing import Tab, TestClient


def make_app(**options: object) -> App:
    app = App(**options)

    @app.page("/room/{name}")
    def room(c: Context, name: str) -> None:
        c.scope(f"room:{name}")
        messages = c.signal([], "messages", scope=f"room:{name}")
        draft = c.signal("", "draft", writable=True)
        visits = c.signal(0, "visits", scope=Scope.GLOBAL)
        mine = c.signal(0, "mine", scope=Scope.SESSION)
        route_hits = c.signal(0, "hits", scope=Scope.ROUTE)
        note = c.signal("", "note", scope=f"room:{name}", writable=True)

        @c.action
        def send() -> None:
            messages.mutate(lambda m: [*m, draft.value])
            draft.value = ""

        @c.action
        def visit() -> None:
            visits.increment()
            mine.increment()
            route_hits.increment()

        @c.action
        def shout() -> None:
            c.broadcast()

        @c.action
        def move() -> None:
            c.remove_scope(f"room:{name}")
            c.add_scope("room:elsewhere")

        c.view(lambda: f'<ul id="m">{"".join(f"<li>{m}</li>" for m in messages.value)}</ul>{note.value}')

    @app.page("/lobby")
    def lobby(c: Context) -> None:
        visits = c.signal(0, "visits", scope=Scope.GLOBAL)
        c.view(lambda: f'<p id="v">{visits.value}</p>')

    return app


def received(tab: Tab, signal_id: str) -> list[object]:
    return [e.signals[signal_id] for e in tab.new_events() if signal_id in e.signals]


def test_custom_scope_shares_one_value_and_reaches_only_its_members() -> None:
    app = make_app()
    with TestClient(app) as client:
        a, b, other = client.open("/room/a"), client.open("/room/a"), client.open("/room/b")
        for t in (a, b, other):
            t.new_events()
        a.action("send", draft="hello")
        assert b.signals["_room_a__messages"] == ["hello"]
        assert a.signals["_room_a__messages"] == ["hello"]
        assert "<li>hello</li>" in b.html
        assert other.new_events() == []
        assert "_room_a__messages" not in other.signals
        assert a.signals["draft"] == ""  # the tab signal went to its own tab only
        assert "draft" not in [k for e in b.new_events() for k in e.signals]


def test_redeclaring_keeps_the_shared_value_and_new_tabs_get_it_in_the_page() -> None:
    app = make_app()
    with TestClient(app) as client:
        a = client.open("/room/a")
        a.action("send", draft="first")
        late = client.open("/room/a")
        assert late.signals["_room_a__messages"] == ["first"]
        assert "<li>first</li>" in late.html


def test_global_session_and_route_scopes() -> None:
    app = make_app()
    with TestClient(app) as client, TestClient(app) as other_browser:
        a = client.open("/room/a")
        same_session = client.open("/room/b")
        lobby = other_browser.open("/lobby")
        stranger = other_browser.open("/room/c")
        a.action("visit")
        a.action("visit")
        client.clock.advance(0.1)
        assert lobby.signals["_global__visits"] == 2  # GLOBAL: every page that declared it
        assert same_session.signals["_session__mine"] == 2  # SESSION: same browser session
        assert stranger.signals.get("_session__mine") == 0  # its own session's value, never ours
        assert stranger.signals["_route__hits"] == 2  # ROUTE: same pattern /room/{name}
        assert "_session__mine" not in lobby.signals


def test_session_scope_name_is_a_hash_never_the_cookie() -> None:
    app = make_app()
    with TestClient(app) as client:
        tab = client.open("/room/a")
        cookie = client.cookies["via_session_id"]
        assert all(cookie not in name for name in tab.context.scopes)
        assert Scope.session(cookie) in tab.context.scopes


def test_shared_signals_are_server_owned_unless_declared_client_writable() -> None:
    app = make_app()
    with TestClient(app) as client:
        a, b = client.open("/room/a"), client.open("/room/a")
        a.action("send", draft="x", room_a__messages=["forged"])
        assert b.signals["_room_a__messages"] == ["x"]
        a.action("send", draft="y", room_a__note="hi all")
        client.clock.advance(0.03)
        assert b.signals["room_a__note"] == "hi all"
        a.action("send", draft="z", room_a__note=["not", "a", "string"])  # wrong type: refused
        assert app.scopes.get("room:a").signals["note"].value == "hi all"


def test_k_actions_in_one_tick_make_one_frame_per_tab() -> None:
    app = make_app(broadcast_tick=0.025)
    with TestClient(app) as client:
        a, b = client.open("/room/a"), client.open("/room/a")
        client.clock.advance(1)
        a.action("send", draft="0")  # the first flush goes at once
        b.new_events()
        before = b.writes
        for i in range(1, 6):
            a.action("send", draft=str(i))
        assert b.writes == before  # marked, not yet flushed: the tick has not passed
        client.clock.advance(0.03)
        assert b.writes == before + 1
        assert b.signals["_room_a__messages"] == [str(i) for i in range(6)]


def test_flush_broadcasts_forces_a_flush() -> None:
    app = make_app()
    with TestClient(app) as client:
        a, b = client.open("/room/a"), client.open("/room/a")
        a.action("send", draft="0")
        a.action("send", draft="1")  # inside the tick: waiting
        assert app.flush_broadcasts() == 2
        assert b.signals["_room_a__messages"] == ["0", "1"]


def test_throttle_delivers_the_last_state() -> None:
    app = make_app()
    app.broadcast_throttle("room:*", 0.5)
    with TestClient(app) as client:
        a, b = client.open("/room/a"), client.open("/room/a")
        client.clock.advance(1)
        a.action("send", draft="0")
        b.new_events()
        for i in range(1, 4):
            a.action("send", draft=str(i))
            client.clock.advance(0.1)
        assert b.new_events() == []
        client.clock.advance(0.3)
        assert b.signals["_room_a__messages"] == ["0", "1", "2", "3"]


def test_wildcard_broadcast_reaches_every_matching_scope() -> None:
    app = make_app()
    with TestClient(app) as client:
        a, b, lobby = client.open("/room/a"), client.open("/room/b"), client.open("/lobby")
        for t in (a, b, lobby):
            t.new_events()
        app.broadcast("room:*")
        app.flush_broadcasts()
        assert [e.type for e in a.new_events()] == [protocol.PATCH_ELEMENTS]
        assert [e.type for e in b.new_events()] == [protocol.PATCH_ELEMENTS]
        assert lobby.new_events() == []


def test_tab_primary_scope_broadcast_is_this_tab_only_and_bare_names_are_refused() -> None:
    app = App()

    @app.page("/")
    def page(c: Context) -> None:
        @c.action
        def shout() -> None:
            c.broadcast()

        c.view(lambda: "<p id='p'>x</p>")

    with TestClient(app) as client:
        a, b = client.open("/"), client.open("/")
        a.new_events()
        b.new_events()
        a.action("shout")
        assert [e.type for e in a.new_events()] == [protocol.PATCH_ELEMENTS]
        assert b.new_events() == []
    for bare in ("tab", "route", "session"):
        with pytest.raises(DeclarationError):
            app.broadcast(bare)


def test_live_scope_migration() -> None:
    app = make_app()
    with TestClient(app) as client:
        mover, stay = client.open("/room/a"), client.open("/room/a")
        mover.action("move")
        assert "room:a" not in mover.context.scopes and "room:elsewhere" in mover.context.scopes
        mover.new_events()
        stay.action("send", draft="after")
        client.clock.advance(0.1)
        assert received(mover, "_room_a__messages") == []
        app.broadcast("room:elsewhere")
        app.flush_broadcasts()
        assert mover.new_events()


def test_scope_signals_are_freed_with_the_last_member_and_app_signal_reaches_them() -> None:
    app = make_app()
    with TestClient(app) as client:
        a = client.open("/room/a")
        a.action("send", draft="x")
        assert app.scopes.get("room:a") is not None
        a.expire()
        assert app.scopes.get("room:a") is None
        ticker = app.signal([], "messages", scope="room:a")
        b = client.open("/room/a")
        ticker.value = ["from a timer"]
        app.flush_broadcasts()
        assert b.signals["_room_a__messages"] == ["from a timer"]
        b.expire()
        assert app.scopes.get("room:a") is not None  # kept: the app holds it


def test_share_render_renders_once_for_all_tabs() -> None:
    renders: list[int] = []
    app = App()

    @app.page("/")
    def page(c: Context) -> None:
        c.scope(Scope.ROUTE)
        n = c.signal(0, "n", scope=Scope.ROUTE)

        @c.action
        def inc() -> None:
            n.increment()

        def view() -> str:
            renders.append(1)
            return f"<p id='n'>{n.value}</p>"

        c.view(view, share_render=True)

    with TestClient(app) as client:
        tabs = [client.open("/") for _ in range(5)]
        renders.clear()
        tabs[0].action("inc")
        app.flush_broadcasts()
        assert len(renders) == 1
        assert all("<p id='n'>1</p>" in t.html for t in tabs)


def test_share_render_needs_a_shared_primary_scope() -> None:
    app = App()

    @app.page("/")
    def page(c: Context) -> None:
        c.view(lambda: "<p></p>", share_render=True)

    with TestClient(app) as client, pytest.raises(DeclarationError, match="share_render"):
        client.get("/")


def test_concurrent_async_increments_lose_nothing() -> None:
    import asyncio

    app = App()

    @app.page("/")
    def page(c: Context) -> None:
        total = c.signal(0, "total", scope=Scope.GLOBAL)
        items = c.signal([], "items", scope=Scope.GLOBAL)

        @c.action
        async def add() -> None:
            await asyncio.sleep(0)
            total.increment()
            await asyncio.sleep(0)
            items.mutate(lambda xs: [*xs, len(xs)])

        c.view(lambda: "<p></p>")

    with TestClient(app) as client:
        tabs = [client.open("/") for _ in range(4)]
        ctx_ids = [t.id for t in tabs]

        async def hammer() -> None:
            from pyvia.http import Headers, Request

            async def one(ctx_id: str) -> None:
                import orjson

                req = Request(
                    "POST",
                    "/_action/add",
                    headers=Headers(
                        [
                            ("host", "testserver"),
                            ("origin", "http://testserver"),
                            ("content-type", "application/json"),
                            ("cookie", f"via_session_id={client.cookies['via_session_id']}"),
                        ]
                    ),
                    body=orjson.dumps({"via_ctx": ctx_id}),
                )
                result = app.handle(req)
                response = await result if asyncio.iscoroutine(result) else result
                assert response.status == 200

            await asyncio.gather(*(one(ctx_ids[i % 4]) for i in range(200)))

        client.loop.run_until_complete(hammer())
        assert app.scopes.get("global").signals["total"].value == 200
        assert app.scopes.get("global").signals["items"].value == list(range(200))


def test_global_state_and_session_data() -> None:
    app = App(max_sessions=2)

    @app.page("/")
    def page(c: Context) -> None:
        app.global_state.increment("views")
        c.session_data["seen"] = c.session_data.get("seen", 0) + 1
        c.view(lambda: f"<p>{c.session_data['seen']}</p>")

    with TestClient(app) as client:
        client.get("/")
        client.get("/")
        assert app.global_state["views"] == 2
        assert app.session_data(client.cookies["via_session_id"])["seen"] == 2
        for _ in range(3):
            with TestClient(app) as other:
                other.get("/")
        assert app.sessions.evictions >= 1
        assert len(app.sessions) == 2


def test_keys_removed_from_dict_signals_leave_the_browser_too() -> None:
    """Datastar merges a signal patch into what the browser holds: a key that a tab or scoped
    dict signal lost is sent as "" (what the page reads for a missing key): left out, or sent as
    null (which Datastar deletes without re-running what reads it), the tab would keep showing it."""
    app = App()

    @app.page("/")
    def page(c: Context) -> None:
        errors = c.signal({"email": "taken", "name": "short"}, "errors")
        board = c.signal({"ann": 3, "bob": 1}, "board", scope=Scope.ROUTE)

        @c.action
        def fix() -> None:
            errors.value = {"name": "short"}
            board.value = {"ann": 4}

        c.view(lambda: "<p></p>")

    with TestClient(app) as client:
        tab, other = client.open("/"), client.open("/")
        tab.action("fix")
        client.clock.advance(1)
        assert tab.signals["_errors"] == {"name": "short", "email": ""}
        assert tab.signals["_route__board"] == other.signals["_route__board"] == {"ann": 4, "bob": ""}


def test_a_scope_patch_reaches_every_tab_of_the_scope_and_no_view_is_rendered() -> None:
    # a board of many cards: a changed card goes to the board's tabs as one small patch, where a
    # broadcast would render each tab's whole board (a newcomer's 10,000 cards: 9.6 MB a tab)
    renders: list[str] = []
    app = App()

    @app.page("/board/{name}")
    def board(c: Context, name: str) -> None:
        scope = Scope.custom("board", name)
        c.scope(scope)

        @c.action
        def rename() -> None:  # from an action: its own tab's patch comes with its answer
            app.patch_elements(scope, '<li id="card-1">renamed</li>')

        def view() -> str:
            renders.append(name)
            return (
                f'<ul id="cards"><li id="card-1">first</li></ul><button id="rename" data-on:click="{rename}">r</button>'
            )

        c.view(view)

    with TestClient(app) as client:
        one, two, other = client.open("/board/a"), client.open("/board/a"), client.open("/board/b")
        for tab in (one, two, other):
            tab.new_events()
        renders.clear()
        app.patch_elements("board:a", '<li id="card-1">edited</li>')
        for tab in (one, two):
            (event,) = tab.new_events()
            assert event.elements == '<li id="card-1">edited</li>'
            assert '<li id="card-1">edited</li>' in tab.html
        assert other.new_events() == [] and renders == []
        app.patch_elements("board:*", '<li id="new">x</li>', "#cards", "append")
        assert all('<li id="new">x</li>' in tab.html for tab in (one, two, other))
        one.click("#rename")
        assert '<li id="card-1">renamed</li>' in one.html and '<li id="card-1">renamed</li>' in two.html
        assert renders == []
        with pytest.raises(DeclarationError, match="needs a selector"):
            app.patch_elements("board:a", "<li>x</li>", mode="append")
        with pytest.raises(DeclarationError):
            app.patch_elements("tab", "<li>x</li>")
