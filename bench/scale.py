"""``python -m bench.scale --tabs N [--workers W]``: N idle tabs on one machine, and how fast one
broadcast reaches the last of them (issue 22, target 6).

The app is ``bench.apps_broadcast:app`` (one page whose tabs share the route scope, a shared signal
``n`` and a 300-byte view rendered once per flush; see :mod:`bench.broadcast`). The run:

1. **Limits.** The harness raises its own soft and hard ``RLIMIT_NOFILE`` (as root it may; else it
   says what to run and stops) to what the server needs for N streams under its derived caps
   (:func:`bench.fanout.stream_fds_needed`); the server inherits the hard limit and raises its soft
   limit to it at start (``pyvia.server.os_limits``). It reads ``net.core.somaxconn``, the
   ephemeral port range and ``fs.nr_open``, and spreads the streams over enough loopback source
   addresses (127.0.0.1, .2, ...: :func:`bench.fanout.source_addresses`) that no address needs
   more than ``--per-address`` ports towards the server's one port.
2. **Server.** ``python -m pyvia run APP`` (this checkout's ``src``) with ``--workers W`` when
   W > 1 (a local nats-server carries the broadcast between the workers); with one worker it is
   pinned to CPU 1 and the harness to CPU 0, with several nothing is pinned. Gated on its log
   (listening, with W workers) and a real page.
3. **Tabs.** ``--clients`` harness processes (``python -m bench.scale --child``) each open their
   share of the tabs as :func:`bench.fanout.open_tabs` does (page view on one of 16 keep-alive
   browser connections, then the stream on its own connection, counted once its connect event
   arrived) and decode every stream event by event (:class:`bench.fanout.TabStream`). One process
   decoding 50,000 streams would itself be what a broadcast waits for; the run prints the
   harness's CPU in each broadcast so that can be judged.
4. **Figures.** Server RSS (process tree, nats-server included) before and after the tabs, per
   process; the connections each worker holds (``/proc/net/tcp``); idle CPU of the server and the
   harness with every tab open; then ``--rounds`` broadcasts (after 2 warm-up ones), each from
   ``POST /bump`` written until every tab decoded the new value: first, median and last tab, the
   server's and the harness's CPU in the round. At the end every tab must still be open, with no
   stream error, no unknown event, the last value, and its view agreeing with its signal.

Raw JSON lines go to ``bench/results/scale-<timestamp>.jsonl``; the exit status is 1 when
anything failed (a tab not opened, closed, wrong or late).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from bench import proc
from bench.broadcast import APP, Control, check_tabs, flush_spans
from bench.client import Connection, build_request, run
from bench.fanout import (
    Hub,
    ephemeral_ports,
    open_tabs,
    raise_fd_limit,
    source_addresses,
    stream_fds_needed,
)
from bench.provenance import print_provenance, provenance
from bench.report import Recorder, fmt, spread
from bench.server import PAGE_MARKER, REPO, Server, free_port, server_env
from pyvia.server.http import derive_max_connections, derive_max_streams

SOMAXCONN = Path("/proc/sys/net/core/somaxconn")
NR_OPEN = Path("/proc/sys/fs/nr_open")
PORT_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.scale", description=__doc__.split("\n")[0])
    p.add_argument("--tabs", type=int, default=5000, help="idle tabs to open (default 5000)")
    p.add_argument("--workers", type=int, default=1, help="server workers (default 1)")
    p.add_argument(
        "--clients", type=int, default=None, help="harness processes holding the tabs (default: one per 12,500 tabs)"
    )
    p.add_argument("--rounds", type=int, default=7, help="measured broadcasts (default 7; 2 warm-up ones before)")
    p.add_argument(
        "--per-address",
        type=int,
        default=None,
        help="streams per loopback source address (default: 2/3 of the ephemeral port range)",
    )
    p.add_argument("--sessions", type=int, default=16, help="browser sessions per harness process (default 16)")
    p.add_argument("--idle-seconds", type=float, default=5.0, help="window for the idle CPU (default 5)")
    # the child's side
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--sources", default="", help=argparse.SUPPRESS)
    return p


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return "?"


def _emit(record: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(record) + "\n")
    sys.stdout.flush()


# --- the child: holds its share of the tabs ------------------------------------------------------


async def _child(args: argparse.Namespace) -> int:
    """Open the tabs, say so, then answer ``arm V`` / ``check V`` / ``quit`` lines on stdin."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=1 << 20)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    host = f"127.0.0.1:{args.port}"
    hub = Hub(check_view=True)
    failures: Counter[str] = Counter()
    started = time.perf_counter()
    browsers, tabs = await open_tabs(
        host,
        args.port,
        args.tabs,
        hub,
        sessions=args.sessions,
        failures=failures,
        deadline_s=60.0 + args.tabs / 25,
        sources=args.sources.split(",") if args.sources else None,
    )
    _emit({"type": "opened", "tabs": len(tabs), "failures": dict(failures), "seconds": time.perf_counter() - started})
    try:
        while line := (await reader.readline()).decode().split():
            command, value = line[0], int(line[1]) if len(line) > 1 else 0
            if command == "arm":
                done = hub.arm(value, len(tabs))
                _emit({"type": "armed", "value": value})
                try:
                    await asyncio.wait_for(done, 30.0)
                    late = 0
                except TimeoutError:
                    late = len(tabs) - len(hub.times)
                _emit({"type": "round", "value": value, "times": hub.times, "late": late})
            elif command == "check":
                await asyncio.sleep(0.3)
                _emit({"type": "check", **check_tabs(tabs, hub, value)})
            else:
                break
    finally:
        for tab in tabs:
            tab.close()
        for browser in browsers:
            browser.conn.close()
    return 0


