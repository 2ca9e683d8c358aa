"""Who owns a signal, what the browser sends, and how a tab comes back without trusting it."""

from __future__ import annotations

import logging
from urllib.parse import parse_qs

import orjson
import pytest

from pyvia import App, Context, protocol
from pyvia.testing import Tab, TestClient


def make_app(**options: object) -> App:
    app = App(secret="ownership tests", **options)

    @app.page("/")
    def page(c: Context) -> None:
        count = c.signal(0, "count")
        draft = c.signal("", "draft", writable=True, max_length=50)
        said = c.signal([], "said")

        @c.action
        def inc() -> None:
            count.value += 1

        @c.action
        def send() -> None:
            said.value = [*said.value, draft.value]
            draft.value = ""  # the server's write of a writable signal

        @c.action
        def noop() -> None:
            pass

        c.view(lambda: f'<p id="n">{count.value}</p>')

    return app


def test_a_request_carries_the_writable_signals_and_the_context_id_only() -> None:
    with TestClient(make_app()) as client:
        tab = client.open("/")
        for _ in range(5):
            tab.action("inc")
        sent = tab._outgoing()
        assert set(sent) == {"via_ctx", "draft"}  # not the count, not the list, not the snapshot
        assert tab.signals["_count"] == 5


def test_the_stream_request_carries_the_context_id_only_and_no_value_in_its_url() -> None:
    with TestClient(make_app()) as client:
        tab = client.open("/")
        tab.signals["draft"] = "typed, secret"
        seen: list[str] = []
        handle = client.app.handle

        def spy(request):  # type: ignore[no-untyped-def]
            seen.append(request.query_string)
            return handle(request)

        client.app.handle = spy  # type: ignore[method-assign]
        tab.disconnect()
        tab.reconnect()
        assert [parse_qs(query) for query in seen] == [{"datastar": [orjson.dumps({"via_ctx": tab.id}).decode()]}]


def test_the_servers_write_wins_over_a_post_made_before_the_browser_saw_it() -> None:
    with TestClient(make_app()) as client:
        tab = client.open("/")
        crossing = {"via_ctx": tab.id, "draft": "hello"}  # what the page posts twice, quickly
        assert client.post("/_action/send", json=crossing).status == 200  # the server clears the draft
        assert tab.signals["draft"] == "" and tab.signals["via_rev"] == {"draft": 1}
        assert client.post("/_action/noop", json=crossing).status == 200  # made before the clear arrived
        assert tab.context.signals["draft"].value == ""  # not brought back
        assert tab.action("noop", draft="again").status == 200  # made after: it has seen revision 1
        assert tab.context.signals["draft"].value == "again"


def test_a_forged_revision_only_moves_the_tabs_own_number_and_garbage_counts_as_none() -> None:
    with TestClient(make_app()) as client:
        tab = client.open("/")
        assert tab.action("noop", draft="x", via_rev={"draft": 10**6}).status == 200
        assert tab.context.signals["draft"].value == "x"
        assert tab.action("noop", draft="y", via_rev="not a dict").status == 200
        assert tab.context.signals["draft"].value == "x"  # no revision: older than the one it forged


def test_a_writable_value_over_its_limit_is_refused_and_named(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="pyvia")
    with TestClient(make_app()) as client:
        tab = client.open("/")
        response = tab.action("send", draft="x" * 51)
        assert response.status == 413
        assert response.body.decode() == "signal 'draft' got 51 characters; it takes at most 50"
        assert tab.context.signals["said"].value == []  # the action did not run
        assert any("signal 'draft' got 51 characters" in r.getMessage() for r in caplog.records)


def _restart(tab: Tab, app: App) -> TestClient:
    """The same browser against a new process: no contexts, no records, the same secret."""
    client = TestClient(app)
    client.cookies.update(tab.client.cookies)
    tab.client = client
    return client


def test_after_a_restart_the_stream_revives_the_tab_from_its_snapshot() -> None:
    with TestClient(make_app()) as client:
        tab = client.open("/")
        for _ in range(3):
            tab.action("inc")
        tab.action("send", draft="kept")
    with _restart(tab, make_app()) as client:
        tab.disconnect()
        assert tab.reconnect().status == 200
        ctx = tab.context
        assert ctx is not None
        assert ctx.signals["count"].value == 3 and ctx.signals["said"].value == ["kept"]
        tab.action("inc")
        assert tab.signals["_count"] == 4


