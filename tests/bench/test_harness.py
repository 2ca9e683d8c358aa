"""The benchmark harness, run for real with tiny numbers: its checks pass on a correct app and
catch a broken one. The real runs (and their figures) stay out of the suite: bench/RESULTS*.md."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

ROOT = Path(__file__).resolve().parents[2]


def bench(*argv: str, timeout: float = 120.0) -> tuple[int, str, list[dict[str, Any]]]:
    """``python -m bench ARGV`` serving this checkout's pyvia: exit code, output, the raw JSON lines."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYVIA_")}
    server = ["--pyvia-src", str(ROOT / "src")] if argv[0] != "calibrate" else []
    done = subprocess.run(
        [sys.executable, "-m", "bench", *argv, *server],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    out = done.stdout + done.stderr
    found = re.search(r"^# raw results: (\S+)$", out, re.M)
    assert found, out
    path = Path(found.group(1))
    records = [orjson.loads(line) for line in path.read_bytes().splitlines()]
    path.unlink()
    assert records[0]["type"] == "provenance" and records[0]["git_sha"], out
    return done.returncode, out, records


def summary(records: list[dict[str, Any]]) -> dict[str, Any]:
    return next(r for r in records if r["type"] == "summary")


def test_pages_and_actions_verify_every_response() -> None:
    code, out, records = bench("pages", "-c", "2", "-d", "0.5", "-r", "1", "--warmup", "0.2", "--no-expiry")
    assert code == 0, out
    rep = next(r for r in records if r["type"] == "rep")
    assert rep["ok"] > 0 and not rep["non2xx"] and not rep["dirty"]
    code, out, records = bench("actions", "-t", "2", "-c", "2", "-d", "0.5", "-r", "1", "--warmup", "0.2")
    assert code == 0, out
    rep = next(r for r in records if r["type"] == "rep")
    assert rep["ok"] > 0 and rep["mismatches"] == 0 and not rep["dirty"]


def test_hammer_counts_every_action_on_the_shared_counter() -> None:
    code, out, records = bench("hammer", "-k", "150", "-c", "10", "-o", "4", "-r", "2", "--warmup", "20")
    assert code == 0, out
    reps = [r for r in records if r["type"] == "rep"]
    assert len(reps) == 2
    for r in reps:
        assert r["http_ok"] == r["sent"] == 150 and not r["non2xx"] and not r["errors"]
        assert r["net_increment"] == 150 and r["exact"]
        assert r["observers_on_final"] == r["observers"] == 4
        assert 1 <= r["frames_per_observer"]["max"] < 150  # flushes coalesce the actions
        assert not r["dirty"]
    s = summary(records)
    assert s["all_exact"] and s["dirty_reps"] == [] and s["http_ok_total"] == 300


def test_hammer_on_a_private_counter_checks_the_other_tabs_see_nothing() -> None:
    code, out, records = bench(
        "hammer", "--app", "examples.counter:app", "-k", "60", "-c", "4", "-o", "3", "-r", "1", "--warmup", "0"
    )
    assert code == 0, out
    rep = next(r for r in records if r["type"] == "rep")
    assert rep["observers"] == 1 and rep["net_increment"] == 60 and rep["isolation_leaks"] == 0
    assert rep["frames_per_observer"]["median"] == 60  # a private patch per action


def test_hammer_marks_server_errors_dirty() -> None:
    code, out, records = bench(
        "hammer", "--app", "tests.bench.apps:failing", "-k", "50", "-c", "5", "-o", "2", "-r", "1", "--warmup", "0"
    )
    assert code == 1, out
    rep = next(r for r in records if r["type"] == "rep")
    assert rep["non2xx"] == {"500": 10} and rep["http_ok"] == 40 and rep["dirty"]
    assert rep["net_increment"] == 40 and rep["exact"]  # the failures did not count either
    assert "first non-2xx: 500" in out and "DIRTY" in out


def test_hammer_catches_a_lost_update_behind_200s() -> None:
    code, out, records = bench(
        "hammer",
        "--app",
        "tests.bench.apps:lossy",
        "-k",
        "50",
        "-c",
        "5",
        "-o",
        "2",
        "-r",
        "1",
        "--warmup",
        "0",
        "--timeout",
        "1",
    )
    assert code == 1, out
    rep = next(r for r in records if r["type"] == "rep")
    assert rep["http_ok"] == 50 and rep["net_increment"] == 40 and not rep["exact"] and rep["dirty"]
    assert "NOT EXACT" in out


def test_storm_converges_and_checks_every_tab() -> None:
    code, out, records = bench("storm", "-n", "30", "-k", "40", "-c", "4", "-r", "2")
    assert code == 0, out
    storms = [r for r in records if r["type"] == "storm"]
    assert len(storms) == 2 and all(not r["dirty"] and r["ms_to_last_tab"] > 0 for r in storms)
    s = summary(records)
    assert s["tabs"] == 30 and s["check"]["clean"] and s["check"]["wrong_final_value"] == 0 and not s["dirty"]


def test_tabs_phases_on_private_and_shared_counters() -> None:
    small = ("-n", "20", "-r", "1", "--warm-tabs", "2", "--settle", "0.5", "--phase", "1")
    code, out, records = bench("tabs", *small, "--churn-rate", "5", "--tab-rates", "40")
    assert code == 0, out
    rep = next(r for r in records if r["type"] == "rep")
    churn, private = rep["phases"]
    assert churn["phase"] == "churn" and churn["visitors"] == 5 and not churn["failures"]
    assert private["phase"] == "private" and private["ok"] == private["sent"] == 40 and private["never_seen"] == 0
    assert private["seen_p50_ms"] > 0 and rep["rss_after_close_kb"] > 0
    code, out, records = bench(
        "tabs", "--app", "examples.shared_counter:app", *small, "--bc-rates", "10", "--tab-rates", "10"
    )
    assert code == 1, out  # the shared counter has no private signal: that phase is reported, the run dirty
    rep = next(r for r in records if r["type"] == "rep")
    shared, skipped = sorted(rep["phases"], key=lambda p: "skipped" in p)
    assert skipped["skipped"] == "the page has no private signal 'count'"
    assert shared["ok"] == 10 and shared["observed_on_final"] == shared["observed"] == 22  # 20 + 2 warm-up tabs
    assert shared["clicks_never_visible"] == 0 and shared["events_per_tab_s"] > 0


@pytest.mark.parametrize("encoding", ["zstd", "br", "gzip"])
def test_tabs_on_compressed_streams_decode_every_event(encoding: str) -> None:
    small = ("-n", "20", "-r", "1", "--warm-tabs", "2", "--settle", "0.5", "--phase", "1")
    code, out, records = bench("tabs", *small, "--encoding", encoding, "--tab-rates", "20")
    assert code == 0, out
    assert records[0]["settings"]["encoding"] == encoding
    rep = next(r for r in records if r["type"] == "rep")
    (private,) = rep["phases"]
    assert private["ok"] == private["sent"] == 20 and private["never_seen"] == 0  # patches decoded off the stream


def test_calibrate_prints_the_brotli_figure() -> None:
    code, out, records = bench("calibrate", "-r", "2", "--count", "5")
    assert code == 0, out
    record = next(r for r in records if r["type"] == "calibrate")
    assert len(record["rounds_ms"]) == 2 and record["brotli_ms"] == min(record["rounds_ms"]) > 0
    assert record["input_bytes"] == 102_000 and f"brotli {record['brotli_ms']:.1f} ms" in out


def test_pyvia_bench_is_the_harness_of_the_checkout(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYVIA_")}
    command = [sys.executable, "-m", "pyvia", "bench", "calibrate", "-r", "1", "--count", "2"]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "brotli " in done.stdout, done.stdout + done.stderr
    Path(re.search(r"^# raw results: (\S+)$", done.stdout, re.M).group(1)).unlink()
    elsewhere = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert elsewhere.returncode == 2 and "checkout of the pyvia repository" in elsewhere.stderr
