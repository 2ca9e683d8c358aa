"""``python -m bench.cluster throughput|forward|hotkey``: what several workers and nodes cost and give.

* ``throughput --workers N``: closed-loop CPU-bound private actions (``work``, ~2 ms each) from
  ``--connections`` keep-alive connections on ``--tabs`` tabs, for ``--seconds``; actions/s with
  1 worker (no engine) and with N workers (a local NATS started by ``pyvia run``). The kernel
  spreads connections over the workers, so about half of the actions land on a worker that does
  not hold their tab and are forwarded. ``--action bump`` makes it broadcast-bound instead: every
  action increments a counter shared by every tab, and each tab's stream is read to the end.
* ``forward``: two nodes of one machine (two ``pyvia run`` on two ports) sharing one local NATS;
  one tab on node A. CPU per trivial action (``tap``), from ``/proc`` of both nodes (and with the
  NATS server's CPU added), on each path of ``FORWARD_PATHS``: sent to A (local); sent to B on a
  proxy's connection (forwarded to A over the direct channel); sent to B on a browser's keep-alive
  connection (passed to A with the first action, A's own after that); and one new connection per
  action, to A and to B (each connection passed), to price the move itself. ``--channel tcp`` or
  ``engine``: the nodes stand for two machines (their unix sockets off), and only the first two
  paths apply: B forwards over the TCP channel (both run with ``--cluster-address``) or through NATS.
* ``opening --workers N``: server CPU per tab opened in batches opened at once, and per short
  connection (what spreading connections over the workers costs).
* ``request``: the CPU of one request/reply through a local NATS, both ends in this process.
* ``hotkey --engine nats|redis``: ``increment()`` and ``mutate()`` on one key from ``--writers``
  processes for ``--seconds``, through a real engine: operations/s and exactness.

The client runs in this process (not pinned: the servers use both cores). Every response is
checked: a run with anything but 200 is marked dirty. Raw results go to bench/results/.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

from bench.client import Connection, boot_signals, build_request, stream_target
from bench.proc import cpu_seconds_precise, tree_pids
from bench.provenance import print_provenance, provenance
from bench.report import Recorder
from bench.server import free_port

REPO = Path(__file__).resolve().parent.parent
APP = "bench.apps_cluster:app"
HOST = "127.0.0.1"


class Node:
    """One ``pyvia run`` (its supervisor and workers when ``workers`` > 1) on its own port."""

    def __init__(
        self, workers: int, env: dict[str, str], engine: str | None = None, extra: tuple[str, ...] = ()
    ) -> None:
        self.workers = workers
        self.port = free_port()
        command = [sys.executable, "-m", "pyvia", "run", APP, "--host", HOST, "--port", str(self.port), *extra]
        if workers > 1:
            command += ["--workers", str(workers)]
        if engine:
            command += ["--engine", engine]
        self.log = tempfile.NamedTemporaryFile(prefix="pyvia-bench-cluster-", suffix=".log", delete=False)  # noqa: SIM115  # lives as long as the node
        self.proc = subprocess.Popen(
            command, cwd=REPO, env={**os.environ, **env}, stdout=self.log, stderr=subprocess.STDOUT
        )
        self.command = command

    async def ready(self, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited: {Path(self.log.name).read_text()[-2000:]}")
            try:
                conn = await Connection.open(HOST, self.port)
                response = await conn.request(build_request("GET", "/_ready", HOST))
                conn.close()
                # every worker accepting (the supervisor's line), not just the first: tabs opened
                # while one is still starting all land on the others
                if response.status == 200 and (
                    self.workers == 1 or f"with {self.workers} workers" in Path(self.log.name).read_text()
                ):
                    return
            except OSError:
                pass
            await asyncio.sleep(0.1)
        raise TimeoutError("server not ready")

    def cpu(self) -> float:
        return cpu_seconds_precise(self.proc.pid)

    def worker_pids(self) -> list[int]:
        """The processes that serve: the workers under a supervisor (``pyvia run`` has one for one worker too)."""
        return sorted(
            pid
            for pid in tree_pids(self.proc.pid)
            if b"pyvia.server.supervisor" in Path(f"/proc/{pid}/cmdline").read_bytes()
        )

    def connections_by_worker(self) -> list[int]:
        """Established connections each worker holds on the node's port (/proc/net/tcp), in worker order."""
        owner: dict[str, int] = {}
        pids = self.worker_pids()
        for index, pid in enumerate(pids):
            for fd in Path(f"/proc/{pid}/fd").iterdir():
                try:
                    target = os.readlink(fd)
                except OSError:
                    continue
                if target.startswith("socket:["):
                    owner[target[8:-1]] = index
        counts = [0] * len(pids)
        port = f"{self.port:04X}"
        for table in ("/proc/net/tcp", "/proc/net/tcp6"):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()
                if fields[1].rsplit(":", 1)[1] == port and fields[3] == "01" and fields[9] in owner:
                    counts[owner[fields[9]]] += 1
        return counts

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        os.unlink(self.log.name)


