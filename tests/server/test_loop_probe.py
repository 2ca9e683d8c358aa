"""The native server's loop probe: once a second while nothing comes, on the fast schedule as
soon as something does, and the app's loop-lag metric read from it (one timer, not two)."""

from __future__ import annotations

import time

from pyvia import App, Response
from pyvia.http import Request
from tests.helpers import RawClient, get, running_server
from tests.ops.promtext import parse


def _lag(address: tuple[str, int]) -> tuple[float, float]:
    """``(count, sum)`` of ``pyvia_event_loop_lag_seconds``."""
    with RawClient(*address) as client:
        client.send(get("/metrics"))
        response = client.read_response()
    samples = parse(response.body.decode())[1]
    return (
        samples[("pyvia_event_loop_lag_seconds_count", frozenset())],
        samples[("pyvia_event_loop_lag_seconds_sum", frozenset())],
    )


def test_a_handler_that_blocks_the_loop_shows_in_the_loop_lag_the_probe_measures() -> None:
    app = App()

    @app.route("GET", "/block")
    def block(request: Request) -> Response:
        time.sleep(0.6)  # holds the loop, as a blocking call in a handler does
        return Response.text("done")

    with running_server(app) as address:
        assert not app.metrics.lag_monitor.running  # the server's probe measures it instead
        time.sleep(2.5)  # idle: the probe waits a second at a time
        count, total = _lag(address)
        time.sleep(2.0)
        idle_count, idle_total = _lag(address)
        assert 1 <= idle_count - count <= 4  # about one probe a second (each scrape wakes it once)
        assert idle_total - total < 0.2
        with RawClient(*address) as client:
            client.send(get("/block"))
            assert client.read_response().status == 200
        _, blocked_total = _lag(address)
        assert blocked_total - idle_total >= 0.4  # the probe woken by the request ran that late
    assert not app.metrics.lag_monitor.running
