"""``python -m bench.gol_session``: a Game-of-Life page watched by N tabs for a whole session:
server memory per busy tab, compression ratio and CPU per tab-frame (issue 4).

The app (``bench.apps_broadcast:gol``) is ``examples/game_of_life.py``'s: a 50x50 board rendered
whole into the view every generation (``share_render=True``: one render per flush, the same bytes
to every tab), advanced by an app timer every 200 ms, using the example's own ``step``. Left to
itself that board settles into still lifes and blinkers within a few hundred generations and the
frames stop changing; to keep every frame busy for the whole session, 20 random cells are also
flipped each generation (``--reseed``), as in the frames of machine-limits.md §3. The fraction
of cells that changed per generation is measured and printed.

Per coding (zstd and br; identity as the CPU baseline), a fresh server: 2 identity warm-up tabs
watch for 3 s, RSS and malloc'd heap are read, then N tabs connect with ``Accept-Encoding`` set
to the coding and watch for ``--seconds``. Each tab decodes its stream incrementally and counts
events; the session is cut into windows of ``--window`` seconds:

* **CPU per tab-frame** = server CPU in the window / view frames the tabs received in it (warm-up
  tabs included); it holds the step, the one shared render, and each tab's encode and write.
* **Memory per busy tab** = (RSS at the end - RSS before the N tabs) / N, also as heap
  (glibc ``mallinfo2``) and as the framework's own encoder estimate.
* **Compression ratio** = decoded event bytes / content-coded bytes received (chunk payloads;
  the chunk framing adds ~8 B per write), summed over the N tabs for the whole session.

Then two variants, each a fresh server:

* **idle**: ``App(encoder_idle_release=2)``; M zstd tabs watch 4 s, the board is paused, and once
  the server reports no live encoder (the sweep releases idle zstd encoders; br ones are never
  released for idleness) RSS per tab is read, and again after ``malloc_trim(0)``.
* **diff**: the same board, but each generation sends only the changed cells (one
  patch-elements event of ``<div id="c…">`` elements, morphed by id) instead of the whole board:
  the bytes, memory and CPU of that design.

Last, **alternatives** offline (no server; ``--alternatives``): the same 300 generations (60 s)
of board frames, whole and changed-cells, through pyvia's own ``StreamEncoder`` at levels and
windows the framework does not choose today. Each configuration runs in a fresh process that
feeds K encoders every frame and reports the RSS and heap growth per encoder, the bytes per
frame, and the µs per tab-frame with the K encoders used in turn, as a flush uses them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import subprocess
import sys
import time
from collections import Counter
from typing import Any

from bench.client import Connection, run
from bench.fanout import (
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

APP = "bench.apps_broadcast:gol"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.gol_session", description=__doc__.split("\n")[0])
    p.add_argument("--tabs", type=int, default=100, help="watching tabs (default 100)")
    p.add_argument("--seconds", type=float, default=60.0, help="session length per coding (default 60)")
    p.add_argument("--codings", default="zstd,br")
    p.add_argument("--identity-seconds", type=float, default=10.0, help="identity baseline session; 0 skips")
    p.add_argument("--window", type=float, default=10.0, help="seconds per CPU window (default 10)")
    p.add_argument("--reseed", type=int, default=20, help="cells flipped per generation (default 20)")
    p.add_argument("--idle-tabs", type=int, default=200, help="tabs of the idle-release test; 0 skips")
    p.add_argument("--diff-seconds", type=float, default=15.0, help="session of the changed-cells variant; 0 skips")
    p.add_argument("--diff-codings", default="zstd")
    p.add_argument(
        "--shared-frames-min-tabs",
        type=int,
        default=16,
        help="the app's shared_frames_min_tabs: 0 compresses every render per tab (A/B)",
    )
    p.add_argument(
        "--zstd-search",
        choices=("pyvia", "level"),
        default="pyvia",
        help="zstd streams: pyvia's STREAM_ZSTD_SEARCH (default) or the level's own search (A/B)",
    )
    p.add_argument(
        "--alternatives",
        type=int,
        default=100,
        metavar="K",
        help="tabs per offline configuration (default 100); 0 skips the offline part",
    )
    p.add_argument("--probe", help=argparse.SUPPRESS)  # internal: one offline configuration
    return p


# --- offline: the same frames through other encoder settings ----------------------------------------

ALTERNATIVES = [  # (mode, coding, level, window): pyvia today is (full, zstd, 3, 16) and (full, br, 4, 16)
    ("full", "zstd", 3, 16),
    ("full", "zstd", 1, 16),
    ("full", "zstd", 3, 15),
    ("full", "zstd", 6, 17),
    ("full", "br", 4, 16),
    ("full", "br", 2, 16),
    ("full", "br", 5, 17),
    ("diff", "zstd", 3, 16),
    ("diff", "zstd", 3, 14),
    ("diff", "zstd", 1, 14),
    ("diff", "br", 4, 14),
    ("diff", "br", 2, 14),
    ("full", "zstd-shared", 3, 16),
    ("full", "zstd-shared", 6, 17),
]


def gol_frames(mode: str, generations: int = 300, reseed: int = 20) -> list[bytes]:
    """The events a tab receives: the view (or the changed cells) plus the generation signal."""
    from bench.apps_broadcast import SIZE, new_board, step
    from pyvia import protocol
    from pyvia.render import view_patch

    rng = random.Random(7)
    board = new_board(seed=1)
    click = (
        "evt.target.parentElement.id == 'board' &amp;&amp; @post(&#39;/_action/toggle?cell=&#39; + "
        "[...evt.target.parentElement.children].indexOf(evt.target), {requestCancellation: &#39;disabled&#39;})"
    )
    frames = []
    for gen in range(1, generations + 1):
        new = step(board)
        for _ in range(reseed):
            i = rng.randrange(SIZE * SIZE)
            new[i] = not new[i]
        signals = protocol.patch_signals({"_route__generation": gen})
        if mode == "diff":
            cells = "".join(
                f'<div id="c{i}" class="on"></div>' if new[i] else f'<div id="c{i}"></div>'
                for i in range(SIZE * SIZE)
                if new[i] != board[i]
            )
            frames.append(protocol.patch_elements(cells) + signals)
        else:
            cells = "".join('<div class="on"></div>' if alive else "<div></div>" for alive in new)
            view = (
                f'<main id="life"><h1>Game of Life</h1><p>Generation '
                f'<strong id="gen" data-text="$_route__generation">'
                f'{gen}</strong>, 100 watching.</p><div id="board" data-on:click="{click}">{cells}</div></main>'
            )
            frames.append(view_patch(view) + signals)
        board = new
    return frames


def _probe(spec: str) -> dict[str, Any]:
    """Run in a fresh process: K encoders of one configuration, each fed every frame in turn (frame
    i to every encoder, then frame i+1, as a flush does), so each encoder is cold in the cache when
    its turn comes; then one more encoder fed all frames alone. A ``-shared`` coding is one
    encoder for all K tabs (the same bytes written to each) that ends its zstd frame every 50
    frames, where a tab that connected since could join."""
    import gc

    from bench.apps_broadcast import _libc, _rss_kb
    from pyvia import protocol
    from pyvia.compress import StreamEncoder

    mode, coding, level, window, k_text = spec.split(":")
    k = int(k_text)
    shared = coding.endswith("-shared")
    codec = coding.removesuffix("-shared")
    frames = gol_frames(mode)
    first = protocol.patch_signals({protocol.DISCONNECTED_SIGNAL: False, protocol.FILTER_SIGNAL: protocol.FILTER_OPEN})
    gc.collect()
    rss0, heap0 = _rss_kb(), _libc.mallinfo2().uordblks + _libc.mallinfo2().hblkhd
    encoders = [StreamEncoder(codec, level=int(level), window=int(window)) for _ in range(1 if shared else k)]
    wire = sum(len(e.encode(first)) for e in encoders[:1])
    spent = 0.0
    for n, frame in enumerate(frames):
        t0 = time.perf_counter()
        boundary = shared and n > 0 and n % 50 == 0  # a zstd frame ends: tabs that joined since start here
        for enc in encoders:
            out = enc.release().data + enc.encode(frame) if boundary else enc.encode(frame)
        spent += time.perf_counter() - t0
        wire += len(out)
    info = _libc.mallinfo2()
    rss1, heap1 = _rss_kb(), info.uordblks + info.hblkhd
    warm = StreamEncoder(codec, level=int(level), window=int(window))
    t0 = time.perf_counter()
    for frame in frames:
        warm.encode(frame)
    warm_us = (time.perf_counter() - t0) / len(frames) * 1e6
    raw = sum(len(f) for f in frames)
    return {
        "mode": mode,
        "coding": coding,
        "level": int(level),
        "window": int(window),
        "tabs": k,
        "encoders": len(encoders),
        "rss_kb_per_tab": (rss1 - rss0) / k,
        "heap_kb_per_tab": (heap1 - heap0) / 1024 / k,
        "raw_bytes_per_frame": raw / len(frames),
        "wire_bytes_per_frame": wire / len(frames),
        "ratio": raw / wire,
        "us_per_tab_frame_cold": spent / k / len(frames) * 1e6,
        "us_per_frame_warm": warm_us,
    }


async def alternatives(args: argparse.Namespace, recorder: Recorder) -> list[dict[str, Any]]:
    rows = []
    full_raw = None
    print(f"[offline] 300 generations per configuration, {args.alternatives} tabs each, a fresh process per row")
    for mode, coding, level, window in ALTERNATIVES:
        spec = f"{mode}:{coding}:{level}:{window}:{args.alternatives}"
        out = await asyncio.to_thread(
            subprocess.run,
            ["taskset", "-c", "1", sys.executable, "-m", "bench.gol_session", "--probe", spec],
            capture_output=True,
            text=True,
            timeout=300,
        )
        if out.returncode != 0:
            raise RuntimeError(f"probe {spec} failed: {out.stderr[-800:]}")
        row = json.loads(out.stdout.strip().splitlines()[-1])
        if mode == "full" and full_raw is None:
            full_raw = row["raw_bytes_per_frame"]
        row["type"] = "alternative"
        row["board_ratio"] = (full_raw or row["raw_bytes_per_frame"]) / row["wire_bytes_per_frame"]
        row["pyvia_today"] = (mode, coding, level, window) in (("full", "zstd", 3, 16), ("full", "br", 4, 16))
        recorder.write(row)
        rows.append(row)
        print(
            f"  {mode:4} {coding:11} level {level} window 2^{window}: {row['rss_kb_per_tab']:6.0f} KB RSS/tab "
            f"(heap {row['heap_kb_per_tab']:5.0f}), {row['raw_bytes_per_frame']:7,.0f} → "
            f"{row['wire_bytes_per_frame']:5,.0f} B/frame = {row['ratio']:5.1f}:1 "
            f"({row['board_ratio']:5.1f}:1 against the whole board), "
            f"{row['us_per_tab_frame_cold']:5.1f} µs/tab-frame with {args.alternatives} tabs in turn "
            f"({row['us_per_frame_warm']:.1f} for one encoder alone)"
            f"{'   <- pyvia today' if row['pyvia_today'] else ''}",
            flush=True,
        )
    return rows


async def _call(conn: Connection, server: Server, method: str, target: str) -> dict[str, Any]:
    return await get_json(conn, server.host, method, target)


async def session(
    args: argparse.Namespace, coding: str, mode: str, seconds: float, recorder: Recorder
) -> dict[str, Any]:
    env = {
        "BENCH_GOL_MODE": mode,
        "BENCH_GOL_RESEED": str(args.reseed),
        "BENCH_ZSTD_SEARCH": args.zstd_search,
        "BENCH_SHARED_MIN_TABS": str(args.shared_frames_min_tabs),
    }
    server = await launch("native", APP, env=env)
    tabs: list[TabStream] = []
    try:
        return await _session(args, coding, mode, seconds, recorder, server, tabs)
    finally:
        for tab in tabs:
            tab.close()
        await server.stop()


async def _session(
    args: argparse.Namespace,
    coding: str,
    mode: str,
    seconds: float,
    recorder: Recorder,
    server: Server,
    tabs: list[TabStream],
) -> dict[str, Any]:
    label = f"{mode}/{coding}"
    conn = await Connection.open("127.0.0.1", server.port)
    hub = Hub(key="_route__generation")
    failures: Counter[str] = Counter()
    browsers, warm = await open_tabs(server.host, server.port, 2, hub, "identity", sessions=2, failures=failures)
    tabs += warm
    await asyncio.sleep(3.0)
    await wait_quiet(max_wait=10.0)
    rss0 = server.rss_kb()
    mem0 = await _call(conn, server, "GET", "/mem")
    gol0 = await _call(conn, server, "GET", "/gol")
    _, watching = await open_tabs(
        server.host, server.port, args.tabs, hub, coding, browsers=browsers, failures=failures
    )
    tabs += watching
    print(f"[{label}] {len(watching)}/{args.tabs} tabs watching; RSS before them {rss0 / 1024:.1f} MB", flush=True)
    windows = []
    started = time.monotonic()
    while time.monotonic() - started < seconds - 0.5:
        frames0 = sum(t.n_elements for t in tabs)
        g0 = await _call(conn, server, "GET", "/gol")
        meter = Meter(server).start()
        await asyncio.sleep(min(args.window, seconds - (time.monotonic() - started)))
        meter.stop()
        g1 = await _call(conn, server, "GET", "/gol")
        frames = sum(t.n_elements for t in tabs) - frames0
        gens = g1["generations"] - g0["generations"]
        rec = {
            "type": "window",
            "mode": mode,
            "coding": coding,
            "tabs": len(tabs),
            "generations": gens,
            "tab_frames": frames,
            "us_per_tab_frame": meter.cpu_clock / frames * 1e6 if frames else float("nan"),
            "changed_share": (g1["cells"] - g0["cells"]) / max(1, gens) / 2500,
            "rss_kb": server.rss_kb(),
            **meter.as_dict(),
        }
        recorder.write(rec)
        windows.append(rec)
        print(
            f"  window {len(windows)}: {gens} generations, {frames:,} tab-frames, "
            f"{rec['us_per_tab_frame']:.1f} µs server CPU per tab-frame, {rec['changed_share']:.1%} of cells "
            f"changed per generation; RSS {rec['rss_kb'] / 1024:.1f} MB; server core {rec['server_busy']:.0%}, "
            f"others on it {rec['others_on_server_core']:.0%}{' NOISY' if rec['noisy'] else ''}",
            flush=True,
        )
    await asyncio.sleep(0.5)
    rss1 = server.rss_kb()
    mem1 = await _call(conn, server, "GET", "/mem")
    gol1 = await _call(conn, server, "GET", "/gol")
    n = max(1, len(watching))
    wire = sum(t.wire for t in watching)
    decoded = sum(t.decoded for t in watching)
    elements = [t.n_elements for t in watching]
    gens = gol1["generations"] - gol0["generations"]
    closed = sum(1 for t in tabs if t.closed)
    errors = Counter(t.error for t in tabs if t.error)
    unknown = sum(t.n_unknown for t in tabs)
    behind = sum(1 for t in watching if t.value is None or t.value < gol1["generation"] - 2)
    quiet = [w for w in windows if not w["noisy"]] or windows
    summary = {
        "type": "summary",
        "mode": mode,
        "coding": coding,
        "zstd_search": args.zstd_search,
        "shared_frames_min_tabs": args.shared_frames_min_tabs,
        "tabs": len(watching),
        "seconds": seconds,
        "generations": gens,
        "reseed": args.reseed,
        "changed_share": (gol1["cells"] - gol0["cells"]) / max(1, gens) / 2500,
        "kb_per_tab_rss": (rss1 - rss0) / n,
        "kb_per_tab_heap": (mem1["heap_in_use"] - mem0["heap_in_use"]) / 1024 / n,
        "kb_per_tab_encoder_estimate": mem1["encoders"]["bytes"] / 1024 / max(1, mem1["encoders"]["encoders"]),
        "encoders": mem1["encoders"],
        "ratio": decoded / wire if wire else float("nan"),
        "wire_bytes_per_tab_frame": wire / max(1, sum(elements)),
        "decoded_bytes_per_tab_frame": decoded / max(1, sum(elements)),
        "frames_per_tab": spread([float(e) for e in elements]),
        "us_per_tab_frame": spread([w["us_per_tab_frame"] for w in quiet]),
        "us_per_tab_frame_all": spread([w["us_per_tab_frame"] for w in windows]),
        "noisy_windows": sum(1 for w in windows if w["noisy"]),
        "windows": len(windows),
        "rss_kb": [rss0, rss1],
        "closed": closed,
        "errors": dict(errors),
        "unknown_events": unknown,
        "tabs_behind": behind,
        "open_failures": dict(failures),
        "dirty": bool(failures)
        or bool(errors)
        or closed > 0
        or unknown > 0
        or behind > 0
        or len(watching) != args.tabs,
    }
    recorder.write(summary)
    print(
        f"  => {label}: {summary['kb_per_tab_rss']:.0f} KB RSS per busy tab "
        f"(heap {summary['kb_per_tab_heap']:.0f} KB, "
        f"encoder estimate {summary['kb_per_tab_encoder_estimate']:.0f} KB); ratio {summary['ratio']:.1f}:1 "
        f"({summary['decoded_bytes_per_tab_frame']:,.0f} → {summary['wire_bytes_per_tab_frame']:,.0f} B per "
        f"tab-frame); CPU {fmt(summary['us_per_tab_frame'])} µs per tab-frame; "
        f"{summary['changed_share']:.1%} of cells changed per generation; checks "
        f"{'clean' if not summary['dirty'] else 'DIRTY'}",
        flush=True,
    )
    for browser in browsers:
        browser.conn.close()
    conn.close()
    return summary


async def idle_release(args: argparse.Namespace, recorder: Recorder) -> dict[str, Any]:
    env = {"BENCH_GOL_MODE": "full", "BENCH_GOL_RESEED": str(args.reseed), "BENCH_IDLE_RELEASE": "2"}
    server = await launch("native", APP, env=env)
    tabs: list[TabStream] = []
    try:
        return await _idle_release(args, recorder, server, tabs)
    finally:
        for tab in tabs:
            tab.close()
        await server.stop()


async def _idle_release(
    args: argparse.Namespace, recorder: Recorder, server: Server, tabs: list[TabStream]
) -> dict[str, Any]:
    conn = await Connection.open("127.0.0.1", server.port)
    hub = Hub(key="_route__generation")
    failures: Counter[str] = Counter()
    browsers, warm = await open_tabs(server.host, server.port, 2, hub, "identity", sessions=2, failures=failures)
    tabs += warm
    await asyncio.sleep(3.0)
    rss0 = server.rss_kb()
    mem0 = await _call(conn, server, "GET", "/mem")
    _, watching = await open_tabs(
        server.host, server.port, args.idle_tabs, hub, "zstd", browsers=browsers, failures=failures
    )
    tabs += watching
    await asyncio.sleep(4.0)
    rss_busy = server.rss_kb()
    mem_busy = await _call(conn, server, "GET", "/mem")
    await _call(conn, server, "POST", "/pause?on=1")
    paused = time.monotonic()
    mem = mem_busy
    while time.monotonic() - paused < 30.0:
        await asyncio.sleep(1.0)
        mem = await _call(conn, server, "GET", "/mem")
        if mem["encoders"]["encoders"] == 0:
            break
    released_after = time.monotonic() - paused
    await asyncio.sleep(1.0)
    rss_idle = server.rss_kb()
    mem_idle = await _call(conn, server, "GET", "/mem")
    await asyncio.sleep(5.0)  # pyvia's sweep trims at most every 5 s after encoders were dropped
    rss_swept = server.rss_kb()
    trimmed = await _call(conn, server, "POST", "/trim")
    await asyncio.sleep(0.5)
    rss_trim = server.rss_kb()
    n = max(1, len(watching))
    frames_ended = sum(t.frames for t in watching)
    alive = sum(1 for t in watching if not t.closed and not t.error)
    summary = {
        "type": "summary",
        "mode": "idle-release",
        "coding": "zstd",
        "tabs": len(watching),
        "kb_per_busy_tab_rss": (rss_busy - rss0) / n,
        "kb_per_busy_tab_heap": (mem_busy["heap_in_use"] - mem0["heap_in_use"]) / 1024 / n,
        "live_encoders_busy": mem_busy["encoders"]["encoders"],
        "live_encoders_idle": mem["encoders"]["encoders"],
        "released_after_s": released_after,
        "zstd_frames_ended_per_tab": frames_ended / n,
        "kb_per_idle_tab_rss": (rss_idle - rss0) / n,
        "kb_per_idle_tab_rss_6s": (rss_swept - rss0) / n,
        "kb_per_idle_tab_heap": (mem_idle["heap_in_use"] - mem0["heap_in_use"]) / 1024 / n,
        "kb_per_idle_tab_rss_after_trim": (rss_trim - rss0) / n,
        "trim_rss_kb_reported": trimmed["rss_kb"],
        "rss_kb": [rss0, rss_busy, rss_idle, rss_swept, rss_trim],
        "alive": alive,
        "open_failures": dict(failures),
        "dirty": bool(failures) or alive != len(watching) or mem["encoders"]["encoders"] != 0,
    }
    recorder.write(summary)
    print(
        f"[idle release, zstd, {len(watching)} tabs] busy {summary['kb_per_busy_tab_rss']:.0f} KB RSS/tab "
        f"(heap {summary['kb_per_busy_tab_heap']:.0f} KB, {summary['live_encoders_busy']} live encoders); "
        f"paused, all "
        f"encoders released after {released_after:.1f} s ({summary['zstd_frames_ended_per_tab']:.1f} zstd frames "
        f"ended per tab); idle {summary['kb_per_idle_tab_rss']:.1f} KB RSS/tab 1 s later, "
        f"{summary['kb_per_idle_tab_rss_6s']:.1f} KB 6 s later, heap "
        f"{summary['kb_per_idle_tab_heap']:.1f} KB/tab, after malloc_trim "
        f"{summary['kb_per_idle_tab_rss_after_trim']:.1f}"
        f" KB RSS/tab; checks {'clean' if not summary['dirty'] else 'DIRTY'}",
        flush=True,
    )
    for browser in browsers:
        browser.conn.close()
    conn.close()
    return summary


async def _main(args: argparse.Namespace) -> int:
    recorder = Recorder("gol_session")
    record = provenance("gol_session", vars(args), ["taskset", "-c", "1", "pyvia", "run", APP])
    record["server_packages"] = server_versions()
    record["env"] = env_record()
    print_provenance(record)
    recorder.write(record)
    print(f"# raw results: {recorder.path}", flush=True)
    started = time.monotonic()
    results = []
    if args.identity_seconds > 0:
        results.append(await session(args, "identity", "full", args.identity_seconds, recorder))
    for coding in [c.strip() for c in args.codings.split(",") if c.strip()]:
        results.append(await session(args, coding, "full", args.seconds, recorder))
    if args.idle_tabs > 0:
        results.append(await idle_release(args, recorder))
    if args.diff_seconds > 0:
        for coding in [c.strip() for c in args.diff_codings.split(",") if c.strip()]:
            results.append(await session(args, coding, "diff", args.diff_seconds, recorder))
    if args.alternatives > 0:
        await alternatives(args, recorder)
    _print_table(results)
    print(f"# done in {time.monotonic() - started:.0f} s")
    return 1 if any(r["dirty"] for r in results) else 0


def _print_table(results: list[dict[str, Any]]) -> None:
    base = next((r for r in results if r["coding"] == "identity" and r["mode"] == "full"), None)
    full = next((r for r in results if r["mode"] == "full"), None)
    print("summary")
    for r in results:
        if r["mode"] == "idle-release":
            print(
                f"  idle tab, zstd encoder released: {r['kb_per_idle_tab_rss']:.1f} KB RSS 1 s after, "
                f"{r['kb_per_idle_tab_rss_6s']:.1f} KB 6 s after "
                f"({r['kb_per_idle_tab_rss_after_trim']:.1f} after an explicit malloc_trim), "
                f"heap {r['kb_per_idle_tab_heap']:.1f} KB"
                f"   (target ≤ 12 KB)"
            )
            continue
        net = ""
        if base is not None and r is not base:
            net = f", {r['us_per_tab_frame']['median'] - base['us_per_tab_frame']['median']:.1f} over identity"
        eff = ""
        if r["mode"] == "diff" and full is not None:
            eff = (
                f", {full['decoded_bytes_per_tab_frame'] / r['wire_bytes_per_tab_frame']:.0f}:1 against the "
                f"whole board's {full['decoded_bytes_per_tab_frame']:,.0f} B"
            )
        print(
            f"  {r['mode']:4} {r['coding']:8} {r['kb_per_tab_rss']:7.0f} KB/busy tab "
            f"(heap {r['kb_per_tab_heap']:.0f}); "
            f"ratio {r['ratio']:5.1f}:1, {r['wire_bytes_per_tab_frame']:,.0f} B on the wire per frame{eff}; "
            f"CPU {fmt(r['us_per_tab_frame'])} µs/tab-frame{net}"
        )
    print("  targets: a busy GoL tab ≤ 200 KB of server memory at ≥ 50x compression over 60 s")


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.probe:
        print(json.dumps(_probe(args.probe)))
        return 0
    pin_client()
    return int(run(_main(args)))


if __name__ == "__main__":
    sys.exit(main())