def test_after_a_restart_an_action_without_the_snapshot_is_refused_not_run_on_other_values() -> None:
    with TestClient(make_app()) as client:
        tab = client.open("/")
        tab.action("inc")
    with _restart(tab, make_app()) as client:
        # a hand-written post never carries the snapshot: the tab cannot be rebuilt from it
        assert client.post("/_action/inc", json={"via_ctx": tab.id}).status == 409
        assert client.app.contexts == {}
        tab.disconnect()  # the page's own action while its stream is down carries the snapshot
        assert tab.action("inc").status == 200
        assert tab.context is not None and tab.context.signals["count"].value == 2


def test_a_forged_snapshot_is_refused_and_the_page_reloads(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="pyvia")
    with TestClient(make_app()) as client:
        tab = client.open("/")
        tab.action("inc")
    with _restart(tab, make_app()) as client:
        mac, seq, body = tab.signals[protocol.SNAPSHOT_SIGNAL].split(".", 2)
        values = orjson.loads(body)
        values["count"] = 1000  # what a user could wish for
        tab.signals[protocol.SNAPSHOT_SIGNAL] = f"{mac}.{seq}.{orjson.dumps(values).decode()}"
        tab.disconnect()
        tab.reconnect()
        assert tab.scripts == ["window.location.reload()"]
        assert client.app.contexts == {}
        assert "refused a forged snapshot" in caplog.text


def test_a_snapshot_of_another_tab_is_refused() -> None:
    with TestClient(make_app()) as client:
        tab, other = client.open("/"), client.open("/")
        for _ in range(5):
            other.action("inc")
        tab.signals[protocol.SNAPSHOT_SIGNAL] = other.signals[protocol.SNAPSHOT_SIGNAL]
    with _restart(tab, make_app()) as client:
        tab.disconnect()
        tab.reconnect()
        assert tab.scripts == ["window.location.reload()"]


def test_an_older_snapshot_than_the_server_sent_is_a_replay_and_refused(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="pyvia")
    app = make_app()
    with TestClient(app) as client:
        tab = client.open("/")
        tab.action("inc")
        old = tab.signals[protocol.SNAPSHOT_SIGNAL]
        for _ in range(4):
            tab.action("inc")
        tab.disconnect()
        client.clock.advance(120)  # destroyed; this process keeps its newest values and their number
        assert tab.context is None
        tab.signals[protocol.SNAPSHOT_SIGNAL] = old
        assert tab.action("inc").status == 200  # the server's own newer values win over the old one
        assert tab.context is not None and tab.context.signals["count"].value == 6
        tab.disconnect()
        client.clock.advance(120)
        # its values dropped (past the budget): only the number is left
        app.runtime.revival.graveyard[tab.id].snapshot = None
        assert tab.action("inc").status == 400  # the replayed snapshot is refused
        assert "refused a replayed snapshot" in caplog.text


def test_a_tab_whose_values_pass_the_snapshot_bound_revives_with_its_handlers_values() -> None:
    app = make_app(max_snapshot_bytes=64)
    with TestClient(app) as client:
        tab = client.open("/")
        tab.action("send", draft="a long enough message " * 2)
        assert protocol.SNAPSHOT_SIGNAL not in tab.signals  # too large: removed from the browser
        tab.action("inc")
    with _restart(tab, make_app(max_snapshot_bytes=64)) as client:
        tab.disconnect()
        tab.reconnect()
        assert tab.context is not None
        assert tab.context.signals["count"].value == 0 and tab.context.signals["said"].value == []


def test_an_in_process_revival_uses_the_servers_own_newest_values() -> None:
    app = make_app()
    with TestClient(app) as client:
        tab = client.open("/")
        tab.action("inc")
        tab.disconnect()
        tab.action("inc")  # ran on the live context; its patch is waiting for the stream
        client.clock.advance(120)
        assert tab.context is None
        tab.reconnect()
        assert tab.context is not None and tab.context.signals["count"].value == 2