class Tab:
    __slots__ = ("cookie", "ctx", "stream")

    def __init__(self, ctx: str, cookie: str) -> None:
        self.ctx = ctx
        self.cookie = cookie
        self.stream: Any = None


async def open_tab(port: int, *, stream: bool = True) -> Tab:
    conn = await Connection.open(HOST, port)
    page = await conn.request(build_request("GET", "/", HOST))
    conn.close()
    assert page.status == 200, page.status
    signals = boot_signals(page.body)
    tab = Tab(signals["via_ctx"], f"via_session_id={page.cookie('via_session_id')}")
    if stream:
        sconn = await Connection.open(HOST, port)
        tab.stream = await sconn.open_stream(
            build_request("GET", stream_target({"via_ctx": tab.ctx}), HOST, [("Cookie", tab.cookie)])
        )
    return tab


def action_request(port: int, tab: Tab, name: str, extra: list[tuple[str, str]] | None = None) -> bytes:
    body = orjson.dumps({"via_ctx": tab.ctx})
    return build_request(
        "POST",
        f"/_action/{name}",
        f"{HOST}:{port}",
        [
            ("Origin", f"http://{HOST}:{port}"),
            ("Cookie", tab.cookie),
            ("Content-Type", "application/json"),
            *(extra or []),
        ],
        body,
    )


async def drain(tabs: list[Tab], until: float) -> None:
    """Read every tab's stream so no socket fills up (events are dropped here)."""
    while time.monotonic() < until:
        for tab in tabs:
            tab.stream.events.clear()
        await asyncio.sleep(0.05)


async def closed_loop(
    port: int, tabs: list[Tab], name: str, connections: int, seconds: float
) -> tuple[int, dict[int, int]]:
    statuses: dict[int, int] = {}
    done = 0
    stop_at = time.monotonic() + seconds
    requests = [action_request(port, tab, name) for tab in tabs]

    async def worker() -> None:
        nonlocal done
        conn = await Connection.open(HOST, port)
        while time.monotonic() < stop_at:
            if conn.closed:  # the server closed it (a 503 at accept under overload): counted, dirty
                statuses[0] = statuses.get(0, 0) + 1
                conn = await Connection.open(HOST, port)
            response = await conn.request(random.choice(requests), timeout=30.0)
            statuses[response.status] = statuses.get(response.status, 0) + 1
            done += 1
        conn.close()

    await asyncio.gather(*(worker() for _ in range(connections)))
    return done, statuses


