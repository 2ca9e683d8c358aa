"""Fuzz the native server's request side: whatever bytes arrive, in whatever pieces, the connection
answers well-formed responses (the app's, or a refusal) or waits for more, and never raises.

The invariant is h11's (STYLE.md §3): parse, or refuse; anything else is a bug. A connection runs
on a FakeTransport, so nothing here touches a socket.
"""

from __future__ import annotations

import logging
import re

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pyvia.http import Request, Response, StreamResponse
from pyvia.server.http import ServerLimits
from tests.helpers import FakeTransport, make_protocol

#: What a connection may answer on its own or through the app below. Never 500: the app does not fail.
ALLOWED = {100, 200, 400, 408, 413, 414, 417, 431, 501, 505}
LIMITS = ServerLimits(max_request_line=64, max_header_count=8, max_header_bytes=256, max_body=64, max_pipelined=4)
RESPONSE_HEAD = re.compile(rb"HTTP/1\.1 (\d{3}) [^\r\n]*\r\n((?:[^\r\n]+\r\n)*)\r\n")


class App:
    def handle(self, request: Request) -> Response | StreamResponse:
        if request.path == "/s":
            return StreamResponse([("content-type", "text/event-stream")], lambda sink: sink.write(b"data: 1\n\n"),
                                  lambda: None)
        return Response(200, [("content-type", "text/plain")], b"ok:%d" % len(request.body))

    async def startup(self) -> None:
        pass

    async def shutdown(self, budget: float) -> None:
        pass


SEEDS = [
    b"GET / HTTP/1.1\r\nHost: a\r\n\r\n",
    b"GET /p?q=1 HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
    b"HEAD / HTTP/1.1\r\nHost: a\r\n\r\n",
    b"POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello",
    b"POST /x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\nT: 1\r\n\r\n",
    b"POST /x HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\nok",
    b"GET /s HTTP/1.1\r\nHost: a\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
    b"OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n",
    b"GET http://a/b HTTP/1.1\r\nHost: a\r\n\r\n",
]


TOKENS = [b"\r\n", b":", b" ", b"\x00", b"%", b"9" * 9, b"Content-Length: 1\r\n", b"Transfer-Encoding: chunked\r\n"]


@st.composite
def mutated_requests(draw: st.DrawFn) -> bytes:
    """One to three seed requests, pipelined, then bytes inserted, removed or replaced."""
    data = bytearray(b"".join(draw(st.lists(st.sampled_from(SEEDS), min_size=1, max_size=3))))
    for _ in range(draw(st.integers(0, 4))):
        at = draw(st.integers(0, len(data)))
        op = draw(st.sampled_from(["insert", "delete", "replace"]))
        chunk = draw(st.binary(min_size=1, max_size=8) | st.sampled_from(TOKENS))
        if op == "insert":
            data[at:at] = chunk
        elif op == "delete":
            del data[at:at + len(chunk)]
        else:
            data[at:at + len(chunk)] = chunk
    return bytes(data)


def pieces(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    return [data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True) if data[a:b]]


class _Errors(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def check_connection(chunks: list[bytes]) -> None:
    errors = _Errors()
    logger = logging.getLogger("pyvia.server")
    logger.addHandler(errors)
    try:
        protocol, transport, registry = make_protocol(App(), limits=LIMITS)
        for chunk in chunks:
            protocol.data_received(chunk)  # must never raise
        loop = registry.loop
        loop.now += 3600  # type: ignore[attr-defined]  # the FakeLoop's clock: every deadline passes
        registry.sweep(loop.time())
        registry.sweep(loop.time() + 10)
        if not transport.closed:
            protocol.eof_received()
        protocol.connection_lost(None)
    finally:
        logger.removeHandler(errors)
    assert not errors.records, [r.getMessage() for r in errors.records]
    check_output(transport)


def check_output(transport: FakeTransport) -> None:
    """Every write is whole responses (or stream chunks after a stream head), each well-formed."""
    streaming = False
    for write in transport.writes:
        if streaming:
            assert re.fullmatch(rb"([0-9a-f]+\r\n[^\r]*\r\n)+|0\r\n\r\n", write, re.S), write
            continue
        at = 0
        while at < len(write):
            match = RESPONSE_HEAD.match(write, at)
            assert match, write[at:at + 80]
            status = int(match.group(1))
            assert status in ALLOWED, write
            headers = dict(line.split(b": ", 1) for line in match.group(2).split(b"\r\n") if line)
            at = match.end()
            if b"transfer-encoding" in headers:
                streaming = True
                at = len(write)  # the first event may share the write with the head
            elif b"content-length" in headers:
                length = int(headers[b"content-length"])
                if status != 200 or write[at:at + 3] == b"ok:":
                    at += length
            if status >= 400:
                assert headers.get(b"connection") == b"close"


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.binary(max_size=300), max_size=6))
def test_random_bytes_are_answered_or_refused(chunks: list[bytes]) -> None:
    check_connection(chunks)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_requests(), st.lists(st.integers(0, 10_000), max_size=6))
def test_mutated_requests_in_any_pieces_are_answered_or_refused(data: bytes, cuts: list[int]) -> None:
    check_connection(pieces(data, cuts))


TARGETS = [b"*", b"ftp://a/b", b"http://a", b"HTTP://a?b", b"https://a/b#c", b"//x", b"a:1", b"/%zz", b"/a%2F%00"]


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from([b"GET", b"POST", b"OPTIONS", b"CONNECT", b"PRI", b"DELETE"]),
    st.lists(st.sampled_from(TARGETS) | st.binary(min_size=1, max_size=12), min_size=1, max_size=3),
)
def test_odd_request_targets_are_answered_or_refused(method: bytes, parts: list[bytes]) -> None:
    check_connection([method + b" " + b"".join(parts) + b" HTTP/1.1\r\nHost: a\r\n\r\n"])


def test_the_seeds_themselves_are_served() -> None:
    for seed in SEEDS:
        protocol, transport, _ = make_protocol(App(), limits=LIMITS)
        protocol.data_received(seed)
        assert transport.writes, seed
        assert transport.writes[-1].startswith((b"HTTP/1.1 200 ", b"HTTP/1.1 100 ")), transport.writes
        check_output(transport)
