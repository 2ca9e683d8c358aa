"""The phases ``tabs`` runs on its open tabs after the idle window (php-via's ``capacity.php tabs``, §11.7).

* **churn** (``--churn-rate R``): visitors arrive at R a second (open loop), each a new browser that
  opens a tab (page view + stream), keeps it ``--churn-hold`` seconds and closes it. Is the server
  steady? Server RSS and CPU are sampled every second: CPU per visitor, RSS growth per second over
  the phase, and the bytes the already open tabs received per visitor (presence broadcasts).
* **private actions at fixed rates** (``--tab-rates 100,300``): open loop, each action scheduled at
  ``t0 + i / rate`` and sent from a pool of 64 connections to the next idle tab with that tab's
  cookie. Latency runs from the *scheduled* time (a late send counts against the server, no
  coordinated omission): to the response, and to the moment the tab's own stream shows the new
  value. A response that is not 2xx, a patch that never came or carried another value: dirty.
* **shared clicks at fixed rates** (``--bc-rates 5,20``): the same open loop on a shared signal;
  every ``n / observe``-th tab is observed (its events kept with their arrival times), the others'
  events are counted and dropped. Per click: the time until every observed tab shows a value that
  includes it; per tab and second: events (a flush writes a view and a signals event in one
  write) and bytes received; the server's share of its core.

CPU per operation is given as measured and net of the idle rate the ``tabs`` idle window found
(the per-second sweep over every tab is paid whether or not anything happens).
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

from bench.actions import _patch_seen
from bench.client import Connection, ProtocolError, event_signals
from bench.report import percentile
from bench.server import Server
from bench.tabs_client import Browser, Tab, TabError
from bench.window import Window

__all__ = ["add_arguments", "churn", "clicks", "private_rates", "run_phases"]

POOL = 64


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--phase", type=float, default=10.0, help="seconds per churn/rate phase (default 10)")
    parser.add_argument(
        "--churn-rate",
        type=float,
        default=0.0,
        help="visitors a second opening and closing a tab while the others stay open (default 0: no churn phase)",
    )
    parser.add_argument("--churn-hold", type=float, default=0.5, help="seconds a visitor's tab stays open")
    parser.add_argument(
        "--tab-rates",
        default="",
        help="comma-separated private action rates a second, open "
        "loop (e.g. 100,300); needs a tab-private --tab-signal",
    )
    parser.add_argument("--tab-action", default="increment")
    parser.add_argument("--tab-signal", default="count")
    parser.add_argument(
        "--bc-rates",
        default="",
        help="comma-separated shared click rates a second (e.g. 5,20); "
        "needs a shared --bc-signal (e.g. --app examples.shared_counter:app)",
    )
    parser.add_argument("--bc-action", default="increment")
    parser.add_argument("--bc-signal", default="count")
    parser.add_argument("--observe", type=int, default=100, help="tabs whose events are kept for shared clicks")


def _rates(text: str) -> list[float]:
    return [float(r) for r in text.split(",") if r.strip()]


def _drain(tabs: list[Tab]) -> int:
    """Drop every queued event (counting them): a phase must not grow the harness's memory."""
    n = 0
    for tab in tabs:
        n += len(tab.stream.events)
        tab.stream.events.clear()
    return n


async def _open_loop(rate: float, seconds: float, send: Callable[[int, float], Awaitable[None]]) -> float:
    """Start ``send(i, scheduled)`` at ``t0 + i / rate`` for ``seconds``; wait for all; the phase's wall time."""
    loop = asyncio.get_running_loop()
    t0 = time.perf_counter()
    tasks = []
    i = 0
    while (scheduled := t0 + i / rate) < t0 + seconds:
        delay = scheduled - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(loop.create_task(send(i, scheduled)))
        i += 1
    await asyncio.gather(*tasks)
    return time.perf_counter() - t0


