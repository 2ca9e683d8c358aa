"""``tabs``: N connected tabs; server RSS per tab and CPU to open one, then optional load phases.

Per repetition, a fresh server: a few warm-up tabs are opened (and kept), RSS is read, then N
tabs are opened in batches (page view, then the stream, by default with identity encoding: no
``Accept-Encoding``, so no compressor is counted; ``--encoding`` chooses another), each only
counted once its stream's first event arrived. After a settle time RSS is read again: KB per idle
tab = (RSS_N - RSS_before) / N, the method of machine-limits.md §2 (there 2.0 KB for a bare
httptools stream, 15.6 for stario).
The CPU of the opening phase divided by N is the cost of opening one tab (page + stream).

With ``--churn-rate``, ``--tab-rates`` or ``--bc-rates`` the open tabs then carry the phases of
:mod:`bench.tab_phases` (visitor churn, private actions and shared clicks at fixed open-loop
rates), and RSS is read once more after every tab closed.
"""

from __future__ import annotations

import argparse
import asyncio
from collections import Counter
from typing import Any

from bench import tab_phases
from bench.client import ProtocolError
from bench.report import fmt, quiet_spread, spread
from bench.server import Server
from bench.tabs_client import Browser, Tab, TabError
from bench.window import Window

__all__ = ["SERVER_ENV", "add_arguments", "main"]

