"""``python -m bench.broadcast``: what one broadcast costs per receiving tab, how fast a storm of
actions reaches 1,000 tabs, and how long one broadcast takes to reach 5,000 (issue 3).

The app (``bench.apps_broadcast:app``) is one page whose tabs share the route scope, a shared
signal ``n`` and a 300-byte view rendered once per flush (``share_render=True``); a broadcast
therefore writes to each tab one ``datastar-patch-elements`` event (the view) and one
``datastar-patch-signals`` event (``{"_route__n": v}``) in a single write, 440 bytes in all.

(a) **CPU per receiving tab**, per coding (identity, zstd, br), a fresh server each: N tabs
(+20 warm-up tabs, which receive too) are opened; then rounds, closed loop: ``POST /bump``
increments ``n`` (the broadcast an action causes, minus the action), and the round ends when
every tab has decoded the signal's new value (and its view frame carried the same value). After
W warm-up rounds, R repetitions of K rounds are measured: server CPU (per-process CPU clock,
summed over the tree; ticks alongside) / (K x tabs). It includes the ``/bump`` request and
everything else the server did meanwhile (its idle rate is measured and printed). Then 10
rounds with ``?flush=1`` time the flush alone in the server (``time.process_time`` around
``app.flush_broadcasts()``). RSS per tab is read after opening and after the broadcasts.

(b) **Storm**: 200 actions (``POST /_action/bump``, each for a tab of the posting browser's own
session) sent from 16 keep-alive connections as fast as they are answered (closed loop, one in
flight per connection), on the same 1,000 tabs. Measured: from the moment the first action is
written (client clock) until the last of the tabs has *decoded* the final value
(``start + 200``) on its stream; also when the last action was answered, how many flushes
the server made (coalescing: a flush runs at most every 25 ms) and how many of them were cut
short (the settle rule of ``pyvia/broadcast.py``; ``--settle 0`` turns it off).

(e) **Single action on an idle server**, same 1,000 tabs: one ``POST /_action/bump`` at least
100 ms after the last flush, until the first and the last tab decoded the new value: what the
settle rule must not make slower.

(d) **Encoder micro-benchmark** (no server, a process pinned to CPU 1 after the runs): what
``Stream.send`` (the per-tab call of a flush) costs for the same 450-byte frame with identity, zstd
and br, for one stream (its encoder warm in the cache) and for 1,000 streams used in turn as a
flush uses them (each encoder cold when its turn comes).

(c) **5,000 tabs**, identity, fresh server: RSS per idle tab, then rounds spaced 300 ms: from
``POST /bump`` written to the last tab having the value; the server's flush start and duration
(``GET /stats``) tell how much of that is the server writing and how much the client reading.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from collections import Counter
from typing import Any

from bench.client import Connection, ProtocolError, run
from bench.fanout import (
    Browser,
    Hub,
    Meter,
    TabStream,
    env_record,
    get_json,
    launch,
    open_tabs,
    pin_client,
    server_versions,
    wait_quiet,
)
from bench.provenance import print_provenance, provenance
from bench.report import Recorder, fmt, spread
from bench.server import Server

APP = "bench.apps_broadcast:app"
ASGI_APP = "bench.apps_broadcast:broadcast_asgi"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.broadcast", description=__doc__.split("\n")[0])
    p.add_argument("--tabs", type=int, default=1000, help="receiving tabs for (a) and (b) (default 1000)")
    p.add_argument("--codings", default="identity,zstd,br", help="stream codings for (a)/(b), comma-separated")
    p.add_argument("--rounds", type=int, default=40, help="broadcasts per repetition (default 40)")
    p.add_argument("--reps", type=int, default=5, help="repetitions per coding (default 5)")
    p.add_argument("--warmup", type=int, default=10, help="warm-up broadcasts (default 10)")
    p.add_argument("--storms", type=int, default=5, help="storms per coding (default 5)")
    p.add_argument("--storm-actions", type=int, default=200)
    p.add_argument("--storm-conns", type=int, default=16)
    p.add_argument("--singles", type=int, default=10, help="single actions on an idle server, (e) (default 10)")
    p.add_argument("--big", type=int, default=5000, help="tabs for (c); 0 skips it (default 5000)")
    p.add_argument("--big-rounds", type=int, default=7, help="broadcasts for (c) (default 7)")
    p.add_argument("--server", default="native", help="native | uvicorn | granian | hypercorn")
    p.add_argument("--no-micro", action="store_true", help="skip the encoder micro-benchmark (d)")
    p.add_argument(
        "--shared-frames-min-tabs",
        type=int,
        default=None,
        help="the app's shared_frames_min_tabs (default: pyvia's, 16; 0 = every zstd tab compresses each broadcast)",
    )
    p.add_argument(
        "--settle",
        type=float,
        default=None,
        help="the app's broadcast_settle in seconds (default: pyvia's, 0.002; 0 = plain tick policy)",
    )
    p.add_argument("--micro-child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument(
        "--tick", type=float, default=None, help="the app's broadcast_tick in seconds (default: pyvia's, 0.025)"
    )
    return p


# --- pieces ---------------------------------------------------------------------------------------


class Control:
    """The harness's own keep-alive connection for /bump, /stats and /mem."""

    def __init__(self, server: Server, conn: Connection) -> None:
        self.server = server
        self.conn = conn

    @classmethod
    async def open(cls, server: Server) -> Control:
        return cls(server, await Connection.open("127.0.0.1", server.port))

    async def call(self, method: str, target: str) -> dict[str, Any]:
        if self.conn.closed:  # idle past the server's keep-alive timeout
            self.conn = await Connection.open("127.0.0.1", self.server.port)
        return await get_json(self.conn, self.server.host, method, target)


