"""Stream compression and static serving: CPU, bytes and memory of pyvia's encoders.

Run from the repository root: ``python -m bench.compression`` (about two minutes on the 2-core
dev box). It prints tables and writes one JSON object per row to
``bench/results/compression-<UTC time>.jsonl``.

What it measures (the method of ``machine-limits.md`` §3, on pyvia's own code paths):

* **Streams** (``pyvia.compress.StreamEncoder``, window sized from the first frame as in
  production) per coding and level — zstd 1/3, br 2/4/5, gzip 1/6 — on two 60-second sessions
  at 5 events/s (300 events each): (a) Game-of-Life frames, a 50x50 board of
  ``<div id="c{i}" class="cell on|off"></div>`` (~96 KB per frame, 12-33% of cells changing per
  generation, 20 cells re-seeded each one) and (b) 2 KB "cluster status" patches (3 of 16
  numbers, a tick and a time change per event). Two more small shapes, a chat list (~2.5 KB,
  one new message per event) and a ``datastar-patch-signals`` event of 30 gauges (~0.9 KB), run
  zstd 1/3 and br 4 to check the zstd table sizing; "zstd-plain" rows are zstd with the level's
  own tables (``from_level(3, window_log=w)`` alone). CPU is ``time.process_time_ns`` around
  ``encode()`` (compress + flush), best of 3 sessions, pinned to one CPU; bytes and ratio are
  over the whole session, first event included.
* **Memory per encoder**: a fresh subprocess per row creates 200 encoders, feeds each (GoL: 40
  frames, 3.8 MB, enough to fill a 256 KB window; patches: 300 events), and reports the growth
  of RSS (``/proc/self/smaps_rollup``) divided by 200; then after ``release()`` of every encoder,
  and after glibc's ``malloc_trim(0)``.
* ``--memory-grid``: the same probe over levels and explicit windows, after 64 KB of patches
  and after the window has filled; this is the table behind ``pyvia.compress.estimate_memory``.
* **Static**: ``StaticFiles.get`` on a 91 KB stylesheet held in memory: µs per call for a 304
  (``If-None-Match``), a full brotli 200 and a full identity 200; the one-off precompression
  times; and whether the GIL is released while compressing (the main thread's progress while a
  thread compresses, against its progress alone).
"""

from __future__ import annotations

import argparse
import ctypes
import datetime
import gc
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pyvia.compress.codings
from pyvia.compress import StreamEncoder, compress, window_for
from pyvia.http import Headers, Request
from pyvia.static import StaticFiles

RESULTS = Path(__file__).parent / "results"
ROWS = [
    ("zstd", 1),
    ("zstd", 3),
    ("zstd-dfast", 3),
    ("zstd-plain", 3),
    ("br", 2),
    ("br", 4),
    ("br", 5),
    ("gzip", 1),
    ("gzip", 6),
]
#: Two more small-patch shapes, to check that the zstd table sizing holds beyond the status card.
EXTRA_ROWS = [("zstd", 1), ("zstd", 3), ("zstd-dfast", 3), ("zstd-plain", 3), ("br", 4)]
SESSION = 300  # events: 60 s at 5 per second
MEMORY_ENCODERS = 200
MEMORY_GOL_FRAMES = 40


# --- frames -------------------------------------------------------------------------------------


def gol_frames(n: int, width: int = 50, height: int = 50, seed: int = 1) -> list[bytes]:
    """``n`` Game-of-Life generations, each a whole-board Datastar event."""
    rng = random.Random(seed)
    cells = [rng.random() < 0.3 for _ in range(width * height)]
    out = []
    for _ in range(n):
        board = "".join(
            f'<div id="c{i}" class="cell {"on" if alive else "off"}"></div>' for i, alive in enumerate(cells)
        )
        out.append(f'event: datastar-patch-elements\ndata: elements <div id="board">{board}</div>\n\n'.encode())
        nxt = []
        for y in range(height):
            for x in range(width):
                around = sum(
                    cells[((y + dy) % height) * width + (x + dx) % width]
                    for dy in (-1, 0, 1)
                    for dx in (-1, 0, 1)
                    if dy or dx
                )
                nxt.append(around == 3 or (cells[y * width + x] and around == 2))
        for _ in range(20):
            nxt[rng.randrange(width * height)] = True
        cells = nxt
    return out


