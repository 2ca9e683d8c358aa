"""The performance plots: drawn from bench/figures.json into valid SVGs, and the committed ones current."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import orjson
import pytest

from bench import plots

SVG = "{http://www.w3.org/2000/svg}svg"


def test_every_plot_is_drawn_as_a_valid_svg_stamped_with_its_data(tmp_path: Path) -> None:
    assert plots.main(["--out", str(tmp_path)]) == 0
    figures = orjson.loads(plots.FIGURES.read_bytes())
    ids = {p["id"] for p in figures["plots"]}
    assert {"memory-per-tab", "storm", "private-latency", "shared-clicks"} <= ids
    for plot in figures["plots"]:
        text = (tmp_path / f"{plot['id']}.svg").read_text()
        assert ET.fromstring(text).tag == SVG
        assert f"bench/figures.json sha256 {plots.data_hash()}" in text
        assert all(series["points"] for series in plot["series"])


def test_the_committed_svgs_show_the_current_figures() -> None:
    stamp = f"bench/figures.json sha256 {plots.data_hash()}"
    for plot in orjson.loads(plots.FIGURES.read_bytes())["plots"]:
        path = plots.OUT / f"{plot['id']}.svg"
        assert path.exists() and stamp in path.read_text(), f"{path.name} is stale: run python -m bench.plots"


def _run(tmp_path: Path, name: str, command: str, summary: dict) -> Path:
    path = tmp_path / f"{name}.jsonl"
    prov = {
        "type": "provenance",
        "command": command,
        "git_sha": "0" * 40,
        "time": "t",
        "loadavg_at_start": ["0"],
        "settings": {"app": "examples.counter:app"},
    }
    path.write_bytes(b"\n".join(orjson.dumps(r) for r in (prov, {"type": "summary", **summary})))
    return path


def test_collect_takes_clean_summaries_and_refuses_a_dirty_run(tmp_path: Path) -> None:
    spread = {"median": 7.0, "min": 6.5, "max": 7.5}
    clean = _run(tmp_path, "tabs-1", "tabs", {"tabs": 500, "kb_per_tab": spread, "dirty_reps": [], "phases": []})
    storm = _run(tmp_path, "storm-1", "storm", {"tabs": 250, "ms_to_last_tab": spread, "dirty": False})
    figures = plots.collect([clean, storm])
    by_id = {p["id"]: p for p in figures["plots"]}
    assert by_id["memory-per-tab"]["series"][0]["points"] == [{"x": 500, **spread, "run": "tabs-1"}]
    assert by_id["storm"]["series"][0]["points"][0]["x"] == 250
    assert "private-latency" not in by_id  # no such phase in the runs: no empty plot
    dirty = _run(tmp_path, "tabs-2", "tabs", {"tabs": 500, "kb_per_tab": spread, "dirty_reps": [2], "phases": []})
    with pytest.raises(SystemExit, match="dirty"):
        plots.collect([clean, dirty])
