"""/_health, /_ready and /metrics against a real App driven by the test client."""

from __future__ import annotations

import gc
from dataclasses import dataclass
from typing import Any

import orjson
import pytest
from examples.counter import app as counter_app

import pyvia
from pyvia import App, Context, Response
from pyvia.ops.health import health_response, metrics_response, ready_response
from pyvia.ops.metrics import CONTENT_TYPE, metrics_for
from pyvia.testing import TestClient
from tests.ops.promtext import parse, value


def make_app() -> App:
    app = App(title="ops")

    @app.page("/")
    def page(c: Context) -> None:
        count = c.signal(0, "count")

        @c.action
        def inc() -> None:
            count.value += 1

        c.view(lambda: f"<div id='n'>{count.value}</div>")

    return app


def body(response: Any) -> Any:
    return orjson.loads(response.body)


def test_health_counts_tabs_and_streams_of_the_counter_example() -> None:
    with TestClient(counter_app) as client:
        # the example's app is shared with other tests, whose tabs may still be alive: count from here
        before = body(health_response(counter_app))
        first, second = client.open("/"), client.open("/")
        response = health_response(counter_app)
        assert response.status == 200
        assert ("content-type", "application/json") in response.headers
        assert ("cache-control", "no-store") in response.headers
        assert body(response) == {
            "status": "ok",
            "version": pyvia.__version__,
            "started": True,
            "engine": {"name": "none", "state": "none"},
            "contexts": before["contexts"] + 2,
            "streams": before["streams"] + 2,
        }
        second.disconnect()
        assert body(health_response(counter_app))["streams"] == before["streams"] + 1
        assert first.is_connected


def test_ready_only_once_started_and_not_while_draining(monkeypatch: pytest.MonkeyPatch) -> None:
    app = make_app()
    before = ready_response(app)
    assert (before.status, body(before)) == (503, {"ready": False, "reason": "not started"})
    assert ("retry-after", "1") in before.headers
    assert body(health_response(app))["started"] is False
    with TestClient(app):
        assert (ready_response(app).status, body(ready_response(app))) == (200, {"ready": True})
        monkeypatch.setattr(app, "draining", True, raising=False)
        assert body(ready_response(app)) == {"ready": False, "reason": "draining"}
    assert ready_response(app).status == 503


@dataclass
class Status:
    engine: str
    url: str
    connected: bool
    node_id: str
    reconnects: int
    last_error: str | None


class FakeEngine:
    name = "nats"

    def __init__(self, connected: bool) -> None:
        self.is_connected = connected

    def status(self) -> Status:
        return Status(
            "nats",
            "nats://user:pw@nats.internal:4222",
            self.is_connected,
            "n1",
            3,
            None if self.is_connected else "connection refused",
        )


def test_health_is_503_while_a_configured_engine_is_down(monkeypatch: pytest.MonkeyPatch) -> None:
    app = make_app()
    engine = FakeEngine(connected=False)  # the report's format; tests/cluster takes a real engine down
    monkeypatch.setattr(type(app), "engine", property(lambda self: engine))
    with TestClient(app) as client:
        client.open("/")
        response = health_response(app)
        assert response.status == 503 and ("retry-after", "1") in response.headers
        data = body(response)
        assert data["status"] == "engine down"
        assert data["engine"] == {
            "name": "nats",
            "state": "down",
            "node_id": "n1",
            "reconnects": 3,
            "last_error": "connection refused",
            "url": "nats://nats.internal:4222",
        }
        assert ready_response(app).status == 200  # readiness never follows the engine
        _, samples = parse(metrics_response(app).body.decode())
        assert value(samples, "pyvia_engine_up", engine="nats") == 0
        app.engine.is_connected = True
        assert health_response(app).status == 200
        assert body(health_response(app))["engine"]["state"] == "up"


