"""``python -m bench.zstd_params``: zstd compression parameters for a busy Game-of-Life tab, offline
(issue 4: ≤ 200 KB of server memory per tab at ≥ 50x over a 60 s session).

The frames are ``bench.gol_session.gol_frames("full")``: the 300 generations (60 s at 200 ms) a tab
receives, each the whole 50x50 board plus the generation signal, 20 random cells flipped per
generation. Each configuration runs in a fresh process, pinned to CPU 1, that feeds K streaming
zstd compressors (``compressobj``, flushed after every frame as pyvia's ``StreamEncoder`` does) every
frame in turn, as a flush does, and reports:

* RSS growth per compressor (``Rss:`` of ``/proc/self/smaps_rollup``), and heap (glibc ``mallinfo2``);
* ``ZstdCompressor.memory_size()`` of one compressor after the session (what zstd allocated);
* bytes per frame on the wire and the ratio (raw / coded, first frame included);
* µs per tab-frame with the K compressors used in turn (cold in the cache, as in a flush).

``--grid`` picks the set of configurations (``quick``: the candidates; ``wide``: a sweep of strategy,
hash/chain/search logs and min_match at window 2^16). Raw rows go to ``bench/results``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from typing import Any

from bench.provenance import print_provenance, provenance
from bench.report import Recorder

#: (label, level, window_log, hash_log, chain_log, search_log, min_match, strategy); 0 = the level's.
Config = tuple[str, int, int, int, int, int, int, int]

QUICK: list[Config] = [
    ("pyvia before (level 3, tables window-3/-4)", 3, 16, 13, 12, 0, 0, 0),
    ("pyvia now (STREAM_ZSTD_SEARCH: greedy h11 s4 m5)", 3, 16, 11, 11, 4, 5, 3),
    ("level 3 plain", 3, 16, 0, 0, 0, 0, 0),
    ("level 1", 1, 16, 0, 0, 0, 0, 0),
    ("lazy2 h13 c13 s3 m5", 3, 16, 13, 13, 3, 5, 5),
    ("lazy2 h13 c14 s4 m5", 3, 16, 13, 14, 4, 5, 5),
    ("lazy2 h12 c12 s3 m6", 3, 16, 12, 12, 3, 6, 5),
    ("btlazy2 h13 c13 s3 m5", 3, 16, 13, 13, 3, 5, 6),
    ("btopt h13 c13 s3 m5", 3, 16, 13, 13, 3, 5, 7),
    ("greedy h13 c12 s2 m5", 3, 16, 13, 12, 2, 5, 3),
    ("dfast h13 c12 m6", 3, 16, 13, 12, 1, 6, 2),
    ("dfast h13 c12 m7", 3, 16, 13, 12, 1, 7, 2),
]


def _focus() -> list[Config]:
    out: list[Config] = [QUICK[0]]
    for strategy, name in ((3, "greedy"), (4, "lazy"), (5, "lazy2")):
        for hash_log in (11, 12):
            for search_log in (2, 3, 4):
                for min_match in (5, 6, 7):
                    out.append(
                        (
                            f"{name} h{hash_log} s{search_log} m{min_match}",
                            3,
                            16,
                            hash_log,
                            hash_log,
                            search_log,
                            min_match,
                            strategy,
                        )
                    )
    return out


def _wide() -> list[Config]:
    out: list[Config] = [QUICK[0]]
    for strategy, name in ((2, "dfast"), (3, "greedy"), (4, "lazy"), (5, "lazy2"), (6, "btlazy2"), (7, "btopt")):
        for hash_log in (12, 14):
            for chain_log in (12, 14):
                for search_log in (1,) if strategy == 2 else (2, 4):
                    for min_match in (5, 7):
                        out.append(
                            (
                                f"{name} h{hash_log} c{chain_log} s{search_log} m{min_match}",
                                3,
                                16,
                                hash_log,
                                chain_log,
                                search_log,
                                min_match,
                                strategy,
                            )
                        )
    return out


def params(
    level: int, window: int, hash_log: int, chain_log: int, search_log: int, min_match: int, strategy: int
) -> Any:
    import zstandard

    extra = {
        k: v
        for k, v in (
            ("hash_log", hash_log),
            ("chain_log", chain_log),
            ("search_log", search_log),
            ("min_match", min_match),
            ("strategy", strategy),
        )
        if v
    }
    return zstandard.ZstdCompressionParameters.from_level(level, window_log=window, **extra)


def _rss_kb() -> int:
    with open("/proc/self/smaps_rollup") as f:
        for line in f:
            if line.startswith("Rss:"):
                return int(line.split()[1])
    return 0


def probe(spec: str) -> dict[str, Any]:
    """In a fresh process: K compressors of one configuration fed every frame in turn."""
    import gc

    import zstandard

    from bench.apps_broadcast import _libc
    from bench.gol_session import gol_frames

    config: Config = tuple(json.loads(spec))  # type: ignore[assignment]
    label, level, window, hash_log, chain_log, search_log, min_match, strategy, k = (*config,)  # type: ignore[misc]
    frames = gol_frames("full")
    p = params(level, window, hash_log, chain_log, search_log, min_match, strategy)
    flush = zstandard.COMPRESSOBJ_FLUSH_BLOCK
    gc.collect()
    info = _libc.mallinfo2()
    rss0, heap0 = _rss_kb(), info.uordblks + info.hblkhd
    compressors = [zstandard.ZstdCompressor(compression_params=p) for _ in range(k)]
    objs = [c.compressobj() for c in compressors]
    wire = 0
    spent = 0.0
    for frame in frames:
        t0 = time.perf_counter()
        for obj in objs:
            out = obj.compress(frame) + obj.flush(flush)
        spent += time.perf_counter() - t0
        wire += len(out)
    info = _libc.mallinfo2()
    rss1, heap1 = _rss_kb(), info.uordblks + info.hblkhd
    raw = sum(len(f) for f in frames)
    return {
        "label": label,
        "level": level,
        "window": window,
        "hash_log": p.hash_log,
        "chain_log": p.chain_log,
        "search_log": p.search_log,
        "min_match": p.min_match,
        "strategy": p.strategy,
        "tabs": k,
        "rss_kb_per_tab": (rss1 - rss0) / k,
        "heap_kb_per_tab": (heap1 - heap0) / 1024 / k,
        "zstd_memory_size_kb": compressors[0].memory_size() / 1024,
        "wire_bytes_per_frame": wire / len(frames),
        "ratio": raw / wire,
        "us_per_tab_frame": spent / k / len(frames) * 1e6,
    }


def small_events(tabs: int = 1000, rounds: int = 40) -> list[dict[str, Any]]:
    """450 B broadcast events (a 300 B view and a signal, as ``bench.broadcast``) through ``tabs``
    compressors in turn: µs per tab-event, median and min over ``rounds``, per search."""
    import statistics

    import zstandard

    view = "<div>" + "x" * 300 + "</div>"
    rows = []
    for config in QUICK[:2]:
        label, level, window, hash_log, chain_log, search_log, min_match, strategy = config
        p = params(level, window, hash_log, chain_log, search_log, min_match, strategy)
        objs = [zstandard.ZstdCompressor(compression_params=p).compressobj() for _ in range(tabs)]
        flush = zstandard.COMPRESSOBJ_FLUSH_BLOCK
        times, wire = [], 0
        for r in range(rounds):
            event = (
                f'event: datastar-patch-elements\ndata: elements <div id="via-view"><p>{r}</p>{view}</div>\n\n'
                f"event: datastar-patch-signals\n"
                f'data: signals {{"route__n":{r}}}\n\n'
            ).encode()
            t0 = time.perf_counter()
            for obj in objs:
                out = obj.compress(event) + obj.flush(flush)
            times.append((time.perf_counter() - t0) / tabs * 1e6)
            wire += len(out)
        rows.append(
            {
                "type": "small",
                "label": label,
                "tabs": tabs,
                "us_median": statistics.median(times),
                "us_min": min(times),
                "us_max": max(times),
                "bytes_per_event": wire / rounds,
            }
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.zstd_params", description=__doc__.split("\n")[0])
    ap.add_argument("--grid", choices=("quick", "focus", "wide"), default="quick")
    ap.add_argument("--tabs", type=int, default=100, help="compressors per configuration (default 100)")
    ap.add_argument("--small", action="store_true", help="450 B events through 1,000 compressors instead")
    ap.add_argument("--probe", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.probe:
        print(json.dumps(probe(args.probe)))
        return 0
    recorder = Recorder("zstd_params")
    record = provenance("zstd_params", vars(args), ["taskset", "-c", "1", sys.executable, "-m", "bench.zstd_params"])
    print_provenance(record)
    recorder.write(record)
    print(f"# raw results: {recorder.path}", flush=True)
    if args.small:
        import os

        os.sched_setaffinity(0, {1})  # the server's CPU, as the probes
        for _ in range(3):
            for row in small_events():
                recorder.write(row)
                print(
                    f"  {row['label']:50} {row['us_median']:5.2f} µs per tab-event (min {row['us_min']:.2f}, "
                    f"max {row['us_max']:.2f}), {row['bytes_per_event']:.0f} B",
                    flush=True,
                )
        return 0
    grid = {"quick": QUICK, "focus": _focus(), "wide": _wide()}[args.grid]
    for config in grid:
        spec = json.dumps([*config, args.tabs])
        out = subprocess.run(
            ["taskset", "-c", "1", sys.executable, "-m", "bench.zstd_params", "--probe", spec],
            capture_output=True,
            text=True,
            timeout=600,
            check=True,
        )
        row = json.loads(out.stdout.strip().splitlines()[-1])
        row["type"] = "row"
        recorder.write(row)
        print(
            f"  {row['label']:50} h{row['hash_log']:2} c{row['chain_log']:2} s{row['search_log']} "
            f"m{row['min_match']} st{row['strategy']}: {row['rss_kb_per_tab']:6.0f} KB RSS/tab "
            f"(heap {row['heap_kb_per_tab']:4.0f}, zstd {row['zstd_memory_size_kb']:4.0f}), "
            f"{row['wire_bytes_per_frame']:5.0f} B/frame = {row['ratio']:5.1f}x, "
            f"{row['us_per_tab_frame']:5.1f} µs/tab-frame",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
