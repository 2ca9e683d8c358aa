"""Overload (issue 7, item 6; ephpm-lessons §5.5, §8.3 #16): open-loop arrivals at twice the
measured capacity, every arrival accounted for, none hanging past its timeout, and the server
serving normally again within 2 s of the load stopping.

The server runs in its own process (pinned to CPU 1 when ``taskset`` exists); the generator runs
here on uvloop. Each arrival is a fresh connection sending ``POST /work`` (about 1 ms of CPU) with
``Connection: close`` and waiting up to ``CLIENT_TIMEOUT`` for the status line, so an arrival is
exactly one of: 2xx, 429, 503, another status, refused, reset (closed without an answer), or
timed out; the test requires no time-outs. ``OVERLOAD_SECONDS`` is short for CI; the issue's 20 s
run is ``PYVIA_OVERLOAD_SECONDS=20`` (``-s`` prints the figures).
"""

from __future__ import annotations

import asyncio
import os
import statistics
from collections import Counter
from dataclasses import dataclass, field

import pytest
import uvloop

from tests.security.servers import server_process

#: Seconds of overload in CI; the issue asks for 20, run by hand.
OVERLOAD_SECONDS = float(os.environ.get("PYVIA_OVERLOAD_SECONDS", "6"))
#: Offered load as a multiple of the measured capacity.
OVERLOAD_FACTOR = float(os.environ.get("PYVIA_OVERLOAD_FACTOR", "2"))
#: Seconds an arrival waits for its answer before it counts as timed out.
CLIENT_TIMEOUT = 5.0
#: After the load, a normal request must succeed within this.
RECOVERY_SECONDS = 2.0


def request(path: str) -> bytes:
    return f"POST {path} HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".encode()


class _Call(asyncio.Protocol):
    """Send one request; resolve with the status code of the first line; never read further."""

    def __init__(self, payload: bytes, done: asyncio.Future[int]) -> None:
        self.payload = payload
        self.done = done
        self.buffer = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        transport.write(self.payload)  # type: ignore[attr-defined]

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if not self.done.done() and b"\r\n" in self.buffer:
            line = self.buffer.partition(b"\r\n")[0]
            try:
                self.done.set_result(int(line.split(b" ", 2)[1]))
            except (IndexError, ValueError):
                self.done.set_exception(ValueError(f"not a status line: {line[:60]!r}"))
            assert self.transport is not None
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            self.done.set_exception(ConnectionResetError("closed without an answer"))


@dataclass
class Tally:
    outcomes: Counter[str] = field(default_factory=Counter)
    latency: dict[str, list[float]] = field(default_factory=dict)
    #: Loop time of the last answer, to turn counts into rates.
    last: float = 0.0

    def add(self, outcome: str, seconds: float, now: float) -> None:
        self.outcomes[outcome] += 1
        self.latency.setdefault(outcome, []).append(seconds)
        self.last = max(self.last, now)

    def percentile(self, outcome: str, q: float) -> float:
        values = sorted(self.latency.get(outcome, []))
        return values[min(len(values) - 1, int(q * len(values)))] * 1000 if values else float("nan")


async def one(host: str, port: int, payload: bytes, tally: Tally) -> None:
    loop = asyncio.get_running_loop()
    began = loop.time()
    done: asyncio.Future[int] = loop.create_future()
    transport = None
    try:
        async with asyncio.timeout(CLIENT_TIMEOUT):
            transport, _ = await loop.create_connection(lambda: _Call(payload, done), host, port)
            status = await done
    except TimeoutError:
        outcome = "timeout"
    except ConnectionRefusedError:
        outcome = "refused"
    except (ConnectionResetError, BrokenPipeError, ConnectionAbortedError):
        outcome = "reset"
    except OSError as exc:  # EADDRNOTAVAIL, EMFILE…: counted, never lost
        outcome = f"oserror:{exc.errno}"
    else:
        outcome = "2xx" if 200 <= status < 300 else str(status)
    finally:
        if transport is not None:
            transport.abort()
    now = loop.time()
    tally.add(outcome, now - began, now)


