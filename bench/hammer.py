"""``hammer``: K actions at concurrency C, with observing tabs; does every action count, exactly once?

php-via's ``action_hammer`` (php-via.md §11.1), on pyvia's raw-socket client. O observer tabs are
opened (page view + stream, each stream decoded event by event); C keep-alive connections, each
with the session cookie of one observer's browser, then post K ``/_action/<action>`` requests for
the observers' contexts, closed loop (one in flight per connection). Three things are measured
independently, because each can fail on its own:

* **HTTP**: completed responses by status, transport errors; 100% 2xx or the repetition is dirty;
* **processing**: the net increment of the signal (last value observed minus the value before) must equal
  the 2xx count: a lost update or an action run twice shows here;
* **delivery**: signal frames each observer received (a flush coalesces many actions into one
  frame, so far fewer than K) and how many observers end on the final value.

The signal is found in the page's seed by name: ``count`` or a scoped ``<scope>__count``. A scoped
(shared) signal is expected on every observer and the actions go to every observer's context in
turn; a tab-private one only on the first observer, which receives every action, while the other
observers must see none of them (isolation). Default app: the shared counter example.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import time
from collections import Counter
from typing import Any

from bench.client import Connection, ProtocolError, boot_signals
from bench.fanout import Browser, Hub, TabStream, open_stream
from bench.report import Recorder, fmt, percentile, spread
from bench.server import Server
from bench.window import Window

__all__ = ["DEFAULT_APP", "SERVER_ENV", "CountingHub", "add_arguments", "is_shared", "main", "signal_key"]

DEFAULT_APP = "examples.shared_counter:app"
#: As for ``actions``: the per-address action rate would answer a one-address hammer with 429s.
SERVER_ENV = {"PYVIA_APP__ACTION_RATE": "0"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-k", "--actions", type=int, default=2000, help="actions per repetition (default 2000)")
    parser.add_argument("-c", "--concurrency", type=int, default=50, help="posting connections (default 50)")
    parser.add_argument("-o", "--observers", type=int, default=20, help="observer tabs (default 20)")
    parser.add_argument("-r", "--repeat", type=int, default=5, help="repetitions (default 5)")
    parser.add_argument("--warmup", type=int, default=200, help="warm-up actions, not reported (default 200)")
    parser.add_argument("--action", default="increment", help="action name (default increment)")
    parser.add_argument("--signal", default="count", help="signal the action increments (default count)")
    parser.add_argument(
        "--timeout",
        type=float,
        default=5.0,
        help="seconds for a response, and for the observers to converge after the last one (default 5)",
    )


def signal_key(seed: dict[str, Any], name: str) -> str:
    """The key of signal ``name`` in a page's seed: ``_name`` (server-owned) or ``name`` (writable),
    or a scoped ``_<scope>__name`` / ``<scope>__name``."""
    for key in ("_" + name, name):
        if key in seed:
            return key
    scoped = [k for k in seed if k.endswith("__" + name)]
    if len(scoped) != 1:
        raise ProtocolError(f"signal {name!r} not in the page's seed (or ambiguous): {sorted(seed)}")
    return scoped[0]


def is_shared(key: str) -> bool:
    """Whether a seed key names a shared signal (its scope and name are joined by ``__``)."""
    return "__" in key


class CountingHub(Hub):
    """A :class:`Hub` that also counts, per tab, the signal frames that carried its key."""

    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.frames: Counter[int] = Counter()

    def on_signals(self, tab: TabStream, values: dict[str, Any], now: float) -> None:
        if self.key in values:
            self.frames[id(tab)] += 1
        super().on_signals(tab, values, now)


class Fired:
    """What one burst of actions got back."""

    __slots__ = ("errors", "first_non2xx", "latencies", "non2xx", "ok", "sent")

    def __init__(self) -> None:
        self.sent = 0
        self.ok = 0
        self.latencies: list[float] = []
        self.non2xx: Counter[int] = Counter()
        self.first_non2xx: str | None = None
        self.errors: Counter[str] = Counter()


async def fire(actors: list[tuple[Connection, bytes]], total: int, port: int, timeout: float) -> Fired:
    """``total`` requests over the actors' connections, closed loop; every outcome accounted for."""
    out = Fired()
    perf = time.perf_counter

    async def worker(index: int) -> None:
        conn, raw = actors[index]
        while out.sent < total:
            out.sent += 1
            t0 = perf()
            try:
                response = await conn.request(raw, timeout)
            except (OSError, TimeoutError, ProtocolError) as exc:
                out.errors[f"{type(exc).__name__}: {str(exc)[:60]}"] += 1
                conn.close()
                try:
                    conn = await Connection.open("127.0.0.1", port)
                except OSError:
                    return
                actors[index] = (conn, raw)
                continue
            if 200 <= response.status < 300:
                out.ok += 1
                out.latencies.append(response.done - t0)
            else:
                out.non2xx[response.status] += 1
                if out.first_non2xx is None:
                    out.first_non2xx = f"{response.status} {response.body[:160]!r}"

    await asyncio.gather(*(worker(i) for i in range(len(actors))))
    return out


