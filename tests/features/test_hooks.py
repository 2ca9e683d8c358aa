"""Presence, app timers, background tasks, start/stop hooks and error reporting."""

from __future__ import annotations

import asyncio

from pyvia import App, Context, Scope
from pyvia.testing import TestClient


def test_presence_and_connect_hooks() -> None:
    app = App()
    log: list[str] = []
    app.on_connect(lambda c: log.append(f"+{c.route.pattern}"))
    app.on_disconnect(lambda c: log.append(f"-{c.route.pattern}"))

    @app.page("/room/{name}")
    def room(c: Context, name: str) -> None:
        c.add_scope(f"room:{name}")
        c.view(lambda: "<p></p>")

    with TestClient(app) as client:
        a, b, c = client.open("/room/x"), client.open("/room/x"), client.open("/room/y")
        assert app.count_clients("room:x") == 2
        assert app.count_clients("room:*") == 3
        assert app.count_clients() == 3
        assert {ctx.id for ctx in app.local_clients("room:y")} == {c.id}
        b.disconnect()
        assert app.count_clients("room:x") == 1
        assert log == ["+/room/{name}"] * 3 + ["-/room/{name}"]
        client.get("/room/x")  # a page whose stream is not open yet is not a client
        assert app.count_clients("room:x") == 1
        assert a.is_connected


def test_hooks_may_be_bound_methods_with_or_without_the_context() -> None:
    app = App()

    class Log:
        def __init__(self) -> None:
            self.lines: list[str] = []

        def joined(self, c: Context) -> None:
            self.lines.append(f"+{c.route.pattern}")

        def left(self) -> None:
            self.lines.append("-")

        def noted(self, c: Context, note: str = "noted") -> None:
            self.lines.append(note)

    log = Log()
    app.on_connect(log.joined)
    app.on_connect(log.noted)
    app.on_disconnect(log.left)

    @app.page("/")
    def page(c: Context) -> None:
        c.on_connect(log.left)
        c.view(lambda: "<p></p>")

    with TestClient(app) as client:
        client.open("/").disconnect()
        assert log.lines == ["-", "+/", "noted", "-"]


def test_app_interval_drives_shared_state_and_survives_errors() -> None:
    app = App()
    errors: list[tuple[str, str]] = []
    app.on_error(lambda exc, ctx, phase: errors.append((phase, str(exc))))
    ticks = app.signal(0, "ticks", scope="global")
    calls = {"n": 0}

    def tick() -> None:
        calls["n"] += 1
        if calls["n"] == 2:
            raise RuntimeError("flaky")
        ticks.increment()

    app.set_interval(tick, 0.2)

    @app.page("/")
    def page(c: Context) -> None:
        c.signal(0, "ticks", scope=Scope.GLOBAL)
        c.view(lambda: "<p></p>")

    with TestClient(app, raise_server_exceptions=False) as client:
        tab = client.open("/")
        client.clock.advance(1.05)
        assert calls["n"] == 5
        assert tab.signals["_global__ticks"] == 4
        assert errors == [("timer", "flaky")]


def test_spawned_tasks_report_errors_and_start_stop_hooks_run() -> None:
    app = App()
    seen: list[str] = []
    app.on_start(lambda: seen.append("start"))
    app.on_stop(lambda: seen.append("stop"))
    app.on_error(lambda exc, ctx, phase: seen.append(f"{phase}:{exc}:{ctx is not None}"))

    @app.page("/")
    def page(c: Context) -> None:
        done = c.signal("", "done")

        @c.action
        async def work() -> None:
            async def job() -> None:
                await asyncio.sleep(0)
                done.value = "yes"
                c.sync_signals()

            async def broken() -> None:
                raise ValueError("boom")

            c.spawn(job())
            c.spawn(broken())

        c.view(lambda: "<p></p>")

    with TestClient(app, raise_server_exceptions=False) as client:
        tab = client.open("/")
        tab.action("work")
        client.loop.run_until_complete(asyncio.sleep(0.01))
        assert tab.signals["_done"] == "yes"
        assert "task:boom:True" in seen
    assert seen[0] == "start" and seen[-1] == "stop"


def test_render_error_during_a_broadcast_spares_the_other_tabs() -> None:
    app = App()
    phases: list[str] = []
    app.on_error(lambda exc, ctx, phase: phases.append(phase))

    @app.page("/{kind}")
    def page(c: Context, kind: str) -> None:
        c.add_scope("room:all")
        n = c.signal(0, "n", scope="room:all")

        def view() -> str:
            if kind == "bad" and n.value:
                raise RuntimeError("render failed")
            return f"<p id='n'>{n.value}</p>"

        @c.action
        def inc() -> None:
            n.increment()

        c.view(view)

    with TestClient(app, raise_server_exceptions=False) as client:
        good, bad = client.open("/good"), client.open("/bad")
        good.action("inc")
        app.flush_broadcasts()
        assert "<p id='n'>1</p>" in good.html
        assert bad.signals["_room_all__n"] == 1  # the signals still reached the failing tab
        assert phases == ["render"]