#: As for ``actions``: the phases send actions from one address, which the default per-address
#: action rate (1,200 a second) would answer with 429s past that rate.
SERVER_ENV = {"PYVIA_APP__ACTION_RATE": "0"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-n", "--tabs", type=int, default=1000, help="idle tabs to open (default 1000)")
    parser.add_argument("-b", "--batch", type=int, default=100, help="tabs opened per batch (default 100)")
    parser.add_argument("-r", "--repeat", type=int, default=3, help="repetitions, a fresh server each (default 3)")
    parser.add_argument("--browsers", type=int, default=16, help="page-view connections (sessions; default 16)")
    parser.add_argument("--warm-tabs", type=int, default=20, help="tabs opened and kept before 'before' (default 20)")
    parser.add_argument("--settle", type=float, default=2.0, help="seconds between opening and reading RSS")
    parser.add_argument(
        "--idle-seconds",
        type=float,
        default=0.0,
        help="after reading RSS, seconds of idle server CPU measured with every tab open (default 0: none)",
    )
    parser.add_argument(
        "--encoding",
        choices=("identity", "zstd", "br", "gzip"),
        default="identity",
        help="the Accept-Encoding of every stream (default identity: no compressor is counted)",
    )
    tab_phases.add_arguments(parser)


def _slab_kb() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("Slab:"):
                return int(line.split()[1])
    return 0


async def _open_batch(
    browsers: list[Browser], count: int, port: int, failures: Counter[str], owners: dict[int, Browser]
) -> list[Tab]:
    """Open ``count`` tabs, each browser opening its share one after the other (``owners``: tab → browser)."""
    shares = [count // len(browsers) + (1 if i < count % len(browsers) else 0) for i in range(len(browsers))]

    async def one_browser(browser: Browser, share: int) -> list[Tab]:
        opened = []
        for _ in range(share):
            try:
                tab = await browser.open_tab(port)
                owners[id(tab)] = browser
                opened.append(tab)
            except (OSError, TimeoutError, ProtocolError, TabError) as exc:
                failures[f"{type(exc).__name__}: {str(exc)[:80]}"] += 1
                if browser.conn.closed:
                    await browser.reconnect(port)
        return opened

    groups = await asyncio.gather(*(one_browser(b, s) for b, s in zip(browsers, shares, strict=True)))
    return [tab for group in groups for tab in group]


async def _one_rep(args: argparse.Namespace, server: Server, rep: int, tabs: list[Tab]) -> dict[str, Any]:
    browsers = [await Browser.open(server.host, server.port, args.encoding) for _ in range(args.browsers)]
    failures: Counter[str] = Counter()
    owners: dict[int, Browser] = {}
    tabs += await _open_batch(browsers, args.warm_tabs, server.port, failures, owners)
    warm = len(tabs)
    await asyncio.sleep(1.0)
    rss_before, slab_before = server.rss_kb(), _slab_kb()
    opening = Window(server).start()
    for start in range(0, args.tabs, args.batch):
        tabs += await _open_batch(browsers, min(args.batch, args.tabs - start), server.port, failures, owners)
    opening.stop()
    opened = len(tabs) - warm
    idle = Window(server).start()
    await asyncio.sleep(args.settle)
    idle.stop()
    rss_n, slab_n = server.rss_kb(), _slab_kb()
    idle_ms_per_s = float("nan")
    if args.idle_seconds > 0:
        quiet = Window(server).start()
        await asyncio.sleep(args.idle_seconds)
        quiet.stop()
        idle_ms_per_s = quiet.server_cpu_precise / quiet.wall * 1e3
    alive = sum(1 for t in tabs[warm:] if not t.stream.closed)
    first_event_bytes = sum(t.stream.bytes_seen for t in tabs[warm:]) / opened if opened else float("nan")
    phases = await tab_phases.run_phases(args, server, tabs, owners, idle.server_cpu_precise / idle.wall)
    for phase in phases:
        _print_phase(phase)
    rss_closed = None
    if phases:
        for tab in tabs:
            tab.close()
        await asyncio.sleep(args.settle)
        rss_closed = server.rss_kb()
    for browser in browsers:
        browser.conn.close()
    return {
        "type": "rep",
        "rep": rep,
        "requested": args.tabs,
        "opened": opened,
        "alive_after_settle": alive,
        "failures": dict(failures),
        "dirty": bool(failures) or opened != args.tabs or alive != opened,
        "warm_tabs": warm,
        "rss_before_kb": rss_before,
        "rss_with_tabs_kb": rss_n,
        "kb_per_tab": (rss_n - rss_before) / opened if opened else float("nan"),
        "open_cpu_us_per_tab": opening.server_cpu / opened * 1e6 if opened else float("nan"),
        "open_cpu_us_per_tab_clock": opening.server_cpu_precise / opened * 1e6 if opened else float("nan"),
        "open_wall_s": opening.wall,
        "open_client_busy": opening.client_busy,
        "open_server_busy": opening.server_busy,
        "open_others_on_server_core": opening.others_on_core,
        "noisy": opening.noisy,
        "open_others_on_client_core": opening.others_on_client_core,
        "idle_server_cpu_s": idle.server_cpu,
        "idle_wall_s": idle.wall,
        "idle_ms_per_s": idle_ms_per_s,
        "slab_kb_per_tab_pair": (slab_n - slab_before) / opened if opened else float("nan"),
        "first_event_bytes": first_event_bytes,
        "phases": phases,
        "rss_after_close_kb": rss_closed,
        "dirty_phases": [p["phase"] for p in phases if p["dirty"]],
    }


async def main(args: argparse.Namespace, session: Any) -> dict[str, Any]:
    """R repetitions, each on a fresh server."""
    reps = []
    for rep in range(1, args.repeat + 1):
        server = await session.start()
        tabs: list[Tab] = []
        try:
            record = await _one_rep(args, server, rep, tabs)
        finally:
            for tab in tabs:
                tab.close()
            await session.stop(server)
        session.recorder.write(record)
        reps.append(record)
        _print_rep(record)
    summary: dict[str, Any] = {"type": "summary", "tabs": args.tabs}
    for key in (
        "kb_per_tab",
        "open_cpu_us_per_tab",
        "open_cpu_us_per_tab_clock",
        "idle_server_cpu_s",
        "idle_ms_per_s",
        "slab_kb_per_tab_pair",
        "rss_before_kb",
        "rss_with_tabs_kb",
    ):
        summary[key] = spread([r[key] for r in reps])
    summary["phases"] = _phase_summary(reps)
    summary["dirty_reps"] = [r["rep"] for r in reps if r["dirty"] or r["dirty_phases"]]
    summary["noisy_reps"] = [r["rep"] for r in reps if r["noisy"]]
    summary["quiet"] = quiet_spread(reps, ("kb_per_tab", "open_cpu_us_per_tab_clock"))
    session.recorder.write(summary)
    _print_summary(summary)
    return summary


def _print_rep(r: dict[str, Any]) -> None:
    print(
        f"rep {r['rep']}: {r['opened']:,}/{r['requested']:,} tabs open ({r['alive_after_settle']:,} alive after "
        f"settle) in {r['open_wall_s']:.2f} s; "
        f"RSS {r['rss_before_kb'] / 1024:.1f} → {r['rss_with_tabs_kb'] / 1024:.1f} MB "
        f"= {r['kb_per_tab']:.2f} KB/tab; "
        f"open CPU {r['open_cpu_us_per_tab']:.0f} µs/tab ({r['open_cpu_us_per_tab_clock']:.0f} by the CPU clock) "
        f"(server core {r['open_server_busy']:.0%}, client core {r['open_client_busy']:.0%}, "
        f"others on server/client core {r['open_others_on_server_core']:.0%}/"
        f"{r['open_others_on_client_core']:.0%}); idle CPU "
        f"{r['idle_server_cpu_s'] * 1000:.0f} ms in {r['idle_wall_s']:.1f} s, then {r['idle_ms_per_s']:.2f} ms/s; "
        f"kernel slab "
        f"{r['slab_kb_per_tab_pair']:.1f} KB/socket pair; failures {sum(r['failures'].values())}"
        f"{' DIRTY ' + str(r['failures']) if r['dirty'] else ''}",
        flush=True,
    )


_PHASE_FIGURES = {
    "churn": (
        "cpu_us_per_visitor",
        "cpu_us_per_visitor_net",
        "kb_to_open_tabs_per_visitor",
        "rss_growth_kb_per_s_second_half",
        "cpu_share_first_half",
        "cpu_share_second_half",
    ),
    "private": (
        "response_p50_ms",
        "response_p99_ms",
        "seen_p50_ms",
        "seen_p99_ms",
        "cpu_us_per_action",
        "cpu_us_per_action_net",
        "server_busy",
    ),
    "shared": (
        "visible_p50_ms",
        "visible_p99_ms",
        "events_per_tab_s",
        "kb_per_tab_s",
        "cpu_ms_per_click",
        "cpu_ms_per_click_net",
        "server_busy",
    ),
}


def _phase_summary(reps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each (phase, rate) with its figures' median (min-max) over the repetitions."""
    groups: dict[tuple[str, float], list[dict[str, Any]]] = {}
    for r in reps:
        for p in r["phases"]:
            if "skipped" not in p:
                groups.setdefault((p["phase"], p["rate"]), []).append(p)
    return [
        {
            "phase": kind,
            "rate": rate,
            "reps": len(ps),
            "dirty": any(p["dirty"] for p in ps),
            **{k: spread([p[k] for p in ps]) for k in _PHASE_FIGURES[kind]},
        }
        for (kind, rate), ps in groups.items()
    ]


def _print_phase(p: dict[str, Any]) -> None:
    flag = " DIRTY" if p["dirty"] else ""
    if "skipped" in p:
        print(f"  {p['phase']}: skipped, {p['skipped']}{flag}", flush=True)
    elif p["phase"] == "churn":
        rss = p["rss_kb_samples"]
        print(
            f"  churn {p['rate']:g}/s: {p['visitors']} visitors in {p['seconds']:.1f} s, "
            f"{p['cpu_us_per_visitor']:,.0f} µs CPU each ({p['cpu_us_per_visitor_net']:,.0f} net of idle), "
            f"{p['kb_to_open_tabs_per_visitor']:.2f} KB to the open "
            f"tabs each; RSS {rss[0] / 1024:.1f} → {rss[-1] / 1024:.1f} MB (second half "
            f"{p['rss_growth_kb_per_s_second_half']:+.0f} KB/s); server core {p['cpu_share_first_half']:.0%} "
            f"then {p['cpu_share_second_half']:.0%}; failures {sum(p['failures'].values())}{flag}",
            flush=True,
        )
    elif p["phase"] == "private":
        print(
            f"  private actions {p['rate']:g}/s: {p['ok']}/{p['sent']} OK; from the scheduled send: response "
            f"p50 {p['response_p50_ms']:.2f} p99 {p['response_p99_ms']:.2f} ms, patch seen p50 "
            f"{p['seen_p50_ms']:.2f} p99 {p['seen_p99_ms']:.2f} ms; never seen {p['never_seen']}, wrong "
            f"{p['wrong_value']}, no free tab {p['no_free_tab']}; {p['cpu_us_per_action']:.0f} µs CPU/action "
            f"({p['cpu_us_per_action_net']:.0f} net of idle), server "
            f"core {p['server_busy']:.0%}{flag}",
            flush=True,
        )
    else:
        print(
            f"  shared clicks {p['rate']:g}/s on {p['tabs']} tabs: {p['ok']}/{p['sent']} OK; visible in all "
            f"{p['observed']} observed tabs p50 {p['visible_p50_ms']:.1f} p99 {p['visible_p99_ms']:.1f} ms "
            f"(never {p['clicks_never_visible']}); {p['observed_on_final']}/{p['observed']} on the final value; "
            f"{p['events_per_tab_s']:.1f} events and {p['kb_per_tab_s']:.2f} KB per tab per s; "
            f"{p['cpu_ms_per_click']:.2f} ms CPU/click ({p['cpu_ms_per_click_net']:.2f} net of idle), "
            f"server core {p['server_busy']:.0%}{flag}",
            flush=True,
        )


def _print_summary(s: dict[str, Any]) -> None:
    print("summary: median (min-max) over repetitions, a fresh server each")
    print(f"  RSS KB per idle connected tab  {fmt(s['kb_per_tab'], 2)}   (target ≤ 10)")
    print(
        f"  server CPU µs to open a tab    {fmt(s['open_cpu_us_per_tab'], 0)} by ticks, "
        f"{fmt(s['open_cpu_us_per_tab_clock'], 0)} by the CPU clock   (page view + stream connect)"
    )
    print(f"  server CPU while idle (ms)     {fmt({k: v * 1000 for k, v in s['idle_server_cpu_s'].items()}, 0)}")
    if s["idle_ms_per_s"]["median"] == s["idle_ms_per_s"]["median"]:  # measured (not NaN)
        print(f"  idle server CPU, tabs open     {fmt(s['idle_ms_per_s'], 2)} ms/s (the --idle-seconds window)")
    print(f"  kernel slab KB per socket pair {fmt(s['slab_kb_per_tab_pair'], 1)}   (client + server side; not in RSS)")
    q = s["quiet"]
    if s["noisy_reps"] and q["n"]:
        print(
            f"  quiet repetitions only (n={q['n']}): {fmt(q['kb_per_tab'], 2)} KB/tab, "
            f"open CPU {fmt(q['open_cpu_us_per_tab_clock'], 0)} µs/tab by the CPU clock"
        )
    for p in s["phases"]:
        figures = ", ".join(f"{k} {fmt(p[k], 2)}" for k in _PHASE_FIGURES[p["phase"]])
        print(f"  {p['phase']} {p['rate']:g}/s (n={p['reps']}{', DIRTY' if p['dirty'] else ''}): {figures}")
    print(
        f"  dirty repetitions: {s['dirty_reps'] or 'none'}; noisy (others took > 5% of a core "
        f"while opening): {s['noisy_reps'] or 'none'}"
    )
