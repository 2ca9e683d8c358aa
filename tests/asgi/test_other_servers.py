"""The counter through hypercorn (in a thread) and granian (a subprocess), the adapter unchanged."""

from __future__ import annotations

from examples.counter import app as counter_app

from pyvia.asgi import asgi
from pyvia.lifecycle import State
from tests.asgi.servers import GranianProcess, open_page, open_stream, post_action, request, serving
from tests.helpers import OPENING, frame_body, signals_event

FIRST = OPENING


def round_trip(host: str, port: int) -> str:
    """Page, stream, two actions; returns the tab's context id."""
    _, seed, cookie = open_page(host, port)
    signals = {"via_ctx": seed["via_ctx"], "step": 1}
    stream, head = open_stream(host, port, signals, cookie)
    with stream:
        assert head.status == 200 and head.header("content-type") == "text/event-stream"
        assert frame_body(stream.read_chunk()) == FIRST
        for n in range(2):
            response = post_action(host, port, "increment", signals, cookie)
            assert (response.status, response.body) == (200, b"")
            assert signals_event(stream.read_chunk())["_count"] == n + 1
    return str(seed["via_ctx"])


def test_hypercorn_serves_the_counter_and_reports_disconnects() -> None:
    with serving(asgi(counter_app), "hypercorn") as server:
        ctx_id = round_trip(server.host, server.port)
        server.wait_for(lambda: counter_app.contexts[ctx_id].state is State.DISCONNECTED, timeout=3)
        assert request(server.host, server.port, "HEAD", "/").status == 200


def test_granian_serves_the_counter() -> None:
    with GranianProcess("tests.asgi.apps:counter") as server:
        round_trip(server.host, server.port)
        assert request(server.host, server.port, "POST", "/", body=b"x").status == 405
