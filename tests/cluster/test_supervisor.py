"""``pyvia run APP --workers N``: the supervisor, its workers and the nats-server, as processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.helpers import RawClient, get
from tests.processes import ROOT, free_port


def children(pid: int) -> dict[int, str]:
    """Live child processes of ``pid`` and their command lines, read from /proc."""
    found: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == pid and fields[0] != "Z":
            found[int(entry.name)] = cmdline
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def wait_until(check: Callable[[], object], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not reached within {timeout} s")
        time.sleep(0.02)


class Cluster:
    """``python -m pyvia run APP --workers N`` on a free port, its log collected from stderr."""

    def __init__(self, app: str, workers: int = 2, *extra: str) -> None:
        self.port = free_port()
        self.lines: list[str] = []
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "pyvia", "run", app, "--port", str(self.port), "--workers", str(workers), *extra],
            cwd=ROOT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            stderr=subprocess.PIPE,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.wait_for_log(f"with {workers} workers")

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for raw in self.proc.stderr:
            self.lines.append(raw.decode(errors="replace"))

    def log(self) -> str:
        return "".join(self.lines)

    def wait_for_log(self, needle: str, timeout: float = 15.0) -> None:
        wait_until(lambda: needle in self.log() or self.proc.poll() is not None, timeout, f"log line {needle!r}")
        assert needle in self.log(), self.log()

    def workers(self) -> dict[int, str]:
        return {pid: cmd for pid, cmd in children(self.proc.pid).items() if "pyvia.server.supervisor" in cmd}

    def nats_pids(self) -> list[int]:
        return [pid for pid, cmd in children(self.proc.pid).items() if "nats-server" in cmd]

    def get(self, path: str) -> tuple[int, bytes]:
        with RawClient("127.0.0.1", self.port) as client:
            client.send(get(path))
            response = client.read_response()
            return response.status, response.body

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(15)
        finally:
            self._reader.join(5)
            if self.proc.stderr is not None:
                self.proc.stderr.close()


@pytest.fixture
def pid_cluster() -> Iterator[Cluster]:
    cluster = Cluster("tests.cluster.apps:app")
    try:
        yield cluster
    finally:
        cluster.stop()
        for pid in list(cluster.workers()) + cluster.nats_pids():
            os.kill(pid, signal.SIGKILL)


def pid_of_each_worker(cluster: Cluster) -> set[int]:
    """Which workers answer: one request holds a worker's loop, so the next go to another one."""
    result: dict[str, bytes] = {}

    def blocked() -> None:
        result["blocked"] = cluster.get("/block")[1]

    holder = threading.Thread(target=blocked)
    holder.start()
    time.sleep(0.1)
    others = {int(cluster.get("/pid")[1]) for _ in range(5)}
    holder.join()
    return others | {int(result["blocked"])}


def test_two_workers_answer_from_two_processes_and_share_the_engine(pid_cluster: Cluster) -> None:
    workers = pid_cluster.workers()
    assert len(workers) == 2
    assert len(pid_cluster.nats_pids()) == 1  # no --engine: the supervisor started a nats-server
    assert pid_of_each_worker(pid_cluster) == set(workers)
    counts = [int(pid_cluster.get("/hit")[1].split()[1]) for _ in range(10)]
    assert counts == list(range(1, 11))  # one counter in the engine, whichever worker answered
    status, body = pid_cluster.get("/")
    assert status == 200 and b"worker " in body


def test_the_counter_example_runs_on_two_workers() -> None:
    cluster = Cluster("examples.counter:app")
    try:
        assert len(cluster.workers()) == 2
        for _ in range(10):
            status, body = cluster.get("/")
            assert status == 200 and b"data-signals" in body
    finally:
        assert cluster.stop() == 0


def test_a_killed_worker_is_restarted(pid_cluster: Cluster) -> None:
    before = pid_cluster.workers()
    victim = min(before)
    os.kill(victim, signal.SIGKILL)
    wait_until(
        lambda: len(pid_cluster.workers()) == 2 and victim not in pid_cluster.workers(),
        10,
        "a new worker in place of the killed one",
    )
    pid_cluster.wait_for_log(f"(pid {victim}) was killed by SIGKILL")
    assert "restarting in 0.5 s" in pid_cluster.log()
    survivor = (set(before) - {victim}).pop()
    assert survivor in pid_cluster.workers()
    wait_until(lambda: pid_of_each_worker(pid_cluster) == set(pid_cluster.workers()), 10, "both workers serving")


def test_sigterm_stops_every_process_within_the_graceful_budget(pid_cluster: Cluster) -> None:
    processes = list(pid_cluster.workers()) + pid_cluster.nats_pids()
    assert len(processes) == 3
    with RawClient("127.0.0.1", pid_cluster.port) as idle:
        idle.send(get("/pid"))
        assert idle.read_response().status == 200  # a keep-alive connection stays open
        started = time.monotonic()
        assert pid_cluster.stop() == 0
        assert time.monotonic() - started < 3.0 + 1.0  # the workers' graceful budget, plus start-up slack
        assert idle.is_closed_by_peer()
    assert not [pid for pid in processes if alive(pid)]
    assert "SIGTERM: stopping 2 worker(s)" in pid_cluster.log()


def test_sighup_replaces_the_workers_one_by_one_while_serving(pid_cluster: Cluster) -> None:
    before = set(pid_cluster.workers())
    failures: list[object] = []
    done = threading.Event()

    retried: list[object] = []

    def keep_asking() -> None:
        while not done.is_set():
            for attempt in range(2):
                try:
                    status, _ = pid_cluster.get("/pid")
                except (OSError, EOFError) as exc:
                    # a retiring worker closes a connection it accepted but got no request on yet
                    # (the native server's graceful stop treats it as idle); HTTP clients retry an
                    # idempotent request on such a close (RFC 9110 section 9.2.2), and so does this one
                    (retried if attempt == 0 else failures).append(exc)
                    continue
                if status != 200:
                    failures.append(status)
                break

    client = threading.Thread(target=keep_asking)
    client.start()
    try:
        pid_cluster.proc.send_signal(signal.SIGHUP)
        pid_cluster.wait_for_log("reload done", timeout=30)
    finally:
        done.set()
        client.join()
    after = set(pid_cluster.workers())
    assert len(after) == 2 and not after & before
    assert not [pid for pid in before if alive(pid)]
    assert failures == []


def test_the_workers_and_nats_server_stop_when_the_supervisor_is_killed(pid_cluster: Cluster) -> None:
    processes = list(pid_cluster.workers()) + pid_cluster.nats_pids()
    pid_cluster.proc.kill()
    pid_cluster.stop()
    wait_until(lambda: not [pid for pid in processes if alive(pid)], 10, "no process left behind")


def test_a_worker_that_cannot_start_stops_the_supervisor(tmp_path: Path) -> None:
    (tmp_path / "crashing.py").write_text(
        "import os\nfrom pyvia import App\napp = App()\n"
        "if os.environ.get('PYVIA_WORKER_ID'):\n    raise SystemExit(3)\n"
    )
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pyvia",
            "run",
            "crashing:app",
            "--workers",
            "2",
            "--port",
            str(free_port()),
            "--engine",
            "redis://127.0.0.1:1/0",
        ],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        timeout=60,
    )
    assert proc.returncode == 1
    assert b"exited with status 3 before accepting connections, 3 times in a row, and no worker serves" in proc.stderr
