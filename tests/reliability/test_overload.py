"""Issue 21 item 4, overload: an open loop at twice the measured capacity, as the attack ran it.

Page views of a counter whose render costs ~1 ms arrive every ``1 / (2 x capacity)`` s whatever
happened to the earlier ones, each on a pooled keep-alive connection when one is free and on a
new connection otherwise (as Go's net/http pools); every 100 ms a probe opens a brand-new
connection. The attack saw 9,509 client time-outs, a p99 of 4.4 s, 17 of 40 new connections
without an answer in 10 s and RSS from 145 to 524 MB. Here:

* every arrival is accounted for and none times out; every probe gets a 200, or a 503 with
  ``Retry-After``, within a second;
* the 503s come at once (p99 within about twice ``shed_after``), accepted work keeps p99 within
  ``shed_after`` (250 ms), and the server does as much real work per CPU second as it did below
  capacity (a 503 costs little);
* memory stays flat: page contexts whose stream never comes are capped (the app's
  ``max_waiting_contexts`` 2,000), so RSS ends within 1.2x (+16 MiB) of where the load began.

The server runs in its own process, pinned to CPU 1 when ``taskset`` exists; the generator runs
here on uvloop, pinned to CPU 0 for the run. The latency bounds are the issue's when the server
has its core (measured on this machine then: p99 177 ms served, 237 ms refused, the slowest new
connection 334 ms). On a machine shared with other work the server gets a share of it (read from
/proc, printed on the figure line): its turns take longer by that share and it also waits to be
scheduled between them, so the bounds are divided by the share squared.
``PYVIA_OVERLOAD_SECONDS`` lengthens the run (``-s`` prints the figures).
"""

from __future__ import annotations

import asyncio
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import uvloop

from tests.security.servers import server_process

SECONDS = float(os.environ.get("PYVIA_OVERLOAD_SECONDS", "8"))
FACTOR = 2.0
CLIENT_TIMEOUT = 5.0
PROBE_EVERY = 0.1
PROBE_LIMIT = 1.0
REQUEST = b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n"
LAGS: list[float] = []
OPENED: list[int] = []
SHARES: list[float] = []  # the server's share of a CPU below capacity, then under the load
CPU: list[float] = []  # the server's CPU seconds under the load


def cpu_seconds(pid: int) -> float:
    """User and system CPU time of a process so far (/proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


class Conn(asyncio.Protocol):
    """A keep-alive connection that reads whole responses (Content-Length framed)."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buffer = b""
        self.waiter: asyncio.Future[tuple[int, dict[str, str]]] | None = None
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        self._parse()

    def _parse(self) -> None:
        end = self.buffer.find(b"\r\n\r\n")
        if end < 0 or self.waiter is None or self.waiter.done():
            return
        lines = self.buffer[:end].decode("latin-1").split("\r\n")
        headers = dict(line.lower().split(": ", 1) for line in lines[1:] if ": " in line)
        length = int(headers.get("content-length", "0"))
        if len(self.buffer) < end + 4 + length:
            return
        self.buffer = self.buffer[end + 4 + length :]
        self.waiter.set_result((int(lines[0].split(" ", 2)[1]), headers))

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(ConnectionResetError("closed without an answer"))

    async def request(self) -> tuple[int, dict[str, str]]:
        assert self.transport is not None
        self.waiter = asyncio.get_running_loop().create_future()
        self.transport.write(REQUEST)
        return await self.waiter


@dataclass
class Tally:
    outcomes: Counter[str] = field(default_factory=Counter)
    latency: dict[str, list[float]] = field(default_factory=dict)
    retry_after_missing: int = 0

    def add(self, outcome: str, seconds: float) -> None:
        self.outcomes[outcome] += 1
        self.latency.setdefault(outcome, []).append(seconds)

    def p(self, outcome: str, q: float) -> float:
        values = sorted(self.latency.get(outcome, []))
        return values[min(len(values) - 1, int(q * len(values)))] if values else float("nan")


class Pool:
    """Idle keep-alive connections to reuse; a new one when none is idle (no limit, as Go's default)."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.idle: list[Conn] = []
        self.opened = 0

    async def close(self) -> None:
        for conn in self.idle:
            if conn.transport is not None:
                conn.transport.close()
        self.idle = []
        await asyncio.sleep(0.05)  # let connection_lost run before the loop closes

    async def call(self, tally: Tally, *, fresh: bool = False) -> str:
        loop = asyncio.get_running_loop()
        began = loop.time()
        conn = None
        try:
            async with asyncio.timeout(CLIENT_TIMEOUT):
                if self.idle and not fresh:
                    conn = self.idle.pop()
                else:
                    self.opened += 1
                    _, conn = await loop.create_connection(Conn, self.host, self.port)
                status, headers = await conn.request()
        except TimeoutError:
            outcome = "timeout"
        except (ConnectionResetError, ConnectionRefusedError, BrokenPipeError):
            outcome = "reset"
        except OSError as exc:
            outcome = f"oserror:{exc.errno}"
        else:
            outcome = "200" if status == 200 else str(status)
            if status == 503 and "retry-after" not in headers:
                tally.retry_after_missing += 1
            if conn is not None and headers.get("connection") != "close" and not conn.closed and not fresh:
                self.idle.append(conn)
                conn = None
        finally:
            if conn is not None and conn.transport is not None and (fresh or outcome != "200"):
                conn.transport.close()
        tally.add(outcome, loop.time() - began)
        return outcome


async def capacity(pool: Pool, seconds: float = 2.0, workers: int = 16) -> float:
    loop = asyncio.get_running_loop()
    tally = Tally()
    end = loop.time() + seconds

    async def worker() -> None:
        while loop.time() < end:
            await pool.call(tally)

    began = loop.time()
    await asyncio.gather(*(worker() for _ in range(workers)))
    return tally.outcomes["200"] / (loop.time() - began)


async def lag_monitor(lags: list[float], period: float = 0.01) -> None:
    """How late the generator's own loop runs: past a few tens of ms its figures are its own."""
    loop = asyncio.get_running_loop()
    while True:
        due = loop.time() + period
        await asyncio.sleep(period)
        lags.append(loop.time() - due)