def test_metrics_read_the_app_at_scrape_time() -> None:
    app = make_app()
    with TestClient(app, accept_encoding="zstd") as client:
        tabs = [client.open("/") for _ in range(3)]
        tabs[0].action("inc")
        tabs[2].disconnect()
        response = metrics_response(app)
        assert response.status == 200
        assert ("content-type", CONTENT_TYPE) in response.headers
        meta, samples = parse(response.body.decode())
        assert value(samples, "pyvia_tabs") == 3
        assert value(samples, "pyvia_streams_open") == 2
        assert value(samples, "pyvia_sessions") >= 0
        assert value(samples, "pyvia_encoder_budget_bytes") == app.compression.budget.stats()["limit_bytes"]
        assert value(samples, "pyvia_encoders") == app.compression.budget.stats()["encoders"]
        assert value(samples, "process_resident_memory_bytes") > 10 << 20
        assert value(samples, "pyvia_errors_total") == 0
        assert ("pyvia_engine_up", frozenset()) not in samples  # no engine, no series
        assert meta["pyvia_tabs"][0] == "gauge" and meta["pyvia_requests_total"][0] == "counter"
        client.clock.advance(60)  # the disconnected tab is destroyed after its timeouts
        _, later = parse(metrics_response(app).body.decode())
        assert value(later, "pyvia_tabs") == 2


def test_the_core_serves_the_endpoints_and_runs_the_monitors() -> None:
    app = make_app()
    m = metrics_for(app)
    assert m is app.metrics
    with TestClient(app) as client:
        assert m.gc_monitor.installed and m.lag_monitor.running
        client.open("/")
        health = client.get("/_health")
        assert health.status == 200 and body(health)["contexts"] == 1
        assert client.get("/_ready").status == 200
        scrape = client.get("/metrics")
        assert ("content-type", CONTENT_TYPE) in scrape.headers
        _, samples = parse(scrape.body.decode())
        assert value(samples, "pyvia_tabs") == 1
        client.clock.advance(1.0)  # four lag checks on the manual clock
        assert m.lag_monitor.histogram.count == 4
    assert not m.gc_monitor.installed and not m.lag_monitor.running
    assert m.gc_monitor._callback not in gc.callbacks


def test_probes_answer_before_middleware() -> None:
    app = make_app()

    @app.middleware
    def deny_all(request, call_next):
        return Response.text("login first", 403)

    with TestClient(app) as client:
        assert client.get("/_health").status == 200
        assert client.get("/_ready").status == 200
        assert client.get("/metrics").status == 200
        assert client.get("/").status == 403


def test_rate_limited_actions_and_unsent_cap_hits_are_counted_in_metrics() -> None:
    from pyvia import Scope

    app = App(action_rate=10, action_burst=2, max_unsent_bytes=3000, max_stream_buffer=10_000)

    @app.page("/")
    def page(c: Context) -> None:
        c.scope(Scope.ROUTE)
        n = c.signal(0, "n", scope=Scope.ROUTE)

        @c.action
        def inc() -> None:
            n.increment()

        c.view(lambda: f"<p id='n'>{n.value}</p>" + "x" * 1000, share_render=True)

    def counts() -> tuple[float, float, float]:
        _, samples = parse(metrics_response(app).body.decode())
        return (
            value(samples, "pyvia_rate_limited_total"),
            value(samples, "pyvia_unsent_cap_hits_total"),
            value(samples, "pyvia_unsent_bytes"),
        )

    with TestClient(app) as client:
        tabs = [client.open("/") for _ in range(3)]
        assert counts() == (0, 0, 0)
        _, samples = parse(metrics_response(app).body.decode())
        assert not [n for n, _ in samples if n.startswith("pyvia_server_")]  # no native server: no series
        assert [tabs[2].action("inc").status for _ in range(3)] == [200, 200, 429]
        assert counts()[0] == 1
        for t in tabs[:2]:
            t.pause()  # stalled tabs: the broadcasts pile up in their sockets
        for _ in range(3):
            client.clock.advance(0.2)
            tabs[2].action("inc")
            app.flush_broadcasts()
        client.clock.advance(1.1)  # the sweep adds the unsent bytes up: over 3,000 together
        _, hits, unsent = counts()
        assert hits == 1 and unsent > 3000
        client.clock.advance(1.1)  # still over: the same episode, not a new hit
        assert counts()[1] == 1
        for t in tabs[:2]:
            t.resume()
        client.clock.advance(1.1)
        assert counts()[1:] == (1, 0)
