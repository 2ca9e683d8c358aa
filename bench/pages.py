"""``pages``: keep-alive page views of the counter at concurrency C, like a crawler (no streams).

Closed loop: C connections, each with its own session cookie, each sending ``GET /`` as soon as
its previous page arrived. One warm-up, then R back-to-back windows of D seconds, measured while
the load keeps running (no ramp-down between windows). Every response is checked (status 200 and
the ``via-boot`` marker); a window with any failure is marked dirty (ephpm-lessons §6.3 D).

A page view whose stream never connects leaves a context for ``connect_timeout`` (30 s) and then
costs its destruction. Unless ``--no-expiry``, the command waits for those contexts to expire and
reports that deferred CPU per page view too; it also reports the RSS held per waiting context.
The default run (1 + 5 x 5 s) ends before the first contexts expire, so no window pays for expiry.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections import Counter
from typing import Any

from bench.client import ProtocolError, Response
from bench.report import Recorder, fmt, percentile, quiet_spread, spread
from bench.server import PAGE_MARKER, Server
from bench.tabs_client import Browser
from bench.window import Window

__all__ = ["add_arguments", "main"]

CONNECT_TIMEOUT = 30.0  # pyvia.config.Config.connect_timeout, the counter app's setting


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-c", "--concurrency", type=int, default=16, help="connections (default 16)")
    parser.add_argument("-d", "--duration", type=float, default=5.0, help="seconds per repetition (default 5)")
    parser.add_argument("-r", "--repeat", type=int, default=5, help="repetitions (default 5)")
    parser.add_argument("--warmup", type=float, default=1.0, help="seconds of warm-up (default 1)")
    parser.add_argument("--no-expiry", action="store_true", help="skip waiting for the page contexts to expire")
    parser.add_argument(
        "--new-connections",
        action="store_true",
        help="each view on a connection of its own, closed once answered (a crawler without keep-alive)",
    )
    parser.add_argument(
        "--after",
        type=float,
        default=0.0,
        help="after the expiry, read RSS again this many seconds after the last view, against RSS "
        "before the load (issue 22: a burst's memory returned; default 0: not read)",
    )


class Phase:
    """What the workers completed while one window was current."""

    __slots__ = ("bad_body", "errors", "first_non2xx", "latencies", "non2xx", "ok")

    def __init__(self) -> None:
        self.ok = 0
        self.latencies: list[float] = []
        self.non2xx: Counter[int] = Counter()
        self.first_non2xx: str | None = None  # status line, headers and body start of the first one
        self.bad_body = 0
        self.errors: Counter[str] = Counter()

    def refused(self, response: Response) -> None:
        """Count a non-2xx answer; keep the first one whole enough to say why."""
        self.non2xx[response.status] += 1
        if self.first_non2xx is None:
            self.first_non2xx = f"{response.status} {response.headers} {response.body[:200]!r}"

    @property
    def failures(self) -> int:
        return sum(self.non2xx.values()) + self.bad_body + sum(self.errors.values())


class Load:
    """The running workers and the phase they currently report into."""

    def __init__(self) -> None:
        self.phase = Phase()
        self.running = True
        self.total_ok = 0
        self.last_page_at = 0.0


async def _worker(load: Load, server: Server, new_connections: bool = False) -> None:
    browser = await Browser.open(server.host, server.port)
    perf = time.perf_counter
    while load.running:
        t0 = perf()
        try:
            response = await browser.page()
            if new_connections:
                await browser.reconnect(server.port)
        except (OSError, TimeoutError, ProtocolError) as exc:
            load.phase.errors[type(exc).__name__] += 1
            if load.running:
                await browser.reconnect(server.port)
            continue
        phase = load.phase
        if response.status != 200:
            phase.refused(response)
        elif PAGE_MARKER not in response.body:
            phase.bad_body += 1
        else:
            phase.ok += 1
            phase.latencies.append(response.done - t0)
            load.total_ok += 1
    load.last_page_at = time.monotonic()
    browser.conn.close()


def _rep_record(rep: int, phase: Phase, window: Window, rss_kb: int) -> dict[str, Any]:
    lat = sorted(phase.latencies)
    return {
        "type": "rep",
        "rep": rep,
        "ok": phase.ok,
        "non2xx": dict(phase.non2xx),
        "first_non2xx": phase.first_non2xx,
        "bad_body": phase.bad_body,
        "errors": dict(phase.errors),
        "dirty": phase.failures > 0,
        "req_per_s": phase.ok / window.wall,
        "p50_us": percentile(lat, 50) * 1e6,
        "p99_us": percentile(lat, 99) * 1e6,
        "server_cpu_us_per_page": window.server_cpu / phase.ok * 1e6 if phase.ok else float("nan"),
        "server_cpu_us_per_page_clock": window.server_cpu_precise / phase.ok * 1e6 if phase.ok else float("nan"),
        "server_rss_kb": rss_kb,
        **window.as_dict(),
    }


async def main(args: argparse.Namespace, session: Any) -> dict[str, Any]:
    """Start a server, measure, stop it."""
    server = await session.start()
    try:
        return await measure(args, server, session.recorder)
    finally:
        await session.stop(server)


async def measure(args: argparse.Namespace, server: Server, recorder: Recorder) -> dict[str, Any]:
    load = Load()
    started = time.monotonic()
    rss_idle = server.rss_kb()
    workers = [asyncio.ensure_future(_worker(load, server, args.new_connections)) for _ in range(args.concurrency)]
    await asyncio.sleep(args.warmup)
    warm = load.phase
    rss_before = server.rss_kb()
    ok_before = load.total_ok
    held_at = (rss_before, ok_before)  # RSS and page views at the last window no context expired in
    reps = []
    for rep in range(1, args.repeat + 1):
        load.phase = phase = Phase()
        window = Window(server).start()
        await asyncio.sleep(args.duration)
        window.stop()
        record = _rep_record(rep, phase, window, server.rss_kb())
        record["expiry_overlap"] = time.monotonic() - started > CONNECT_TIMEOUT
        if not record["expiry_overlap"]:
            held_at = (record["server_rss_kb"], load.total_ok)
        recorder.write(record)
        reps.append(record)
        _print_rep(record)
    load.running = False
    await asyncio.gather(*workers, return_exceptions=True)
    rss_after = server.rss_kb()
    views = load.total_ok
    held = {
        "rss_idle_kb": rss_idle,
        "rss_after_warmup_kb": rss_before,
        "rss_after_reps_kb": rss_after,
        "rss_held_kb": held_at[0],
        "kb_per_waiting_context": (held_at[0] - rss_before) / (held_at[1] - ok_before)
        if held_at[1] > ok_before
        else float("nan"),
    }
    summary: dict[str, Any] = {
        "type": "summary",
        "warmup_ok": warm.ok,
        "warmup_failures": warm.failures,
        "page_views": views,
        **held,
    }
    for key in ("req_per_s", "p50_us", "p99_us", "server_cpu_us_per_page", "server_busy", "client_busy"):
        summary[key] = spread([r[key] for r in reps])
    if all(r["gc_share"] is not None for r in reps):
        summary["gc_share"] = spread([r["gc_share"] for r in reps])
    summary["dirty_reps"] = [r["rep"] for r in reps if r["dirty"]]
    summary["noisy_reps"] = [r["rep"] for r in reps if r["noisy"]]
    summary["quiet"] = quiet_spread(reps, ("req_per_s", "p50_us", "p99_us", "server_cpu_us_per_page"))
    summary["expiry_overlap_reps"] = [r["rep"] for r in reps if r["expiry_overlap"]]
    if not args.no_expiry:
        summary.update(await _expiry(server, load, views))
        if args.after > 0:
            await asyncio.sleep(max(0.0, load.last_page_at + args.after - time.monotonic()))
            summary["rss_after_s"] = args.after
            summary["rss_after_kb"] = server.rss_kb()
    recorder.write(summary)
    _print_summary(summary)
    return summary


async def _expiry(server: Server, load: Load, views: int) -> dict[str, Any]:
    """Wait until every page context passed its connect timeout and was destroyed; CPU per view."""
    wait = max(0.0, load.last_page_at + CONNECT_TIMEOUT + 3.0 - time.monotonic())
    print(f"# waiting {wait:.0f} s for {views:,} page contexts to expire (--no-expiry skips this)", flush=True)
    window = Window(server).start()
    await asyncio.sleep(wait)
    await _until_idle(server)
    window.stop()
    return {
        "expiry_wait_s": window.wall,
        "expiry_server_cpu_s": window.server_cpu,
        "expiry_cpu_us_per_page": window.server_cpu / views * 1e6 if views else float("nan"),
        "rss_after_expiry_kb": server.rss_kb(),
    }


async def _until_idle(server: Server, limit: float = 60.0) -> None:
    """Return once the server used under 20 ms of CPU in a second (destruction runs in slices)."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        before = server.cpu()
        await asyncio.sleep(1.0)
        if server.cpu() - before < 0.02:
            return