class Pool:
    """Keep-alive connections for actions, one request in flight each; a closed one is replaced."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.idle: asyncio.Queue[Connection] = asyncio.Queue()

    async def fill(self, n: int = POOL) -> Pool:
        for _ in range(n):
            self.idle.put_nowait(await Connection.open("127.0.0.1", self.port))
        return self

    async def get(self) -> Connection:
        conn = await self.idle.get()
        return conn if not conn.closed else await Connection.open("127.0.0.1", self.port)

    def put(self, conn: Connection) -> None:
        self.idle.put_nowait(conn)

    def close(self) -> None:
        while not self.idle.empty():
            self.idle.get_nowait().close()


def _key(tab: Tab, name: str, shared: bool) -> str | None:
    """The signal's key in the tab's seed, if it has the wanted kind (private: ``_name``, or ``name``
    when writable; shared: ``_x__name`` or ``x__name``)."""
    if not shared:
        return next((k for k in ("_" + name, name) if k in tab.signals), None)
    found = [k for k in tab.signals if k.endswith("__" + name)]
    return found[0] if len(found) == 1 else None


# --- churn -----------------------------------------------------------------------------------------


def _net(window: Window, idle_rate: float, ops: int) -> float:
    """Server CPU per operation (µs) minus what the idle server would have used in the window."""
    return (window.server_cpu_precise - idle_rate * window.wall) / ops * 1e6 if ops else float("nan")


async def churn(
    server: Server, tabs: list[Tab], rate: float, seconds: float, hold: float, idle_rate: float = 0.0
) -> dict[str, Any]:
    failures: Counter[str] = Counter()
    done = 0
    bytes0 = sum(t.stream.bytes_seen for t in tabs)

    async def visitor(_i: int, _scheduled: float) -> None:
        nonlocal done
        try:
            browser = await Browser.open(server.host, server.port)
        except OSError as exc:
            failures[f"{type(exc).__name__}"] += 1
            return
        try:
            tab = await browser.open_tab(server.port)
            await asyncio.sleep(hold)
            tab.close()
            done += 1
        except (OSError, TimeoutError, ProtocolError, TabError) as exc:
            failures[f"{type(exc).__name__}: {str(exc)[:60]}"] += 1
        finally:
            browser.conn.close()

    samples: list[tuple[float, int, float]] = []

    async def sampler() -> None:
        while True:
            samples.append((time.perf_counter(), server.rss_kb(), server.cpu_precise()))
            _drain(tabs)
            await asyncio.sleep(1.0)

    sampling = asyncio.ensure_future(sampler())
    window = Window(server).start()
    try:
        wall = await _open_loop(rate, seconds, visitor)
    finally:
        window.stop()
        sampling.cancel()
    received = sum(t.stream.bytes_seen for t in tabs) - bytes0
    _drain(tabs)
    half = len(samples) // 2
    first, mid, last = samples[0], samples[half], samples[-1]
    return {
        "phase": "churn",
        "rate": rate,
        "seconds": wall,
        "visitors": done,
        "failures": dict(failures),
        "dirty": bool(failures),
        "cpu_us_per_visitor": window.server_cpu_precise / done * 1e6 if done else float("nan"),
        "cpu_us_per_visitor_net": _net(window, idle_rate, done),
        "kb_to_open_tabs_per_visitor": received / 1024 / done if done else float("nan"),
        "rss_kb_samples": [s[1] for s in samples],
        "rss_growth_kb_per_s_second_half": (last[1] - mid[1]) / (last[0] - mid[0]) if last[0] > mid[0] else 0.0,
        "cpu_share_first_half": (mid[2] - first[2]) / (mid[0] - first[0]) if mid[0] > first[0] else float("nan"),
        "cpu_share_second_half": (last[2] - mid[2]) / (last[0] - mid[0]) if last[0] > mid[0] else float("nan"),
        **window.as_dict(),
    }


# --- private actions at fixed rates ----------------------------------------------------------------


async def private_rates(
    server: Server,
    tabs: list[Tab],
    owners: dict[int, Browser],
    rate: float,
    seconds: float,
    action: str,
    key: str,
    idle_rate: float = 0.0,
    timeout: float = 2.0,
) -> dict[str, Any]:
    pool = await Pool(server.port).fill()
    _drain(tabs)
    free = list(tabs)
    response_lat: list[float] = []
    seen_lat: list[float] = []
    non2xx: Counter[int] = Counter()
    errors: Counter[str] = Counter()
    never_seen = wrong = no_free_tab = ok = 0

    async def send(_i: int, scheduled: float) -> None:
        nonlocal never_seen, wrong, no_free_tab, ok
        if not free:
            no_free_tab += 1  # every tab has an action in flight: the rate is beyond what N tabs can carry
            return
        tab = free.pop(0)
        conn = await pool.get()
        n = tab.signals[key]
        raw = owners[id(tab)].action_request(action, {**tab.signals, "via_ctx": tab.ctx_id})
        try:
            response = await conn.request(raw, timeout)
            if not 200 <= response.status < 300:
                non2xx[response.status] += 1
                return
            response_lat.append(response.done - scheduled)
            ok += 1
            try:
                at = await _patch_seen(tab, n + 1, timeout)
            except TimeoutError:
                never_seen += 1
                return
            if at is None:
                wrong += 1
            else:
                seen_lat.append(at - scheduled)
        except (OSError, TimeoutError, ProtocolError) as exc:
            errors[type(exc).__name__] += 1
            conn.close()
        finally:
            pool.put(conn)
            free.append(tab)

    window = Window(server).start()
    try:
        wall = await _open_loop(rate, seconds, send)
    finally:
        window.stop()
        pool.close()
    response_lat.sort()
    seen_lat.sort()
    sent = ok + sum(non2xx.values()) + sum(errors.values())
    return {
        "phase": "private",
        "rate": rate,
        "seconds": wall,
        "sent": sent,
        "ok": ok,
        "non2xx": dict(non2xx),
        "errors": dict(errors),
        "never_seen": never_seen,
        "wrong_value": wrong,
        "no_free_tab": no_free_tab,
        "dirty": bool(non2xx or errors or never_seen or wrong or no_free_tab),
        "response_p50_ms": percentile(response_lat, 50) * 1e3,
        "response_p99_ms": percentile(response_lat, 99) * 1e3,
        "seen_p50_ms": percentile(seen_lat, 50) * 1e3,
        "seen_p99_ms": percentile(seen_lat, 99) * 1e3,
        "cpu_us_per_action": window.server_cpu_precise / ok * 1e6 if ok else float("nan"),
        "cpu_us_per_action_net": _net(window, idle_rate, ok),
        **window.as_dict(),
    }


# --- shared clicks at fixed rates ------------------------------------------------------------------


def _value_times(tab: Tab, key: str) -> list[tuple[float, int]]:
    """(arrival time, value) of every patch of ``key`` queued on the tab's stream."""
    out = []
    for at, raw in tab.stream.events:
        patch = event_signals(raw)
        if patch and key in patch:
            out.append((at, int(patch[key])))
    return out