async def throughput_once(workers: int, action: str, args: argparse.Namespace) -> dict[str, Any]:
    env = {"PYVIA_SECRET": "bench-cluster", "BENCH_WORK": str(args.work)}
    node = Node(workers, env)
    try:
        await node.ready()
        # opened side by side, as a crowd of browsers would: opened one after another, an idle
        # server's kernel hands most connections to the same worker
        cpu_before_tabs = node.cpu()
        tabs: list[Tab] = []
        for start in range(0, args.tabs, 64):  # a crowd of 64 at a time: more at once overloads one worker
            tabs += await asyncio.gather(*(open_tab(node.port) for _ in range(min(64, args.tabs - start))))
        await asyncio.sleep(0.5)  # the streams' first events are written
        tab_cpu = node.cpu() - cpu_before_tabs
        streams = node.connections_by_worker()  # where the tabs live, so where their actions run
        drainer = asyncio.ensure_future(drain(tabs, time.monotonic() + args.seconds + 30))
        await closed_loop(node.port, tabs, action, args.connections, 1.0)  # warm-up
        pids = node.worker_pids()
        worker_cpu0 = [_process_cpu(pid) for pid in pids]
        cpu0, t0 = node.cpu(), time.monotonic()
        done, statuses = await closed_loop(node.port, tabs, action, args.connections, args.seconds)
        elapsed, cpu = time.monotonic() - t0, node.cpu() - cpu0
        busy = [round((_process_cpu(pid) - before) / elapsed, 2) for pid, before in zip(pids, worker_cpu0, strict=True)]
        drainer.cancel()
        for tab in tabs:
            tab.stream.close()
        return {
            "workers": workers,
            "action": action,
            "actions": done,
            "seconds": round(elapsed, 3),
            "per_second": round(done / elapsed, 1),
            "server_cpu_s": round(cpu, 3),
            "cpu_us_per_action": round(cpu / done * 1e6, 1),
            "statuses": statuses,
            "cpu_us_per_tab_opened": round(tab_cpu / args.tabs * 1e6, 1),
            "streams_by_worker": streams,
            "worker_cores": busy,
            "clean": set(statuses) == {200},
        }
    finally:
        node.stop()


async def throughput(args: argparse.Namespace, recorder: Recorder) -> None:
    for rep in range(args.reps):
        rows = [await throughput_once(w, args.action, args) for w in (1, args.workers)]
        one, many = rows
        ratio = many["per_second"] / one["per_second"]
        for row in rows:
            recorder.write({"rep": rep, **row})
        print(
            f"rep {rep}: 1 worker {one['per_second']:.0f}/s, {args.workers} workers {many['per_second']:.0f}/s "
            f"= {ratio:.2f}x  (cpu/action {one['cpu_us_per_action']} vs {many['cpu_us_per_action']} us; "
            f"cpu/tab opened {one['cpu_us_per_tab_opened']} vs {many['cpu_us_per_tab_opened']} us; "
            f"streams by worker {many['streams_by_worker']}, cores busy {many['worker_cores']})"
            f"{'' if one['clean'] and many['clean'] else '  DIRTY ' + str([one['statuses'], many['statuses']])}"
        )
        recorder.write({"rep": rep, "ratio": round(ratio, 3)})