async def broadcast_round(
    control: Control, hub: Hub, tabs: list[TabStream], value: int, flush: bool = False, timeout: float = 15.0
) -> dict[str, Any]:
    """One broadcast: arm, POST /bump, wait until every tab decoded ``value``."""
    done = hub.arm(value, len(tabs))
    t0 = time.perf_counter()
    answer = await control.call("POST", "/bump?flush=1" if flush else "/bump")
    if answer["n"] != value:
        raise ProtocolError(f"/bump answered n={answer['n']}, expected {value}")
    try:
        await asyncio.wait_for(done, timeout)
    except TimeoutError:
        late = len(tabs) - len(hub.times)
        raise TimeoutError(f"{late} of {len(tabs)} tabs did not get n={value} within {timeout} s") from None
    times = sorted(hub.times)
    return {
        "t0": t0,
        "server_mark": answer["t_ns"] / 1e9,
        "first": times[0],
        "median": statistics.median(times),
        "last": times[-1],
        "answer": answer,
    }


def flush_spans(log: list[list[float]]) -> list[tuple[float, float, float, int]]:
    """The server's flush log, one row per flush: (first start, last end, CPU, tabs written).
    A flush written in slices (the settle rule) logs one entry per slice under one number."""
    spans: dict[int, list[float]] = {}
    for start, end, cpu, written, number in log:
        span = spans.setdefault(int(number), [start, end, 0.0, 0])
        span[0], span[1] = min(span[0], start), max(span[1], end)
        span[2] += cpu
        span[3] += written
    return [(a, b, c, int(n)) for a, b, c, n in spans.values()]


def check_tabs(tabs: list[TabStream], hub: Hub, value: int | None) -> dict[str, Any]:
    """Every tab alive, every event known, view and signal agreeing, the final value reached."""
    closed = sum(1 for t in tabs if t.closed)
    errors = Counter(t.error for t in tabs if t.error)
    unknown = sum(t.n_unknown for t in tabs)
    wrong = sum(1 for t in tabs if value is not None and t.value != value)
    bad = closed or errors or unknown or wrong or hub.mismatches or hub.regressions
    return {
        "tabs": len(tabs),
        "closed": closed,
        "errors": dict(errors),
        "unknown_events": unknown,
        "wrong_final_value": wrong,
        "view_signal_mismatches": hub.mismatches,
        "value_regressions": hub.regressions,
        "clean": not bad,
    }


