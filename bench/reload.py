"""``python -m bench.reload``: what a deploy (``pyvia reload``) does to action latency, with tabs open.

A fresh ``pyvia run examples.counter:app --reload-spread S`` (one worker, pinned to CPU 1 and
gated as :mod:`bench.server` does);
the client, on CPU 0, opens N tabs (page view, then a stream, identity coding) and keeps them the
way the page does: when a stream ends, the tab reopens it after a random 0-1 s with a GET that
carries its context id; a server that no longer holds the tab answers ``_via_revive``, and the tab
opens it again with a POST of its writable signals and its snapshot. It checks that the server
revived it (the new stream starts with a full render). Meanwhile actions (``increment``, each on a new connection,
for a tab taken in turn) are sent open loop at a fixed rate, and each one's latency, from the
request written to the answer's last byte, is recorded with the phase it started in:

* ``before``: the steady state, ``--steady`` seconds;
* ``during``: from the SIGHUP to the supervisor until its log says ``reload done`` (the new
  worker imported, the old one retired, its streams ended over ``--reload-spread``);
* ``after``: ``--steady`` seconds more.

Since the tabs of a reload without spread reconnect after it is done (within their one-second
interval), the phases are also cut another way: ``window`` holds every action started in the
``--window`` seconds (default 4) from the SIGHUP, whatever the reload's length, which is the
figure to compare between ``--spread`` values.

An action refused, or cut before any byte of its answer, is a failure (the client does not
retry). Per repetition (a fresh server each): per phase the count, median, p99 and max
latency and the failures; the reload's duration; the tabs revived and any that were not.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import signal
import statistics
import time
from html import unescape
from typing import Any
from urllib.parse import quote

from bench.provenance import provenance
from bench.report import Recorder
from bench.server import CLIENT_CPU, REPO, SERVER_CPU, Server, _wait_ready, free_port, server_command, server_env

SEED = re.compile(rb'data-signals="([^"]*)"')


async def _exchange(port: int, raw: bytes, timeout: float = 10.0) -> tuple[int, bytes]:
    """One request on a new connection: (status, body); raises on a cut or a timeout."""
    reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), timeout)
    try:
        writer.write(raw)
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout)
        status = int(head.split(b" ", 2)[1])
        length = re.search(rb"(?i)content-length: (\d+)", head)
        body = await asyncio.wait_for(reader.readexactly(int(length.group(1))), timeout) if length else b""
        return status, body
    finally:
        writer.close()


class BenchTab:
    """One tab: its browser store and cookie, a stream it keeps open, reopened as the page does."""

    def __init__(self, port: int, signals: dict[str, Any], cookie: str) -> None:
        self.port = port
        self.signals = signals
        self.cookie = cookie
        self.reopened = 0
        self.revived = 0
        self.problems: list[str] = []
        self.task: asyncio.Task[None] | None = None
        self.first = asyncio.Event()

    @classmethod
    async def open(cls, port: int) -> BenchTab:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            writer.write(f"GET / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
            head = await reader.readuntil(b"\r\n\r\n")
            length = int(re.search(rb"(?i)content-length: (\d+)", head).group(1))
            body = await reader.readexactly(length)
        finally:
            writer.close()
        cookie = re.search(rb"(?i)set-cookie: ([^;\r]+)", head).group(1).decode()
        signals = json.loads(unescape(SEED.search(body).group(1).decode()))
        tab = cls(port, signals, cookie)
        tab.task = asyncio.create_task(tab._keep_open())
        await asyncio.wait_for(tab.first.wait(), 10)
        return tab

    def _posted(self, *, snapshot: bool = False) -> bytes:
        """What the page posts: the signals whose ids do not start with ``_`` (and, to revive the
        tab, its snapshot)."""
        return json.dumps(
            {k: v for k, v in self.signals.items() if not k.startswith("_") or (snapshot and k == "_via_snap")}
        ).encode()

    def _stream_request(self, revive: bool) -> bytes:
        if not revive:
            query = quote(json.dumps({"via_ctx": self.signals["via_ctx"]}))
            return (
                f"GET /_sse?datastar={query} HTTP/1.1\r\nHost: 127.0.0.1:{self.port}\r\nCookie: {self.cookie}\r\n\r\n"
            ).encode()
        body = self._posted(snapshot=True)
        return (
            f"POST /_sse HTTP/1.1\r\nHost: 127.0.0.1:{self.port}\r\nOrigin: http://127.0.0.1:{self.port}\r\n"
            f"Cookie: {self.cookie}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode() + body

    async def _keep_open(self) -> None:
        revive = False
        while True:
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
            except OSError as exc:
                self.problems.append(f"connect: {exc}")
                await asyncio.sleep(1.0)
                continue
            try:
                writer.write(self._stream_request(revive))
                head = await reader.readuntil(b"\r\n\r\n")
                if b" 200 " not in head.split(b"\r\n", 1)[0]:
                    self.problems.append(head.split(b"\r\n", 1)[0].decode())
                length = re.search(rb"(?i)content-length: (\d+)", head)
                if length is not None:  # not a stream: the server asks for the snapshot (or refused)
                    body = await reader.readexactly(int(length.group(1)))
                    revive = b"application/json" in head.lower() and "_via_revive" in json.loads(body or b"{}")
                    if not revive:
                        self.problems.append(f"stream answered {head.split(b' ', 2)[1].decode()} without a stream")
                        await asyncio.sleep(1.0)
                    continue
                revive = False
                awaiting_render = self.first.is_set()  # a reopened stream starts with a full render
                self.reopened += awaiting_render
                self.first.set()
                while True:
                    size = int((await reader.readuntil(b"\r\n"))[:-2], 16)
                    chunk = await reader.readexactly(size + 2)
                    if size == 0:
                        break
                    if awaiting_render and b"datastar-patch-elements" in chunk:
                        self.revived += 1
                        awaiting_render = False
                    for value in re.findall(rb"data: signals (\{[^\n]*\})", chunk):
                        patch = json.loads(value)
                        self.signals.update(patch)
            except (asyncio.IncompleteReadError, ConnectionError) as exc:
                self.problems.append(f"stream cut: {type(exc).__name__}")
            finally:
                writer.close()
            await asyncio.sleep(random.uniform(0.0, 1.0))  # the page's one-second interval

    def action(self) -> bytes:
        body = self._posted()
        return (
            f"POST /_action/increment HTTP/1.1\r\nHost: 127.0.0.1:{self.port}\r\n"
            f"Origin: http://127.0.0.1:{self.port}\r\nCookie: {self.cookie}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        ).encode() + body


def _summary(latencies: list[float]) -> dict[str, float]:
    if not latencies:
        return {"n": 0}
    ordered = sorted(latencies)
    return {
        "n": len(ordered),
        "median_ms": statistics.median(ordered) * 1000,
        "p99_ms": ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000,
        "max_ms": ordered[-1] * 1000,
    }


async def _one_rep(args: argparse.Namespace, server: Server) -> dict[str, Any]:
    tabs = []
    for _ in range(args.tabs):
        tabs.append(await BenchTab.open(server.port))
    phase = "before"
    latencies: dict[str, list[float]] = {"before": [], "during": [], "after": []}
    failures: dict[str, list[str]] = {"before": [], "during": [], "after": []}
    pending: set[asyncio.Task[None]] = set()

    window: list[float] = []
    sighup = float("inf")

    async def act(tab: BenchTab, started_in: str) -> None:
        started = time.perf_counter()
        try:
            status, _ = await _exchange(server.port, tab.action())
        except (OSError, asyncio.IncompleteReadError, TimeoutError) as exc:
            failures[started_in].append(type(exc).__name__)
            return
        if status != 200:
            failures[started_in].append(str(status))
        else:
            latencies[started_in].append(time.perf_counter() - started)
            if sighup <= started < sighup + args.window:
                window.append(time.perf_counter() - started)

    stop = asyncio.Event()

    async def load() -> None:
        interval, n = 1.0 / args.rate, 0
        next_at = time.perf_counter()
        while not stop.is_set():
            task = asyncio.create_task(act(tabs[n % len(tabs)], phase))
            pending.add(task)
            task.add_done_callback(pending.discard)
            n += 1
            next_at += interval
            await asyncio.sleep(max(0.0, next_at - time.perf_counter()))

    loader = asyncio.create_task(load())
    await asyncio.sleep(args.steady)
    phase = "during"
    log_before = server.log_path.read_text(errors="replace").count("reload done")
    sighup = time.perf_counter()
    os.kill(server.pid, signal.SIGHUP)
    while server.log_path.read_text(errors="replace").count("reload done") == log_before:
        await asyncio.sleep(0.01)
    reload_seconds = time.perf_counter() - sighup
    phase = "after"
    await asyncio.sleep(args.steady)
    stop.set()
    await loader
    await asyncio.gather(*pending)
    for tab in tabs:
        assert tab.task is not None
        tab.task.cancel()
    return {
        "reload_s": reload_seconds,
        "phases": {name: {**_summary(values), "failures": len(failures[name])} for name, values in latencies.items()},
        "window": _summary(window),
        "failure_kinds": {name: sorted(set(kinds)) for name, kinds in failures.items() if kinds},
        "tabs": len(tabs),
        "reopened": sum(t.reopened for t in tabs),
        "revived": sum(t.revived for t in tabs),
        "tab_problems": sorted({p for t in tabs for p in t.problems}),
    }


async def _start(spread: float) -> Server:
    """:func:`bench.server.start_server`'s fresh, pinned and gated server, with ``--reload-spread``."""
    import subprocess
    import tempfile
    from pathlib import Path

    port = free_port()
    command = [*server_command("examples.counter:app", port, "cli", as_module=True), "--reload-spread", str(spread)]
    fd, name = tempfile.mkstemp(prefix="pyvia-bench-", suffix=".log")
    with os.fdopen(fd, "wb") as log:
        process = subprocess.Popen(
            ["taskset", "-c", SERVER_CPU, *command],
            cwd=REPO,
            env=server_env(None, str(REPO / "src")),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    server = Server(process, port, command, Path(name))
    try:
        await _wait_ready(server, 20.0)
    except BaseException:
        await server.stop()
        raise
    return server


async def _main(args: argparse.Namespace) -> None:
    os.sched_setaffinity(0, {CLIENT_CPU})
    recorder = Recorder("reload")
    print(f"load average: {os.getloadavg()}", flush=True)
    results = []
    for rep in range(args.repeat):
        server = await _start(args.spread)
        if rep == 0:
            recorder.write({"type": "provenance", **provenance("reload", vars(args), server.command)})
        try:
            result = await _one_rep(args, server)
        finally:
            await server.stop()
        result["rep"] = rep
        recorder.write({"type": "rep", **result, "args": vars(args)})
        results.append(result)
        print(json.dumps(result), flush=True)
    for name in ("before", "during", "after"):
        medians = [r["phases"][name].get("median_ms", float("nan")) for r in results]
        p99s = [r["phases"][name].get("p99_ms", float("nan")) for r in results]
        maxes = [r["phases"][name].get("max_ms", float("nan")) for r in results]
        fails = [r["phases"][name]["failures"] for r in results]
        print(
            f"{name:>6}: median {statistics.median(medians):.2f} ms (reps {', '.join(f'{m:.2f}' for m in medians)}), "
            f"p99 {statistics.median(p99s):.2f} ms (reps {', '.join(f'{m:.2f}' for m in p99s)}), "
            f"max {', '.join(f'{m:.1f}' for m in maxes)} ms, failures {fails}"
        )
    medians = [r["window"].get("median_ms", float("nan")) for r in results]
    p99s = [r["window"].get("p99_ms", float("nan")) for r in results]
    maxes = [r["window"].get("max_ms", float("nan")) for r in results]
    print(
        f"window ({args.window:g} s from the SIGHUP): median {statistics.median(medians):.2f} ms "
        f"(reps {', '.join(f'{m:.2f}' for m in medians)}), p99 {statistics.median(p99s):.2f} ms "
        f"(reps {', '.join(f'{m:.2f}' for m in p99s)}), max {', '.join(f'{m:.1f}' for m in maxes)} ms"
    )
    durations = ", ".join(f"{r['reload_s']:.2f}" for r in results)
    reopened = [(r["reopened"], r["revived"]) for r in results]
    print(f"reload: {durations} s; streams reopened / with a full render, per rep: {reopened} of {args.tabs} tabs")
    print(f"load average: {os.getloadavg()}; raw records in {recorder.path}")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.reload", description=__doc__.split("\n\n")[0])
    parser.add_argument("--tabs", type=int, default=500, help="open tabs (default 500)")
    parser.add_argument("--rate", type=float, default=200.0, help="actions a second, open loop (default 200)")
    parser.add_argument("--steady", type=float, default=5.0, help="seconds before and after the reload (default 5)")
    parser.add_argument("--repeat", type=int, default=3, help="repetitions, a fresh server each (default 3)")
    parser.add_argument("--spread", type=float, default=2.0, help="the server's --reload-spread (default 2)")
    parser.add_argument("--window", type=float, default=4.0, help="seconds from the SIGHUP in 'window' (default 4)")
    asyncio.run(_main(parser.parse_args()))


if __name__ == "__main__":
    main()