async def capacity(host: str, port: int, path: str, seconds: float = 2.0, workers: int = 8) -> float:
    """Closed loop: ``workers`` back-to-back callers for ``seconds``; completed 2xx a second."""
    tally = Tally()
    payload = request(path)
    loop = asyncio.get_running_loop()
    end = loop.time() + seconds

    async def worker() -> None:
        while loop.time() < end:
            await one(host, port, payload, tally)

    began = loop.time()
    await asyncio.gather(*(worker() for _ in range(workers)))
    return tally.outcomes["2xx"] / (loop.time() - began)


async def open_loop(host: str, port: int, path: str, rate: float, seconds: float) -> tuple[Tally, int, float]:
    """Arrivals every ``1/rate`` s for ``seconds``, whatever happens to the earlier ones; also the
    seconds from the first arrival to the last answer."""
    tally = Tally()
    payload = request(path)
    loop = asyncio.get_running_loop()
    tasks: list[asyncio.Task[None]] = []
    total = int(rate * seconds)
    start = loop.time()
    for i in range(total):
        delay = start + i / rate - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.ensure_future(one(host, port, payload, tally)))
    await asyncio.gather(*tasks)
    return tally, total, tally.last - start


async def recovery(host: str, port: int) -> float:
    """Seconds until ``GET /`` is answered 200 (tries every 50 ms, up to RECOVERY_SECONDS)."""
    loop = asyncio.get_running_loop()
    began = loop.time()
    while loop.time() - began < RECOVERY_SECONDS:
        tally = Tally()
        get = b"GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
        await one(host, port, get, tally)
        if tally.outcomes["2xx"]:
            return loop.time() - began
        await asyncio.sleep(0.05)
    return float("inf")


def report(
    label: str,
    cap: float,
    rate: float,
    tally: Tally,
    total: int,
    span: float,
    recovered: float,
    server: dict[str, float],
) -> str:
    outcomes = dict(sorted(tally.outcomes.items()))
    goodput = tally.outcomes["2xx"] / span
    p = tally.percentile
    return (
        f"[{label}] capacity {cap:.0f}/s; offered {rate:.0f}/s for {OVERLOAD_SECONDS:.0f} s = {total} arrivals: "
        f"{outcomes}; goodput {goodput:.0f}/s = {goodput / cap:.0%} of capacity over {span:.1f} s; "
        f"2xx p50/p99/max {p('2xx', 0.5):.1f}/{p('2xx', 0.99):.1f}/{p('2xx', 1):.1f} ms; "
        f"503 p50/p99/max {p('503', 0.5):.1f}/{p('503', 0.99):.1f}/{p('503', 1):.1f} ms; "
        f"recovered in {recovered * 1000:.0f} ms; server: shed {server.get('shed_requests')}, "
        f"max loop lag {server.get('max_lag_seconds', 0) * 1000:.0f} ms, CPU {server.get('cpu_seconds', 0):.1f} s"
    )


@pytest.mark.parametrize("path", ["/work", "/async-work"])
def test_open_loop_overload_is_shed_fast_and_the_server_recovers(path: str) -> None:
    with server_process("tests.security.overload_app:app") as server:
        host, port = server.address

        async def main() -> tuple[float, float, Tally, int, float, float]:
            cap = await capacity(host, port, path)
            rate = OVERLOAD_FACTOR * cap
            tally, total, span = await open_loop(host, port, path, rate, OVERLOAD_SECONDS)
            return cap, rate, tally, total, span, await recovery(host, port)

        cap, rate, tally, total, span, recovered = uvloop.run(main())
    line = report(path, cap, rate, tally, total, span, recovered, server.stats)
    print(line)
    outcomes = tally.outcomes
    assert sum(outcomes.values()) == total, line  # every arrival accounted for
    assert outcomes["timeout"] == 0, line  # none hung past its timeout
    assert max(max(v) for v in tally.latency.values()) < CLIENT_TIMEOUT, line
    assert outcomes["503"] > 0, line  # the excess was shed…
    assert outcomes["2xx"] / span >= 0.5 * cap, line  # …while real work went on near capacity
    assert set(outcomes) <= {"2xx", "429", "503", "refused", "reset"}, line
    assert recovered <= RECOVERY_SECONDS, line
    assert statistics.median(tally.latency["503"]) < 1.5, line
    assert cap > 100, f"the capacity measurement is implausible: {cap:.0f}/s"