def test_on_error_sees_page_and_action_errors_and_bad_params_reach_the_404_page() -> None:
    app = App()
    seen: list[tuple[str, bool]] = []
    app.on_error(lambda exc, ctx, phase: seen.append((phase, ctx is not None)))

    @app.not_found
    def missing(request) -> str:
        return "<h1>nothing here</h1>"

    @app.page("/item/{n}")
    def item(c: Context, n: int) -> None:
        @c.action
        def fail() -> None:
            raise RuntimeError("action broke")

        if n == 0:
            raise RuntimeError("page broke")
        c.view(lambda: "<p></p>")

    with TestClient(app, raise_server_exceptions=False) as client:
        assert client.get("/item/0").status == 500
        tab = client.open("/item/1")
        assert tab.action("fail").status == 500
        response = client.get("/item/abc")
        assert response.status == 404 and b"nothing here" in response.body
    assert seen == [("page", False), ("action", True)]
    assert app.errors == 2


def test_close_beacon_after_the_stream_closed_shortens_the_wait() -> None:
    app = App()

    @app.page("/")
    def page(c: Context) -> None:
        @c.action
        def touch() -> None:
            pass

        c.view(lambda: "<p></p>")

    with TestClient(app) as client:
        tab = client.open("/")
        tab.action("touch")  # would hold the context for the 60 s reconnect timeout
        tab.disconnect()
        client.post("/_session/close", body=tab.id.encode())
        client.clock.advance(6)
        assert tab.context is None


def test_an_error_that_keeps_coming_is_logged_once_a_minute(caplog) -> None:
    app = App()
    seen: list[str] = []
    app.on_error(lambda exc, ctx, phase: seen.append(phase))

    def tick() -> None:
        raise RuntimeError("the feed is down")

    app.set_interval(tick, 0.2)

    @app.page("/")
    def page(c: Context) -> None:
        c.view(lambda: "<p></p>")

    with TestClient(app, raise_server_exceptions=False) as client:
        client.open("/")
        with caplog.at_level("INFO", logger="pyvia"):
            client.clock.advance(3.05)
            assert len(seen) == 15 and app.errors == 15  # every failure is counted and observed
            logged = [r for r in caplog.records if r.levelname == "ERROR" and "error in timer" in r.getMessage()]
            assert len(logged) == 1 and logged[0].exc_info is not None  # one traceback, not fifteen
            client.clock.advance(60)
            logged = [r for r in caplog.records if r.levelname == "ERROR" and "error in timer" in r.getMessage()]
            assert len(logged) == 2
            assert "and 299 more like it" in logged[1].getMessage()


def test_refusals_of_two_inputs_too_large_are_both_logged_and_a_flood_of_one_once(caplog) -> None:
    app = App()

    @app.page("/")
    def page(c: Context) -> None:
        title = c.signal("", "title", writable=True, max_length=10)
        chat = c.signal("", "chat", writable=True, max_length=10)

        @c.action
        def add() -> None:
            pass

        c.view(lambda: f"<p>{title.value}{chat.value}</p>")

    with TestClient(app) as client:
        tab = client.open("/")
        with caplog.at_level("INFO", logger="pyvia"):
            for _ in range(5):
                assert tab.action("add", title="x" * 11).status == 413
            assert tab.action("add", title="", chat="y" * 11).status == 413
            logged = [r.getMessage() for r in caplog.records if r.levelname == "WARNING" and "-> 413" in r.getMessage()]
            assert len(logged) == 2, logged  # one for the flood on title, one for chat
            assert "'title'" in logged[0] and "'chat'" in logged[1]
            client.clock.advance(61)
            assert tab.action("add", title="x" * 11, chat="").status == 413
            logged = [r.getMessage() for r in caplog.records if r.levelname == "WARNING" and "-> 413" in r.getMessage()]
            assert len(logged) == 3 and "and 4 more like it" in logged[2]


def test_app_clients_is_renamed_local_clients_and_says_so() -> None:
    import pytest

    from pyvia import PyviaDeprecationWarning

    app = App()

    @app.page("/")
    def page(c: Context) -> None:
        c.view(lambda: "<main id='m'></main>")

    with TestClient(app) as client:
        tab = client.open("/")
        with pytest.warns(PyviaDeprecationWarning, match=r"app\.local_clients\(\)"):
            listed = app.clients()
        assert [ctx.id for ctx in listed] == [ctx.id for ctx in app.local_clients()] == [tab.id]


def test_a_failing_page_view_is_logged_with_its_path_and_its_template_line(caplog, tmp_path) -> None:
    """What a newcomer reads first when a page is broken: which page, and which line of which
    template (Jinja's own line, not the line of the Python it compiled the template to)."""
    import traceback

    (tmp_path / "t.html").write_text('<p id="a">fine</p>\n<p>{{ 1 }}</p>\n<p>{{ cuont.ref() }}</p>\n<p>end</p>\n')
    app = App(template_dir=tmp_path)

    @app.page("/tpl")
    def tpl(c: Context) -> None:
        c.signal(0, "count")
        c.view("t.html")

    with TestClient(app, raise_server_exceptions=False) as client, caplog.at_level("ERROR", logger="pyvia"):
        assert client.get("/tpl").status == 500
    (record,) = [r for r in caplog.records if "error in page" in r.getMessage()]
    assert "GET /tpl" in record.getMessage()
    assert record.exc_info is not None
    frames = traceback.extract_tb(record.exc_info[2])
    assert [(frame.lineno, frame.line) for frame in frames if frame.filename.endswith("t.html")] == [
        (3, "<p>{{ cuont.ref() }}</p>")
    ]
