"""pyvia.ops.autotune: cgroup v2, v1 and host limits on fake trees, and the derived profile."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest

from pyvia.config import Config
from pyvia.ops import autotune
from pyvia.ops.autotune import Limits, apply_gc_policy, derive_profile, profile_for, read_limits, tab_cost
from pyvia.ops.settings import load_settings

MiB = 1 << 20
GiB = 1 << 30


def tree(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


@pytest.fixture
def fake(tmp_path: Path) -> tuple[Path, Path]:
    cgroup, proc = tmp_path / "cgroup", tmp_path / "proc"
    cgroup.mkdir()
    tree(proc, {"meminfo": "MemTotal:       16384000 kB\nMemFree:  100 kB\n", "self/cgroup": "0::/\n"})
    return cgroup, proc


def limits(cgroup: Path, proc: Path, cpus: int = 8) -> Limits:
    return read_limits(cgroup, proc, cpu_count=lambda: cpus)


def test_cgroup_v2_quota_and_memory(fake: tuple[Path, Path]) -> None:
    cgroup, proc = fake
    tree(cgroup, {"cpu.max": "150000 100000\n", "memory.max": f"{GiB}\n"})
    found = limits(cgroup, proc)
    assert (found.cpus, found.cpu_source) == (1.5, "cgroup v2")
    assert (found.memory, found.memory_source) == (GiB, "cgroup v2")
    assert found.host_cpus == 8 and found.host_memory == 16384000 * 1024


def test_cgroup_v2_max_means_no_limit_and_v1_is_not_consulted(fake: tuple[Path, Path]) -> None:
    cgroup, proc = fake
    tree(
        cgroup,
        {
            "cpu.max": "max 100000\n",
            "memory.max": "max\n",
            "cpu,cpuacct/cpu.cfs_quota_us": "50000\n",
            "cpu,cpuacct/cpu.cfs_period_us": "100000\n",
            "memory/memory.limit_in_bytes": f"{GiB}\n",
        },
    )
    found = limits(cgroup, proc, cpus=4)
    assert (found.cpus, found.cpu_source) == (4.0, "host")
    assert (found.memory, found.memory_source) == (16384000 * 1024, "host")


def test_cgroup_v2_own_cgroup_and_the_tightest_limit_up_the_hierarchy(fake: tuple[Path, Path]) -> None:
    cgroup, proc = fake
    tree(proc, {"self/cgroup": "0::/system.slice/app.service\n"})
    tree(
        cgroup,
        {
            "system.slice/memory.max": f"{512 * MiB}\n",
            "system.slice/cpu.max": "max 100000\n",
            "system.slice/app.service/memory.max": "max\n",
            "system.slice/app.service/cpu.max": "50000 100000\n",
        },
    )
    found = limits(cgroup, proc)
    assert (found.cpus, found.cpu_source) == (0.5, "cgroup v2")
    assert (found.memory, found.memory_source) == (512 * MiB, "cgroup v2")


def test_cgroup_v1_quota_and_memory(fake: tuple[Path, Path]) -> None:
    cgroup, proc = fake
    tree(proc, {"self/cgroup": "4:cpu,cpuacct:/docker/abc\n3:memory:/docker/abc\n1:name=systemd:/docker/abc\n"})
    tree(
        cgroup,
        {
            "cpu,cpuacct/cpu.cfs_quota_us": "250000\n",
            "cpu,cpuacct/cpu.cfs_period_us": "100000\n",
            "memory/memory.limit_in_bytes": f"{256 * MiB}\n",
        },
    )
    found = limits(cgroup, proc)
    assert (found.cpus, found.cpu_source) == (2.5, "cgroup v1")
    assert (found.memory, found.memory_source) == (256 * MiB, "cgroup v1")


def test_cgroup_v1_unlimited_falls_back_to_the_host(fake: tuple[Path, Path]) -> None:
    cgroup, proc = fake
    tree(
        cgroup,
        {
            "cpu/cpu.cfs_quota_us": "-1\n",
            "cpu/cpu.cfs_period_us": "100000\n",
            "memory/memory.limit_in_bytes": "9223372036854771712\n",
        },
    )
    found = limits(cgroup, proc, cpus=6)
    assert (found.cpus, found.cpu_source) == (6.0, "host")
    assert (found.memory, found.memory_source) == (16384000 * 1024, "host")


def test_a_cgroup_limit_above_the_host_memory_counts_as_the_host(fake: tuple[Path, Path]) -> None:
    cgroup, proc = fake
    tree(cgroup, {"memory.max": f"{64 * GiB}\n"})
    assert limits(cgroup, proc).memory_source == "host"


def test_no_cgroup_and_no_proc_is_the_host_count_and_unknown_memory(tmp_path: Path) -> None:
    found = read_limits(tmp_path / "none", tmp_path / "none", cpu_count=lambda: None)
    assert (found.cpus, found.cpu_source, found.memory, found.memory_source) == (1.0, "host", None, "unknown")


@pytest.mark.parametrize(
    ("text", "cpus"),
    [
        ("25000 100000", 0.25),
        ("max 100000", None),
        ("MAX", None),
        ("0 100000", None),
        ("10 0", None),
        ("x y", None),
        ("200000", 2.0),
    ],
)
def test_parse_cpu_max(text: str, cpus: float | None) -> None:
    assert autotune.parse_cpu_max(text) == cpus


def test_parse_memory() -> None:
    assert autotune.parse_memory_max("max") is None
    assert autotune.parse_memory_max("0") is None
    assert autotune.parse_memory_max("1048576\n") == MiB
    assert autotune.parse_v1_memory(str(1 << 62)) is None
    assert autotune.parse_v1_memory("1048576") == MiB
    assert autotune.parse_v1_cpu("-1", "100000") is None


def make_limits(cpus: float, memory: int | None, *, quota: bool = True, host_cpus: int = 16) -> Limits:
    return Limits(
        cpus=cpus,
        cpu_source="cgroup v2" if quota else "host",
        memory=memory,
        memory_source="cgroup v2" if memory is not None else "unknown",
        host_cpus=host_cpus,
        host_memory=None,
    )


def test_profile_from_a_quota_and_a_memory_limit() -> None:
    profile = derive_profile(make_limits(1.5, GiB))
    assert profile.workers == 2 and profile.sources["workers"] == "cgroup quota"
    assert profile.memory_budget == (GiB - 64 * MiB) // 2 == 480 * MiB
    assert profile.encoder_budget == 120 * MiB
    assert tab_cost(1 << 20) == 10240 + 20480 + 10485
    assert profile.max_tabs == (480 - 48) * MiB // 41205 == 10993
    assert profile.gc_thresholds == Config().gc_thresholds and profile.gc_freeze is True
    assert profile.pinned == frozenset()


@pytest.mark.parametrize(
    ("cpus", "memory", "quota", "host_cpus", "workers", "source"),
    [
        (0.25, 320 * MiB, True, 16, 1, "cgroup quota"),
        (2.0, 4 * GiB, True, 16, 2, "cgroup quota"),
        (8.0, 512 * MiB, False, 8, 3, "memory"),  # (512 - 64) / 128 MiB per worker at least
        (64.0, 64 * GiB, False, 64, 32, "host cpus"),  # clamped to 32
        (4.0, None, False, 4, 3, "memory"),  # unknown memory counts as 512 MiB
    ],
)
def test_auto_workers(cpus: float, memory: int | None, quota: bool, host_cpus: int, workers: int, source: str) -> None:
    profile = derive_profile(make_limits(cpus, memory, quota=quota, host_cpus=host_cpus))
    assert (profile.workers, profile.sources["workers"]) == (workers, source)
    assert profile.memory_budget >= autotune.MIN_WORKER_BUDGET


def test_a_bigger_stream_buffer_means_fewer_tabs() -> None:
    small = derive_profile(make_limits(1, GiB), max_stream_buffer=64 * 1024)
    big = derive_profile(make_limits(1, GiB), max_stream_buffer=16 * MiB)
    assert small.max_tabs > big.max_tabs


def test_pinned_values_are_used_as_given_and_marked() -> None:
    profile = derive_profile(
        make_limits(1.5, GiB), workers=4, max_tabs=100, gc_thresholds=None, encoder_budget=32 * MiB
    )
    assert (profile.workers, profile.max_tabs, profile.encoder_budget) == (4, 100, 32 * MiB)
    assert profile.gc_thresholds is None
    assert profile.gc_freeze is False
    assert profile.memory_budget == (GiB - 64 * MiB) // 4  # derived from the pinned worker count
    assert profile.pinned == {"workers", "max_tabs", "gc_thresholds", "encoder_budget"}
    line = profile.log_line()
    assert line == (
        "autotune: cpu 1.50 (cgroup v2), memory 1024 MiB (cgroup v2); workers=4* [pinned], "
        "memory_budget=240MiB, encoder_budget=32MiB*, max_tabs=100*, gc=python-default* (* = pinned)"
    )
    assert "\n" not in line


def test_the_log_line_of_a_derived_profile() -> None:
    profile = derive_profile(make_limits(1.5, GiB), gc_thresholds=(50_000, 50, 100), defaulted={"gc_thresholds"})
    line = profile.log_line()
    assert line == (
        "autotune: cpu 1.50 (cgroup v2), memory 1024 MiB (cgroup v2); workers=2 [cgroup quota], "
        "memory_budget=480MiB, encoder_budget=120MiB, max_tabs=10993, gc=freeze+50000/50/100 (* = pinned)"
    )
    assert "*," not in line


def test_profile_for_settings_applies_their_pins(tmp_path: Path) -> None:
    path = tmp_path / "pyvia.toml"
    path.write_text(
        '[server]\nworkers = "auto"\n[autotune]\nmax_tabs = 2000\nmemory_budget = "300MiB"\n'
        "[app]\ngc_thresholds = [10000, 20, 30]\n"
    )
    profile = profile_for(load_settings(path, env={"PYVIA_APP__ENCODER_BUDGET": "50MiB"}), make_limits(2, 2 * GiB))
    assert profile.workers == 2 and "workers" not in profile.pinned
    assert (profile.max_tabs, profile.memory_budget, profile.encoder_budget) == (2000, 300 * MiB, 50 * MiB)
    assert profile.gc_thresholds == (10000, 20, 30)
    assert profile.pinned == {"max_tabs", "memory_budget", "encoder_budget", "gc_thresholds"}


def test_the_default_worker_count_is_used_but_not_marked_pinned() -> None:
    profile = profile_for(load_settings(env={}), make_limits(4, 4 * GiB))
    assert profile.workers == 1 and profile.sources["workers"] == "default"
    assert profile.gc_thresholds == Config().gc_thresholds and profile.pinned == frozenset()
    assert "workers=1 [default]" in profile.log_line() and "*," not in profile.log_line()


def test_gc_policy_freezes_and_sets_the_thresholds_only_when_asked() -> None:
    before = gc.get_threshold()
    assert apply_gc_policy(derive_profile(make_limits(1, GiB), gc_thresholds=None)) is False
    try:
        assert apply_gc_policy(derive_profile(make_limits(1, GiB), gc_thresholds=(5000, 20, 30))) is True
        assert gc.get_freeze_count() > 0 and gc.get_threshold() == (5000, 20, 30)
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)


def test_the_real_machine_can_be_read() -> None:
    found = read_limits()
    assert found.cpus > 0 and found.host_cpus >= 1
    assert derive_profile(found).workers >= 1