def arm(hub: Hub, tabs: list[TabStream], target: int, start: int) -> asyncio.Future[None]:
    """``hub.arm``, counting at once the tabs already there (their last frame may precede the arming)."""
    done = hub.arm(target, len(tabs))
    now = time.perf_counter()
    for tab in tabs:
        if (tab.value if tab.value is not None else start) >= target:
            tab.round = hub.round
            hub.times.append(now)
    if len(hub.times) >= len(tabs) and not done.done():
        done.set_result(None)
    return done


class Bench:
    """The observers, the actors and the value the signal should have now."""

    def __init__(self, args: argparse.Namespace, server: Server, key: str, value: int, shared: bool) -> None:
        self.args = args
        self.server = server
        self.hub = CountingHub(key)
        self.value = value
        self.shared = shared
        self.tabs: list[TabStream] = []
        self.actors: list[tuple[Connection, bytes]] = []

    async def open(self, browsers: list[Browser]) -> None:
        targets: list[tuple[Browser, str]] = []
        for i in range(self.args.observers):
            browser = browsers[i % len(browsers)]
            _, ctx = await browser.page()
            self.tabs.append(await open_stream(self.server.host, self.server.port, browser, ctx, self.hub, "identity"))
            targets.append((browser, ctx))
        if not self.shared:
            targets = targets[:1]  # a private signal: every action for the first observer's tab
        for i in range(self.args.concurrency):
            browser, ctx = targets[i % len(targets)]
            conn = await Connection.open("127.0.0.1", self.server.port)
            self.actors.append((conn, browser.action_request(self.args.action, ctx)))

    @property
    def watching(self) -> list[TabStream]:
        """The observers that must receive the signal."""
        return self.tabs if self.shared else self.tabs[:1]

    async def burst(self, rep: int, total: int) -> dict[str, Any]:
        start = self.value
        frames0 = Counter(self.hub.frames)
        window = Window(self.server).start()
        t0 = time.perf_counter()
        fired = await fire(self.actors, total, self.server.port, self.args.timeout)
        answered = time.perf_counter() - t0
        target = start + fired.ok
        converged = arm(self.hub, self.watching, target, start)
        with contextlib.suppress(TimeoutError):  # reported below as observers not on the final value
            await asyncio.wait_for(converged, self.args.timeout)
        settled = (max(self.hub.times) if converged.done() and self.hub.times else time.perf_counter()) - t0
        window.stop()
        await asyncio.sleep(0.2)  # an action run twice would push a value past the target now
        values = [t.value if t.value is not None else start for t in self.watching]
        final = max(values)
        net = final - start
        on_final = sum(1 for v in values if v == final)
        frames = [self.hub.frames[id(t)] - frames0[id(t)] for t in self.watching]
        leaked = sum(self.hub.frames[id(t)] - frames0[id(t)] for t in self.tabs[1:]) if not self.shared else 0
        closed = sum(1 for t in self.tabs if t.closed)
        lat = sorted(fired.latencies)
        dirty = (
            fired.ok != total
            or net != fired.ok
            or on_final != len(self.watching)
            or bool(leaked)
            or bool(closed)
            or bool(self.hub.regressions)
        )
        self.value = final
        return {
            "type": "rep",
            "rep": rep,
            "sent": fired.sent,
            "http_ok": fired.ok,
            "http_ok_share": fired.ok / total,
            "non2xx": dict(fired.non2xx),
            "first_non2xx": fired.first_non2xx,
            "errors": dict(fired.errors),
            "start": start,
            "final": final,
            "net_increment": net,
            "exact": net == fired.ok,
            "observers": len(self.watching),
            "observers_on_final": on_final,
            "frames_per_observer": spread([float(f) for f in frames]),
            "frames_median": statistics.median(frames),
            "isolation_leaks": leaked,
            "closed_streams": closed,
            "value_regressions": self.hub.regressions,
            "answered_s": answered,
            "converged_s": settled,
            "actions_per_s": fired.ok / answered if answered else 0.0,
            "p50_us": percentile(lat, 50) * 1e6,
            "p99_us": percentile(lat, 99) * 1e6,
            "server_cpu_us_per_action": window.server_cpu_precise / fired.ok * 1e6 if fired.ok else float("nan"),
            "dirty": dirty,
            **window.as_dict(),
        }

    def close(self) -> None:
        for tab in self.tabs:
            tab.close()
        for conn, _ in self.actors:
            conn.close()


