"""The connection's state: one enum, moved only through the table of pyvia.server.states (issue 20),
driven here through HttpProtocol on a FakeTransport."""

from __future__ import annotations

from typing import Any

import pytest

from pyvia.http import Request, Response, StreamResponse, StreamSink
from pyvia.server.http import ServerLimits
from pyvia.server.states import DEADLINES, TRANSITIONS, ConnState, check_move
from tests.helpers import get, make_protocol

S = ConnState


class App:
    def __init__(self) -> None:
        self.sinks: list[StreamSink] = []

    def handle(self, request: Request) -> Any:
        if request.path == "/stream":
            return StreamResponse([("content-type", "text/event-stream")], self.sinks.append, lambda: None)
        return Response(200, [], b"ok")


def test_the_table_lets_every_state_end_and_nothing_come_back_from_closed() -> None:
    assert set(TRANSITIONS) == set(ConnState) == set(DEADLINES)
    assert all(S.CLOSED in allowed for allowed in TRANSITIONS.values())
    assert TRANSITIONS[S.CLOSED] == {S.CLOSED} and TRANSITIONS[S.FLUSHING] == {S.CLOSED}
    assert check_move(S.IDLE, S.RECEIVING) is S.RECEIVING
    with pytest.raises(RuntimeError, match="CLOSED -> IDLE is not a move of the table"):
        check_move(S.CLOSED, S.IDLE)
    with pytest.raises(RuntimeError, match="LINGERING -> ANSWERING"):
        check_move(S.LINGERING, S.ANSWERING)
    # Only the states that wait on the peer run a deadline.
    assert {s for s, d in DEADLINES.items() if d} == {S.IDLE, S.RECEIVING, S.STALLED, S.LINGERING, S.FLUSHING}


def test_a_request_moves_idle_receiving_answering_idle() -> None:
    protocol, transport, _ = make_protocol(App())
    assert protocol.state is S.IDLE
    request = get("/")
    protocol.data_received(request[:10])
    assert protocol.state is S.RECEIVING and protocol.deadline > 0
    protocol.data_received(request[10:])
    assert protocol.state is S.IDLE and transport.output.startswith(b"HTTP/1.1 200 ")


def test_a_stream_moves_to_streaming_and_back_to_idle_when_it_ends() -> None:
    app = App()
    protocol, transport, _ = make_protocol(app)
    protocol.data_received(get("/stream"))
    assert protocol.state is S.STREAMING and protocol.deadline == 0.0
    app.sinks[0].close()
    assert protocol.state is S.IDLE and protocol.deadline > 0 and not transport.closed


def test_a_peer_that_stops_reading_stalls_the_connection_then_it_resumes() -> None:
    protocol, transport, _ = make_protocol(App())
    protocol.data_received(get("/"))
    protocol.pause_writing()
    assert protocol.state is S.STALLED and transport.reading_paused
    protocol.resume_writing()
    assert protocol.state is S.IDLE and not transport.reading_paused


def test_a_refusal_lingers_then_closes_and_a_stalled_peer_is_reset() -> None:
    protocol, transport, _ = make_protocol(App(), limits=ServerLimits(max_request_line=16))
    protocol.data_received(b"GET /" + b"x" * 40 + b" HTTP/1.1\r\nHost: a\r\n\r\n")
    assert protocol.state is S.LINGERING and transport.eof_written
    protocol.timeout()
    assert protocol.state is S.CLOSED  # nothing left to flush
    stalled, transport2, registry = make_protocol(App())
    stalled.data_received(get("/"))
    stalled.pause_writing()
    stalled.timeout()
    assert stalled.state is S.CLOSED and transport2.aborted and registry.timeouts["send"] == 1
