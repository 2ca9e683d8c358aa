"""``python -m bench peers`` for real, at a tiny scale: the peers installed from PyPI into their
own virtualenvs, every contender served and verified on every workload, and the summary's
ratios; then that a patch that never arrives, or a page without its marker, makes a rep DIRTY.
No figure is asserted: timings of a shared machine are not results (bench/RESULTS.md)."""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
from bench.peer_apps.content import VIEW_BYTES

from bench import peers

ROOT = Path(__file__).resolve().parents[2]
#: Every workload but idle (the in-process test below runs that one), every contender, tiny.
TINY = shlex.split(
    "--workloads page,roundtrip,broadcast,doc --reps 1 --duration 0.3 --warmup 0.2 --broadcast-tabs 20 --rounds 3 "
    "--rounds-warmup 1 --codings identity,zstd"
)


def run_peers(*argv: str, timeout: float = 150.0) -> tuple[int, str, list[dict[str, Any]]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYVIA_")}
    done = subprocess.run(
        [sys.executable, "-m", "bench", "peers", *argv],
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
    return done.returncode, out, records


def test_every_contender_runs_every_workload_verified() -> None:
    code, out, records = run_peers(*TINY)
    assert code == 0, out
    assert records[0]["type"] == "provenance" and records[0]["git_sha"]
    setup = next(r for r in records if r["type"] == "peers")
    versions = setup["versions"]
    assert versions["stario"]["stario"].startswith("5.") and versions["datastar-py"]["datastar-py"].startswith("1.")
    assert versions["starhtml"]["starhtml"] != "absent"
    assert len({v["python"] for v in versions.values()}) == 1  # one interpreter for every contender
    reps = [r for r in records if r["type"] == "rep"]
    done = {(r["label"], r["contender"]) for r in reps}
    for label in ("page", "roundtrip", "broadcast identity", "doc"):
        assert {c for lab, c in done if lab == label} == {"pyvia", "stario", "datastar-py", "starhtml"}, label
    # datastar-py on Starlette has no stream compression: zstd is measured for the other two only
    assert {c for lab, c in done if lab == "broadcast zstd"} == {"pyvia", "stario", "starhtml"}
    for r in reps:
        assert not r["dirty"] and r["ok"] > 0, r
        for key, value in r["figures"].items():  # RSS per tab may come out below 0 with 20 tabs: not checked
            assert value == value and (value >= 0 or key == "rss_kb_per_tab"), r
    for r in (r for r in reps if r["kind"] == "broadcast"):
        assert r["figures"]["broadcast_decoded_bytes"] > VIEW_BYTES  # the fragment and the value
        if r["coding"] == "zstd":
            assert r["figures"]["broadcast_wire_bytes"] < r["figures"]["broadcast_decoded_bytes"]
    sizes = {r["contender"]: r["figures"]["page_bytes"] for r in reps if r["kind"] == "page"}
    assert sizes["stario"] < 1500 and sizes["datastar-py"] < 1500  # the ~1 KB counter, framework chrome aside
    docs = {r["contender"]: r["figures"]["doc_bytes"] for r in reps if r["kind"] == "doc"}
    assert all(18_000 < size < 30_000 for size in docs.values()), docs
    summary = next(r for r in records if r["type"] == "summary")
    row = next(r for r in summary["rows"] if r["key"] == "roundtrip_us")
    best = min(row["cells"][name]["median"] for name in ("stario", "datastar-py", "starhtml"))
    assert row["ratio"] == row["cells"]["pyvia"]["median"] / best
    assert "| private round trip (POST, patch on the tab's stream) | µs |" in out
    assert f"{row['ratio']:.2f}x |" in out


def _args(**overrides: Any) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    peers.add_arguments(parser)
    args = parser.parse_args(["--duration", "0.3", "--warmup", "0.1", "--timeout", "0.5", "-c", "2"])
    for key, value in overrides.items():
        setattr(args, key, value)
    return args


def test_idle_tabs_stay_open_and_a_lost_patch_or_a_missing_marker_is_dirty() -> None:
    stario = peers.CONTENDERS["stario"]
    python, version = peers.find_python(None)
    interpreter, _ = peers.ensure_venv(
        stario,
        python,
        version,
        peers.default_venvs(),
        install=not (peers.default_venvs() / f"stario-py{version[0]}.{version[1]}").exists(),
    )

    async def scenario() -> tuple[dict[str, Any], ...]:
        server = await peers.start(stario, interpreter)
        try:
            idle = await peers.idle(server, stario.dialect, 30, _args(idle_seconds=0.2, settle=0.1))
            deaf = peers.Dialect("peer", count_key="not_the_count", board_key="n")  # never sees its patch
            lost = await peers.roundtrip(server, deaf, _args())
            blind = await peers.pages(server, "/", (b"not-on-the-page",), _args())
            fine = await peers.roundtrip(server, stario.dialect, _args())
        finally:
            await server.stop(grace=2.0)
            server.log_path.unlink(missing_ok=True)
        return idle, lost, blind, fine

    idle, lost, blind, fine = asyncio.run(scenario())
    assert idle["ok"] == idle["tabs"] == 30 and not idle["failures"]
    assert idle["figures"]["idle_ms_per_s"] >= 0 and idle["rss_kb"][1] > 0
    assert lost["ok"] == 0 and lost["failures"] and lost["first_failure"]
    assert blind["ok"] == 0 and blind["failures"].get("no marker", 0) > 0
    assert fine["ok"] > 0 and not fine["failures"]


def _rep(contender: str, value: float, dirty: bool = False, rep: int = 1) -> dict[str, Any]:
    return {
        "label": "page",
        "kind": "page",
        "contender": contender,
        "rep": rep,
        "dirty": dirty,
        "noisy": False,
        "figures": {"page_us": value, "page_bytes": 1000.0},
    }


def test_summary_takes_clean_medians_and_the_ratio_to_the_best_peer() -> None:
    reps = [
        _rep("pyvia", 30.0, rep=1),
        _rep("pyvia", 40.0, rep=2),
        _rep("pyvia", 1000.0, dirty=True, rep=3),
        _rep("stario", 10.0),
        _rep("stario", 20.0, rep=2),
        _rep("datastar-py", 50.0),
    ]
    summary = peers.summarise(reps, ["pyvia", "stario", "datastar-py"])
    row = next(r for r in summary["rows"] if r["key"] == "page_us")
    assert row["cells"]["pyvia"]["median"] == 35.0  # the dirty rep is left out
    assert row["best_peer"] == 15.0 and row["ratio"] == 35.0 / 15.0
    assert summary["dirty"] and summary["dirty_reps"] == [("page", "pyvia", 3)]
    size = next(r for r in summary["rows"] if r["key"] == "page_bytes")
    assert size["ratio"] != size["ratio"]  # a page's size is shown, not ranked
    table = peers.summary_table(summary)
    assert "35.0 (30.0-40.0) DIRTY x1 | 15.0 (10.0-20.0) | 50.0 (50.0-50.0) | 2.33x |" in table