def patch_frames(n: int, seed: int = 2) -> list[bytes]:
    """``n`` ~2 KB status-card events; 3 of 16 numbers, the tick and the time change each time."""
    rng = random.Random(seed)
    values = [rng.randrange(1000, 99999) for _ in range(16)]
    out = []
    for t in range(n):
        for _ in range(3):
            values[rng.randrange(16)] = rng.randrange(1000, 99999)
        rows = "".join(
            f'<tr><td class="name">node-{i:02d}.cluster.local</td><td class="metric">{v}</td>'
            f'<td class="unit">req/s</td></tr>'
            for i, v in enumerate(values)
        )
        card = (
            f'<div id="status" class="card"><h2>Cluster status</h2><p class="tick">tick {t} at '
            f"2026-05-09T12:{t // 60 % 60:02d}:{t % 60:02d}Z</p><table>{rows}</table></div>"
        )
        out.append(f"event: datastar-patch-elements\ndata: elements {card}\n\n".encode())
    return out


_WORDS_TEXT = (
    "the of and to in is you that it he was for on are as with his they at be this have from or one had by "
    "word but not what all were we when your can said there use an each which she do how their if will up "
    "other about out many then them these so some her would make like him into time has look two more"
)


def chat_frames(n: int, seed: int = 5) -> list[bytes]:
    """A chat list of the last 15 messages, one new message per event (~2.5 KB)."""
    rng = random.Random(seed)
    words = _WORDS_TEXT.split()
    messages: list[str] = []
    out = []
    for t in range(n):
        text = " ".join(rng.choice(words) for _ in range(rng.randrange(5, 25)))
        messages.append(
            f'<li class="msg" id="m{t}"><b class="who">user{rng.randrange(40)}</b> '
            f'<span class="text">{text}</span><time>12:{t % 60:02d}</time></li>'
        )
        messages = messages[-15:]
        out.append(
            f'event: datastar-patch-elements\ndata: elements <ul id="chat">{"".join(messages)}</ul>\n\n'.encode()
        )
    return out


def signal_frames(n: int, seed: int = 6) -> list[bytes]:
    """A ``datastar-patch-signals`` event of 30 gauges, 5 of them changing per event (~0.9 KB)."""
    rng = random.Random(seed)
    gauges = {f"cpu{i}": rng.random() for i in range(30)}
    out = []
    for _ in range(n):
        for key in rng.sample(sorted(gauges), 5):
            gauges[key] = rng.random()
        out.append(f"event: datastar-patch-signals\ndata: signals {json.dumps(gauges)}\n\n".encode())
    return out


WORKLOADS = {"gol": gol_frames, "patch": patch_frames, "chat": chat_frames, "signals": signal_frames}


def workload(name: str, n: int) -> list[bytes]:
    return WORKLOADS[name](n)


def plain_zstd_tables(plain: bool) -> None:
    """Switch pyvia's zstd stream tables between window-sized (default) and the level's own."""
    pyvia.compress.codings._ZSTD_TABLE_SLACK = None if plain else 3
    pyvia.compress.codings._zstd_params.clear()


def make_encoder(label: str, level: int, window: int | None = None) -> StreamEncoder:
    """pyvia's encoder for a row: "zstd" is the default (``STREAM_ZSTD_SEARCH``); "zstd-dfast" the
    level's own search with window-sized tables (pyvia's default before); "zstd-plain" the level's
    own search and tables (call ``plain_zstd_tables(True)`` first)."""
    if label in ("zstd-dfast", "zstd-plain"):
        return StreamEncoder("zstd", level=level, window=window, search=None)
    return StreamEncoder(label, level=level, window=window)


# --- helpers ------------------------------------------------------------------------------------


def rss() -> int:
    with open("/proc/self/smaps_rollup") as f:
        for line in f:
            if line.startswith("Rss:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no Rss line in /proc/self/smaps_rollup")