async def storm(
    browsers: list[Browser],
    hub: Hub,
    tabs: list[TabStream],
    start: int,
    actions: int,
    conns: int,
    control: Control | None,
    timeout: float = 15.0,
    action: str = "bump",
) -> dict[str, Any]:
    """``actions`` action POSTs over ``conns`` connections, closed loop; until every tab has the result.

    Without ``control`` (an app without the bench app's ``/stats`` route) the flush log is left out.
    """
    users = browsers[:conns]
    shares = [actions // len(users) + (1 if i < actions % len(users) else 0) for i in range(len(users))]
    target = start + actions
    stats0 = await control.call("GET", "/stats") if control is not None else None
    done = hub.arm(target, len(tabs))
    non2xx: Counter[int] = Counter()
    answered: list[float] = []

    async def worker(browser: Browser, share: int) -> None:
        ids = browser.ctx_ids
        for i in range(share):
            response = await browser.conn.request(browser.action_request(action, ids[i % len(ids)]), 10.0)
            if response.status != 200:
                non2xx[response.status] += 1
            answered.append(response.done)

    t0 = time.perf_counter()
    await asyncio.wait_for(asyncio.gather(*(worker(b, s) for b, s in zip(users, shares, strict=True))), timeout)
    try:
        await asyncio.wait_for(done, timeout)
    except TimeoutError:
        raise TimeoutError(f"{len(tabs) - len(hub.times)} tabs never saw n={target}") from None
    times = sorted(hub.times)
    result = {
        "t0": t0,
        "ms_to_last_tab": (times[-1] - t0) * 1e3,
        "flush_timeline_ms": [],
        "ms_to_first_tab": (times[0] - t0) * 1e3,
        "ms_to_median_tab": (statistics.median(times) - t0) * 1e3,
        "ms_last_action_answered": (max(answered) - t0) * 1e3,
        "actions": actions,
        "non2xx": dict(non2xx),
        "flushes": None,
        "tab_frames": None,
        "cut_short": None,
        "final": target,
    }
    if control is not None and stats0 is not None:
        stats1 = await control.call("GET", f"/stats?since={t0 - 0.001}")
        result["flush_timeline_ms"] = [
            ((a - t0) * 1e3, (b - t0) * 1e3, n) for a, b, _, n in flush_spans(stats1["flush_log"])
        ]
        result["flushes"] = stats1["flushes"] - stats0["flushes"]
        result["tab_frames"] = stats1["tab_frames"] - stats0["tab_frames"]
        result["cut_short"] = stats1["cut_short"] - stats0["cut_short"]
    return result


async def idle_rate(server: Server, seconds: float = 2.0) -> float:
    meter = Meter(server).start()
    await asyncio.sleep(seconds)
    meter.stop()
    return meter.cpu_clock / meter.wall


def _quiet_or_all(reps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The repetitions no other process disturbed, or all of them when fewer than two were quiet."""
    quiet = [r for r in reps if not r["noisy"]]
    return quiet if len(quiet) >= 2 else reps


# --- (a) and (b) ----------------------------------------------------------------------------------


def _env(args: argparse.Namespace) -> dict[str, str]:
    env = {}
    if args.settle is not None:
        env["BENCH_BROADCAST_SETTLE"] = str(args.settle)
    if args.tick is not None:
        env["BENCH_BROADCAST_TICK"] = str(args.tick)
    if args.shared_frames_min_tabs is not None:
        env["BENCH_SHARED_MIN_TABS"] = str(args.shared_frames_min_tabs)
    return env


async def per_coding(args: argparse.Namespace, coding: str, recorder: Recorder) -> dict[str, Any]:
    server = await launch(args.server, APP, ASGI_APP, env=_env(args))
    tabs: list[TabStream] = []
    try:
        return await _per_coding(args, coding, recorder, server, tabs)
    finally:
        for tab in tabs:
            tab.close()
        await server.stop()


async def _per_coding(
    args: argparse.Namespace, coding: str, recorder: Recorder, server: Server, tabs: list[TabStream]
) -> dict[str, Any]:
    control = await Control.open(server)
    hub = Hub(check_view=True)
    failures: Counter[str] = Counter()
    browsers, warm = await open_tabs(server.host, server.port, 20, hub, coding, failures=failures)
    tabs += warm
    await asyncio.sleep(1.0)
    rss0 = server.rss_kb()
    mem0 = await control.call("GET", "/mem")
    opening = Meter(server).start()
    _, more = await open_tabs(server.host, server.port, args.tabs, hub, coding, browsers=browsers, failures=failures)
    opening.stop()
    tabs += more
    await asyncio.sleep(2.0)
    rss1 = server.rss_kb()
    mem1 = await control.call("GET", "/mem")
    idle = await idle_rate(server)
    print(
        f"[{args.server} {coding}] {len(more):,}/{args.tabs:,} tabs open (+{len(warm)} warm-up) in "
        f"{opening.wall:.1f} s; RSS {rss0 / 1024:.1f} → {rss1 / 1024:.1f} MB = "
        f"{(rss1 - rss0) / max(1, len(more)):.2f} KB/idle tab; idle server CPU {idle * 1e3:.1f} ms/s; "
        f"open failures {sum(failures.values())}",
        flush=True,
    )
    value = 0  # n starts at 0 on a fresh server
    for _ in range(args.warmup):
        value += 1
        await broadcast_round(control, hub, tabs, value)
    reps: list[dict[str, Any]] = []
    extra = 0
    rep = 0
    while rep < args.reps + extra:
        rep += 1
        quiet = await wait_quiet(max_wait=15.0)
        meter = Meter(server).start()
        lat = []
        for _ in range(args.rounds):
            value += 1
            r = await broadcast_round(control, hub, tabs, value)
            lat.append((r["last"] - r["t0"]) * 1e3)
        meter.stop()
        tab_events = args.rounds * len(tabs)
        record = {
            "type": "rep",
            "part": "a",
            "server": args.server,
            "coding": coding,
            "rep": rep,
            "tabs": len(tabs),
            "rounds": args.rounds,
            "us_per_tab": meter.cpu_clock / tab_events * 1e6,
            "us_per_tab_ticks": meter.cpu / tab_events * 1e6,
            "us_per_tab_net_of_idle": (meter.cpu_clock - idle * meter.wall) / tab_events * 1e6,
            "round_ms_median": statistics.median(lat),
            "round_ms_max": max(lat),
            "quiet_wait": quiet,
            **meter.as_dict(),
        }
        recorder.write(record)
        reps.append(record)
        if record["noisy"] and extra < 3:
            extra += 1  # another process shared the server's core: measure once more
        print(
            f"  rep {rep}: {record['us_per_tab']:.2f} µs/tab by the CPU clock ({record['us_per_tab_ticks']:.1f} by "
            f"ticks; {record['us_per_tab_net_of_idle']:.2f} net of idle; {record['server_sys_share']:.0%} in the "
            f"kernel); round bump→last tab median "
            f"{record['round_ms_median']:.1f} ms; server core {record['server_busy']:.0%}, client core "
            f"{record['client_busy']:.0%}, others on server core {record['others_on_server_core']:.0%}"
            f"{' NOISY' if record['noisy'] else ''}",
            flush=True,
        )
    rss2 = server.rss_kb()
    mem2 = await control.call("GET", "/mem")
    forced = []
    for _ in range(10):
        value += 1
        r = await broadcast_round(control, hub, tabs, value, flush=True)
        a = r["answer"]
        forced.append(
            {
                "cpu_us_per_tab": a["flush_cpu_s"] / a["written"] * 1e6,
                "wall_us_per_tab": a["flush_wall_s"] / a["written"] * 1e6,
                "written": a["written"],
                "ms_to_last_tab": (r["last"] - r["t0"]) * 1e3,
            }
        )
    storms = []
    for browser in browsers:  # the server closes keep-alive connections idle for 75 s
        if browser.conn.closed:
            browser.conn = await Connection.open("127.0.0.1", server.port)
    i = extra = 0
    while i < args.storms + extra:
        i += 1
        await wait_quiet(max_wait=10.0)
        meter = Meter(server).start()
        s = await storm(browsers, hub, tabs, value, args.storm_actions, args.storm_conns, control)
        meter.stop()
        value = s["final"]
        s.update(
            {
                "type": "storm",
                "part": "b",
                "server": args.server,
                "coding": coding,
                "storm": i,
                "tabs": len(tabs),
                "others_on_server_core": meter.others,
                "noisy": meter.noisy,
            }
        )
        if meter.noisy and extra < 5:
            extra += 1
        del s["t0"]
        recorder.write(s)
        storms.append(s)
        print(
            f"  storm {i}: {s['actions']} actions from {args.storm_conns} connections → last tab has the final "
            f"value after {s['ms_to_last_tab']:.1f} ms (first tab {s['ms_to_first_tab']:.1f}, median "
            f"{s['ms_to_median_tab']:.1f}; last action answered at {s['ms_last_action_answered']:.1f} ms); "
            f"{s['flushes']} flushes ({s['cut_short']} cut short) at "
            + ", ".join(f"{a:.1f}-{b:.1f}" for a, b, _ in s["flush_timeline_ms"])
            + f" ms, non-2xx {sum(s['non2xx'].values())}{' NOISY' if s['noisy'] else ''}",
            flush=True,
        )
    singles = []
    i = extra = 0
    while i < args.singles + extra:
        i += 1
        await wait_quiet(max_wait=10.0)
        await asyncio.sleep(0.1)  # idle: the last flush is long past
        meter = Meter(server).start()
        s = await storm(browsers, hub, tabs, value, 1, 1, control)
        meter.stop()
        value = s["final"]
        s.update(
            {
                "type": "single",
                "part": "e",
                "server": args.server,
                "coding": coding,
                "single": i,
                "tabs": len(tabs),
                "others_on_server_core": meter.others,
                "noisy": meter.noisy,
            }
        )
        if meter.noisy and extra < 5:
            extra += 1
        del s["t0"]
        recorder.write(s)
        singles.append(s)
    if singles:
        print(
            f"  single action on an idle server (x{len(singles)}): first tab "
            f"{fmt(spread([s['ms_to_first_tab'] for s in _quiet_or_all(singles)]), 2)} ms, last tab "
            f"{fmt(spread([s['ms_to_last_tab'] for s in _quiet_or_all(singles)]), 2)} ms, answered "
            f"{fmt(spread([s['ms_last_action_answered'] for s in _quiet_or_all(singles)]), 2)} ms",
            flush=True,
        )
    await asyncio.sleep(0.3)
    check = check_tabs(tabs, hub, value)
    wire = sum(t.wire for t in tabs)
    decoded = sum(t.decoded for t in tabs)
    for browser in browsers:
        browser.conn.close()
    control.conn.close()
    summary = {
        "type": "summary",
        "part": "a+b",
        "server": args.server,
        "coding": coding,
        "tabs": len(tabs),
        "tick": args.tick,
        "settle": args.settle,
        "open_failures": dict(failures),
        "check": check,
        "dirty": bool(failures) or not check["clean"] or any(s["non2xx"] for s in storms),
        "noisy_reps": [r["rep"] for r in reps if r["noisy"]],
        "reps_used": [r["rep"] for r in _quiet_or_all(reps)],
        "us_per_tab": spread([r["us_per_tab"] for r in _quiet_or_all(reps)]),
        "us_per_tab_ticks": spread([r["us_per_tab_ticks"] for r in _quiet_or_all(reps)]),
        "us_per_tab_net_of_idle": spread([r["us_per_tab_net_of_idle"] for r in _quiet_or_all(reps)]),
        "us_per_tab_all_reps": spread([r["us_per_tab"] for r in reps]),
        "sys_share": spread([r["server_sys_share"] for r in _quiet_or_all(reps)]),
        "round_ms_median": spread([r["round_ms_median"] for r in _quiet_or_all(reps)]),
        "flush_cpu_us_per_tab": spread([f["cpu_us_per_tab"] for f in forced]),
        "flush_wall_us_per_tab": spread([f["wall_us_per_tab"] for f in forced]),
        "forced_ms_to_last_tab": spread([f["ms_to_last_tab"] for f in forced]),
        "storm_ms_to_last_tab": spread([s["ms_to_last_tab"] for s in _quiet_or_all(storms)]),
        "storm_ms_last_action": spread([s["ms_last_action_answered"] for s in _quiet_or_all(storms)]),
        "storm_flushes": spread([s["flushes"] for s in _quiet_or_all(storms)]),
        "storms_used": [s["storm"] for s in _quiet_or_all(storms)],
        "storm_cut_short": spread([s["cut_short"] for s in _quiet_or_all(storms)]),
        "single_ms_to_first_tab": spread([s["ms_to_first_tab"] for s in _quiet_or_all(singles)]) if singles else None,
        "single_ms_to_last_tab": spread([s["ms_to_last_tab"] for s in _quiet_or_all(singles)]) if singles else None,
        "storm_ms_to_last_tab_all": spread([s["ms_to_last_tab"] for s in storms]),
        "idle_cpu_ms_per_s": idle * 1e3,
        "kb_per_idle_tab": (rss1 - rss0) / max(1, len(more)),
        "kb_per_tab_after_broadcasts": (rss2 - rss0) / max(1, len(more)),
        "heap_kb_per_tab_after_broadcasts": (mem2["heap_in_use"] - mem0["heap_in_use"]) / 1024 / max(1, len(more)),
        "encoders": mem2["encoders"],
        "encoders_before_any_broadcast": mem1["encoders"],
        "rss_kb": [rss0, rss1, rss2],
        "heap_kb_per_idle_tab": (mem1["heap_in_use"] - mem0["heap_in_use"]) / 1024 / max(1, len(more)),
        "wire_bytes_per_tab_event": wire / max(1, sum(t.n_signals for t in tabs)),
        "decoded_bytes_per_tab_event": decoded / max(1, sum(t.n_signals for t in tabs)),
        "open_cpu_us_per_tab": opening.cpu_clock / max(1, len(more)) * 1e6,
    }
    recorder.write(summary)
    print(
        f"  => {coding}: {fmt(summary['us_per_tab'], 2)} µs per receiving tab (server CPU per broadcast / tabs); "
        f"flush alone {fmt(summary['flush_cpu_us_per_tab'], 2)} µs/tab; storm {fmt(summary['storm_ms_to_last_tab'])}"
        f" ms to the last tab; RSS/tab idle {summary['kb_per_idle_tab']:.1f} KB, after broadcasts "
        f"{summary['kb_per_tab_after_broadcasts']:.1f} KB; {summary['wire_bytes_per_tab_event']:.0f} B on the wire "
        f"per tab-broadcast ({summary['decoded_bytes_per_tab_event']:.0f} decoded); checks "
        f"{'clean' if not summary['dirty'] else 'DIRTY ' + str(check) + str(dict(failures))}",
        flush=True,
    )
    return summary


# --- (c) ------------------------------------------------------------------------------------------


async def big(args: argparse.Namespace, recorder: Recorder) -> dict[str, Any]:
    server = await launch(args.server, APP, ASGI_APP, env=_env(args))
    tabs: list[TabStream] = []
    try:
        return await _big(args, recorder, server, tabs)
    finally:
        for tab in tabs:
            tab.close()
        await server.stop()


async def _big(args: argparse.Namespace, recorder: Recorder, server: Server, tabs: list[TabStream]) -> dict[str, Any]:
    control = await Control.open(server)
    hub = Hub(check_view=True)
    failures: Counter[str] = Counter()
    browsers, warm = await open_tabs(server.host, server.port, 20, hub, failures=failures)
    tabs += warm
    await asyncio.sleep(1.0)
    rss0 = server.rss_kb()
    mem0 = await control.call("GET", "/mem")
    opening = Meter(server).start()
    _, more = await open_tabs(server.host, server.port, args.big, hub, browsers=browsers, failures=failures)
    opening.stop()
    tabs += more
    await asyncio.sleep(2.0)
    rss1 = server.rss_kb()
    mem1 = await control.call("GET", "/mem")
    slab = _slab_kb()
    print(
        f"[{args.server} identity] {len(more):,}/{args.big:,} tabs open (+{len(warm)}) in {opening.wall:.1f} s; RSS "
        f"{rss0 / 1024:.1f} → {rss1 / 1024:.1f} MB = {(rss1 - rss0) / max(1, len(more)):.2f} KB/idle tab "
        f"(heap {(mem1['heap_in_use'] - mem0['heap_in_use']) / 1024 / max(1, len(more)):.2f} KB); "
        f"open failures {sum(failures.values())}",
        flush=True,
    )
    value = 0
    for _ in range(2):  # warm-up: the first render, the first writes
        value += 1
        await broadcast_round(control, hub, tabs, value)
        await asyncio.sleep(0.3)
    rounds = []
    for i in range(1, args.big_rounds + 1):
        value += 1
        await wait_quiet(max_wait=10.0)
        meter = Meter(server).start()
        r = await broadcast_round(control, hub, tabs, value)
        meter.stop()
        t0 = r["t0"]
        stats = await control.call("GET", f"/stats?since={t0 - 0.001}")
        spans = flush_spans(stats["flush_log"])
        if len(spans) != 1 or spans[0][3] < len(tabs):  # (the gate's page, never connected, is written too)
            raise ProtocolError(f"expected one flush to every tab for the round, the server logged {spans}")
        flush_start, flush_end, flush_cpu, _ = spans[0]
        flush_s = flush_end - flush_start
        rec = {
            "type": "round",
            "part": "c",
            "server": args.server,
            "round": i,
            "tabs": len(tabs),
            "ms_to_last_tab": (r["last"] - t0) * 1e3,
            "ms_to_first_tab": (r["first"] - t0) * 1e3,
            "ms_to_median_tab": (r["median"] - t0) * 1e3,
            "ms_bump_to_flush_start": (flush_start - t0) * 1e3,
            "flush_ms": flush_s * 1e3,
            "ms_flush_end_to_last_tab": (r["last"] - flush_start - flush_s) * 1e3,
            "us_per_tab": meter.cpu_clock / len(tabs) * 1e6,
            "flush_cpu_us_per_tab": flush_cpu / len(tabs) * 1e6,
            **meter.as_dict(),
        }
        recorder.write(rec)
        rounds.append(rec)
        print(
            f"  round {i}: bump → last of {len(tabs):,} tabs {rec['ms_to_last_tab']:.1f} ms (first "
            f"{rec['ms_to_first_tab']:.1f}, median {rec['ms_to_median_tab']:.1f}); server flush "
            f"{rec['flush_ms']:.1f} ms starting {rec['ms_bump_to_flush_start']:.2f} ms after the bump; last tab "
            f"{rec['ms_flush_end_to_last_tab']:.1f} ms after the flush ended; {rec['us_per_tab']:.1f} µs CPU/tab"
            f"{' NOISY' if rec['noisy'] else ''}",
            flush=True,
        )
        await asyncio.sleep(0.3)
    rss2 = server.rss_kb()
    check = check_tabs(tabs, hub, value)
    for browser in browsers:
        browser.conn.close()
    control.conn.close()
    summary = {
        "type": "summary",
        "part": "c",
        "server": args.server,
        "tabs": len(tabs),
        "requested": args.big,
        "open_failures": dict(failures),
        "check": check,
        "dirty": bool(failures) or not check["clean"] or len(more) != args.big,
        "rounds_used": [r["round"] for r in _quiet_or_all(rounds)],
        "ms_to_last_tab": spread([r["ms_to_last_tab"] for r in _quiet_or_all(rounds)]),
        "ms_to_first_tab": spread([r["ms_to_first_tab"] for r in _quiet_or_all(rounds)]),
        "flush_ms": spread([r["flush_ms"] for r in _quiet_or_all(rounds)]),
        "ms_flush_end_to_last_tab": spread([r["ms_flush_end_to_last_tab"] for r in _quiet_or_all(rounds)]),
        "us_per_tab": spread([r["us_per_tab"] for r in _quiet_or_all(rounds)]),
        "ms_to_last_tab_all": spread([r["ms_to_last_tab"] for r in rounds]),
        "noisy_rounds": [r["round"] for r in rounds if r["noisy"]],
        "kb_per_idle_tab": (rss1 - rss0) / max(1, len(more)),
        "heap_kb_per_idle_tab": (mem1["heap_in_use"] - mem0["heap_in_use"]) / 1024 / max(1, len(more)),
        "kb_per_tab_after_broadcasts": (rss2 - rss0) / max(1, len(more)),
        "rss_kb": [rss0, rss1, rss2],
        "kernel_slab_kb": slab,
        "open_cpu_us_per_tab": opening.cpu_clock / max(1, len(more)) * 1e6,
        "open_wall_s": opening.wall,
    }
    recorder.write(summary)
    print(
        f"  => {len(tabs):,} tabs: one broadcast reaches the last tab in {fmt(summary['ms_to_last_tab'])} ms "
        f"(server flush {fmt(summary['flush_ms'])} ms); RSS {summary['kb_per_idle_tab']:.2f} KB per idle tab; "
        f"checks {'clean' if not summary['dirty'] else 'DIRTY ' + str(check)}",
        flush=True,
    )
    return summary


def encoder_micro() -> list[dict[str, Any]]:
    """(d): Stream.send per tab, warm (one stream) and cold (1,000 streams in turn)."""
    from bench.apps_broadcast import _view_markup
    from pyvia import protocol
    from pyvia.compress import Compression
    from pyvia.ops.metrics import PyviaMetrics
    from pyvia.render import view_patch
    from pyvia.stream import Outflow, Stream

    class Sink:
        buffered = 0
        is_closed = False

        def write(self, data: bytes) -> None:
            pass

    compression, meter = Compression(), PyviaMetrics()
    views = [view_patch(_view_markup(v)) for v in range(1000, 1300)]
    first = protocol.patch_signals({protocol.DISCONNECTED_SIGNAL: False, protocol.FILTER_SIGNAL: protocol.FILTER_OPEN})
    rows = []
    for coding in ("identity", "zstd", "br"):
        out: dict[str, Any] = {"type": "micro", "coding": coding}
        for label, count, rounds in (("warm", 1, 3000), ("cold", 1000, 30)):
            streams = []
            for _ in range(count):
                stream = Stream(1 << 20, Outflow(meter))
                encoder = compression.stream_encoder(coding) if coding != "identity" else None
                stream.attach(Sink(), 0.0, encoder)  # type: ignore[arg-type]
                stream.send(first, None, 0.0)  # the connect event: creates the encoder, as in the server
                streams.append(stream)
            per_tab = []
            for r in range(rounds):
                view, signals = views[r % len(views)], protocol.patch_signals({"_route__n": r})
                t0 = time.perf_counter()
                for stream in streams:
                    stream.send(signals, view, 1.0)
                per_tab.append((time.perf_counter() - t0) / count * 1e6)
            out[f"us_per_tab_{label}"] = statistics.median(per_tab[rounds // 6 :])
        rows.append(out)
    return rows


async def _micro(recorder: Recorder) -> None:
    proc_ = await asyncio.create_subprocess_exec(
        "taskset", "-c", "1", sys.executable, "-m", "bench.broadcast", "--micro-child", stdout=asyncio.subprocess.PIPE
    )
    out, _ = await asyncio.wait_for(proc_.communicate(), 120)
    print("(d) Stream.send per tab, same 450-byte frame, no server (pinned to CPU 1):")
    for line in out.decode().splitlines():
        row = json.loads(line)
        recorder.write(row)
        print(
            f"  {row['coding']:8} warm (one stream) {row['us_per_tab_warm']:.2f} µs; 1,000 streams in turn "
            f"{row['us_per_tab_cold']:.2f} µs per tab",
            flush=True,
        )


def _slab_kb() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("Slab:"):
                return int(line.split()[1])
    return 0


async def _main(args: argparse.Namespace) -> int:
    recorder = Recorder("broadcast")
    record = provenance("broadcast", vars(args), ["taskset", "-c", "1", "pyvia", "run", APP])
    record["server_packages"] = server_versions()
    record["env"] = env_record()
    print_provenance(record)
    recorder.write(record)
    print(f"# raw results: {recorder.path}", flush=True)
    dirty = False
    started = time.monotonic()
    for coding in [c.strip() for c in args.codings.split(",") if c.strip()]:
        summary = await per_coding(args, coding, recorder)
        dirty |= summary["dirty"]
    if args.big:
        summary = await big(args, recorder)
        dirty |= summary["dirty"]
    if not args.no_micro:
        await _micro(recorder)
    print(f"# done in {time.monotonic() - started:.0f} s{'; DIRTY results above' if dirty else ''}")
    return 1 if dirty else 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.micro_child:
        for row in encoder_micro():
            print(json.dumps(row))
        return 0
    pin_client()
    return int(run(_main(args)))


if __name__ == "__main__":
    sys.exit(main())
