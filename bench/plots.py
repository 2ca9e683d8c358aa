"""``python -m bench.plots``: the performance plots of the website, drawn from ``bench/figures.json``.

Two steps, so the data and the pictures stay apart:

* ``python -m bench.plots collect RUN.jsonl ...`` reads the raw JSON lines of ``python -m bench
  tabs|storm`` runs (``bench/results/``, not committed) and writes ``bench/figures.json``: every
  point as median, min and max over the repetitions, with the run it came from and its provenance
  (commit, load average). That file is committed next to ``RESULTS-2.md``, which gives the commands.
* ``python -m bench.plots [--out DIR]`` draws one SVG per plot of ``figures.json`` (matplotlib)
  into ``website/static/perf/``, where the site serves them and ``docs/performance.md`` shows them.

The SVGs are committed too: the website (and its ``site`` extra) must not need matplotlib and
numpy to show them, and they only change when someone records new runs. Each SVG carries the
sha256 of the ``figures.json`` it was drawn from, and a test fails when the two disagree, so the
pictures cannot go stale silently; the same test draws them afresh and checks they are valid SVG.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from pathlib import Path
from typing import Any

import orjson

__all__ = ["FIGURES", "OUT", "collect", "data_hash", "draw", "main"]

BENCH = Path(__file__).resolve().parent
FIGURES = BENCH / "figures.json"
OUT = BENCH.parent / "website" / "static" / "perf"


def data_hash(path: Path = FIGURES) -> str:
    """The stamp an SVG carries: sha256 (16 hex) of the figures it shows."""
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


# --- collect: raw runs → figures.json --------------------------------------------------------------


def _records(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


def _point(x: float, s: dict[str, float], run: str) -> dict[str, Any]:
    return {"x": x, "median": s["median"], "min": s["min"], "max": s["max"], "run": run}


def collect(paths: list[Path]) -> dict[str, Any]:
    """The plots' points from the runs' summaries; a dirty run is refused, not plotted."""
    memory: list[dict[str, Any]] = []
    storm: list[dict[str, Any]] = []
    private: dict[str, list[dict[str, Any]]] = {"p50": [], "p99": []}
    shared: dict[int, dict[str, list[dict[str, Any]]]] = {}
    runs: dict[str, Any] = {}
    for path in sorted(paths):
        records = _records(path)
        prov, summary = records[0], next((r for r in records if r["type"] == "summary"), None)
        if summary is None or summary.get("dirty_reps") or summary.get("dirty"):
            raise SystemExit(f"{path.name}: no clean summary; a dirty run is not plotted")
        run = path.stem
        runs[run] = {
            "command": prov["command"],
            "git": prov["git_sha"][:12],
            "time": prov["time"],
            "load": prov["loadavg_at_start"],
            "settings": {k: v for k, v in prov["settings"].items() if k not in ("runner", "profile", "native")},
        }
        if prov["command"] == "storm":
            storm.append(_point(summary["tabs"], summary["ms_to_last_tab"], run))
        elif prov["command"] == "tabs":
            if "examples.counter" in prov["settings"]["app"]:
                memory.append(_point(summary["tabs"], summary["kb_per_tab"], run))
            for phase in summary.get("phases", []):
                if phase["phase"] == "private":
                    private["p50"].append(_point(phase["rate"], phase["seen_p50_ms"], run))
                    private["p99"].append(_point(phase["rate"], phase["seen_p99_ms"], run))
                elif phase["phase"] == "shared":
                    by_tabs = shared.setdefault(summary["tabs"], {"p50": [], "p99": [], "core": []})
                    by_tabs["p50"].append(_point(phase["rate"], phase["visible_p50_ms"], run))
                    by_tabs["p99"].append(_point(phase["rate"], phase["visible_p99_ms"], run))
                    by_tabs["core"].append(
                        _point(phase["rate"], {k: v * 100 for k, v in phase["server_busy"].items()}, run)
                    )
    plots = [
        {
            "id": "memory-per-tab",
            "title": "Server memory per idle connected tab",
            "x": "open tabs (counter example, identity)",
            "y": "RSS per tab (KB)",
            "ymin": 0,
            "series": [{"label": "pyvia", "points": memory}],
            "lines": [{"y": 10, "label": "target 10 KB"}],
        },
        {
            "id": "storm",
            "title": "200 actions on N tabs: time until every tab shows the result",
            "x": "open tabs (shared counter, 16 posting connections)",
            "y": "first send → last tab (ms)",
            "ymin": 0,
            "series": [{"label": "pyvia", "points": storm}],
            "lines": [{"y": 30, "label": "target 30 ms"}],
        },
        {
            "id": "private-latency",
            "title": "Private actions at fixed rates: patch seen on the tab's stream",
            "x": "actions per second (open loop, 1,000 tabs)",
            "y": "from the scheduled send (ms)",
            "logx": True,
            "ymin": 0,
            "series": [{"label": "p50", "points": private["p50"]}, {"label": "p99", "points": private["p99"]}],
        },
        {
            "id": "shared-clicks",
            "title": "Shared clicks at fixed rates: visible in every observed tab",
            "x": "clicks per second (shared counter)",
            "y": "from the scheduled click (ms)",
            "ymin": 0,
            "series": [
                {"label": f"{pct}, {n:,} tabs", "points": v[pct]}
                for n, v in sorted(shared.items())
                for pct in ("p50", "p99")
            ],
        },
    ]
    for plot in plots:
        for series in plot["series"]:
            series["points"].sort(key=lambda p: p["x"])
    return {
        "about": "Points of the website's performance plots: median, min and max over repetitions of "
        "python -m bench runs (commands and method in bench/RESULTS-2.md). Regenerate with "
        "python -m bench.plots collect RUN.jsonl ..., then python -m bench.plots.",
        "plots": [p for p in plots if any(s["points"] for s in p["series"])],
        "runs": runs,
    }


# --- draw: figures.json → SVG ----------------------------------------------------------------------


def draw(figures: Path = FIGURES, out: Path = OUT, fmt: str = "svg") -> list[Path]:
    """One SVG per plot; deterministic (fixed hash salt, no date) and stamped with the data's hash.

    ``fmt="png"`` draws PNGs instead (to look at, or for a page that wants bitmaps), unstamped.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update(
        {
            "svg.hashsalt": "pyvia-bench",
            "svg.fonttype": "path",
            "font.size": 10,
            "axes.spines.top": False,
            "axes.spines.right": False,
        }
    )
    data = orjson.loads(figures.read_bytes())
    stamp = data_hash(figures)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for plot in data["plots"]:
        fig, ax = plt.subplots(figsize=(6.4, 3.6))
        for series in plot["series"]:
            pts = series["points"]
            xs = [p["x"] for p in pts]
            med = [p["median"] for p in pts]
            err = [[p["median"] - p["min"] for p in pts], [p["max"] - p["median"] for p in pts]]
            ax.errorbar(xs, med, yerr=err, marker="o", capsize=3, label=series["label"])
        for line in plot.get("lines", []):
            ax.axhline(line["y"], color="grey", linestyle="--", linewidth=1)
            ax.annotate(
                line["label"],
                (1, line["y"]),
                xycoords=("axes fraction", "data"),
                ha="right",
                va="bottom",
                color="grey",
                fontsize=8,
            )
        if plot.get("logx"):
            ax.set_xscale("log")
            ticks = sorted({p["x"] for series in plot["series"] for p in series["points"]})
            ax.set_xticks(ticks, [f"{t:,g}" for t in ticks])
            ax.minorticks_off()
        if "ymin" in plot:
            ax.set_ylim(bottom=plot["ymin"])
        ax.set_title(plot["title"], fontsize=11)
        ax.set_xlabel(plot["x"])
        ax.set_ylabel(plot["y"])
        ax.grid(True, alpha=0.3)
        if len(plot["series"]) > 1:
            ax.legend(fontsize=8)
        fig.tight_layout()
        path = out / f"{plot['id']}.{fmt}"
        if fmt == "svg":
            fig.savefig(
                path,
                format="svg",
                metadata={"Date": None, "Title": plot["title"], "Source": f"bench/figures.json sha256 {stamp}"},
            )
        else:
            fig.savefig(path, format=fmt, dpi=120)
        plt.close(fig)
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.plots", description=__doc__.split("\n")[0])
    parser.add_argument("--figures", type=Path, default=FIGURES, help="the figures file (default bench/figures.json)")
    parser.add_argument("--out", type=Path, default=OUT, help="folder for the SVGs (default website/static/perf)")
    parser.add_argument("--format", choices=("svg", "png"), default="svg", help="svg (default) or png")
    sub = parser.add_subparsers(dest="command")
    gather = sub.add_parser("collect", help="write the figures file from raw runs (bench/results/*.jsonl)")
    gather.add_argument("runs", type=Path, nargs="+")
    args = parser.parse_args(argv)
    if args.command == "collect":
        args.figures.write_bytes(orjson.dumps(collect(args.runs), option=orjson.OPT_INDENT_2) + b"\n")
        print(f"wrote {args.figures}")
        return 0
    for path in draw(args.figures, args.out, args.format):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
