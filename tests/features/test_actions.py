"""Actions: ids, client-writable signals, sync helpers, errors and async callbacks."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from pyvia import App, Context, DeclarationError, UserError, protocol
from pyvia.testing import TestClient


def post_click(client: TestClient, tab: Any, name: str, click: str) -> Any:
    """Post action ``name`` as a click with id ``click`` would, so that posting it twice is a retry."""
    body = {protocol.CONTEXT_SIGNAL: tab.context.id}
    return client.post(f"{tab.base}_action/{name}", json=body, headers={"via-click": click})


def make_app() -> App:
    app = App()

    @app.page("/")
    def page(c: Context) -> None:
        count = c.signal(0, "count", writable=True)
        owned = c.signal("server", "owned")
        c.signal(0, "other", writable=True)

        @c.action
        def inc() -> None:
            count.value += 1

        @c.action("named_by_decorator")
        def _x() -> None:
            count.value += 10

        def with_context(ctx: Context) -> None:
            ctx.signals["count"].value = 100

        c.action(with_context, "set_hundred")

        @c.action
        def boom() -> None:
            count.value = 42
            raise RuntimeError("secret detail")

        @c.action
        async def slow() -> None:
            await asyncio.sleep(0)
            count.value += 1000

        @c.action
        def render_now() -> None:
            count.value = 7
            c.sync()

        @c.action
        def patch() -> None:
            c.patch_elements("<li>x</li>", selector="#list", mode="append")
            c.exec_script("console.log('hi')")

        @c.action
        def go() -> None:
            c.redirect("/elsewhere")

        @c.action
        def touch_owned() -> None:
            owned.value = owned.value + "!"

        c.view(lambda is_update: f'<p id="v">{count.value} {owned.value} {is_update}</p>')

    return app


def test_decorator_forms_and_explicit_names() -> None:
    with TestClient(make_app()) as client:
        tab = client.open("/")
        assert set(tab.context.actions) >= {"inc", "named_by_decorator", "set_hundred", "slow"}
        assert str(tab.context.actions["inc"]) == (
            "@post('/_action/inc', {requestCancellation: 'disabled', filterSignals: {exclude: $_via_filter}, "
            "headers: {'via-click': Math.random()}, retryMaxCount: Infinity, retryMaxWait: 8000})"
        )
        tab.action("named_by_decorator")
        assert tab.signals["count"] == 10
        tab.action("set_hundred")
        assert tab.signals["count"] == 100


def test_async_action_runs_and_its_changes_are_sent() -> None:
    with TestClient(make_app()) as client:
        tab = client.open("/")
        assert tab.action("slow").status == 200
        assert tab.signals["count"] == 1000


def test_client_values_are_written_before_the_action_runs() -> None:
    with TestClient(make_app()) as client:
        tab = client.open("/")
        tab.action("inc", count=41)
        assert tab.signals["count"] == 42
        assert tab.context.signals["count"].value == 42


def test_server_owned_signal_ignores_client_writes() -> None:
    with TestClient(make_app()) as client:
        tab = client.open("/")
        tab.action("touch_owned", owned="hacked")
        assert tab.context.signals["owned"].value == "server!"
        assert tab.signals["_owned"] == "server!"


def test_wrongly_typed_client_value_is_refused_and_not_echoed() -> None:
    with TestClient(make_app()) as client:
        tab = client.open("/")
        tab.new_events()
        tab.action("render_now", other="not a number")
        assert tab.context.signals["other"].value == 0
        assert all("other" not in e.signals for e in tab.new_events())


def test_unknown_signal_ids_are_ignored() -> None:
    with TestClient(make_app()) as client:
        tab = client.open("/")
        assert tab.action("inc", nosuch=1).status == 200
        assert "nosuch" not in tab.context.signals


def test_exception_answers_500_without_detail_and_still_sends_changed_signals() -> None:
    with TestClient(make_app(), raise_server_exceptions=False) as client:
        tab = client.open("/")
        tab.new_events()
        response = tab.action("boom")
        assert response.status == 500
        assert b"secret" not in response.body
        assert tab.signals["count"] == 42
        assert tab.action("inc").status == 200  # the app keeps serving
        assert tab.signals["count"] == 43


def test_sync_sends_view_and_signals_in_one_write() -> None:
    with TestClient(make_app()) as client:
        tab = client.open("/")
        tab.new_events()
        before = tab.writes
        tab.action("render_now")
        assert tab.writes == before + 1
        events = tab.new_events()
        assert [e.type for e in events] == [protocol.PATCH_ELEMENTS, protocol.PATCH_SIGNALS]
        assert events[0].view is not None
        assert "7 server True" in events[0].elements
        assert "7 server True" in tab.html


def test_patch_elements_and_scripts() -> None:
    with TestClient(make_app()) as client:
        tab = client.open("/")
        tab.new_events()
        tab.action("patch")
        events = tab.new_events()
        assert events[0].selector == "#list" and events[0].mode == "append" and events[0].elements == "<li>x</li>"
        assert tab.scripts == ["console.log('hi')"]
        tab.action("go")
        assert tab.scripts[-1] == 'window.location.href = "/elsewhere"'


def test_unknown_action_is_404_and_get_is_405() -> None:
    with TestClient(make_app()) as client:
        tab = client.open("/")
        assert tab.action("nosuch").status == 404
        response = client.get("/_action/inc")
        assert response.status == 405
        assert ("allow", "POST") in response.headers


def test_action_without_context_id_is_400() -> None:
    with TestClient(make_app()) as client:
        client.open("/")
        assert client.post("/_action/inc", json={}).status == 400
        assert client.post("/_action/inc", json={"via_ctx": "bogus"}).status == 400


def test_malformed_signals_are_400() -> None:
    with TestClient(make_app()) as client:
        client.open("/")
        response = client.post("/_action/inc", body=b"{not json", headers={"content-type": "application/json"})
        assert response.status == 400


def test_bad_declarations_fail_with_clear_messages() -> None:
    app = App()

    @app.page("/bad-signal")
    def bad_signal(c: Context) -> None:
        c.signal(0, "my count")

    @app.page("/bad-action")
    def bad_action(c: Context) -> None:
        c.action(lambda *values: None, "many")

    with TestClient(app) as client:
        with pytest.raises(DeclarationError, match=r"signal name 'my count' in page '/bad-signal'"):
            client.get("/bad-signal")
        with pytest.raises(DeclarationError, match="parameter 'values' must be a plain or keyword-only parameter"):
            client.get("/bad-action")


def test_a_click_posted_again_after_its_answer_was_lost_runs_once() -> None:
    """Datastar posts an action again, with the same headers, when the network lost its answer; the
    page's random ``via-click`` id lets the tab run each click once (a server-owned count, which a
    re-sent body cannot set back)."""
    app = App()

    @app.page("/")
    def page(c: Context) -> None:
        hits = c.signal(0, "hits")

        @c.action
        def hit() -> None:
            hits.value += 1

        c.view(lambda: f"<p id='hits'>{hits.value}</p>")

    with TestClient(app) as client:
        tab = client.open("/")
        assert "headers: {'via-click': Math.random()}" in str(tab.context.actions["hit"])
        hits = tab.context.signals["hits"]

        def post(click: str | None) -> int:
            headers = {"via-click": click} if click is not None else None
            body = {protocol.CONTEXT_SIGNAL: tab.context.id}
            return client.post(f"{tab.base}_action/hit", json=body, headers=headers).status

        assert [post("0.5"), post("0.5")] == [200, 200] and hits.value == 1  # the retry is answered, not run
        assert post("0.25") == 200 and hits.value == 2  # another click runs
        assert [post(None), post(None)] == [200, 200] and hits.value == 4  # no id: every post runs
        long_id = "1" * 40  # not an id the page makes: not remembered
        assert [post(long_id), post(long_id)] == [200, 200] and hits.value == 6
        for n in range(14):
            post(f"0.{n + 100}")
        assert hits.value == 20 and post("0.25") == 200 and hits.value == 20  # still within the last 16


def test_a_click_posted_again_gets_the_answer_its_first_post_got() -> None:
    """The network lost the answer of a click that navigated and set a cookie, or that was refused:
    its retry runs nothing, and gets that same answer, so the page still navigates, the browser
    still gets its cookie, and the refusal still shows (a newcomer's login stayed on its page)."""
    app = App()

    @app.page("/")
    def page(c: Context) -> None:
        hits = c.signal(0, "hits")

        @c.action
        def login() -> None:
            hits.value += 1
            c.set_cookie("seen", "yes")
            c.redirect("/done")

        @c.action
        def bid() -> None:
            hits.value += 1
            raise UserError("This lot is closed.")

        @c.action
        def plain() -> None:
            hits.value += 1

        c.view(lambda: f"<p id='hits'>{hits.value}</p>")

    with TestClient(app) as client:
        tab = client.open("/")
        hits = tab.context.signals["hits"]

        def post(name: str, click: str) -> Any:
            return post_click(client, tab, name, click)

        first, again = post("login", "0.5"), post("login", "0.5")
        assert hits.value == 1
        assert again.status == first.status == 200
        cookies = [v for k, v in first.headers if k == "set-cookie"]
        assert [v for k, v in again.headers if k == "set-cookie"] == cookies and any("seen=yes" in v for v in cookies)
        assert b"/done" in first.body and again.body == first.body
        refused, refused_again = post("bid", "0.6"), post("bid", "0.6")
        assert hits.value == 2
        assert refused.status == refused_again.status == 400
        assert refused_again.body == refused.body == b"This lot is closed."
        assert post("plain", "0.7").status == 200 and post("plain", "0.7").body == b"" and hits.value == 3
        assert post("login", "0.5").body == b""  # an older click's answer is not kept: only the latest


def test_an_async_click_posted_again_gets_the_answer_its_first_post_got() -> None:
    # an async action is answered after the request settled (and let go of its signals); with
    # shared state every action that wrote is answered that way (its writes awaited)
    app = App()

    @app.page("/")
    def page(c: Context) -> None:
        hits = c.signal(0, "hits")

        @c.action
        async def login() -> None:
            await asyncio.sleep(0)
            hits.value += 1
            c.set_cookie("seen", "yes")
            c.redirect("/done")

        @c.action
        async def bid() -> None:
            await asyncio.sleep(0)
            hits.value += 1
            raise UserError("This lot is closed.")

        c.view(lambda: f"<p id='hits'>{hits.value}</p>")

    with TestClient(app) as client:
        tab = client.open("/")
        hits = tab.context.signals["hits"]

        def post(name: str, click: str) -> Any:
            return post_click(client, tab, name, click)

        first, again = post("login", "0.5"), post("login", "0.5")
        assert hits.value == 1 and b"/done" in first.body and again.body == first.body
        assert [v for k, v in again.headers if k == "set-cookie"] == [v for k, v in first.headers if k == "set-cookie"]
        refused, refused_again = post("bid", "0.6"), post("bid", "0.6")
        assert hits.value == 2 and refused.status == refused_again.status == 400
        assert refused_again.body == refused.body == b"This lot is closed."
