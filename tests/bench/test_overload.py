"""``python -m bench overload`` at a small fixed rate: every arrival ends in exactly one outcome.

No timing is asserted (the machine may be busy): only the accounting and the shape of the output.
"""

from __future__ import annotations

from bench.overload import OUTCOMES

from tests.bench.test_harness import bench, summary

PER_SECOND = {"second", "arrivals", *OUTCOMES, "p50_s", "p99_s", "server_p99_s", "rss_mb", "send_lag_s"}


def test_overload_accounts_for_every_arrival() -> None:
    code, out, records = bench(
        "overload", "--rate", "40", "-d", "2", "--levels", "1,2", "-t", "4", "--timeout", "5", "--recovery", "0.5"
    )
    assert code == 0, out
    levels = [r for r in records if r["type"] == "level"]
    assert [r["multiple"] for r in levels] == [1.0, 2.0], out
    for r in levels:
        assert r["arrivals"] == int(r["rate"] * 2) == r["accounted"], out
        assert sum(r["outcomes"].values()) == r["arrivals"] and r["balanced"], out
        assert set(r["outcomes"]) == set(OUTCOMES)
        assert r["outcomes"]["2xx"] > 0 and r["server_alive"] and isinstance(r["generator_behind"], bool)
        rows = r["per_second"]
        assert [row["second"] for row in rows] == [0, 1]
        assert all(set(row) == PER_SECOND for row in rows)
        assert sum(row["arrivals"] for row in rows) == r["arrivals"]
        assert sum(row[o] for row in rows for o in OUTCOMES) == r["arrivals"]
        assert r["rss_mb_max"] > 0 and len(r["probes_after"]) == 2 * 10
        assert {p["kind"] for p in r["probes_after"]} == {"new", "action"}
        assert all(p["outcome"] in OUTCOMES for p in r["probes_after"])
    s = summary(records)
    assert not s["measured_capacity"] and s["capacity_rate"] == 40 and s["failed"] == []
    assert set(s["verdict"]["met"]) == {"timeouts", "p99_accepted_s", "rss_ratio", "recovery_s"}
    assert "targets at 2x" in out