async def opening(args: argparse.Namespace, recorder: Recorder) -> None:
    """Server CPU per tab opened (``--batch`` at once, page then stream) and per short connection
    (``GET /_ready`` on a fresh connection from 16 clients), on ``--workers``; the split of the
    last batch's streams."""
    import statistics

    node = Node(args.workers, {"PYVIA_SECRET": "bench-cluster"})
    try:
        await node.ready()
        per_tab: list[float] = []
        split: list[int] = []
        for batch in range(args.batches + 1):  # the first warms up
            cpu0 = node.cpu()
            tabs = list(await asyncio.gather(*(open_tab(node.port) for _ in range(args.batch))))
            await asyncio.sleep(0.05)
            cpu = node.cpu() - cpu0
            split = node.connections_by_worker()
            if batch:
                per_tab.append(cpu / args.batch * 1e6)
            for tab in tabs:
                tab.stream.close()
            await asyncio.sleep(0.5)
        ready = build_request("GET", "/_ready", HOST)

        async def client(count: int) -> None:
            for _ in range(count):
                conn = await Connection.open(HOST, node.port)
                assert (await conn.request(ready)).status == 200
                conn.close()

        per_connection: list[float] = []
        rates: list[float] = []
        for rep in range(args.reps + 1):
            cpu0, t0 = node.cpu(), time.monotonic()
            await asyncio.gather(*(client(args.connections // 16) for _ in range(16)))
            elapsed, cpu = time.monotonic() - t0, node.cpu() - cpu0
            if rep:
                per_connection.append(cpu / args.connections * 1e6)
                rates.append(args.connections / elapsed)
        row = {
            "workers": args.workers,
            "cpu_us_per_tab": [round(x) for x in per_tab],
            "cpu_us_per_connection": [round(x, 1) for x in per_connection],
            "connections_per_second": [round(x) for x in rates],
            "last_split": split,
        }
        recorder.write(row)
        print(
            f"{args.workers} worker(s): server CPU per tab median {statistics.median(per_tab):.0f} us "
            f"(of {len(per_tab)} batches of {args.batch}; streams of the last {split}); per short connection "
            f"median {statistics.median(per_connection):.1f} us, {statistics.median(rates):.0f} connections/s"
        )
    finally:
        node.stop()


#: ``forward``'s paths: (name, node the requests go to, through a proxy, a new connection per action).
#: Node A holds the tab. A proxy's connection (``X-Forwarded-For``) is forwarded over the direct
#: channel; a browser's is passed to A with its first action, then its actions are A's own.
FORWARD_PATHS = (
    ("local", "a", False, False),
    ("forwarded", "b", True, False),
    ("passed", "b", False, False),
    ("local, new connection", "a", False, True),
    ("passed, new connection", "b", False, True),
)


async def forward(args: argparse.Namespace, recorder: Recorder) -> None:
    from pyvia.cluster.nats_server import LocalNats

    nats = LocalNats()
    url = nats.start()
    env = {"PYVIA_SECRET": "bench-cluster"}
    paths = FORWARD_PATHS
    if args.channel != "unix":  # two machines: neither sees the other's socket, no connection moves
        env["PYVIA_APP__CLUSTER_DIRECT"] = "false"
        paths = FORWARD_PATHS[:2]
    extra = ("--cluster-address", HOST) if args.channel == "tcp" else ()
    nodes = [Node(1, env, engine=url, extra=extra) for _ in range(2)]
    try:
        for node in nodes:
            await node.ready()
        a, b = nodes
        tab = await open_tab(a.port)
        drainer = asyncio.ensure_future(drain([tab], time.monotonic() + 3600))
        for rep in range(args.reps):
            row: dict[str, Any] = {"rep": rep}
            for name, where, proxied, fresh in paths:
                node = a if where == "a" else b
                extra = [("X-Forwarded-For", "203.0.113.7")] if proxied else None
                request = action_request(node.port, tab, "tap", extra)
                each = (args.actions // 3 if fresh else args.actions) // args.connections
                count = each * args.connections
                conns = [None if fresh else await Connection.open(HOST, node.port) for _ in range(args.connections)]
                statuses: dict[int, int] = {}

                async def loop(
                    conn: Connection | None,
                    n: int,
                    node: Node = node,
                    request: bytes = request,
                    statuses: dict[int, int] = statuses,
                ) -> None:
                    for _ in range(n):
                        if conn is not None:
                            status = (await conn.request(request)).status
                        else:
                            fresh_conn = await Connection.open(HOST, node.port)
                            status = (await fresh_conn.request(request)).status
                            fresh_conn.close()
                        statuses[status] = statuses.get(status, 0) + 1

                await asyncio.gather(*(loop(conn, 100) for conn in conns))  # warm-up
                assert set(statuses) == {200}, statuses
                statuses.clear()
                cpu0, nats0, t0 = a.cpu() + b.cpu(), cpu_seconds_precise(nats.pid), time.perf_counter()
                await asyncio.gather(*(loop(conn, each) for conn in conns))
                elapsed = time.perf_counter() - t0
                cpu = a.cpu() + b.cpu() - cpu0
                broker = cpu_seconds_precise(nats.pid) - nats0
                for conn in conns:
                    if conn is not None:
                        conn.close()
                row[name] = {
                    "cpu_us": round(cpu / count * 1e6, 1),
                    "cpu_with_nats_us": round((cpu + broker) / count * 1e6, 1),
                    "latency_us": round(elapsed / count * 1e6 * args.connections, 1),
                    "statuses": dict(statuses),
                }
            local = row["local"]["cpu_us"]
            row["ratio_forwarded"] = round(row["forwarded"]["cpu_us"] / local, 3)
            if args.channel != "unix":
                recorder.write(row)
                print(
                    f"rep {rep}: local {local} us; forwarded over {args.channel} {row['forwarded']['cpu_us']} us = "
                    f"{row['ratio_forwarded']}x (with the NATS server's CPU: local "
                    f"{row['local']['cpu_with_nats_us']} us, forwarded {row['forwarded']['cpu_with_nats_us']} us)"
                )
                continue
            fresh = row["local, new connection"]["cpu_us"]
            row["ratio_passed"] = round(row["passed"]["cpu_us"] / local, 3)
            row["ratio_passed_new_connection"] = round(row["passed, new connection"]["cpu_us"] / fresh, 3)
            recorder.write(row)
            print(
                f"rep {rep}: local {local} us; forwarded (proxy connection) {row['forwarded']['cpu_us']} us = "
                f"{row['ratio_forwarded']}x; passed keep-alive connection {row['passed']['cpu_us']} us = "
                f"{row['ratio_passed']}x; new connection each: local {fresh} us, passed "
                f"{row['passed, new connection']['cpu_us']} us = {row['ratio_passed_new_connection']}x"
            )
        drainer.cancel()
    finally:
        for node in nodes:
            node.stop()
        nats.stop()


_HOTKEY_WRITER = """
import asyncio, sys, time, orjson, uvloop
from pyvia.cluster import create_engine
async def main(url, prefix, op, seconds):
    engine = create_engine(url, prefix=prefix)
    await engine.connect()
    go = asyncio.Event()
    await engine.subscribe("go", lambda s, p: go.set())
    print("ready", flush=True)
    await asyncio.wait_for(go.wait(), 30)
    n, stop = 0, time.monotonic() + seconds
    while time.monotonic() < stop:
        if op == "increment":
            await engine.increment("hot", "count")
        else:
            await engine.mutate("hot", "list", lambda raw: orjson.dumps([*orjson.loads(raw)[-20:], n]), b"[]")
        n += 1
    print(n, flush=True)
    await engine.close()
uvloop.run(main(sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])))
"""


async def hotkey(args: argparse.Namespace, recorder: Recorder) -> None:
    from pyvia.cluster import create_engine

    server: Any
    if args.engine == "nats":
        from pyvia.cluster.nats_server import LocalNats

        server = LocalNats()
        url = server.start()
    else:
        url, server = _start_redis()
    try:
        for rep in range(args.reps):
            for op in ("increment", "mutate"):
                prefix = f"hot{rep}{op[0]}{os.getpid()}"
                procs = [
                    subprocess.Popen(
                        [sys.executable, "-c", _HOTKEY_WRITER, url, prefix, op, str(args.seconds)],
                        cwd=REPO,
                        stdout=subprocess.PIPE,
                        text=True,
                    )
                    for _ in range(args.writers)
                ]
                for proc in procs:
                    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
                engine = create_engine(url, prefix=prefix)
                await engine.connect()
                await engine.publish("go", b"")
                # read the counts off the loop, so the engine's client can send "go" meanwhile
                counts = await asyncio.to_thread(_read_counts, procs)
                for proc in procs:
                    proc.wait(10)
                total = sum(counts)
                exact = None
                if op == "increment":
                    value, _ = await engine.get("hot", "count")
                    exact = value is not None and int(value) == total
                await engine.close()
                row = {
                    "rep": rep,
                    "engine": args.engine,
                    "op": op,
                    "writers": args.writers,
                    "ops": total,
                    "per_second": round(total / args.seconds, 1),
                    "exact": exact,
                }
                recorder.write(row)
                print(
                    f"rep {rep}: {args.engine} {op} x{args.writers} writers: {row['per_second']:.0f}/s"
                    f"{'' if exact is None else f', final value exact: {exact}'}"
                )
    finally:
        server.stop()


async def request(args: argparse.Namespace, recorder: Recorder) -> None:
    import resource

    from pyvia.cluster import create_engine
    from pyvia.cluster.nats_server import LocalNats

    def cpu() -> float:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return usage.ru_utime + usage.ru_stime

    nats = LocalNats()
    url = nats.start()
    asker, server = create_engine(url, prefix="rr"), create_engine(url, prefix="rr")
    try:
        await asker.connect()
        await server.connect()
        await server.serve("fwd.x", lambda payload: b"ok" + payload[:10])
        body = b"x" * 600
        for _ in range(500):
            await asker.request("fwd.x", body, 5)
        for rep in range(args.reps):
            cpu0, t0 = cpu(), time.perf_counter()
            for _ in range(args.count):
                await asker.request("fwd.x", body, 5)
            row = {
                "rep": rep,
                "cpu_us": round((cpu() - cpu0) / args.count * 1e6, 1),
                "wall_us": round((time.perf_counter() - t0) / args.count * 1e6, 1),
            }
            recorder.write(row)
            print(f"rep {rep}: request/reply through NATS, both ends: {row['cpu_us']} us CPU, {row['wall_us']} us wall")
    finally:
        await asker.close()
        await server.close()
        nats.stop()


def _process_cpu(pid: int) -> float:
    """CPU seconds of one process (its CPU-time clock, as :func:`bench.proc.cpu_seconds_precise`)."""
    try:
        return time.clock_gettime(((~pid) << 3) | 2)
    except OSError:
        return 0.0


def _read_counts(procs: list[subprocess.Popen[str]]) -> list[int]:
    return [int(proc.stdout.readline()) for proc in procs if proc.stdout is not None]


def _start_redis() -> tuple[str, Any]:
    binary = shutil.which("redis-server")
    if binary is None:
        raise SystemExit("redis-server is missing (scripts/install test)")
    port = free_port()
    proc = subprocess.Popen(
        [binary, "--port", str(port), "--bind", HOST, "--save", "", "--appendonly", "no"], stdout=subprocess.DEVNULL
    )
    time.sleep(0.3)

    class Stopper:
        def stop(self) -> None:
            proc.terminate()
            proc.wait(5)

    return f"redis://{HOST}:{port}/0", Stopper()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.cluster", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    t = sub.add_parser("throughput")
    t.add_argument("--workers", type=int, default=2)
    t.add_argument("--action", choices=("work", "bump"), default="work")
    t.add_argument("--work", type=int, default=60_000, help="iterations of the CPU-bound action (~2 ms)")
    t.add_argument(
        "--tabs",
        type=int,
        default=256,
        help="tabs the actions pick from (64 split 32 +- 4 over two workers: up to 1.13x more work on one)",
    )
    t.add_argument(
        "--connections",
        type=int,
        default=48,
        help="closed-loop client connections (16 leave a worker idle while it relays)",
    )
    t.add_argument("--seconds", type=float, default=8.0)
    t.add_argument("--reps", type=int, default=3)
    f = sub.add_parser("forward")
    f.add_argument("--actions", type=int, default=3000)
    f.add_argument("--connections", type=int, default=1, help="concurrent connections (1: one request at a time)")
    f.add_argument(
        "--channel",
        choices=("unix", "tcp", "engine"),
        default="unix",
        help="how B reaches A: unix (one machine), tcp or engine (two machines: --cluster-address, or NATS)",
    )
    f.add_argument("--reps", type=int, default=3)
    r = sub.add_parser("request")
    r.add_argument("--count", type=int, default=5000)
    r.add_argument("--reps", type=int, default=3)
    o = sub.add_parser("opening")
    o.add_argument("--workers", type=int, default=2)
    o.add_argument("--batch", type=int, default=64, help="tabs opened at once")
    o.add_argument("--batches", type=int, default=20)
    o.add_argument("--connections", type=int, default=2000, help="short connections per repetition")
    o.add_argument("--reps", type=int, default=3)
    h = sub.add_parser("hotkey")
    h.add_argument("--engine", choices=("nats", "redis"), default="nats")
    h.add_argument("--writers", type=int, default=4)
    h.add_argument("--seconds", type=float, default=5.0)
    h.add_argument("--reps", type=int, default=3)
    args = parser.parse_args(argv)
    recorder = Recorder(f"cluster-{args.command}")
    record = provenance(f"cluster {args.command}", vars(args), [sys.executable, "-m", "pyvia", "run", APP])
    print_provenance(record)
    recorder.write({"provenance": record})
    from bench.client import run

    commands = {"throughput": throughput, "forward": forward, "hotkey": hotkey, "request": request, "opening": opening}
    run(commands[args.command](args, recorder))
    print(f"# raw results: {recorder.path}")


if __name__ == "__main__":
    main()
