"""Revival: an unknown context id is rebuilt from its signed id, even by a fresh process."""

from __future__ import annotations

from pyvia import App, Context, Response
from pyvia.testing import Tab, TestClient


def make_app(runs: list[str] | None = None, **options: object) -> App:
    app = App(**options)

    @app.page("/items/{item_id}")
    def page(c: Context, item_id: int) -> None:
        if runs is not None:
            runs.append(f"handler {item_id}")
        count = c.signal(0, "count")
        secret = c.signal("initial", "secret")
        visits = c.tab_state.setdefault("visits", 0)
        c.tab_state["visits"] = visits + 1

        @c.action
        def inc() -> None:
            count.value += 1
            secret.value = "changed on server"

        c.view(lambda: f'<p id="p">item {item_id} count {count.value} visits {c.tab_state["visits"]}</p>')

    return app


def destroy(client: TestClient, app: App) -> None:
    for ctx in list(app.contexts.values()):
        app.destroy(ctx)


def test_stream_revives_destroyed_context_with_the_same_id_and_its_server_owned_values() -> None:
    runs: list[str] = []
    app = make_app(runs)
    with TestClient(app) as client:
        tab = client.open("/items/7")
        tab.click("button") if tab.find("button") else tab.action("inc")
        tab.action("inc")
        assert tab.signals["_count"] == 2
        tab.disconnect()
        client.clock.advance(120)  # past grace and reconnect timeout
        assert tab.context is None
        tab.new_events()
        tab.reconnect()
        ctx = tab.context
        assert ctx is not None and ctx.id == tab.id
        assert runs == ["handler 7", "handler 7"]
        assert ctx.signals["count"].value == 2  # server-owned: from the snapshot this process kept
        assert ctx.signals["secret"].value == "changed on server"
        events = tab.new_events()
        assert events[0].view is not None
        assert "item 7 count 2 visits 2" in events[0].elements  # tab_state kept in-process
        tab.action("inc")
        assert tab.signals["_count"] == 3


def test_revival_after_a_restart_needs_no_server_record() -> None:
    app = make_app()
    with TestClient(app) as client:
        tab = client.open("/items/3")
        tab.action("inc")
        tab.action("inc")
        cookies = dict(client.cookies)
        tab.disconnect()
    restarted = make_app()  # a new process: no contexts, no records; same secret from PYVIA_SECRET
    with TestClient(restarted) as client2:
        client2.cookies.update(cookies)
        tab.client = client2
        tab.reconnect()
        assert tab.stream_status == 200
        assert tab.context is not None
        assert tab.context.signals["count"].value == 2
        assert "item 3 count 2" in tab.html
        tab.action("inc")
        assert tab.signals["_count"] == 3


def test_another_session_cannot_revive_or_use_a_tab() -> None:
    app = make_app()
    with TestClient(app) as client:
        tab = client.open("/items/1")
        thief = TestClient(app)
        thief.get("/items/1")  # gets its own session cookie
        tab.client = thief
        tab.connect()  # live context of another session
        assert tab.stream_status == 403
        assert tab.action("inc").status == 403
        destroy(client, app)
        tab.connect()  # dead context: revival refused, the tab is told to reload
        assert tab.scripts == ["window.location.reload()"]
        assert app.contexts == {}
        thief.close()


def test_revival_refused_outside_the_window_reloads_once_then_stops_retrying() -> None:
    app = make_app(revival_window=60)
    with TestClient(app) as client:
        tab = client.open("/items/1")
        destroy(client, app)
        client.clock.advance(61)
        tab.reconnect()
        assert tab.scripts == ["window.location.reload()"]
        tab.reconnect()  # a JSON answer: Datastar stops retrying, the page's alert says why
        assert tab.signals["_via_error"] == "This page is out of date. Reload it to go on."
        assert tab.signals["_via_lost"] is False  # not reconnecting any more: the alert shows why
        assert app.contexts == {}


def test_forged_id_is_not_revived() -> None:
    app = make_app()
    with TestClient(app) as client:
        tab = client.open("/items/1")
        body, sig = tab.id.split(".")
        tab.id = tab.signals["via_ctx"] = body + "." + ("A" * len(sig))
        tab.reconnect()
        assert tab.scripts == ["window.location.reload()"]
        assert client.post("/_action/inc", json={"via_ctx": tab.id}).status == 400


def test_tab_revive_helper_rebuilds_the_context() -> None:
    app = make_app()
    with TestClient(app) as client:
        tab = client.open("/items/2")
        tab.action("inc")
        old = tab.context
        tab.revive()
        assert tab.context is not None and tab.context is not old
        assert tab.context.signals["count"].value == 1


