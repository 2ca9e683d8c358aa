"""The autotune start-up line names the worker count that really runs (pyvia run --workers N)."""

from __future__ import annotations

from pyvia.cli import profile_line
from pyvia.ops.autotune import Limits, profile_for
from pyvia.ops.settings import load_settings

LIMITS = Limits(cpus=4.0, cpu_source="host", memory=8 << 30, memory_source="host", host_cpus=4, host_memory=8 << 30)


def test_workers_given_on_the_command_line_are_in_the_line() -> None:
    settings = load_settings(env={})  # server.workers keeps its default of 1
    assert "workers=1 [default]" in profile_for(settings, LIMITS).log_line()
    line = profile_for(settings, LIMITS, workers=2).log_line()
    assert "workers=2* [pinned]" in line
    assert profile_for(settings, LIMITS, workers=2).workers == 2


def test_the_cli_line_follows_the_resolved_count() -> None:
    settings = load_settings(env={})
    assert "workers=2*" in profile_line(settings, "2", 2)
    assert "workers=1 " not in profile_line(settings, "2", 2)
    auto = profile_line(settings, "auto", 3)  # auto: the count autotune derives, not pinned
    assert "workers=" in auto and "*" not in auto.split("workers=")[1].split(",")[0]
