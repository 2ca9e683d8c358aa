"""Issue 21 items 6 and 11 over real sockets: where llhttp is lenient the server is not, and never
more lenient than h11 (each refused request is checked against h11 too, and the request next to
it that h11 takes is served)."""

from __future__ import annotations

import json
import time
from typing import Any

import h11
import pytest

from pyvia.http import Request, Response
from pyvia.server.http import ServerLimits
from tests.helpers import RawClient, running_server


class HostEcho:
    """Answers every request with the host, path and body it saw, as JSON."""

    async def startup(self) -> None:
        pass

    async def shutdown(self, budget: float) -> None:
        pass

    def handle(self, request: Request) -> Response:
        seen = {"host": request.headers.get("host"), "path": request.path, "body": request.body.decode("latin-1")}
        return Response(200, [("content-type", "application/json")], json.dumps(seen).encode())


def h11_takes(raw: bytes) -> bool:
    """Whether h11 0.16, as a server, reads ``raw`` as one whole request."""
    conn = h11.Connection(h11.SERVER)
    conn.receive_data(raw)
    try:
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                return False
            if isinstance(event, h11.EndOfMessage):
                return True
    except h11.RemoteProtocolError:
        return False


def answer(address: tuple[str, int], raw: bytes) -> tuple[int, Any]:
    with RawClient(*address) as c:
        c.send(raw)
        response = c.read_response()
    body = json.loads(response.body) if response.status == 200 else response.header("connection")
    return response.status, body


@pytest.fixture
def address() -> Any:
    with running_server(HostEcho(), limits=ServerLimits(allowed_hosts=("served.example", "127.0.0.1"))) as bound:
        yield bound


def chunked(size_line: bytes) -> bytes:
    return (
        b"POST /up HTTP/1.1\r\nHost: served.example\r\nTransfer-Encoding: chunked\r\n\r\n"
        + size_line
        + b"\r\nhello\r\n0\r\n\r\n"
    )


def test_the_absolute_form_authority_wins_over_host(address: tuple[str, int]) -> None:
    # RFC 9112 §3.2.2: the target's authority names the site; Host is ignored.
    served = b"GET http://served.example/page HTTP/1.1\r\nHost: other.example\r\n\r\n"
    refused = b"GET http://other.example/page HTTP/1.1\r\nHost: served.example\r\n\r\n"
    assert answer(address, served) == (200, {"host": "served.example", "path": "/page", "body": ""})
    assert answer(address, refused) == (400, "close")  # not served, whatever Host says
    assert answer(address, b"GET http://user@served.example/ HTTP/1.1\r\nHost: served.example\r\n\r\n")[0] == 400


def test_a_nul_is_never_decoded_into_the_path(address: tuple[str, int]) -> None:
    assert answer(address, b"GET /a%00b HTTP/1.1\r\nHost: served.example\r\n\r\n") == (400, "close")
    assert answer(address, b"GET /a%01b HTTP/1.1\r\nHost: served.example\r\n\r\n")[1]["path"] == "/a\x01b"


@pytest.mark.parametrize("host", [b"\xa0served.example\xa0", b"served.example\x85", b"\x0bserved.example"])
def test_a_host_wrapped_in_non_ascii_whitespace_is_refused(address: tuple[str, int], host: bytes) -> None:
    assert answer(address, b"GET / HTTP/1.1\r\nHost: " + host + b"\r\n\r\n") == (400, "close")
    assert answer(address, b"GET / HTTP/1.1\r\nHost: \tserved.example \r\n\r\n")[0] == 200  # OWS is fine


def test_chunk_sizes_with_long_runs_of_leading_zeros_are_refused_like_h11(address: tuple[str, int]) -> None:
    too_long = chunked(b"0" * 41 + b"5")
    longest = chunked(b"0" * 19 + b"5")  # 20 hex digits: what h11 still takes
    assert not h11_takes(too_long) and h11_takes(longest)
    assert answer(address, too_long) == (400, "close")
    assert answer(address, longest) == (200, {"host": "served.example", "path": "/up", "body": "hello"})