class Child:
    """One harness process and its line protocol."""

    def __init__(self, process: asyncio.subprocess.Process, tabs: int, sources: list[str]) -> None:
        self.process = process
        self.tabs = tabs
        self.sources = sources

    @classmethod
    async def start(cls, port: int, tabs: int, sources: list[str], sessions: int, pin: str | None) -> Child:
        command = [
            sys.executable,
            "-m",
            "bench.scale",
            "--child",
            "--port",
            str(port),
            "--tabs",
            str(tabs),
            "--sessions",
            str(sessions),
            "--sources",
            ",".join(sources),
        ]
        if pin is not None:
            command = ["taskset", "-c", pin, *command]
        process = await asyncio.create_subprocess_exec(
            *command,
            cwd=REPO,
            env={**os.environ, "PYTHONPATH": f"{REPO / 'src'}{os.pathsep}{REPO}"},
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            limit=1 << 26,
        )
        return cls(process, tabs, sources)

    async def send(self, line: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(line.encode() + b"\n")
        await self.process.stdin.drain()

    async def receive(self, kind: str, timeout: float) -> dict[str, Any]:
        assert self.process.stdout is not None
        raw = await asyncio.wait_for(self.process.stdout.readline(), timeout)
        if not raw:
            raise RuntimeError(f"harness process {self.process.pid} exited ({self.process.returncode})")
        record: dict[str, Any] = json.loads(raw)
        if record.get("type") != kind:
            raise RuntimeError(f"harness process {self.process.pid} said {record.get('type')!r}, expected {kind!r}")
        return record

    def cpu(self) -> float:
        return proc.cpu_seconds_precise(self.process.pid)

    async def stop(self) -> None:
        with contextlib.suppress(Exception):
            await self.send("quit")
        try:
            await asyncio.wait_for(self.process.wait(), 30)
        except TimeoutError:
            self.process.kill()
            await self.process.wait()


# --- the server ----------------------------------------------------------------------------------


async def start_server(workers: int, timeout: float = 60.0) -> Server:
    """``python -m pyvia run APP`` of this checkout, gated on its log and a real page."""
    port = free_port()
    command = [sys.executable, "-m", "pyvia", "run", APP, "--host", "127.0.0.1", "--port", str(port)]
    if workers > 1:
        command += ["--workers", str(workers)]
    else:
        command = ["taskset", "-c", "1", *command]
    fd, name = tempfile.mkstemp(prefix="pyvia-bench-scale-", suffix=".log")
    with os.fdopen(fd, "wb") as log:
        process = subprocess.Popen(
            command,
            cwd=REPO,
            env=server_env(pyvia_src=str(REPO / "src")),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    server = Server(process, port, command, Path(name))
    ready = f"listening on http://127.0.0.1:{port}" + (f" with {workers} workers" if workers > 1 else "")
    deadline = time.monotonic() + timeout
    try:
        while True:
            if not server.alive():
                raise RuntimeError(f"server exited with {process.returncode}:\n{server.log_tail()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"server not ready within {timeout} s:\n{server.log_tail()}")
            if ready in server.log_path.read_text(errors="replace"):
                conn = await Connection.open("127.0.0.1", port)
                try:
                    page = await conn.request(build_request("GET", "/", server.host), 10.0)
                finally:
                    conn.close()
                if page.status != 200 or PAGE_MARKER not in page.body:
                    raise RuntimeError(f"GET / answered {page.status} without the via-boot marker")
                return server
            await asyncio.sleep(0.1)
    except BaseException:
        await server.stop()
        raise


def worker_pids(server: Server) -> list[int]:
    """The serving processes of the tree (one under the supervisor for one worker too)."""
    found = []
    for pid in proc.tree_pids(server.pid):
        with contextlib.suppress(OSError):
            if b"pyvia.server.supervisor" in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(pid)
    return sorted(found)


def streams_by_worker(server: Server, pids: list[int]) -> list[int]:
    """Established connections each worker holds on the server's port (/proc/net/tcp)."""
    owner: dict[str, int] = {}
    for index, pid in enumerate(pids):
        with contextlib.suppress(OSError):
            for fd in Path(f"/proc/{pid}/fd").iterdir():
                with contextlib.suppress(OSError):
                    target = os.readlink(fd)
                    if target.startswith("socket:["):
                        owner[target[8:-1]] = index
    counts = [0] * len(pids)
    port = f"{server.port:04X}"
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[1].rsplit(":", 1)[1] == port and fields[3] == "01" and fields[9] in owner:
            counts[owner[fields[9]]] += 1
    return counts


def rss_by_process(server: Server) -> dict[str, int]:
    out: dict[str, int] = {}
    for pid in proc.tree_pids(server.pid):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        name = "nats-server" if b"nats-server" in cmdline[0] else "worker"
        if b"pyvia.server.supervisor" not in b" ".join(cmdline) and name != "nats-server":
            name = "supervisor" if b"pyvia" in b" ".join(cmdline) else Path(cmdline[0].decode()).name
        out[f"{name} {pid}"] = _own_rss_kb(pid)
    return out


def _own_rss_kb(pid: int) -> int:
    """``Rss:`` of one process (``proc.rss_kb`` sums its descendants too)."""
    try:
        text = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except OSError:
        return 0
    return next((int(line.split()[1]) for line in text.splitlines() if line.startswith("Rss:")), 0)


# --- the run -------------------------------------------------------------------------------------


#: The balance spreads new connections by least connections: a worker may hold a few more than its share.
IMBALANCE = 1.05


def worker_share(tabs: int, workers: int) -> int:
    """The most tabs one worker is expected to hold when ``workers`` share ``tabs``."""
    return tabs if workers <= 1 else -(-int(tabs * IMBALANCE) // workers)


def _limits(args: argparse.Namespace, clients: int) -> dict[str, Any]:
    """Raise the fd limits for the server and the harness; what the kernel allows alongside."""
    import resource

    share = worker_share(args.tabs, args.workers)
    need = max(stream_fds_needed(share), -(-args.tabs // clients) + 1024)
    before = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        soft, hard = raise_fd_limit(need)
    except (PermissionError, ValueError, OSError) as exc:
        held = max(0, derive_max_streams(derive_max_connections(before[1])) - 100)
        workers = -(-int(args.tabs * IMBALANCE) // held) if held else 0
        raise RuntimeError(
            f"{args.tabs:,} tabs on {args.workers} worker(s) need an open-file limit of {need:,} per process "
            f"(~{share:,} streams per worker); this process has {before[0]:,} (hard {before[1]:,}) and may not "
            f"raise the hard limit ({exc}). At that limit one worker holds {held:,} tabs under the server's "
            f"derived caps: --workers {workers} would do, or raise it first as root (CAP_SYS_RESOURCE): "
            f"ulimit -Hn {need} && ulimit -Sn {need} (fs.nr_open >= {need})"
        ) from None
    return {
        "fd_needed": need,
        "fd_before": list(before),
        "fd_now": [soft, hard],
        "worker_share": share,
        "nr_open": _read(NR_OPEN),
        "somaxconn": _read(SOMAXCONN),
        "ip_local_port_range": _read(PORT_RANGE),
        "ephemeral_ports": ephemeral_ports(),
    }


def _harness_cpu(children: list[Child]) -> list[float]:
    return [c.cpu() for c in children]


async def _main(args: argparse.Namespace) -> int:
    clients = args.clients or max(1, -(-args.tabs // 12500))
    limits = _limits(args, clients)
    per_address = args.per_address or limits["ephemeral_ports"] * 2 // 3
    sources = source_addresses(args.tabs, per_address)
    pin = "0" if args.workers == 1 else None
    if pin is not None:
        os.sched_setaffinity(0, {0})
    recorder = Recorder("scale")
    record = provenance("scale", vars(args), ["python", "-m", "pyvia", "run", APP, "--workers", str(args.workers)])
    record["limits"] = limits
    record["sources"] = sources
    print_provenance(record)
    recorder.write(record)
    print(
        f"# limits: open files {limits['fd_before'][0]:,}/{limits['fd_before'][1]:,} -> {limits['fd_now'][0]:,}/"
        f"{limits['fd_now'][1]:,} (needed {limits['fd_needed']:,}; fs.nr_open {limits['nr_open']}); somaxconn "
        f"{limits['somaxconn']}; ephemeral ports {limits['ip_local_port_range']} ({limits['ephemeral_ports']:,}); "
        f"streams from {len(sources)} source address(es) {sources[0]}..{sources[-1]}, {clients} harness process(es)",
        flush=True,
    )
    print(f"# raw results: {recorder.path}", flush=True)
    server = await start_server(args.workers)
    children: list[Child] = []
    try:
        return await _run(args, recorder, server, children, clients, sources, pin)
    finally:
        for child in children:
            await child.stop()
        code = await server.stop(grace=10.0)
        print(f"# server stopped (exit {code}{', SIGKILL after the grace' if server.killed else ''})", flush=True)


async def _run(
    args: argparse.Namespace,
    recorder: Recorder,
    server: Server,
    children: list[Child],
    clients: int,
    sources: list[str],
    pin: str | None,
) -> int:
    for line in server.log_tail(20).splitlines():
        if "capacity" in line or "open-file" in line or "somaxconn" in line or "WARNING" in line:
            print(f"# server log: {line.split(': ', 1)[-1][:240]}", flush=True)
    control = await Control.open(server)
    await asyncio.sleep(1.0)
    pids = worker_pids(server)
    rss0 = server.rss_kb()
    shares = [args.tabs // clients + (1 if i < args.tabs % clients else 0) for i in range(clients)]
    # each child takes the addresses in turn from its own offset, so every address gets its share
    starts = [sum(shares[:i]) for i in range(clients)]
    t_open = time.perf_counter()
    server_cpu0 = server.cpu_precise()
    for share, start in zip(shares, starts, strict=True):
        rotated = [sources[(start + k) % len(sources)] for k in range(len(sources))]
        children.append(await Child.start(server.port, share, rotated, args.sessions, pin))
    opened = [await c.receive("opened", 120.0 + args.tabs / 20) for c in children]
    open_wall = time.perf_counter() - t_open
    open_server_cpu = server.cpu_precise() - server_cpu0
    tabs = sum(o["tabs"] for o in opened)
    failures: Counter[str] = Counter()
    for o in opened:
        failures.update(o["failures"])
    await asyncio.sleep(2.0)
    rss1 = server.rss_kb()
    by_worker = streams_by_worker(server, pids)
    per_process = rss_by_process(server)
    cpu_s0, cpu_h0, t0 = server.cpu_precise(), sum(_harness_cpu(children)), time.perf_counter()
    await asyncio.sleep(args.idle_seconds)
    idle_wall = time.perf_counter() - t0
    idle_server = (server.cpu_precise() - cpu_s0) / idle_wall
    idle_harness = (sum(_harness_cpu(children)) - cpu_h0) / idle_wall
    opening = {
        "type": "opened",
        "tabs": tabs,
        "requested": args.tabs,
        "failures": dict(failures),
        "open_wall_s": open_wall,
        "open_server_cpu_us_per_tab": open_server_cpu / max(1, tabs) * 1e6,
        "rss_kb": [rss0, rss1],
        "kb_per_idle_tab": (rss1 - rss0) / max(1, tabs),
        "rss_kb_by_process": per_process,
        "connections_by_worker": by_worker,
        "idle_server_cpu_ms_per_s": idle_server * 1e3,
        "idle_harness_cpu_ms_per_s": idle_harness * 1e3,
        "loadavg": _read(Path("/proc/loadavg")),
    }
    recorder.write(opening)
    print(
        f"{tabs:,}/{args.tabs:,} tabs open in {open_wall:.1f} s ({opening['open_server_cpu_us_per_tab']:.0f} µs server "
        f"CPU each), failures {sum(failures.values())}{' ' + str(dict(failures)) if failures else ''}; server RSS "
        f"{rss0 / 1024:.1f} → {rss1 / 1024:.1f} MB = {opening['kb_per_idle_tab']:.2f} KB/idle tab (by process: "
        + ", ".join(f"{k} {v / 1024:.0f} MB" for k, v in per_process.items())
        + f"); connections by worker {by_worker}; idle CPU: server {idle_server * 1e3:.1f} ms/s, harness "
        f"{idle_harness * 1e3:.1f} ms/s; load {opening['loadavg']}",
        flush=True,
    )
    value = 0
    rounds: list[dict[str, Any]] = []
    late_total = 0
    for i in range(-1, args.rounds + 1):
        value += 1
        for child in children:
            await child.send(f"arm {value}")
        for child in children:
            await child.receive("armed", 10.0)
        server_cpu0, harness0 = server.cpu_precise(), _harness_cpu(children)
        t0 = time.perf_counter()
        answer = await control.call("POST", "/bump")
        if answer["n"] != value:
            raise RuntimeError(f"/bump answered n={answer['n']}, expected {value}")
        results = [await c.receive("round", 40.0) for c in children]
        wall = time.perf_counter() - t0
        server_cpu = server.cpu_precise() - server_cpu0
        harness = [b - a for a, b in zip(harness0, _harness_cpu(children), strict=True)]
        times = sorted(t for r in results for t in r["times"])
        late = sum(r["late"] for r in results)
        if i < 1:  # the warm-up rounds: the first render, the first writes
            await asyncio.sleep(0.3)
            continue
        late_total += late
        rec: dict[str, Any] = {
            "type": "round",
            "round": i,
            "tabs": tabs,
            "reached": len(times),
            "late": late,
            "ms_to_first_tab": (times[0] - t0) * 1e3 if times else None,
            "ms_to_median_tab": (statistics.median(times) - t0) * 1e3 if times else None,
            "ms_to_last_tab": (times[-1] - t0) * 1e3 if times else None,
            "server_cpu_ms": server_cpu * 1e3,
            "server_cpu_us_per_tab": server_cpu / max(1, tabs) * 1e6,
            "harness_cpu_ms": [h * 1e3 for h in harness],
            "wall_ms": wall * 1e3,
            "loadavg": _read(Path("/proc/loadavg")),
        }
        if args.workers == 1:  # the one worker's flush: how much of the time is the server writing
            stats = await control.call("GET", f"/stats?since={t0 - 0.001}")
            spans = flush_spans(stats["flush_log"])
            if spans:
                start, end = min(s[0] for s in spans), max(s[1] for s in spans)
                rec["flush_ms"] = (end - start) * 1e3
                rec["ms_flush_end_to_last_tab"] = (times[-1] - end) * 1e3 if times else None
        recorder.write(rec)
        rounds.append(rec)
        flush = (
            f"; server flush {rec['flush_ms']:.1f} ms, last tab {rec['ms_flush_end_to_last_tab']:.1f} ms after it"
            if "flush_ms" in rec
            else ""
        )
        print(
            f"  round {i}: bump → first {rec['ms_to_first_tab']:.1f} ms, median {rec['ms_to_median_tab']:.1f}, last "
            f"{rec['ms_to_last_tab']:.1f} ({len(times):,} tabs{f', {late} LATE' if late else ''}){flush}; server CPU "
            f"{rec['server_cpu_ms']:.0f} ms ({rec['server_cpu_us_per_tab']:.1f} µs/tab), harness CPU "
            + "+".join(f"{h:.0f}" for h in rec["harness_cpu_ms"])
            + f" ms; load {rec['loadavg'].split()[0]}",
            flush=True,
        )
        await asyncio.sleep(0.3)
    for child in children:
        await child.send(f"check {value}")
    checks = [await c.receive("check", 30.0) for c in children]
    closed = sum(c["closed"] for c in checks)
    errors: Counter[str] = Counter()
    for c in checks:
        errors.update(c["errors"])
    wrong = sum(c["wrong_final_value"] + c["unknown_events"] + c["view_signal_mismatches"] for c in checks)
    failed = max(sum(failures.values()), args.tabs - tabs) + closed + sum(errors.values()) + wrong + late_total
    rss2 = server.rss_kb()
    control.conn.close()
    summary = {
        "type": "summary",
        "tabs": tabs,
        "requested": args.tabs,
        "workers": args.workers,
        "clients": clients,
        "sources": len(sources),
        "failed": failed,
        "open_failures": dict(failures),
        "closed": closed,
        "errors": dict(errors),
        "wrong": wrong,
        "late": late_total,
        "ms_to_first_tab": spread([r["ms_to_first_tab"] for r in rounds if r["ms_to_first_tab"] is not None]),
        "ms_to_median_tab": spread([r["ms_to_median_tab"] for r in rounds if r["ms_to_median_tab"] is not None]),
        "ms_to_last_tab": spread([r["ms_to_last_tab"] for r in rounds if r["ms_to_last_tab"] is not None]),
        "flush_ms": spread([r["flush_ms"] for r in rounds if "flush_ms" in r]) if args.workers == 1 else None,
        "server_cpu_us_per_tab": spread([r["server_cpu_us_per_tab"] for r in rounds]),
        "harness_cpu_ms": spread([sum(r["harness_cpu_ms"]) for r in rounds]),
        "kb_per_idle_tab": opening["kb_per_idle_tab"],
        "rss_kb": [opening["rss_kb"][0], opening["rss_kb"][1], rss2],
        "idle_server_cpu_ms_per_s": opening["idle_server_cpu_ms_per_s"],
        "idle_harness_cpu_ms_per_s": opening["idle_harness_cpu_ms_per_s"],
        "connections_by_worker": opening["connections_by_worker"],
    }
    recorder.write(summary)
    print(
        f"  => {tabs:,} tabs on {args.workers} worker(s), {failed} failed: one broadcast reaches the first tab in "
        f"{fmt(summary['ms_to_first_tab'])} ms, the median in {fmt(summary['ms_to_median_tab'])}, the last in "
        f"{fmt(summary['ms_to_last_tab'])} ms"
        + (f" (server flush {fmt(summary['flush_ms'])} ms)" if summary["flush_ms"] else "")
        + f"; server {fmt(summary['server_cpu_us_per_tab'])} µs CPU/tab, harness {fmt(summary['harness_cpu_ms'])} ms "
        f"CPU per broadcast; RSS {summary['kb_per_idle_tab']:.2f} KB/idle tab; idle server CPU "
        f"{summary['idle_server_cpu_ms_per_s']:.1f} ms/s",
        flush=True,
    )
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.child:
        return int(run(_child(args)))
    try:
        return int(run(_main(args)))
    except RuntimeError as exc:
        print(f"python -m bench.scale: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