def test_action_on_a_destroyed_context_revives_it_and_runs() -> None:
    app = make_app()
    with TestClient(app) as client:
        tab = client.open("/items/5")
        tab.action("inc")
        destroy(client, app)
        assert tab.action("inc", count=1).status == 200
        assert app.contexts[tab.id].signals["count"].value == 2


def test_middleware_runs_on_revival_and_can_refuse_it() -> None:
    app = make_app()
    seen: list[str] = []
    allow = {"yes": True}

    @app.middleware
    def gate(request, call_next):
        seen.append(request.kind)
        if request.kind == "revival" and not allow["yes"]:
            return Response.text("log in first", 302, [("location", "/login")])
        return call_next(request)

    with TestClient(app) as client:
        tab = client.open("/items/1")
        destroy(client, app)
        tab.reconnect()
        assert seen[:3] == ["page", "stream", "revival"]
        assert tab.context is not None
        destroy(client, app)
        allow["yes"] = False
        tab.reconnect()
        assert tab.scripts == ["window.location.reload()"]
        assert app.contexts == {}


def test_an_action_whose_revival_a_middleware_refuses_gets_the_middlewares_answer() -> None:
    # A login kept in session_data is gone after a crash; the tab's next click revives it, and the
    # login check refuses: the click is answered with the check's own 403 and words, not 400
    # "unknown tab" (found by a newcomer's support desk, which logged the wrong cause).
    app = make_app()
    logged_in = {"yes": True}

    @app.middleware
    def login(request, call_next):
        if request.kind in ("revival", "action") and not logged_in["yes"]:
            return Response.text("Log in first", 403)
        return call_next(request)

    with TestClient(app) as client:
        tab = client.open("/items/3")
        destroy(client, app)
        logged_in["yes"] = False
        answer = tab.action("inc")
        assert (answer.status, answer.body) == (403, b"Log in first")
        assert app.contexts == {}
        logged_in["yes"] = True
        assert tab.action("inc").status == 200  # logged in again: the tab revives and the click runs
        assert app.contexts[tab.id].signals["count"].value == 1


def test_a_stream_and_an_action_reviving_a_tab_at_once_run_its_handler_once() -> None:
    import asyncio
    import inspect

    import orjson

    from pyvia.http import Headers, Request

    runs: list[str] = []
    app = App(secret="revive once")

    @app.page("/")
    async def page(c: Context) -> None:
        runs.append("handler")
        await asyncio.sleep(0.01)  # a slow handler: the second request comes while it runs
        count = c.signal(0, "count")

        @c.action
        def inc() -> None:
            count.value += 1

        c.view(lambda: f"<p>{count.value}</p>")

    with TestClient(app) as client:
        tab = client.open("/")
        tab.action("inc")
        tab.disconnect()
        client.clock.advance(120)
        assert tab.context is None and runs == ["handler"]  # the page view
        runs.clear()
        cookie = "; ".join(f"{k}={v}" for k, v in client.cookies.items())
        headers = Headers(
            [
                ("host", "testserver"),
                ("origin", "http://testserver"),
                ("cookie", cookie),
                ("content-type", "application/json"),
            ]
        )
        body = orjson.dumps({"via_ctx": tab.id, "_via_snap": tab.signals["_via_snap"]})
        stream = Request("POST", "/_sse", headers=headers, body=body, client="127.0.0.1")
        action = Request("POST", "/_action/inc", headers=headers, body=body, client="127.0.0.1")

        async def settled(result: object) -> object:
            return await result if inspect.isawaitable(result) else result

        async def both() -> list[object]:
            return await asyncio.gather(settled(app.handle(stream)), settled(app.handle(action)))

        stream_answer, action_answer = client.loop.run_until_complete(both())
        assert runs == ["handler"]  # one revival served both
        assert stream_answer.status == action_answer.status == 200  # type: ignore[attr-defined]
        assert tab.context is not None and tab.context.signals["count"].value == 2


