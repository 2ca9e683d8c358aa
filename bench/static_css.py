"""``python -m bench.static_css``: server CPU per request for a 91 KB stylesheet served by
``App(static_dir=...)`` on the native server (issue 4).

A deterministic 91 KB (93,184-byte) stylesheet is written to a temporary folder served as the
app's ``static_dir`` (``bench.apps_broadcast:static``). Before any load the harness waits until
the brotli-11 variant exists (pyvia precompresses off the event loop; until then it sends the
plain file with ``no-cache``), and checks that the ``br`` body decodes to the file byte for byte.

Then, each for ``--reps`` windows of ``--duration`` s after a ``--warmup``, C keep-alive
connections in a closed loop (one request in flight each) ask for ``/site.css``:

* ``br``: ``Accept-Encoding: br`` → 200 with the precompressed body (its length and ETag checked
  on every response);
* ``304``: the same plus ``If-None-Match: <the br ETag>`` → 304, no body;
* ``identity``: no ``Accept-Encoding`` → 200 with the 91 KB file (for comparison).

Server CPU per request = the server process's CPU (per-process CPU clock; ticks alongside) in
the window / responses completed in it. Any non-2xx/3xx answer other than the expected one, a
wrong length, a wrong ETag or a transport error marks the window dirty.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import brotli  # type: ignore[import-untyped]

from bench.client import Connection, ProtocolError, build_request, run
from bench.fanout import Meter, env_record, launch, pin_client, server_versions, wait_quiet
from bench.provenance import print_provenance, provenance
from bench.report import Recorder, fmt, percentile, spread
from bench.server import Server

APP = "bench.apps_broadcast:static"
SIZE = 91 * 1024


def stylesheet(size: int = SIZE) -> bytes:
    """A plausible, deterministic stylesheet of exactly ``size`` bytes (utility classes and
    components, the kind a CSS framework ships), so its compression ratio is a real one."""
    rng = random.Random(91)
    props = [
        "color",
        "background-color",
        "margin",
        "padding",
        "border",
        "border-radius",
        "font-size",
        "line-height",
        "display",
        "gap",
        "grid-template-columns",
        "box-shadow",
        "transition",
        "width",
        "max-width",
        "min-height",
        "justify-content",
        "align-items",
        "opacity",
        "transform",
    ]
    values = [
        "0",
        "1px",
        "2px",
        "4px",
        "0.25rem",
        "0.5rem",
        "1rem",
        "1.5rem",
        "2rem",
        "100%",
        "auto",
        "none",
        "flex",
        "grid",
        "block",
        "center",
        "space-between",
        "#1f2937",
        "#f9fafb",
        "#e5e7eb",
        "#2563eb",
        "rgba(0,0,0,.1)",
        "1px solid #d1d5db",
        "0 1px 3px rgba(0,0,0,.12)",
        "all .2s ease",
        "repeat(3, 1fr)",
        "translateY(-1px)",
        "0.875rem",
        "1.25",
        "600px",
    ]
    parts = ["/* bench stylesheet: generated, deterministic */\n:root{--brand:#2563eb;--fg:#1f2937;--bg:#f9fafb}\n"]
    total = len(parts[0])
    i = 0
    while total < size:
        kind = rng.choice(["btn", "card", "nav", "grid", "text", "m", "p", "flex", "tbl", "form"])
        state = rng.choice(["", ":hover", ":focus", ":disabled", " > li", " .title", "::before"])
        decls = "".join(f"  {rng.choice(props)}: {rng.choice(values)};\n" for _ in range(rng.randint(2, 6)))
        rule = f".{kind}-{i}{state} {{\n{decls}}}\n"
        if i % 40 == 39:
            rule = f"@media (min-width: {rng.choice([640, 768, 1024, 1280])}px) {{\n{rule}}}\n"
        parts.append(rule)
        total += len(rule)
        i += 1
    return "".join(parts).encode()[: size - 1] + b"\n"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.static_css", description=__doc__.split("\n")[0])
    p.add_argument("-c", "--concurrency", type=int, default=16)
    p.add_argument("-d", "--duration", type=float, default=3.0, help="seconds per window (default 3)")
    p.add_argument("-r", "--reps", type=int, default=5, help="windows per case (default 5)")
    p.add_argument("--warmup", type=float, default=1.0)
    p.add_argument("--cases", default="br,304,identity")
    return p


class Load:
    def __init__(self) -> None:
        self.running = True
        self.ok = 0
        self.bad: Counter[str] = Counter()
        self.latencies: list[float] = []


async def _worker(load: Load, server: Server, request: bytes, status: int, length: int, etag: str) -> None:
    conn = await Connection.open("127.0.0.1", server.port)
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
            if response.status != status:
                load.bad[f"status {response.status}"] += 1
            elif len(response.body) != length:
                load.bad[f"length {len(response.body)}"] += 1
            elif response.headers.get("etag") != etag:
                load.bad[f"etag {response.headers.get('etag')}"] += 1
            else:
                load.ok += 1
                load.latencies.append(response.done - t0)
    finally:
        conn.close()


async def _probe(server: Server, headers: list[tuple[str, str]]) -> Any:
    conn = await Connection.open("127.0.0.1", server.port)
    try:
        return await conn.request(build_request("GET", "/site.css", server.host, headers), 10.0)
    finally:
        conn.close()


async def _main(args: argparse.Namespace) -> int:
    recorder = Recorder("static_css")
    record = provenance("static_css", vars(args), ["taskset", "-c", "1", "pyvia", "run", APP])
    record["server_packages"] = server_versions()
    record["env"] = env_record()
    print_provenance(record)
    recorder.write(record)
    print(f"# raw results: {recorder.path}", flush=True)
    folder = Path(tempfile.mkdtemp(prefix="pyvia-static-"))
    css = stylesheet()
    (folder / "site.css").write_bytes(css)
    server = await launch("native", APP, env={"BENCH_STATIC_DIR": str(folder)})
    dirty = False
    try:
        deadline = time.monotonic() + 60
        while True:  # the br variant is made off the loop; until then the plain file is the stand-in
            br = await _probe(server, [("Accept-Encoding", "br")])
            if br.headers.get("content-encoding") == "br" or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.2)
        if br.status != 200 or br.headers.get("content-encoding") != "br" or brotli.decompress(br.body) != css:
            raise RuntimeError(f"no valid br variant: {br.status} {br.headers}")
        plain = await _probe(server, [])
        if plain.status != 200 or plain.body != css:
            raise RuntimeError(f"plain GET answered {plain.status} with {len(plain.body)} bytes")
        br_etag, plain_etag = br.headers["etag"], plain.headers["etag"]
        check304 = await _probe(server, [("Accept-Encoding", "br"), ("If-None-Match", br_etag)])
        if check304.status != 304:
            raise RuntimeError(f"If-None-Match answered {check304.status}")
        print(
            f"# {len(css):,} B stylesheet; br variant {len(br.body):,} B ({len(css) / len(br.body):.1f}:1), "
            f"ETag {br_etag}; identity ETag {plain_etag}; 304 verified",
            flush=True,
        )
        cases = {
            "br": ([("Accept-Encoding", "br")], 200, len(br.body), br_etag),
            "304": ([("Accept-Encoding", "br"), ("If-None-Match", br_etag)], 304, 0, br_etag),
            "identity": ([], 200, len(css), plain_etag),
        }
        summaries = []
        for case in [c.strip() for c in args.cases.split(",") if c.strip()]:
            headers, status, length, etag = cases[case]
            request = build_request("GET", "/site.css", server.host, headers)
            summary = await _case(args, server, recorder, case, request, status, length, etag)
            dirty |= summary["dirty"]
            summaries.append(summary)
        print("summary: median (min-max) over windows")
        for s in summaries:
            print(
                f"  {s['case']:8} {fmt(s['us_per_request'])} µs server CPU per request, "
                f"{fmt(s['req_per_s'], 0)} req/s, p50 {fmt(s['p50_us'], 0)} µs   "
                f"{'(target ≤ 20 µs; php-via 54 µs)' if s['case'] in ('br', '304') else ''}"
            )
    finally:
        await server.stop()
        shutil.rmtree(folder, ignore_errors=True)
    return 1 if dirty else 0


async def _case(
    args: argparse.Namespace,
    server: Server,
    recorder: Recorder,
    case: str,
    request: bytes,
    status: int,
    length: int,
    etag: str,
) -> dict[str, Any]:
    await wait_quiet(max_wait=15.0)
    load = Load()
    workers = [
        asyncio.ensure_future(_worker(load, server, request, status, length, etag)) for _ in range(args.concurrency)
    ]
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
            "case": case,
            "rep": rep,
            "ok": ok,
            "bad": bad,
            "dirty": bool(bad),
            "req_per_s": ok / meter.wall,
            "us_per_request": meter.cpu_clock / ok * 1e6 if ok else float("nan"),
            "us_per_request_ticks": meter.cpu / ok * 1e6 if ok else float("nan"),
            "p50_us": percentile(lat, 50) * 1e6,
            "p99_us": percentile(lat, 99) * 1e6,
            **meter.as_dict(),
        }
        recorder.write(rec)
        reps.append(rec)
        print(
            f"  {case} rep {rep}: {ok:,} responses = {rec['req_per_s']:,.0f}/s, {rec['us_per_request']:.1f} µs "
            f"server CPU/request ({rec['us_per_request_ticks']:.1f} by ticks, {rec['server_sys_share']:.0%} kernel), "
            f"p50 {rec['p50_us']:.0f} µs, p99 {rec['p99_us']:.0f} µs; server core {rec['server_busy']:.0%}, "
            f"client core {rec['client_busy']:.0%}, others on server core {rec['others_on_server_core']:.0%}"
            f"{' NOISY' if rec['noisy'] else ''}{' DIRTY ' + str(bad) if bad else ''}",
            flush=True,
        )
    load.running = False
    await asyncio.gather(*workers, return_exceptions=True)
    quiet = [r for r in reps if not r["noisy"]]
    used = quiet if len(quiet) >= 2 else reps
    summary = {
        "type": "summary",
        "case": case,
        "reps_used": [r["rep"] for r in used],
        "us_per_request": spread([r["us_per_request"] for r in used]),
        "us_per_request_ticks": spread([r["us_per_request_ticks"] for r in used]),
        "req_per_s": spread([r["req_per_s"] for r in used]),
        "p50_us": spread([r["p50_us"] for r in used]),
        "p99_us": spread([r["p99_us"] for r in used]),
        "client_busy": spread([r["client_busy"] for r in used]),
        "warmup_bad": warm_bad,
        "dirty": warm_bad > 0 or any(r["dirty"] for r in reps),
    }
    recorder.write(summary)
    return summary


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    pin_client()
    return int(run(_main(args)))


if __name__ == "__main__":
    sys.exit(main())