def _print_rep(r: dict[str, Any]) -> None:
    flag = " DIRTY" if r["dirty"] else ""
    flag += " (expiry overlap)" if r["expiry_overlap"] else ""
    print(
        f"rep {r['rep']}: {r['ok']:,} pages in {r['wall_s']:.2f} s = {r['req_per_s']:,.0f}/s, "
        f"p50 {r['p50_us']:,.0f} µs, p99 {r['p99_us']:,.0f} µs, "
        f"server CPU {r['server_cpu_us_per_page']:.1f} µs/page ({_kernel(r):.0%} in the kernel, "
        f"{r['server_minor_faults'] / max(1, r['ok']):.2f} page faults/page), "
        f"server core {r['server_busy']:.0%}, client core {r['client_busy']:.0%}, "
        f"others on server/client core {r['others_on_server_core']:.0%}/{r['others_on_client_core']:.0%}, "
        f"non-2xx {sum(r['non2xx'].values())}, bad body {r['bad_body']}, errors {sum(r['errors'].values())}"
        f"{_gc_text(r)}{flag}{_refusal(r)}",
        flush=True,
    )


def _refusal(r: dict[str, Any]) -> str:
    return f"\n    first non-2xx: {r['first_non2xx'][:300]}" if r.get("first_non2xx") else ""


