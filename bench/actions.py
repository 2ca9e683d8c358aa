"""``actions``: private ``increment`` actions on open tabs, each verified on its tab's stream.

T tabs are opened (page view + stream, session cookie kept), spread over C connections; each
connection then posts ``increment`` closed-loop to its tabs in turn, and an action counts only
when the POST answered 200 *and* the tab's stream carried ``{"_count": n+1}`` (the count is
server-owned: the POST carries the context id and the writable ``step`` only). So the figure is
the whole path a click takes: HTTP parse, Origin check, signal parsing, the action, the signal
patch formatted and written to the stream, and the empty 200. Latency runs from the send to the
moment the patch was parsed off the stream (each event is time-stamped as it arrives).
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections import Counter
from typing import Any

from bench.client import ProtocolError, Response, event_signals
from bench.report import Recorder, fmt, percentile, quiet_spread, spread
from bench.server import Server
from bench.tabs_client import Browser, Tab, TabError
from bench.window import Window

__all__ = ["SERVER_ENV", "add_arguments", "main"]

#: The known bench config (ephpm-lessons §6.3 B): pyvia's per-address action rate (1,200 a
#: second by default) would answer a closed loop from one address with 429s, so the benchmark
#: would measure refusals. php-via's capacity runs lift its rate limit the same way.
SERVER_ENV = {"PYVIA_APP__ACTION_RATE": "0"}
#: The counter's count in the browser store: server-owned, so its id starts with ``_``.
COUNT = "_count"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-t", "--tabs", type=int, default=16, help="open tabs (default 16; at least -c)")
    parser.add_argument("-c", "--concurrency", type=int, default=16, help="posting connections (default 16)")
    parser.add_argument("-d", "--duration", type=float, default=5.0, help="seconds per repetition (default 5)")
    parser.add_argument("-r", "--repeat", type=int, default=5, help="repetitions (default 5)")
    parser.add_argument("--warmup", type=float, default=1.0, help="seconds of warm-up (default 1)")
    parser.add_argument("--timeout", type=float, default=2.0, help="seconds to wait for a POST or its patch")


class Phase:
    """What the workers completed while one window was current."""

    __slots__ = ("errors", "first_non2xx", "latencies", "mismatches", "non2xx", "ok", "post_latencies")

    def __init__(self) -> None:
        self.ok = 0
        self.latencies: list[float] = []
        self.post_latencies: list[float] = []
        self.non2xx: Counter[int] = Counter()
        self.first_non2xx: str | None = None  # status line, headers and body start of the first one
        self.mismatches = 0
        self.errors: Counter[str] = Counter()

    def refused(self, response: Response) -> None:
        """Count a non-2xx answer; keep the first one whole enough to say why."""
        self.non2xx[response.status] += 1
        if self.first_non2xx is None:
            self.first_non2xx = f"{response.status} {response.headers} {response.body[:200]!r}"

    @property
    def failures(self) -> int:
        return sum(self.non2xx.values()) + self.mismatches + sum(self.errors.values())


class Load:
    def __init__(self) -> None:
        self.phase = Phase()
        self.running = True


async def _patch_seen(tab: Tab, expected: int, timeout: float) -> float | None:
    """Arrival time of the tab's ``count`` patch, or None if a different count came first."""
    while True:
        at, raw = await tab.stream.next_event(timeout)
        patch = event_signals(raw)
        if patch is None or COUNT not in patch:
            continue
        tab.signals[COUNT] = patch[COUNT]
        return at if patch[COUNT] == expected else None


async def _worker(load: Load, browser: Browser, tabs: list[Tab], timeout: float, port: int) -> None:
    perf = time.perf_counter
    turn = 0
    while load.running and tabs:
        tab = tabs[turn % len(tabs)]
        turn += 1
        n = tab.signals[COUNT]
        raw = browser.action_request("increment", {**tab.signals, "via_ctx": tab.ctx_id})
        t0 = perf()
        try:
            response = await browser.conn.request(raw, timeout)
            if response.status != 200:
                load.phase.refused(response)
                continue
            seen = await _patch_seen(tab, n + 1, timeout)
        except (OSError, TimeoutError, ProtocolError) as exc:
            load.phase.errors[type(exc).__name__] += 1
            if tab.stream.closed:
                tabs.remove(tab)  # its stream ended: nothing more to verify on it
            if browser.conn.closed and load.running:
                await browser.reconnect(port)
            continue
        phase = load.phase
        if seen is None:
            phase.mismatches += 1
            continue
        phase.ok += 1
        phase.latencies.append(seen - t0)
        phase.post_latencies.append(response.done - t0)


async def _open_tabs(args: argparse.Namespace, server: Server) -> tuple[list[Browser], list[list[Tab]]]:
    browsers = [await Browser.open(server.host, server.port) for _ in range(args.concurrency)]
    owned: list[list[Tab]] = [[] for _ in browsers]
    for i in range(args.tabs):
        owned[i % len(browsers)].append(await browsers[i % len(browsers)].open_tab(server.port))
    return browsers, owned


def _rep_record(rep: int, phase: Phase, window: Window, rss_kb: int) -> dict[str, Any]:
    lat = sorted(phase.latencies)
    post = sorted(phase.post_latencies)
    return {
        "type": "rep",
        "rep": rep,
        "ok": phase.ok,
        "non2xx": dict(phase.non2xx),
        "first_non2xx": phase.first_non2xx,
        "mismatches": phase.mismatches,
        "errors": dict(phase.errors),
        "dirty": phase.failures > 0,
        "actions_per_s": phase.ok / window.wall,
        "p50_us": percentile(lat, 50) * 1e6,
        "p99_us": percentile(lat, 99) * 1e6,
        "post_p50_us": percentile(post, 50) * 1e6,
        "post_p99_us": percentile(post, 99) * 1e6,
        "server_cpu_us_per_action": window.server_cpu / phase.ok * 1e6 if phase.ok else float("nan"),
        "server_cpu_us_per_action_clock": window.server_cpu_precise / phase.ok * 1e6 if phase.ok else float("nan"),
        "server_rss_kb": rss_kb,
        **window.as_dict(),
    }


