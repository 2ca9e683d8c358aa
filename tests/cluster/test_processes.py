"""No lost update when several processes write one key at once (php-via §6.3: read-modify-write
across workers loses updates unless the engine makes it atomic)."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import orjson

from tests.cluster.conftest import Backend, run
from tests.processes import ROOT


def race(backend: Backend, op: str, processes: int, count: int) -> bytes | None:
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.cluster.hammer", backend.url, backend.prefix, op, str(count), f"p{n}"],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for n in range(processes)
    ]
    try:
        for proc in procs:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            assert line == b"ready\n", proc.stderr.read() if proc.stderr else line

        async def start_and_read() -> bytes | None:
            async with backend.open() as (engine,):
                await engine.publish("go", b"")
                for proc in procs:
                    out, err = await asyncio.to_thread(proc.communicate, timeout=60)
                    assert proc.returncode == 0, err.decode()
                    assert out == b"done\n"
                key = "count" if op == "increment" else "list"
                return (await engine.get("race", key))[0]

        return run(start_and_read(), timeout=90)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def test_four_processes_incrementing_250_times_each_reach_1000(server_backend: Backend) -> None:
    value = race(server_backend, "increment", processes=4, count=250)
    assert value is not None and orjson.loads(value) == 1000


def test_appends_from_four_processes_are_all_kept_in_each_writers_order(server_backend: Backend) -> None:
    value = race(server_backend, "append", processes=4, count=50)
    assert value is not None
    items = orjson.loads(value)
    assert sorted(items) == sorted(f"p{n}-{i}" for n in range(4) for i in range(50))
    for n in range(4):
        assert [x for x in items if x.startswith(f"p{n}-")] == [f"p{n}-{i}" for i in range(50)]