async def main(args: argparse.Namespace, session: Any) -> dict[str, Any]:
    """A fresh server, the observers and actors, a warm-up burst, R measured bursts."""
    server = await session.start()
    bench: Bench | None = None
    try:
        probe = await Browser.open(server.host, server.port)
        response, _ = await probe.page()
        seed = boot_signals(response.body)
        key = signal_key(seed, args.signal)
        browsers = [probe] + [await Browser.open(server.host, server.port) for _ in range(min(args.observers, 16) - 1)]
        bench = Bench(args, server, key, int(seed[key]), shared=is_shared(key))
        await bench.open(browsers)
        print(
            f"# {len(bench.tabs)} observers open; signal {key!r} ({'shared' if bench.shared else 'tab-private'}), "
            f"value {bench.value}; {len(bench.actors)} posting connections",
            flush=True,
        )
        return await _measure(args, bench, session.recorder)
    finally:
        if bench is not None:
            bench.close()
        await session.stop(server)


async def _measure(args: argparse.Namespace, bench: Bench, recorder: Recorder) -> dict[str, Any]:
    warm = await bench.burst(0, args.warmup) if args.warmup else None
    if warm is not None:
        recorder.write({**warm, "type": "warmup"})
        print(
            f"warm-up: {warm['http_ok']}/{args.warmup} OK, net {warm['net_increment']}"
            f"{' DIRTY' if warm['dirty'] else ''}",
            flush=True,
        )
    reps = []
    for rep in range(1, args.repeat + 1):
        record = await bench.burst(rep, args.actions)
        recorder.write(record)
        reps.append(record)
        _print_rep(record)
    summary: dict[str, Any] = {
        "type": "summary",
        "actions": args.actions,
        "concurrency": args.concurrency,
        "observers": len(bench.watching),
        "shared": bench.shared,
    }
    for key in ("actions_per_s", "p50_us", "p99_us", "server_cpu_us_per_action", "frames_median", "converged_s"):
        summary[key] = spread([r[key] for r in reps])
    summary["http_ok_total"] = sum(r["http_ok"] for r in reps)
    summary["sent_total"] = sum(r["sent"] for r in reps)
    summary["all_exact"] = all(r["exact"] for r in reps)
    summary["dirty_reps"] = [r["rep"] for r in reps if r["dirty"]]
    summary["noisy_reps"] = [r["rep"] for r in reps if r["noisy"]]
    recorder.write(summary)
    _print_summary(summary)
    return summary


def _print_rep(r: dict[str, Any]) -> None:
    frames = r["frames_per_observer"]
    print(
        f"rep {r['rep']}: HTTP OK {r['http_ok']:,}/{r['sent']:,} ({r['http_ok_share']:.1%}), non-2xx "
        f"{sum(r['non2xx'].values())}, errors {sum(r['errors'].values())}; net increment {r['net_increment']:,} "
        f"({'exact' if r['exact'] else 'NOT EXACT'}); frames per observer {frames['median']:.0f} "
        f"({frames['min']:.0f}-{frames['max']:.0f}); observers on the final value {r['observers_on_final']}/"
        f"{r['observers']}; {r['actions_per_s']:,.0f} actions/s, p50 {r['p50_us']:,.0f} µs p99 "
        f"{r['p99_us']:,.0f} µs; converged {r['converged_s'] * 1000:.1f} ms after the first send; server CPU "
        f"{r['server_cpu_us_per_action']:.1f} µs/action{' NOISY' if r['noisy'] else ''}"
        f"{' DIRTY' if r['dirty'] else ''}"
        + (f"\n    first non-2xx: {r['first_non2xx']}" if r["first_non2xx"] else "")
        + (f"\n    errors: {r['errors']}" if r["errors"] else ""),
        flush=True,
    )


def _print_summary(s: dict[str, Any]) -> None:
    print("summary: median (min-max) over repetitions")
    print(f"  HTTP OK                  {s['http_ok_total']:,} of {s['sent_total']:,}")
    print(f"  net increment exact      {'in every repetition' if s['all_exact'] else 'NO'}")
    print(f"  actions/s                {fmt(s['actions_per_s'], 0)}")
    print(f"  response p50 / p99 µs    {fmt(s['p50_us'], 0)} / {fmt(s['p99_us'], 0)}")
    print(f"  server CPU µs/action     {fmt(s['server_cpu_us_per_action'])} (includes the broadcasts)")
    print(f"  frames per observer      {fmt(s['frames_median'], 0)} (for {s['actions']:,} actions)")
    print(f"  dirty repetitions: {s['dirty_reps'] or 'none'}; noisy: {s['noisy_reps'] or 'none'}")
