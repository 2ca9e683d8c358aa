"""``python -m bench.asgi_compare``: the same app through the native server, uvicorn and granian
(issue 10): server CPU per page view, per receiving tab of a broadcast, and memory per idle tab,
as ratios to the native server.

Servers (each pinned with ``taskset -c 1``, a fresh process per measurement):

* native: ``pyvia run MODULE:app``;
* uvicorn: ``uvicorn bench.apps_broadcast:<x>_asgi --loop uvloop --http httptools`` where the
  attribute is ``pyvia.asgi.asgi(app)``;
* granian: ``granian --interface asgi --workers 1 --runtime-threads 1 --loop uvloop
  --backpressure 16384`` (the default backpressure, 1,024, would leave streams past 1,024
  without an answer: machine-limits.md §2);
* hypercorn on request (``--servers ...,hypercorn``).

**Page views**: ``examples.counter:app`` (through ``counter_asgi`` for ASGI), C keep-alive
connections in a closed loop, each with the session cookie its first page set, ``GET /``
without ``Accept-Encoding``; every answer must be a 200 carrying the ``via-boot`` marker. One
warm-up, then R windows of D seconds: server CPU (tree, per-process CPU clock) / pages.

**Broadcast**: ``bench.apps_broadcast:app`` (``broadcast_asgi``), N identity tabs + 20 warm-up
tabs, the closed-loop rounds of ``bench.broadcast`` (a): server CPU / (rounds x tabs); then 5
rounds spaced 150 ms apart for the time from ``POST /bump`` to the last tab. RSS per idle tab
is read after opening the tabs, before any broadcast.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections import Counter
from typing import Any

from bench.broadcast import Control, _quiet_or_all, broadcast_round, check_tabs
from bench.client import Connection, ProtocolError, build_request, run
from bench.fanout import (
    SESSION_COOKIE,
    Hub,
    Meter,
    TabStream,
    env_record,
    launch,
    open_tabs,
    pin_client,
    server_versions,
    wait_quiet,
)
from bench.provenance import print_provenance, provenance
from bench.report import Recorder, fmt, percentile, spread
from bench.server import PAGE_MARKER, Server

PAGE_APP = ("examples.counter:app", "bench.apps_broadcast:counter_asgi")
BROADCAST_APP = ("bench.apps_broadcast:app", "bench.apps_broadcast:broadcast_asgi")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.asgi_compare", description=__doc__.split("\n")[0])
    p.add_argument("--servers", default="native,uvicorn,granian")
    p.add_argument("-c", "--concurrency", type=int, default=16)
    p.add_argument("-d", "--duration", type=float, default=4.0, help="seconds per page-view window (default 4)")
    p.add_argument("-r", "--reps", type=int, default=3, help="page-view windows (default 3)")
    p.add_argument("--warmup", type=float, default=1.0)
    p.add_argument("--tabs", type=int, default=1000)
    p.add_argument("--rounds", type=int, default=30, help="broadcasts per repetition (default 30)")
    p.add_argument("--bc-reps", type=int, default=3, help="broadcast repetitions (default 3)")
    p.add_argument("--skip-pages", action="store_true")
    p.add_argument("--skip-broadcast", action="store_true")
    return p


# --- page views -----------------------------------------------------------------------------------


class PageLoad:
    def __init__(self) -> None:
        self.running = True
        self.ok = 0
        self.bad: Counter[str] = Counter()
        self.latencies: list[float] = []


async def _page_worker(load: PageLoad, server: Server) -> None:
    conn = await Connection.open("127.0.0.1", server.port)
    request = build_request("GET", "/", server.host)
    perf = time.perf_counter
    try:
        while load.running:
            t0 = perf()
            try:
                response = await conn.request(request, 10.0)
            except (OSError, TimeoutError, ProtocolError) as exc:
                load.bad[type(exc).__name__] += 1
                if load.running:
                    conn.close()
                    conn = await Connection.open("127.0.0.1", server.port)
                continue
            if response.status != 200:
                load.bad[f"status {response.status}"] += 1
            elif PAGE_MARKER not in response.body:
                load.bad["no via-boot marker"] += 1
            else:
                load.ok += 1
                load.latencies.append(response.done - t0)
                cookie = response.cookie(SESSION_COOKIE)
                if cookie and b"Cookie" not in request:  # keep the session the first page set
                    request = build_request("GET", "/", server.host, [("Cookie", f"{SESSION_COOKIE}={cookie}")])
    finally:
        conn.close()


async def pages(args: argparse.Namespace, kind: str, recorder: Recorder) -> dict[str, Any]:
    server = await launch(kind, *PAGE_APP)
    try:
        await wait_quiet(max_wait=15.0)
        load = PageLoad()
        rss_start = server.rss_kb()
        workers = [asyncio.ensure_future(_page_worker(load, server)) for _ in range(args.concurrency)]
        await asyncio.sleep(args.warmup)
        warm_bad = sum(load.bad.values())
        reps = []
        for rep in range(1, args.reps + 1):
            load.ok, load.bad, load.latencies = 0, Counter(), []
            meter = Meter(server).start()
            await asyncio.sleep(args.duration)
            meter.stop()
            ok, bad, lat = load.ok, dict(load.bad), sorted(load.latencies)
            rec = {
                "type": "rep",
                "part": "pages",
                "server": kind,
                "rep": rep,
                "ok": ok,
                "bad": bad,
                "dirty": bool(bad),
                "req_per_s": ok / meter.wall,
                "us_per_page": meter.cpu_clock / ok * 1e6 if ok else float("nan"),
                "us_per_page_ticks": meter.cpu / ok * 1e6 if ok else float("nan"),
                "p50_us": percentile(lat, 50) * 1e6,
                "p99_us": percentile(lat, 99) * 1e6,
                **meter.as_dict(),
            }
            recorder.write(rec)
            reps.append(rec)
            print(
                f"  [{kind}] pages rep {rep}: {ok:,} = {rec['req_per_s']:,.0f}/s, {rec['us_per_page']:.1f} µs server "
                f"CPU/page ({rec['us_per_page_ticks']:.1f} by ticks), p50 {rec['p50_us']:.0f} µs, p99 "
                f"{rec['p99_us']:.0f} µs; server core {rec['server_busy']:.0%}, "
                f"client core {rec['client_busy']:.0%}, "
                f"others {rec['others_on_server_core']:.0%}{' NOISY' if rec['noisy'] else ''}"
                f"{' DIRTY ' + str(bad) if bad else ''}",
                flush=True,
            )
        load.running = False
        await asyncio.gather(*workers, return_exceptions=True)
        used = _quiet_or_all(reps)
        summary = {
            "type": "summary",
            "part": "pages",
            "server": kind,
            "reps_used": [r["rep"] for r in used],
            "us_per_page": spread([r["us_per_page"] for r in used]),
            "req_per_s": spread([r["req_per_s"] for r in used]),
            "p50_us": spread([r["p50_us"] for r in used]),
            "p99_us": spread([r["p99_us"] for r in used]),
            "client_busy": spread([r["client_busy"] for r in used]),
            "server_busy": spread([r["server_busy"] for r in used]),
            "rss_start_kb": rss_start,
            "warmup_bad": warm_bad,
            "dirty": warm_bad > 0 or any(r["dirty"] for r in reps),
        }
        recorder.write(summary)
        return summary
    finally:
        await server.stop()


# --- broadcast ------------------------------------------------------------------------------------


async def broadcast(args: argparse.Namespace, kind: str, recorder: Recorder) -> dict[str, Any]:
    server = await launch(kind, *BROADCAST_APP)
    tabs: list[TabStream] = []
    try:
        return await _broadcast(args, kind, recorder, server, tabs)
    finally:
        for tab in tabs:
            tab.close()
        await server.stop()


async def _broadcast(
    args: argparse.Namespace, kind: str, recorder: Recorder, server: Server, tabs: list[TabStream]
) -> dict[str, Any]:
    control = await Control.open(server)
    hub = Hub(check_view=True)
    failures: Counter[str] = Counter()
    browsers, warm = await open_tabs(server.host, server.port, 20, hub, failures=failures)
    tabs += warm
    await asyncio.sleep(1.0)
    rss0 = server.rss_kb()
    opening = Meter(server).start()
    _, more = await open_tabs(server.host, server.port, args.tabs, hub, browsers=browsers, failures=failures)
    opening.stop()
    tabs += more
    await asyncio.sleep(2.0)
    rss1 = server.rss_kb()
    kb_idle = (rss1 - rss0) / max(1, len(more))
    open_us = opening.cpu_clock / max(1, len(more)) * 1e6
    print(
        f"  [{kind}] {len(more):,}/{args.tabs:,} tabs open in {opening.wall:.1f} s ({open_us:.0f}"
        f" µs server CPU per tab: page + stream); RSS {rss0 / 1024:.1f} → {rss1 / 1024:.1f} MB = "
        f"{kb_idle:.2f} KB/idle tab; "
        f"open failures {sum(failures.values())}",
        flush=True,
    )
    value = 0
    for _ in range(10):
        value += 1
        await broadcast_round(control, hub, tabs, value)
    reps: list[dict[str, Any]] = []
    extra = 0
    rep = 0
    while rep < args.bc_reps + extra:
        rep += 1
        await wait_quiet(max_wait=15.0)
        meter = Meter(server).start()
        for _ in range(args.rounds):
            value += 1
            await broadcast_round(control, hub, tabs, value)
        meter.stop()
        rec = {
            "type": "rep",
            "part": "broadcast",
            "server": kind,
            "rep": rep,
            "tabs": len(tabs),
            "us_per_tab": meter.cpu_clock / (args.rounds * len(tabs)) * 1e6,
            "us_per_tab_ticks": meter.cpu / (args.rounds * len(tabs)) * 1e6,
            **meter.as_dict(),
        }
        recorder.write(rec)
        reps.append(rec)
        print(
            f"  [{kind}] broadcast rep {rep}: {rec['us_per_tab']:.2f} µs per receiving tab "
            f"({rec['us_per_tab_ticks']:.1f} by ticks, {rec['server_sys_share']:.0%} kernel); others on server core "
            f"{rec['others_on_server_core']:.0%}{' NOISY' if rec['noisy'] else ''}",
            flush=True,
        )
        if rec["noisy"] and extra < 3:
            extra += 1
    spaced = []
    for _ in range(5):
        await asyncio.sleep(0.15)
        value += 1
        r = await broadcast_round(control, hub, tabs, value)
        spaced.append((r["last"] - r["t0"]) * 1e3)
    rss2 = server.rss_kb()
    await asyncio.sleep(0.3)
    check = check_tabs(tabs, hub, value)
    for browser in browsers:
        browser.conn.close()
    control.conn.close()
    used = _quiet_or_all(reps)
    summary: dict[str, Any] = {
        "type": "summary",
        "part": "broadcast",
        "server": kind,
        "tabs": len(tabs),
        "reps_used": [r["rep"] for r in used],
        "us_per_tab": spread([r["us_per_tab"] for r in used]),
        "ms_to_last_tab": spread(spaced),
        "kb_per_idle_tab": kb_idle,
        "kb_per_tab_after_broadcasts": (rss2 - rss0) / max(1, len(more)),
        "rss_kb": [rss0, rss1, rss2],
        "open_cpu_us_per_tab": opening.cpu_clock / max(1, len(more)) * 1e6,
        "open_failures": dict(failures),
        "check": check,
        "dirty": bool(failures) or not check["clean"] or len(more) != args.tabs,
    }
    recorder.write(summary)
    print(
        f"  [{kind}] => {fmt(summary['us_per_tab'], 2)} µs per receiving tab; bump → last of {len(tabs):,} tabs "
        f"{fmt(summary['ms_to_last_tab'])} ms; {kb_idle:.1f} KB per idle tab; checks "
        f"{'clean' if not summary['dirty'] else 'DIRTY ' + str(check) + str(dict(failures))}",
        flush=True,
    )
    return summary


def _ratio(value: float, base: float) -> str:
    return f"{value / base:.2f}x" if base else "-"


async def _main(args: argparse.Namespace) -> int:
    recorder = Recorder("asgi_compare")
    kinds = [k.strip() for k in args.servers.split(",") if k.strip()]
    record = provenance("asgi_compare", vars(args), ["taskset", "-c", "1", "<native | uvicorn | granian>"])
    record["server_packages"] = server_versions()
    record["env"] = env_record()
    print_provenance(record)
    recorder.write(record)
    print(f"# raw results: {recorder.path}", flush=True)
    started = time.monotonic()
    page_results: dict[str, dict[str, Any]] = {}
    bc_results: dict[str, dict[str, Any]] = {}
    if not args.skip_pages:
        for kind in kinds:
            page_results[kind] = await pages(args, kind, recorder)
    if not args.skip_broadcast:
        for kind in kinds:
            bc_results[kind] = await broadcast(args, kind, recorder)
    base_p = page_results.get("native")
    base_b = bc_results.get("native")
    rows = []
    print("summary: median (min-max); ratio = this server / native")
    for kind in kinds:
        row: dict[str, Any] = {"type": "ratios", "server": kind}
        line = f"  {kind:9}"
        p = page_results.get(kind)
        if p is not None:
            row["page_ratio"] = p["us_per_page"]["median"] / base_p["us_per_page"]["median"] if base_p else None
            ratio = _ratio(p["us_per_page"]["median"], base_p["us_per_page"]["median"]) if base_p else "-"
            line += (
                f" page {fmt(p['us_per_page'])} µs ({ratio}),"
                f" {fmt(p['req_per_s'], 0)}/s, p50 {p['p50_us']['median']:.0f} µs;"
            )
        b = bc_results.get(kind)
        if b is not None:
            row["tab_ratio"] = b["us_per_tab"]["median"] / base_b["us_per_tab"]["median"] if base_b else None
            row["memory_ratio"] = b["kb_per_idle_tab"] / base_b["kb_per_idle_tab"] if base_b else None
            tab_ratio = _ratio(b["us_per_tab"]["median"], base_b["us_per_tab"]["median"]) if base_b else "-"
            mem_ratio = _ratio(b["kb_per_idle_tab"], base_b["kb_per_idle_tab"]) if base_b else "-"
            line += (
                f" broadcast {fmt(b['us_per_tab'], 2)} µs/tab ({tab_ratio}),"
                f" last tab {b['ms_to_last_tab']['median']:.1f} ms;"
                f" idle tab {b['kb_per_idle_tab']:.1f} KB ({mem_ratio})"
            )
        rows.append(row)
        recorder.write(row)
        print(line)
    dirty = any(r["dirty"] for r in [*page_results.values(), *bc_results.values()])
    print(f"# done in {time.monotonic() - started:.0f} s{'; DIRTY results above' if dirty else ''}")
    return 1 if dirty else 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    pin_client()
    return int(run(_main(args)))


if __name__ == "__main__":
    sys.exit(main())
