"""Issue 17, "limits that say so": every refusal the native server makes by itself is one WARNING
line naming the peer, the status and the reason, without a traceback, and a flood of them costs
the log a few lines (the rest are counted into the next line), never one line each."""

from __future__ import annotations

import logging
import time

import pytest

from pyvia.server.http import ServerLimits
from tests.helpers import RawClient, running_server
from tests.security.servers import LimitsApp

LIMITS = ServerLimits(
    max_request_line=64,
    max_header_bytes=1024,
    max_body=100,
    max_in_flight=1,
    max_connections_per_ip=2,
    per_ip_exempt=(),
)


def lines(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "pyvia.server" and r.levelno == logging.WARNING]


def refuse(address: tuple[str, int], raw: bytes) -> int:
    with RawClient(*address) as c:
        c.send(raw)
        return c.read_response().status


def test_each_refusal_is_one_warning_line_with_its_reason(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="pyvia.server")
    with running_server(LimitsApp(), limits=LIMITS) as address:
        statuses = [
            refuse(address, b"GET /" + b"x" * 100 + b" HTTP/1.1\r\nHost: a\r\n\r\n"),
            refuse(address, b"GET / HTTP/1.1\r\nHost: a\r\nX-Big: " + b"y" * 2000 + b"\r\n\r\n"),
            refuse(address, b"GET / HTTP/1.1\r\nHost: a\r\nBad Name: x\r\n\r\n"),
            refuse(address, b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 101\r\n\r\n"),
        ]
        with RawClient(*address) as slow, RawClient(*address) as shed:
            slow.send(b"GET /slow?s=0.5 HTTP/1.1\r\nHost: a\r\n\r\n")
            time.sleep(0.1)
            shed.send(b"GET /other HTTP/1.1\r\nHost: a\r\n\r\n")
            statuses.append(shed.read_response().status)
            slow.read_response()
            with RawClient(*address) as third:  # a third connection from 127.0.0.1: over the cap of two
                statuses.append(third.read_response().status)
    assert statuses == [414, 431, 400, 413, 503, 503]
    logged = lines(caplog)
    messages = [r.getMessage() for r in logged]
    assert len(logged) == 6, messages
    assert all(r.exc_info is None and "\n" not in r.getMessage() for r in logged)  # one line, no traceback
    expected = [
        ("with 414", "request target longer than 64 bytes"),
        ("with 431", "header fields over 1024 bytes"),
        ("with 400", "malformed request"),
        ("with 413", "body of 101 bytes over 100"),
        ("with 503", "answers in flight, the cap (max_in_flight)"),
        ("with 503", "connections open from that address, the cap (max_connections_per_ip)"),
    ]
    for message, (status, reason) in zip(messages, expected, strict=True):
        assert "127.0.0.1" in message and status in message and reason in message, message


def test_a_flood_of_refusals_is_rate_limited_and_counted(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="pyvia.server")
    with running_server(LimitsApp(), limits=LIMITS) as address:
        for _ in range(200):
            assert refuse(address, b"GET / HTTP/1.1\r\nHost: a\r\nBad Name: x\r\n\r\n") == 400
        flood = len(lines(caplog))
        time.sleep(1.1)  # the bucket refills: the next line names what was held back
        refuse(address, b"GET / HTTP/1.1\r\nHost: a\r\nBad Name: x\r\n\r\n")
    assert 1 <= flood <= 12, flood
    last = lines(caplog)[-1].getMessage()
    assert "more 400 refusals not logged since the last line" in last, last
    held = int(last.split("(and ")[1].split(" ")[0])
    assert flood + held == 200, (flood, held)