def test_a_revived_tab_does_not_send_back_what_the_user_typed_after_the_action_that_revived_it() -> None:
    # The server restarted (or the tab expired) while the page was open: the user sends a chat
    # line, which revives the tab, clears the box in the browser and goes on typing in another
    # input. The revived tab's first frames carry the server's values, not the posted ones back.
    said: list[str] = []

    def chat_app() -> App:
        app = App()

        @app.page("/")
        def page(c: Context) -> None:
            title = c.signal("", "title", writable=True)
            chat = c.signal("", "chat", writable=True)
            sent = c.signal(0, "sent")

            @c.action
            def say() -> None:
                said.append(chat.as_str())
                sent.value += 1

            c.view(lambda: f'<input id="title" data-bind="{title.id}"><input id="chat" data-bind="{chat.id}">')

        return app

    def type_and_reconnect(tab: Tab) -> None:
        tab.type("#chat", "queued line")
        assert tab.action("say").status == 200
        tab.type("#chat", "")  # the page clears the box with the click
        tab.type("#title", "typed after the click")
        tab.reconnect()
        assert said == ["queued line"]
        assert tab.signals["title"] == "typed after the click" and tab.signals["chat"] == ""
        assert tab.signals["_sent"] == 1  # the server-owned value the action changed did come

    with TestClient(chat_app()) as client:  # the tab expired in this process
        tab = client.open("/")
        tab.expire()
        type_and_reconnect(tab)
    said.clear()
    with TestClient(chat_app()) as client:  # the server restarted
        tab = client.open("/")
        tab.disconnect()
        cookies = dict(client.cookies)
    with TestClient(chat_app()) as restarted:
        restarted.cookies.update(cookies)
        tab.client = restarted
        type_and_reconnect(tab)


def test_a_revived_tab_does_not_send_back_a_value_the_server_once_wrote_and_the_browser_posted() -> None:
    # The server filled the box once (a revision the browser has seen); the user typed on in it.
    # The server restarts, the stream revives the tab with what the page holds, and the user goes
    # on typing while the first frame travels: that frame must not carry the posted text back,
    # or the keystrokes typed meanwhile are wiped. (A newcomer's kanban lost 4-8 characters.)
    def notes_app() -> App:
        app = App()

        @app.page("/")
        def page(c: Context) -> None:
            text = c.signal("", "text", writable=True)
            other = c.signal("", "other", writable=True)

            @c.action
            def fill() -> None:
                text.value = "a template"

            @c.action
            def retitle() -> None:
                other.value = "set by the server"

            c.view(lambda: f'<textarea id="text" data-bind="{text.id}"></textarea><p>{other.as_str()}</p>')

        return app

    with TestClient(notes_app()) as client:
        tab = client.open("/")
        tab.action("fill")
        tab.action("retitle")
        assert tab.signals["via_rev"] == {"text": 1, "other": 1}
        tab.type("#text", "a template, then what the user typed")
        tab.disconnect()
        cookies = dict(client.cookies)
    with TestClient(notes_app()) as restarted:
        restarted.cookies.update(cookies)
        tab.client = restarted
        tab.new_events()
        tab.reconnect()
        first = next(e for e in tab.new_events() if e.type == "datastar-patch-signals")
        assert "text" not in first.signals  # the browser's own: the server has no newer write
        assert "other" not in first.signals
        ctx = tab.context
        assert ctx is not None and ctx.signals["text"].value == "a template, then what the user typed"
        # a write after the revival is a newer revision and goes out
        tab.action("fill")
        assert tab.signals["text"] == "a template" and tab.signals["via_rev"]["text"] == 2


def test_a_reconnect_that_gets_a_full_render_sends_only_the_writes_the_browser_has_not_seen() -> None:
    # The stream dropped long enough for the replay buffer to forget it: the reconnect gets the
    # full render. A writable value the server wrote and the browser has since posted back is the
    # browser's; one written after the browser's last post may be missed, and goes out.
    app = App()

    @app.page("/")
    def page(c: Context) -> None:
        text = c.signal("", "text", writable=True)
        flag = c.signal("", "flag", writable=True)

        @c.action
        def fill() -> None:
            text.value = "a template"

        @c.action
        def mark() -> None:
            flag.value = "marked"

        c.view(lambda: f'<textarea id="text" data-bind="{text.id}"></textarea><input id="flag" data-bind="{flag.id}">')

    with TestClient(app) as client:
        tab = client.open("/")
        tab.action("fill")
        tab.type("#text", "a template, and more")
        tab.action("mark")  # posts the text with the revision it saw
        tab.signals["flag"] = "stale"  # as if the frame with the mark was lost
        tab.signals["via_rev"] = {"text": 1}
        tab.new_events()
        tab.reconnect(resume=False)
        first = next(e for e in tab.new_events() if e.type == "datastar-patch-signals")
        assert "text" not in first.signals
        assert first.signals.get("flag") == "marked"