async def overload(pool: Pool, rate: float, pid: int) -> tuple[Tally, Tally, int, list[int]]:
    loop = asyncio.get_running_loop()
    load, probes = Tally(), Tally()
    tasks: list[asyncio.Task[str]] = []
    total = int(rate * SECONDS)
    memory = [rss(pid)]
    start = loop.time()
    next_probe = start
    next_sample = start + 1.0
    for i in range(total):
        due = start + i / rate
        now = loop.time()
        if now >= next_probe:
            tasks.append(asyncio.ensure_future(pool.call(probes, fresh=True)))
            next_probe += PROBE_EVERY
        if now >= next_sample:
            memory.append(rss(pid))
            next_sample += 1.0
        if due > now:
            await asyncio.sleep(due - now)
        tasks.append(asyncio.ensure_future(pool.call(load)))
    await asyncio.gather(*tasks)
    memory.append(rss(pid))
    return load, probes, total, memory


def test_an_open_loop_at_twice_capacity_is_shed_at_once_and_nothing_hangs() -> None:
    with server_process("tests.reliability.overload_app:app") as server:
        host, port = server.address
        pid = server.proc.pid

        async def main() -> tuple[float, Tally, Tally, int, list[int]]:
            loop = asyncio.get_running_loop()
            pool = Pool(host, port)
            cpu, began = cpu_seconds(pid), loop.time()
            cap = await capacity(pool)
            SHARES.append((cpu_seconds(pid) - cpu) / (loop.time() - began))
            monitor = asyncio.ensure_future(lag_monitor(LAGS))
            cpu, began = cpu_seconds(pid), loop.time()
            load, probes, total, memory = await overload(pool, FACTOR * cap, pid)
            SHARES.append((cpu_seconds(pid) - cpu) / (loop.time() - began))
            CPU.append(cpu_seconds(pid) - cpu)
            monitor.cancel()
            await pool.close()
            OPENED.append(pool.opened)
            return cap, load, probes, total, memory

        affinity = os.sched_getaffinity(0)
        if len(affinity) > 1 and 0 in affinity:
            os.sched_setaffinity(0, {0})  # the generator on CPU 0, the server on CPU 1: not on each other's
        try:
            cap, load, probes, total, memory = uvloop.run(main())
        finally:
            os.sched_setaffinity(0, affinity)
    pool_opened = OPENED[-1]
    below, under = SHARES[-2:]
    # Work per CPU second: below capacity (one request of the closed loop each), and under the load.
    per_cpu_below = cap / max(below, 0.05)
    per_cpu_under = load.outcomes["200"] / max(CPU[-1], 0.05)
    share = 1.0 if under >= 0.9 else max(under, 0.3)
    stretch = share * share
    ms = lambda t, o, q: f"{t.p(o, q) * 1000:.0f}"  # noqa: E731
    slowest_probe = max(max(v) for v in probes.latency.values())
    report = (
        f"capacity {cap:.0f}/s, offered {FACTOR * cap:.0f}/s for {SECONDS:.0f} s: {dict(load.outcomes)}; "
        f"200 p50/p99 {ms(load, '200', 0.5)}/{ms(load, '200', 0.99)} ms, 503 p50/p99 {ms(load, '503', 0.5)}/"
        f"{ms(load, '503', 0.99)} ms; probes {dict(probes.outcomes)}, slowest {slowest_probe * 1000:.0f} ms; "
        f"RSS {memory[0] >> 20} -> {max(memory) >> 20} -> {memory[-1] >> 20} MiB; server: "
        f"{ {k: v for k, v in server.stats.items() if k.startswith('unavailable.') and v} }, max loop lag "
        f"{server.stats.get('max_lag_seconds', 0) * 1000:.0f} ms, {server.stats.get('accepted')} accepted; "
        f"generator: {pool_opened} connections, loop lag p99 {sorted(LAGS)[int(len(LAGS) * 0.99)] * 1000:.0f} ms; "
        f"server CPU share {below:.0%} below capacity, {under:.0%} under load; 200s per CPU second "
        f"{per_cpu_below:.0f} below, {per_cpu_under:.0f} under load"
    )
    print(report)
    assert cap > 100, report
    assert sum(load.outcomes.values()) == total, report
    assert set(load.outcomes) <= {"200", "503"}, report  # no time-out, no reset, no other status
    assert set(probes.outcomes) <= {"200", "503"}, report
    assert slowest_probe < PROBE_LIMIT, report  # brand-new connections too
    assert load.retry_after_missing == probes.retry_after_missing == 0, report
    assert load.outcomes["503"] > 0, report  # the excess was shed...
    assert load.p("200", 0.99) <= 0.25 / stretch, report  # ...so what was accepted was served in time
    assert load.p("503", 0.99) <= 0.5 / stretch, report  # ...and refused at once
    assert per_cpu_under >= 0.5 * per_cpu_below, report  # while real work went on at its pace
    assert max(memory) <= 1.2 * memory[0] + (16 << 20), report
