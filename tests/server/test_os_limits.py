"""Issue 22 item 6: at start the native server raises its open-file limit to the hard limit and
checks ``net.core.somaxconn`` against its listen backlog, saying in one line what caps it."""

from __future__ import annotations

import logging
import subprocess
import sys
from typing import Any

import pytest

from pyvia.server.os_limits import SOMAXCONN, OsLimits, limit_warnings, raise_open_files, read_sysctl
from tests.helpers import running_server
from tests.security.servers import LimitsApp

INFINITY = -1


class FakeResource:
    RLIMIT_NOFILE = 7
    RLIM_INFINITY = INFINITY

    def __init__(self, soft: int, hard: int, *, refuse: bool = False) -> None:
        self.limits = (soft, hard)
        self.refuse = refuse
        self.calls: list[tuple[int, int]] = []

    def getrlimit(self, which: int) -> tuple[int, int]:
        assert which == self.RLIMIT_NOFILE
        return self.limits

    def setrlimit(self, which: int, limits: tuple[int, int]) -> None:
        self.calls.append(limits)
        if self.refuse:
            raise ValueError("not allowed")
        self.limits = limits


def test_the_soft_open_file_limit_is_raised_to_the_hard_one() -> None:
    fake = FakeResource(1024, 65536)
    assert raise_open_files(fake) == (1024, 65536, 65536) and fake.calls == [(65536, 65536)]
    already = FakeResource(65536, 65536)
    assert raise_open_files(already) == (65536, 65536, 65536) and already.calls == []


def test_an_unlimited_hard_limit_is_taken_as_nr_open_and_a_refusal_changes_nothing() -> None:
    unlimited = FakeResource(1024, INFINITY)
    assert raise_open_files(unlimited, nr_open=lambda: 1_048_576) == (1024, 1_048_576, INFINITY)
    assert unlimited.calls == [(1_048_576, INFINITY)]
    refused = FakeResource(1024, 4096, refuse=True)
    assert raise_open_files(refused) == (1024, 1024, 4096)


def test_a_real_process_started_with_a_low_soft_limit_ends_at_its_hard_limit() -> None:
    code = (
        "import resource\n"
        "soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))\n"
        "from pyvia.server.os_limits import raise_open_files\n"
        "print(*raise_open_files(), *resource.getrlimit(resource.RLIMIT_NOFILE))\n"
    )
    before, now, hard, soft_after, hard_after = map(int, subprocess.check_output([sys.executable, "-c", code]).split())
    assert before == 256 and now == soft_after == hard == hard_after


def test_limits_that_cap_the_configuration_are_named_with_their_fix() -> None:
    roomy = OsLimits(1024, 1_048_576, 1_048_576, 4096)
    assert limit_warnings(roomy, backlog=4096, max_connections=None, effective_connections=943_000) == []
    short_queue = OsLimits(1024, 1_048_576, 1_048_576, 128)
    (line,) = limit_warnings(short_queue, backlog=4096, max_connections=None, effective_connections=943_000)
    assert "listen backlog of 4096 is cut to net.core.somaxconn=128" in line and "sysctl -w" in line
    few_files = OsLimits(1024, 1024, 1024, 4096)
    (line,) = limit_warnings(few_files, backlog=4096, max_connections=None, effective_connections=992)
    assert "open-file limit is 1024" in line and "at most 992 connections" in line and "ulimit -Hn" in line
    (line,) = limit_warnings(roomy, backlog=4096, max_connections=2_000_000, effective_connections=943_000)
    assert "max_connections=2000000 is cut to 943000" in line


def test_the_start_says_in_one_line_when_somaxconn_cuts_the_listen_backlog(caplog: pytest.LogCaptureFixture) -> None:
    somaxconn = read_sysctl(SOMAXCONN)
    assert somaxconn is not None, "this test runs on Linux"
    caplog.set_level(logging.INFO, logger="pyvia.server")
    with running_server(LimitsApp(), backlog=somaxconn + 1):
        pass
    capped = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and "system limits" in r.message]
    assert len(capped) == 1, capped
    assert f"listen backlog of {somaxconn + 1} is cut to net.core.somaxconn={somaxconn}" in capped[0]
    capacity = [r.getMessage() for r in caplog.records if r.getMessage().startswith("capacity:")]
    assert f"listen backlog {somaxconn + 1} (somaxconn {somaxconn})" in capacity[0]


def test_a_server_whose_hard_limit_is_low_says_what_it_caps() -> None:
    code = (
        "import asyncio, logging, resource, sys\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (256, 1000))\n"
        "logging.basicConfig(level=logging.INFO, stream=sys.stdout, format='%(levelname)s %(message)s')\n"
        "from pyvia.server.runner import serve\n"
        "from tests.security.servers import LimitsApp\n"
        "async def main():\n"
        "    stop = asyncio.Event()\n"
        "    await serve(LimitsApp(), port=0, ready=lambda h, p: stop.set(), stop=stop)\n"
        "asyncio.run(main())\n"
    )
    out = subprocess.check_output([sys.executable, "-c", code], text=True, timeout=30)
    warnings = [line for line in out.splitlines() if line.startswith("WARNING system limits")]
    capacity: Any = [line for line in out.splitlines() if "capacity:" in line]
    assert len(warnings) == 1 and "open-file limit is 1000 (hard 1000)" in warnings[0], out
    assert "capacity: 900 connections" in capacity[0] and "open files 1000 (raised from 256, hard 1000)" in capacity[0]