def test_chunk_checks_hold_when_the_body_arrives_a_byte_at_a_time(address: tuple[str, int]) -> None:
    for raw, expected in ((chunked(b"0" * 41 + b"5"), 400), (chunked(b"0" * 19 + b"5;ext=1"), 200)):
        with RawClient(*address) as c:
            for i in range(len(raw)):
                c.send(raw[i : i + 1])
            assert c.read_response().status == expected


def test_a_chunked_request_pipelined_behind_another_is_framed_where_it_starts(address: tuple[str, int]) -> None:
    first = b"POST /a HTTP/1.1\r\nHost: served.example\r\nContent-Length: 5\r\n\r\n00000"
    with RawClient(*address) as c:
        c.send(first + chunked(b"0" * 19 + b"5") + first + chunked(b"0" * 30 + b"5"))
        statuses = [c.read_response().status for _ in range(4)]
    assert statuses == [200, 200, 200, 400]


@pytest.mark.parametrize("line", [b"GET  / HTTP/1.1", b"GET /  HTTP/1.1", b"GET /\t HTTP/1.1"])
def test_doubled_spaces_in_the_request_line_are_refused_like_h11(address: tuple[str, int], line: bytes) -> None:
    raw = line + b"\r\nHost: served.example\r\n\r\n"
    assert not h11_takes(raw)
    assert answer(address, raw)[0] == 400
    assert answer(address, b"\r\n\r\nGET / HTTP/1.1\r\nHost: served.example\r\n\r\n")[0] == 200  # blank lines first


def test_a_request_line_split_across_reads_is_checked_whole(address: tuple[str, int]) -> None:
    for raw, expected in (
        (b"GET  /x HTTP/1.1\r\nHost: served.example\r\n\r\n", 400),
        (b"GET /x HTTP/1.1\r\nHost: served.example\r\n\r\n", 200),
    ):
        with RawClient(*address) as c:
            for piece in (raw[:3], raw[3:5], raw[5:9], raw[9:]):
                c.send(piece)
            assert c.read_response().status == expected


def test_a_content_length_of_thousands_of_digits_is_a_400_not_a_500(address: tuple[str, int]) -> None:
    for digits in (4300, 5000):  # int() would refuse past 4,300 digits: refused before it, like h11
        raw = b"POST / HTTP/1.1\r\nHost: served.example\r\nContent-Length: " + b"0" * digits + b"5\r\n\r\nhello"
        assert not h11_takes(raw)
        assert answer(address, raw) == (400, "close")
    longest = b"POST / HTTP/1.1\r\nHost: served.example\r\nContent-Length: " + b"0" * 19 + b"5\r\n\r\nhello"
    assert h11_takes(longest) and answer(address, longest)[1]["body"] == "hello"  # 20 digits: h11 takes it
    for length in (b"0", b"000", b"5"):
        raw = b"POST / HTTP/1.1\r\nHost: served.example\r\nContent-Length: " + length + b"\r\n\r\n"
        assert answer(address, raw + b"x" * int(length))[0] == 200
    for bad in (b"+5", b"5 5", b"\xd9\xa5", b"0x5"):  # not 1*DIGIT (an Arabic-Indic five is a digit to str)
        raw = b"POST / HTTP/1.1\r\nHost: served.example\r\nContent-Length: " + bad + b"\r\n\r\nhello"
        assert answer(address, raw)[0] == 400, bad


def test_a_blank_line_split_over_three_reads_still_ends_the_head_where_it_does(address: tuple[str, int]) -> None:
    # Found by the fuzz: the head's last CRLF split as "\r" | "\n" | "\r\n1", the chunk size after it.
    raw = chunked(b"5")
    end = raw.index(b"\r\n\r\n")
    with RawClient(*address) as c:
        for piece in (raw[: end + 1], raw[end + 1 : end + 2], raw[end + 2 : end + 5], raw[end + 5 :]):
            c.send(piece)
            time.sleep(0.01)
        response = c.read_response()
    assert response.status == 200 and json.loads(response.body)["body"] == "hello"