async def clicks(
    server: Server,
    tabs: list[Tab],
    owners: dict[int, Browser],
    rate: float,
    seconds: float,
    action: str,
    key: str,
    observe: int,
    idle_rate: float = 0.0,
    timeout: float = 2.0,
) -> dict[str, Any]:
    step = max(1, len(tabs) // max(1, observe))
    observed = tabs[::step][:observe]
    observed_ids = {id(t) for t in observed}
    others = [t for t in tabs if id(t) not in observed_ids]
    pool = await Pool(server.port).fill(8)
    _drain(tabs)
    start = max(int(t.signals.get(key, 0)) for t in observed)
    sent_at: list[float] = []
    non2xx: Counter[int] = Counter()
    errors: Counter[str] = Counter()
    ok = 0
    dropped = 0

    async def send(i: int, scheduled: float) -> None:
        nonlocal ok
        sent_at.append(scheduled)
        tab = tabs[i % len(tabs)]
        conn = await pool.get()
        raw = owners[id(tab)].action_request(action, {"via_ctx": tab.ctx_id})
        try:
            response = await conn.request(raw, timeout)
            if 200 <= response.status < 300:
                ok += 1
            else:
                non2xx[response.status] += 1
        except (OSError, TimeoutError, ProtocolError) as exc:
            errors[type(exc).__name__] += 1
            conn.close()
        finally:
            pool.put(conn)

    async def dropper() -> None:
        nonlocal dropped
        while True:
            await asyncio.sleep(0.5)
            dropped += _drain(others)

    bytes0 = sum(t.stream.bytes_seen for t in tabs)
    dropping = asyncio.ensure_future(dropper())
    window = Window(server).start()
    try:
        wall = await _open_loop(rate, seconds, send)
        final = start + ok
        deadline = time.perf_counter() + timeout
        while time.perf_counter() < deadline and not all(
            any(v >= final for _, v in _value_times(t, key)) for t in observed
        ):
            await asyncio.sleep(0.05)
    finally:
        window.stop()
        dropping.cancel()
        pool.close()
    received = sum(t.stream.bytes_seen for t in tabs) - bytes0
    kept = sum(len(t.stream.events) for t in observed)
    dropped += _drain(others)
    timelines = [_value_times(t, key) for t in observed]
    _drain(observed)
    visible = []
    missing = 0
    for j, scheduled in enumerate(sent_at[:ok]):
        need = start + j + 1
        arrivals = [next((at for at, v in line if v >= need), None) for line in timelines]
        if any(a is None for a in arrivals):
            missing += 1
            continue
        visible.append(max(a for a in arrivals if a is not None) - scheduled)
    visible.sort()
    last_values = [line[-1][1] if line else start for line in timelines]
    on_final = sum(1 for v in last_values if v == final)
    for t in tabs:
        t.signals[key] = final
    per_tab_s = len(tabs) * wall
    return {
        "phase": "shared",
        "rate": rate,
        "seconds": wall,
        "sent": len(sent_at),
        "ok": ok,
        "non2xx": dict(non2xx),
        "errors": dict(errors),
        "observed": len(observed),
        "tabs": len(tabs),
        "observed_on_final": on_final,
        "clicks_never_visible": missing,
        "dirty": bool(non2xx or errors or missing or on_final != len(observed)),
        "visible_p50_ms": percentile(visible, 50) * 1e3,
        "visible_p99_ms": percentile(visible, 99) * 1e3,
        "events_per_tab_s": (kept + dropped) / per_tab_s,
        "kb_per_tab_s": received / 1024 / per_tab_s,
        "cpu_ms_per_click": window.server_cpu_precise / ok * 1e3 if ok else float("nan"),
        "cpu_ms_per_click_net": _net(window, idle_rate, ok) / 1e3,
        **window.as_dict(),
    }


# --- all of them -----------------------------------------------------------------------------------


async def run_phases(
    args: argparse.Namespace, server: Server, tabs: list[Tab], owners: dict[int, Browser], idle_rate: float = 0.0
) -> list[dict[str, Any]]:
    """The phases asked for, in php-via's order; a phase the app cannot run is reported as skipped."""
    out: list[dict[str, Any]] = []
    if args.churn_rate > 0:
        out.append(await churn(server, tabs, args.churn_rate, args.phase, args.churn_hold, idle_rate))
    live = [t for t in tabs if not t.stream.closed]
    for kind, rates, action, name in (
        ("private", _rates(args.tab_rates), args.tab_action, args.tab_signal),
        ("shared", _rates(args.bc_rates), args.bc_action, args.bc_signal),
    ):
        if not rates:
            continue
        key = _key(live[0], name, kind == "shared") if live else None
        if key is None:
            out.append({"phase": kind, "skipped": f"the page has no {kind} signal {name!r}", "dirty": True})
            continue
        for rate in rates:
            if kind == "private":
                out.append(await private_rates(server, live, owners, rate, args.phase, action, key, idle_rate))
            else:
                out.append(await clicks(server, live, owners, rate, args.phase, action, key, args.observe, idle_rate))
    return out