def pin() -> str:
    """Pin this process to its last allowed CPU (``machine-limits.md`` pins with taskset the same way)."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) > 1:
        os.sched_setaffinity(0, {cpus[-1]})
        return str(cpus[-1])
    return "unpinned"


def emit(rows: list[dict[str, object]], out: Path) -> None:
    with out.open("a") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")


# --- streams: CPU and bytes ---------------------------------------------------------------------


def stream_cpu(frames: list[bytes], coding: str, level: int, repeats: int = 3) -> dict[str, object]:
    plain_zstd_tables(coding == "zstd-plain")
    best = None
    for _ in range(repeats):
        enc = make_encoder(coding, level)
        outs = []
        gc.disable()
        t0 = time.process_time_ns()
        for frame in frames:
            outs.append(enc.encode(frame))
        elapsed = time.process_time_ns() - t0
        gc.enable()
        enc.discard()
        if best is None or elapsed < best[0]:
            best = (elapsed, outs, enc.window)
    plain_zstd_tables(False)
    assert best is not None
    elapsed, outs, window = best
    size_in = sum(map(len, frames))
    size_out = sum(map(len, outs))
    steady = outs[len(outs) // 3 :]
    return {
        "window": window,
        "us_per_event": elapsed / len(frames) / 1000,
        "bytes_in_per_event": size_in / len(frames),
        "bytes_out_per_event": size_out / len(frames),
        "steady_bytes_out_per_event": sum(map(len, steady)) / len(steady),
        "first_event_bytes_out": len(outs[0]),
        "ratio": size_in / size_out,
    }


# --- memory probes (one fresh process per row) --------------------------------------------------


def probe(coding: str, level: int, kind: str, frames_n: int, count: int, window: int | None) -> dict[str, object]:
    """Run inside a fresh process: RSS per encoder held, after release, after malloc_trim.

    ``coding`` "zstd-plain" is zstd with the level's own table sizes (for comparison).
    """
    label = coding
    if coding == "zstd-plain":
        plain_zstd_tables(True)
    frames = workload(kind, frames_n)
    libc = ctypes.CDLL("libc.so.6")
    encoders = [make_encoder(coding, level, window) for _ in range(count)]
    gc.collect()
    libc.malloc_trim(0)
    base = rss()
    for enc in encoders:
        for frame in frames:
            enc.encode(frame)
    gc.collect()
    held = rss()
    for enc in encoders:
        enc.release()
    gc.collect()
    released = rss()
    libc.malloc_trim(0)
    trimmed = rss()
    return {
        "coding": label,
        "level": level,
        "window": encoders[0].window,
        "workload": kind,
        "frames": frames_n,
        "fed_bytes": sum(map(len, frames)),
        "encoders": count,
        "kib_per_encoder": (held - base) / count / 1024,
        "kib_after_release": (released - base) / count / 1024,
        "kib_after_trim": (trimmed - base) / count / 1024,
    }


def run_probe(coding: str, level: int, kind: str, frames_n: int, count: int, window: int | None = None) -> dict:
    cmd = [
        sys.executable,
        "-m",
        "bench.compression",
        "--probe",
        coding,
        str(level),
        kind,
        str(frames_n),
        str(count),
        str(window or 0),
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=Path(__file__).parent.parent)
    return json.loads(done.stdout.strip().splitlines()[-1])


def memory_grid(out: Path, codings: str = "zstd,br,gzip") -> None:
    """(small, saturated) KiB per (coding, level, window): the table of ``pyvia.compress.encoder_memory``."""
    print("\nMemory grid: KiB RSS per encoder after 64 KB of 2 KB patches / after the window filled")
    table: dict[tuple[str, int, int], tuple[int, int]] = {}
    rows = []
    specs = [("zstd", lv, w) for lv in (1, 3, 6) for w in (16, 18, 20, 22)]
    specs += [("br", lv, w) for lv in (1, 2, 4, 5) for w in (16, 18, 20, 22)]
    specs += [("gzip", lv, 15) for lv in (1, 6, 9)]
    wanted = {c.strip() for c in codings.split(",")}
    for coding, level, window in [spec for spec in specs if spec[0] in wanted]:
        small = run_probe(coding, level, "patch", 34, 50, window if coding != "gzip" else None)
        need = (1 << (15 if coding == "gzip" else window)) * 2 + (128 << 10)
        frames_n = max(4, -(-need // 95_731))
        big = run_probe(coding, level, "gol", frames_n, 20 if window <= 20 else 8, window if coding != "gzip" else None)
        table[(coding, level, window)] = (round(small["kib_per_encoder"]), round(big["kib_per_encoder"]))
        print(f"  {coding:4s} {level:2d} w{window}: {table[(coding, level, window)]}")
        rows += [{"bench": "memory_grid", "phase": "small", **small}, {"bench": "memory_grid", "phase": "full", **big}]
    emit(rows, out)
    print("\n_MEMORY_KIB = {")
    for key, value in table.items():
        print(f"    {key!r}: {value!r},")
    print("}")


# --- static -------------------------------------------------------------------------------------


def stylesheet(size: int = 91_000) -> bytes:
    rng = random.Random(3)
    parts, total = [], 0
    i = 0
    while total < size:
        rule = (
            f".c{i} > .item-{rng.randrange(400)} {{ color: #{rng.randrange(1 << 24):06x}; "
            f"margin: {rng.randrange(20)}px {rng.randrange(20)}px; display: flex; }}\n"
        )
        parts.append(rule)
        total += len(rule)
        i += 1
    return "".join(parts).encode()[:size]


def _python_job(data: bytes) -> None:
    """A control that holds the GIL the whole time (~70 ms on a 91 KB input)."""
    total = 0
    for _ in range(60):
        for byte in data:
            total += byte


def gil_check(data: bytes) -> list[dict[str, object]]:
    """Main-thread progress while a thread compresses, against its progress alone, alternated
    5 times (median). About 1.0: the library releases the GIL (needs a second CPU); the pure
    Python control shows what holding it looks like."""
    rows = []
    jobs = {"br 11": ("br", 11), "zstd 19": ("zstd", 19), "gzip 9": ("gzip", 9), "python (control)": ("", 0)}
    for name, (coding, level) in jobs.items():

        def run(coding: str = coding, level: int = level) -> None:
            if coding:
                compress(data, coding, level)
            else:
                _python_job(data)

        t0 = time.perf_counter()
        run()
        once = time.perf_counter() - t0
        ratios = []
        for _ in range(5):
            done = threading.Event()

            def job(run: Callable[[], None] = run, done: threading.Event = done) -> None:
                run()
                done.set()

            spins = 0
            t0 = time.perf_counter()
            threading.Thread(target=job).start()
            while not done.is_set():
                sum(range(100))
                spins += 1
            elapsed = time.perf_counter() - t0
            alone = 0
            t0 = time.perf_counter()
            while time.perf_counter() - t0 < elapsed:
                sum(range(100))
                alone += 1
            ratios.append(spins / alone)
        rows.append(
            {
                "bench": "precompress",
                "job": name,
                "ms": once * 1000,
                "bytes_out": len(compress(data, coding, level)) if coding else 0,
                "main_thread_progress": statistics.median(ratios),
            }
        )
    return rows


def static_bench(data: bytes) -> list[dict[str, object]]:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "app.css").write_bytes(data)
        static = StaticFiles(tmp, cache_control="public, max-age=3600")
        static.start()
        static.wait()
        br = [("accept-encoding", "gzip, deflate, br, zstd")]
        probe_resp = static.get("/app.css", Request("GET", "/app.css", headers=Headers([("accept-encoding", "br")])))
        assert probe_resp is not None
        etag = dict(probe_resp.headers)["etag"]
        cases = {
            "304 (If-None-Match, br)": Headers([("accept-encoding", "br"), ("if-none-match", etag)]),
            "200 br": Headers([("accept-encoding", "br")]),
            "200 zstd (browser header)": Headers(br),
            "200 identity": Headers([]),
        }
        for name, headers in cases.items():
            request = Request("GET", "/app.css", headers=headers)
            resp = static.get("/app.css", request)
            assert resp is not None
            n = 50_000
            best = []
            for _ in range(5):
                t0 = time.perf_counter_ns()
                for _ in range(n):
                    static.get("/app.css", request)
                best.append((time.perf_counter_ns() - t0) / n / 1000)
            rows.append(
                {
                    "bench": "static_get",
                    "case": name,
                    "status": resp.status,
                    "body_bytes": len(resp.body),
                    "us_per_get": min(best),
                    "us_median": statistics.median(best),
                    "file_bytes": len(data),
                }
            )
        static.close()
    return rows


# --- main ---------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--probe", nargs=6, metavar=("CODING", "LEVEL", "WORKLOAD", "FRAMES", "COUNT", "WINDOW"))
    parser.add_argument("--memory-grid", action="store_true", help="measure the memory-estimate table only")
    parser.add_argument("--quick", action="store_true", help="fewer encoders for the memory rows (20)")
    parser.add_argument("--grid-codings", default="zstd,br,gzip", help="codings of --memory-grid (default all)")
    args = parser.parse_args()
    if args.probe:
        coding, level, kind, frames_n, count, window = args.probe
        print(json.dumps(probe(coding, int(level), kind, int(frames_n), int(count), int(window) or None)))
        return
    RESULTS.mkdir(exist_ok=True)
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%d-%H%M%S")
    out = RESULTS / f"compression-{stamp}.jsonl"
    if args.memory_grid:
        memory_grid(out, args.grid_codings)
        print(f"\nwrote {out}")
        return
    css = stylesheet()
    gil_rows = gil_check(css)  # before pinning: the thread needs a CPU of its own
    cpu = pin()
    meta = {
        "bench": "meta",
        "python": sys.version.split()[0],
        "cpu": cpu,
        "cpus": os.cpu_count(),
        "session_events": SESSION,
        "time": stamp,
    }
    emit([meta], out)
    sessions = {name: make(SESSION) for name, make in WORKLOADS.items()}
    for kind, frames in sessions.items():
        print(
            f"\n{kind}: {len(frames)} events, {sum(map(len, frames)) / len(frames):,.0f} B/event on average, "
            f"first-frame window {window_for(len(frames[0]))}"
        )
    count = 20 if args.quick else MEMORY_ENCODERS
    print(
        f"\nStreams: per event (CPU = compress + flush, best of 3 sessions, pinned to CPU {cpu}); memory = RSS "
        f"growth / {count} encoders in a fresh process"
    )
    head = (
        f"{'workload':8s} {'coding':10s} {'lvl':>3s} {'win':>3s} {'µs/event':>9s} {'B out/event':>11s} "
        f"{'steady B':>9s} {'1st B':>7s} {'ratio':>6s} {'KiB held':>9s} {'released':>9s} {'trimmed':>8s}"
    )
    print(head)
    rows = []
    for kind, frames in sessions.items():
        for coding, level in ROWS if kind in ("gol", "patch") else EXTRA_ROWS:
            row = stream_cpu(frames, coding, level)
            fed = MEMORY_GOL_FRAMES if kind == "gol" else SESSION
            mem = run_probe(coding, level, kind, fed, count)
            row = {
                "bench": "stream",
                "workload": kind,
                "coding": coding,
                "level": level,
                **row,
                "kib_per_encoder": mem["kib_per_encoder"],
                "kib_after_release": mem["kib_after_release"],
                "kib_after_trim": mem["kib_after_trim"],
                "memory_fed_events": fed,
            }
            rows.append(row)
            print(
                f"{kind:8s} {coding:10s} {level:3d} {row['window']:3d} {row['us_per_event']:9.1f} "
                f"{row['bytes_out_per_event']:11,.0f} {row['steady_bytes_out_per_event']:9,.0f} "
                f"{row['first_event_bytes_out']:7,d} {row['ratio']:6.1f} {row['kib_per_encoder']:9,.0f} "
                f"{row['kib_after_release']:9,.0f} {row['kib_after_trim']:8,.0f}"
            )
    emit(rows, out)
    static_rows = gil_rows + static_bench(css)
    emit(static_rows, out)
    print(
        "\nStatic: precompressing a 91 KB stylesheet (main-thread progress while a thread compresses; 1.0 = "
        "the GIL is released)"
    )
    for row in static_rows:
        if row["bench"] == "precompress":
            print(
                f"  {row['job']:8s} {row['ms']:7.1f} ms  {row['bytes_out']:7,d} B  "
                f"progress {row['main_thread_progress']:.2f}"
            )
    print("Static: StaticFiles.get on the 91 KB stylesheet in memory (in-process, best of 5 x 50k calls)")
    for row in static_rows:
        if row["bench"] == "static_get":
            print(f"  {row['case']:28s} {row['status']} {row['body_bytes']:7,d} B  {row['us_per_get']:6.2f} µs/get")
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()
