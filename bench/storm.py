"""``storm``: K actions on a shared signal while N tabs watch → time until every tab converged.

php-via's ``broadcast_storm`` (php-via.md §11.8) on any app with a shared counter (default the
shared counter example): N tabs are opened over 16 browsers, each stream decoded and checked; then
K ``/_action/<action>`` POSTs go out from C of those browsers' keep-alive connections, closed loop,
each for one of its own tabs. A storm ends in the read where the last tab decoded the final value
(start + K); it is timed from the first send. The storm itself is :func:`bench.broadcast.storm`
(the same code as ``python -m bench.broadcast`` part b, which adds the server's flush log for its
own bench app). Checks after the storms: every tab open, no value going back, all on the final
value, every action 2xx; otherwise the run is dirty.
"""

from __future__ import annotations

import argparse
import asyncio
from collections import Counter
from typing import Any

from bench.broadcast import check_tabs, storm
from bench.client import boot_signals
from bench.fanout import Browser, TabStream, open_tabs, wait_quiet
from bench.hammer import CountingHub, is_shared, signal_key
from bench.report import fmt, spread
from bench.window import Window

__all__ = ["DEFAULT_APP", "SERVER_ENV", "add_arguments", "main"]

DEFAULT_APP = "examples.shared_counter:app"
SERVER_ENV = {"PYVIA_APP__ACTION_RATE": "0"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-n", "--tabs", type=int, default=1000, help="watching tabs (default 1000)")
    parser.add_argument("-k", "--actions", type=int, default=200, help="actions per storm (default 200)")
    parser.add_argument(
        "-c", "--concurrency", type=int, default=16, help="posting connections, at most 16 (default 16)"
    )
    parser.add_argument("-r", "--repeat", type=int, default=5, help="measured storms (default 5)")
    parser.add_argument("--warmup", type=int, default=1, help="storms before the measured ones (default 1)")
    parser.add_argument("--action", default="increment", help="action name (default increment)")
    parser.add_argument("--signal", default="count", help="the shared signal (default count)")
    parser.add_argument("--timeout", type=float, default=15.0, help="seconds for a storm to converge")


async def main(args: argparse.Namespace, session: Any) -> dict[str, Any]:
    """A fresh server, N tabs, warm-up storms, R measured storms, the checks."""
    if not 1 <= args.concurrency <= 16:
        raise SystemExit("--concurrency must be 1..16: the storm posts from the browsers that opened the tabs")
    server = await session.start()
    tabs: list[TabStream] = []
    try:
        probe = await Browser.open(server.host, server.port)
        response, _ = await probe.page()
        seed = boot_signals(response.body)
        key = signal_key(seed, args.signal)
        if not is_shared(key):
            raise SystemExit(f"signal {key!r} is tab-private: a storm needs a shared one (see hammer)")
        hub = CountingHub(key)
        failures: Counter[str] = Counter()
        browsers = [probe] + [await Browser.open(server.host, server.port) for _ in range(15)]
        _, tabs = await open_tabs(server.host, server.port, args.tabs, hub, browsers=browsers, failures=failures)
        value = int(seed[key])
        print(
            f"# {len(tabs):,}/{args.tabs:,} tabs open (failures {sum(failures.values())}), signal {key!r} = {value}",
            flush=True,
        )
        return await _storms(args, session, server, browsers, hub, tabs, value, failures)
    finally:
        for tab in tabs:
            tab.close()
        await session.stop(server)


async def _storms(
    args: argparse.Namespace,
    session: Any,
    server: Any,
    browsers: list[Browser],
    hub: CountingHub,
    tabs: list[TabStream],
    value: int,
    failures: Counter[str],
) -> dict[str, Any]:
    records = []
    timeouts = 0
    frames0: Counter[int] = Counter()
    for i in range(1 - args.warmup, args.repeat + 1):
        if i == 1:
            frames0 = Counter(hub.frames)
        await wait_quiet(max_wait=5.0)
        window = Window(server).start()
        try:
            s = await storm(browsers, hub, tabs, value, args.actions, args.concurrency, None, args.timeout, args.action)
        except TimeoutError as exc:
            window.stop()
            timeouts += 1
            print(f"storm {i}: DIRTY, {exc}", flush=True)
            session.recorder.write({"type": "storm", "storm": i, "timeout": str(exc), "dirty": True})
            value = max(t.value or value for t in tabs)
            continue
        window.stop()
        value = s.pop("final")
        del s["t0"], s["flush_timeline_ms"], s["flushes"], s["tab_frames"]
        s.update(
            {
                "type": "storm" if i > 0 else "warmup",
                "storm": i,
                "tabs": len(tabs),
                "dirty": bool(s["non2xx"]),
                "server_cpu_ms": window.server_cpu_precise * 1e3,
                **window.as_dict(),
            }
        )
        session.recorder.write(s)
        if i > 0:
            records.append(s)
        print(
            f"storm {i}{' (warm-up)' if i <= 0 else ''}: {args.actions} actions from {args.concurrency} connections "
            f"→ every tab on {value} after {s['ms_to_last_tab']:.1f} ms (first tab {s['ms_to_first_tab']:.1f}, "
            f"median {s['ms_to_median_tab']:.1f}; last action answered at {s['ms_last_action_answered']:.1f} ms); "
            f"server CPU {s['server_cpu_ms']:.1f} ms; non-2xx {sum(s['non2xx'].values())}"
            f"{' NOISY' if s['noisy'] else ''}{' DIRTY' if s['dirty'] else ''}",
            flush=True,
        )
    await asyncio.sleep(0.3)
    check = check_tabs(tabs, hub, value)
    frames = [hub.frames[id(t)] - frames0[id(t)] for t in tabs]
    summary: dict[str, Any] = {
        "type": "summary",
        "tabs": len(tabs),
        "requested_tabs": args.tabs,
        "actions": args.actions,
        "concurrency": args.concurrency,
        "open_failures": dict(failures),
        "check": check,
        "timeouts": timeouts,
        "ms_to_last_tab": spread([r["ms_to_last_tab"] for r in records]),
        "ms_to_median_tab": spread([r["ms_to_median_tab"] for r in records]),
        "ms_last_action_answered": spread([r["ms_last_action_answered"] for r in records]),
        "server_cpu_ms": spread([r["server_cpu_ms"] for r in records]),
        "frames_per_tab_per_storm": spread([f / max(1, args.repeat) for f in frames]),
        "noisy_storms": [r["storm"] for r in records if r["noisy"]],
        "dirty": bool(failures)
        or not check["clean"]
        or bool(timeouts)
        or any(r["dirty"] for r in records)
        or len(tabs) != args.tabs,
    }
    summary["dirty_reps"] = [r["storm"] for r in records if r["dirty"]] or ([0] if summary["dirty"] else [])
    session.recorder.write(summary)
    print("summary: median (min-max) over storms")
    print(f"  first send → every tab has the final value  {fmt(summary['ms_to_last_tab'])} ms")
    print(f"  last action answered                         {fmt(summary['ms_last_action_answered'])} ms")
    print(f"  server CPU per storm                         {fmt(summary['server_cpu_ms'])} ms")
    print(f"  frames per tab per storm                     {fmt(summary['frames_per_tab_per_storm'])}")
    print(
        f"  checks: {'clean' if not summary['dirty'] else 'DIRTY ' + str(check) + str(dict(failures))}; "
        f"noisy storms: {summary['noisy_storms'] or 'none'}"
    )
    return summary