def _kernel(r: dict[str, Any]) -> float:
    """System time's share of the server's CPU (syscalls, page faults, loopback delivery)."""
    return float(r["server_sys_s"] / r["server_cpu_s"]) if r["server_cpu_s"] else 0.0


def _gc_text(r: dict[str, Any]) -> str:
    """With --gc-stats: the collector's share of the server's CPU and its full collections."""
    if r.get("gc_share") is None:
        return ""
    gc = r["gc"]
    return (
        f", GC {r['gc_share']:.0%} of server CPU ({gc['collections'][2]} full collections, longest pause so far "
        f"{max(gc['longest_pause_so_far_s']) * 1000:.0f} ms)"
    )


def _print_summary(s: dict[str, Any]) -> None:
    print("summary: median (min-max) over repetitions")
    print(f"  page views/s          {fmt(s['req_per_s'], 0)}")
    print(f"  p50 / p99 latency µs  {fmt(s['p50_us'], 0)} / {fmt(s['p99_us'], 0)}")
    print(f"  server CPU µs/page    {fmt(s['server_cpu_us_per_page'])}   (target ≤ 100)")
    print(f"  server / client core  {fmt(s['server_busy'], 2)} / {fmt(s['client_busy'], 2)}")
    if "gc_share" in s:
        print(f"  GC share of server CPU {fmt(s['gc_share'], 2)}")
    print(
        f"  RSS held per waiting context: {s['kb_per_waiting_context']:.2f} KB "
        f"({s['rss_after_warmup_kb'] / 1024:.1f} → {s['rss_held_kb'] / 1024:.1f} MB before any expired)"
    )
    q = s["quiet"]
    if s["noisy_reps"] and q["n"]:
        print(
            f"  quiet repetitions only (n={q['n']}): {fmt(q['req_per_s'], 0)}/s, p50 {fmt(q['p50_us'], 0)} µs, "
            f"p99 {fmt(q['p99_us'], 0)} µs, server CPU {fmt(q['server_cpu_us_per_page'])} µs/page"
        )
    if "expiry_cpu_us_per_page" in s:
        print(
            f"  deferred: expiring the contexts cost {s['expiry_cpu_us_per_page']:.1f} µs/page "
            f"({s['expiry_server_cpu_s']:.2f} s CPU over {s['expiry_wait_s']:.0f} s); "
            f"RSS after expiry {s['rss_after_expiry_kb'] / 1024:.1f} MB"
        )
    if "rss_after_kb" in s:
        print(
            f"  RSS {s['rss_after_s']:.0f} s after the last of {s['page_views']:,} views: "
            f"{s['rss_after_kb'] / 1024:.1f} MB = {s['rss_after_kb'] / s['rss_idle_kb']:.2f}x its "
            f"{s['rss_idle_kb'] / 1024:.1f} MB before the load (issue 22: at most 1.2x)"
        )
    print(
        f"  dirty repetitions: {s['dirty_reps'] or 'none'}; noisy (others took > 5% of a core): "
        f"{s['noisy_reps'] or 'none'}"
        f"{'; expiry overlapped ' + str(s['expiry_overlap_reps']) if s['expiry_overlap_reps'] else ''}"
    )