async def main(args: argparse.Namespace, session: Any) -> dict[str, Any]:
    """Start a server, open the tabs, measure, stop it."""
    if args.tabs < args.concurrency:
        raise SystemExit("--tabs must be at least --concurrency: each tab is driven by one connection")
    server = await session.start()
    tabs: list[Tab] = []
    try:
        try:
            browsers, owned = await _open_tabs(args, server)
        except (OSError, TimeoutError, ProtocolError, TabError) as exc:
            print(f"opening the tabs failed: {exc!r}")
            return {"failed": True}
        tabs = [t for group in owned for t in group]
        return await measure(args, server, session.recorder, browsers, owned)
    finally:
        for tab in tabs:
            tab.close()
        await session.stop(server)


async def measure(
    args: argparse.Namespace, server: Server, recorder: Recorder, browsers: list[Browser], owned: list[list[Tab]]
) -> dict[str, Any]:
    load = Load()
    rss_tabs = server.rss_kb()
    workers = [
        asyncio.ensure_future(_worker(load, b, t, args.timeout, server.port))
        for b, t in zip(browsers, owned, strict=True)
    ]
    await asyncio.sleep(args.warmup)
    warm = load.phase
    reps = []
    for rep in range(1, args.repeat + 1):
        load.phase = phase = Phase()
        window = Window(server).start()
        await asyncio.sleep(args.duration)
        window.stop()
        record = _rep_record(rep, phase, window, server.rss_kb())
        recorder.write(record)
        reps.append(record)
        _print_rep(record)
    load.running = False
    await asyncio.gather(*workers, return_exceptions=True)
    summary: dict[str, Any] = {
        "type": "summary",
        "tabs": args.tabs,
        "rss_with_tabs_kb": rss_tabs,
        "rss_after_kb": server.rss_kb(),
        "warmup_ok": warm.ok,
        "warmup_failures": warm.failures,
    }
    for key in (
        "actions_per_s",
        "p50_us",
        "p99_us",
        "post_p50_us",
        "post_p99_us",
        "server_cpu_us_per_action",
        "server_busy",
        "client_busy",
    ):
        summary[key] = spread([r[key] for r in reps])
    if all(r["gc_share"] is not None for r in reps):
        summary["gc_share"] = spread([r["gc_share"] for r in reps])
    summary["dirty_reps"] = [r["rep"] for r in reps if r["dirty"]]
    summary["noisy_reps"] = [r["rep"] for r in reps if r["noisy"]]
    summary["quiet"] = quiet_spread(reps, ("actions_per_s", "p50_us", "p99_us", "server_cpu_us_per_action"))
    recorder.write(summary)
    _print_summary(summary)
    return summary


def _print_rep(r: dict[str, Any]) -> None:
    print(
        f"rep {r['rep']}: {r['ok']:,} actions in {r['wall_s']:.2f} s = {r['actions_per_s']:,.0f}/s, "
        f"patch p50 {r['p50_us']:,.0f} µs p99 {r['p99_us']:,.0f} µs (POST p50 {r['post_p50_us']:,.0f}), "
        f"server CPU {r['server_cpu_us_per_action']:.1f} µs/action ({_kernel(r):.0%} in the kernel), "
        f"server core {r['server_busy']:.0%}, "
        f"client core {r['client_busy']:.0%}, "
        f"others on server/client core {r['others_on_server_core']:.0%}/{r['others_on_client_core']:.0%}, "
        f"non-2xx {sum(r['non2xx'].values())}, "
        f"wrong count {r['mismatches']}, errors {sum(r['errors'].values())}{_gc_text(r)}"
        f"{' DIRTY' if r['dirty'] else ''}{_refusal(r)}",
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
    print(f"  actions/s               {fmt(s['actions_per_s'], 0)}")
    print(f"  send→patch p50 / p99 µs {fmt(s['p50_us'], 0)} / {fmt(s['p99_us'], 0)}")
    print(f"  POST answer p50 / p99 µs {fmt(s['post_p50_us'], 0)} / {fmt(s['post_p99_us'], 0)}")
    print(f"  server CPU µs/action    {fmt(s['server_cpu_us_per_action'])}   (target ≤ 60)")
    print(f"  server / client core    {fmt(s['server_busy'], 2)} / {fmt(s['client_busy'], 2)}")
    if "gc_share" in s:
        print(f"  GC share of server CPU  {fmt(s['gc_share'], 2)}")
    q = s["quiet"]
    if s["noisy_reps"] and q["n"]:
        print(
            f"  quiet repetitions only (n={q['n']}): {fmt(q['actions_per_s'], 0)}/s, p50 {fmt(q['p50_us'], 0)} µs, "
            f"p99 {fmt(q['p99_us'], 0)} µs, server CPU {fmt(q['server_cpu_us_per_action'])} µs/action"
        )
    print(
        f"  dirty repetitions: {s['dirty_reps'] or 'none'} (warm-up failures {s['warmup_failures']}); "
        f"noisy (others took > 5% of a core): {s['noisy_reps'] or 'none'}"
    )
