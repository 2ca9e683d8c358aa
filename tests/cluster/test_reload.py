"""Deploys are events: ``pyvia reload`` (SIGHUP to the supervisor) and ``pyvia run --dev``, as processes.

A test copies ``reload_app.py`` into a temporary project, runs ``pyvia run`` on it, opens tabs over
raw sockets the way Datastar does (a page, then a stream that the tab reopens with the signals it
holds whenever it ends), edits the source, and checks what the tabs and plain requests saw.
"""

from __future__ import annotations

import html
import json
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import quote

import pytest

from tests.cluster.test_supervisor import alive, children, wait_until
from tests.helpers import RawClient, RawResponse
from tests.processes import free_port

SOURCE = (Path(__file__).parent / "reload_app.py").read_text()
SEED = re.compile(r'data-signals="([^"]*)"')
HOST = "127.0.0.1"


class Project:
    """``pyvia run reload_app:app`` in a temporary folder, its stderr collected."""

    def __init__(self, folder: Path, *options: str) -> None:
        self.folder = folder
        self.port = free_port()
        self.write("v1")
        env = {
            **os.environ,
            "PYTHONUNBUFFERED": "1",
            "RELOAD_TEST_STATE": str(folder / "state.db"),
            "PYVIA_SECRET": "reload-test-secret",
            "PYTHONPATH": os.pathsep.join(sys.path),
        }
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "pyvia", "run", "reload_app:app", "--port", str(self.port), *options],
            cwd=folder,
            env=env,
            stderr=subprocess.PIPE,
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.wait_for_log("with 1 worker")

    def write(self, version: str, extra: str = "") -> None:
        text = SOURCE.replace('VERSION = "v1"', f'VERSION = "{version}"') + extra
        (self.folder / "reload_app.py").write_text(text)

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for raw in self.proc.stderr:
            self.lines.append(raw.decode(errors="replace"))

    def log(self) -> str:
        return "".join(self.lines)

    def wait_for_log(self, needle: str, timeout: float = 20.0, count: int = 1) -> None:
        wait_until(
            lambda: self.log().count(needle) >= count or self.proc.poll() is not None, timeout, f"log line {needle!r}"
        )
        assert self.log().count(needle) >= count, self.log()

    def workers(self) -> set[int]:
        return {pid for pid, cmd in children(self.proc.pid).items() if "pyvia.server.supervisor" in cmd}

    def get(self, path: str) -> RawResponse:
        with RawClient(HOST, self.port) as client:
            client.send(f"GET {path} HTTP/1.1\r\nHost: {HOST}:{self.port}\r\n\r\n".encode())
            return client.read_response()

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
def project(tmp_path: Path) -> Iterator[Callable[..., Project]]:
    started: list[Project] = []

    def start(*options: str) -> Project:
        started.append(Project(tmp_path, *options))
        return started[-1]

    yield start
    for running in started:
        workers = running.workers()
        running.stop()
        for pid in workers:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


def request(port: int, raw: bytes) -> RawResponse:
    """One request on a new connection."""
    with RawClient(HOST, port) as client:
        client.send(raw)
        return client.read_response()


def events(chunk: bytes) -> Iterator[tuple[str, list[str]]]:
    for block in chunk.decode().split("\n\n"):
        lines = block.split("\n")
        if lines and lines[0].startswith("event: "):
            yield lines[0][7:], [line[6:] for line in lines[1:] if line.startswith("data: ")]


class Tab:
    """A browser tab as Datastar runs it: the page's seed, a stream reopened with the signals
    the tab holds whenever it ends, actions posted with those signals."""

    def __init__(self, port: int) -> None:
        self.port = port
        response = request(port, f"GET / HTTP/1.1\r\nHost: {HOST}:{port}\r\n\r\n".encode())
        assert response.status == 200, response
        self.signals: dict[str, object] = json.loads(html.unescape(SEED.search(response.body.decode()).group(1)))
        self.cookie = (response.header("set-cookie") or "").split(";", 1)[0]
        self.view = response.body.decode()  # the page, then the last view the stream sent
        self.ends: list[float] = []  # when the server ended the tab's stream
        self.lock = threading.Condition()
        self.failures: list[str] = []
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _sent(self) -> dict[str, object]:
        """What the page's actions send: no ``_`` signal, but the snapshot while its stream is down."""
        excluded = re.compile(str(self.signals.get("_via_filter", r"(^|\.)_")))
        return {k: v for k, v in self.signals.items() if not excluded.search(k)}

    def _open(self, client: RawClient) -> RawResponse:
        """Open the stream as the page does: a GET with the context id, then, when the server asks
        for it, a POST with the writable signals and the snapshot."""
        query = quote(json.dumps({"via_ctx": self.signals["via_ctx"]}))
        client.send(
            f"GET /_sse?datastar={query} HTTP/1.1\r\nHost: {HOST}:{self.port}\r\nCookie: {self.cookie}\r\n\r\n".encode()
        )
        head = client.read_head()
        if head.status != 200 or head.header("content-type") != "application/json":
            return head
        answer = client.read_exact(int(head.header("content-length") or 0))
        with self.lock:
            self.signals.update(json.loads(answer))
            body = json.dumps(
                {k: v for k, v in self.signals.items() if not k.startswith("_") or k == "_via_snap"}
            ).encode()
        client.send(
            f"POST /_sse HTTP/1.1\r\nHost: {HOST}:{self.port}\r\nOrigin: http://{HOST}:{self.port}\r\n"
            f"Cookie: {self.cookie}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        return client.read_head()

    def _run(self) -> None:
        while not self.done.is_set():
            try:
                with RawClient(HOST, self.port, timeout=30) as client:
                    head = self._open(client)
                    if head.status != 200:
                        self.failures.append(f"stream answered {head.status}")
                        return
                    while chunk := client.read_chunk():
                        self._apply(chunk)
            except (EOFError, ConnectionResetError) as exc:
                if self.done.is_set():
                    return
                self.failures.append(f"stream cut: {exc!r}")
            except OSError:
                if self.done.is_set():
                    return
                raise
            with self.lock:
                self.signals["_via_filter"] = r"(^|\.)_(?!via_snap)"  # as the page does while it reconnects
                self.ends.append(time.monotonic())
                self.lock.notify_all()
            time.sleep(random.uniform(0.0, 0.3))  # Datastar's page reopens it within a second

    def _apply(self, chunk: bytes) -> None:
        with self.lock:
            for kind, data in events(chunk):
                if kind == "datastar-patch-signals":
                    patch = json.loads(data[0].removeprefix("signals "))
                    self.signals.update(patch)
                elif kind == "datastar-patch-elements":
                    self.view = "\n".join(line.removeprefix("elements ") for line in data)
            self.lock.notify_all()

    def act(self, name: str) -> RawResponse:
        with self.lock:
            body = json.dumps(self._sent()).encode()
        return request(
            self.port,
            (
                f"POST /_action/{name} HTTP/1.1\r\nHost: {HOST}:{self.port}\r\nOrigin: http://{HOST}:{self.port}\r\n"
                f"Cookie: {self.cookie}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
            ).encode()
            + body,
        )

    def wait(self, check: Callable[[Tab], bool], what: str, timeout: float = 10.0) -> None:
        with self.lock:
            if not self.lock.wait_for(lambda: check(self), timeout):
                raise AssertionError(
                    f"{what}: the tab holds {self.signals}, view {self.view!r}, failures {self.failures}"
                )

    def close(self) -> None:
        self.done.set()


def keep_requesting(port: int, stop: threading.Event, seen: list[str], failures: list[object]) -> None:
    while not stop.is_set():
        try:
            response = request(port, f"GET /version HTTP/1.1\r\nHost: {HOST}:{port}\r\n\r\n".encode())
        except OSError as exc:
            failures.append(exc)
            continue
        if response.status != 200:
            failures.append(response.status)
        else:
            seen.append(response.body.decode().split()[0])


def test_a_reload_under_load_runs_the_new_code_and_every_tab_revives_with_its_signals(
    project: Callable[..., Project],
) -> None:
    running = project("--pid-file", "pyvia.pid", "--reload-spread", "1")
    pid_file = running.folder / "pyvia.pid"
    assert int(pid_file.read_text()) == running.proc.pid
    (old_worker,) = running.workers()
    tabs = [Tab(running.port) for _ in range(6)]
    stop, seen, failures = threading.Event(), [], []
    poller = threading.Thread(target=keep_requesting, args=(running.port, stop, seen, failures))
    poller.start()
    acted = [0] * len(tabs)
    try:
        for tab in tabs:
            tab.wait(lambda t: "v1 count=0" in t.view, "the first render")

        def round_of_actions() -> None:
            time.sleep(0.02)  # a few hundred actions a second: under the per-address rate limit
            for i, tab in enumerate(tabs):
                response = tab.act("inc")
                assert (response.status, response.body) == (200, b""), (response, running.log())
                acted[i] += 1
                tab.wait(lambda t, n=acted[i]: t.signals.get("_count") == n, f"count {acted[i]} on tab {i}")

        round_of_actions()
        running.write("v2")  # serve mode watches nothing: the running code stays v1
        round_of_actions()
        assert request(running.port, b"GET /version HTTP/1.1\r\nHost: x\r\n\r\n").body.startswith(b"v1 ")
        assert "watching" not in running.log()

        reload = subprocess.run(
            [sys.executable, "-m", "pyvia", "reload", "--pid-file", str(pid_file)],
            cwd=running.folder,
            capture_output=True,
            timeout=30,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        )
        assert reload.returncode == 0, reload.stderr
        assert f"sent SIGHUP to the supervisor (pid {running.proc.pid})" in reload.stdout.decode()
        while "reload done" not in running.log():  # actions keep flowing during the reload
            round_of_actions()
            assert running.proc.poll() is None, running.log()
        round_of_actions()
        for i, tab in enumerate(tabs):
            tab.wait(
                lambda t, n=acted[i]: f"v2 count={n} total={sum(acted)}" in t.view, f"tab {i} revived on the new code"
            )
    finally:
        stop.set()
        poller.join()
        for tab in tabs:
            tab.close()

    assert failures == []
    assert seen[0] == "v1" and seen[-1] == "v2" and "v1" not in seen[seen.index("v2") :]  # one switch
    for i, tab in enumerate(tabs):
        assert tab.failures == [], tab.failures
        assert tab.signals["_count"] == acted[i]
        assert tab.signals["_global__total"] == sum(acted)  # shared state saved by the old, restored by the new
        assert len(tab.ends) == 1  # each stream ended once, by the old worker
    ends = sorted(tab.ends[0] for tab in tabs)
    assert ends[-1] - ends[0] > 0.4  # spread over --reload-spread 1, not all at once
    (new_worker,) = running.workers()
    assert new_worker != old_worker and not alive(old_worker)
    log = running.log()
    assert "held until the old one saved its state" in log
    assert f"(pid {old_worker}) exited with status 0" in log

    fresh = Tab(running.port)  # a new tab after the reload sees the shared total the old worker had
    try:
        fresh.wait(lambda t: f"v2 count=0 total={sum(acted)}" in t.view, "a new tab's first render")
    finally:
        fresh.close()
    assert running.stop() == 0
    assert not pid_file.exists()
    assert not alive(new_worker)


def test_a_reload_whose_code_does_not_import_keeps_the_old_workers(project: Callable[..., Project]) -> None:
    running = project()
    (worker,) = running.workers()
    running.write("v2", extra="\nraise RuntimeError('broken deploy')\n")
    os.kill(running.proc.pid, signal.SIGHUP)
    running.wait_for_log("reload stopped: the new worker 0")
    assert running.workers() == {worker}
    assert running.get("/version").body == f"v1 {worker}".encode()
    assert "RuntimeError: broken deploy" in running.log()


def test_a_failing_page_shows_no_trace_in_serve_mode(project: Callable[..., Project]) -> None:
    running = project()
    response = running.get("/boom")
    assert (response.status, response.body) == (500, b"Internal Server Error")


def test_dev_mode_reloads_on_change_and_shows_errors_in_the_page(project: Callable[..., Project]) -> None:
    running = project("--dev")
    running.wait_for_log("dev mode: watching")
    boom = running.get("/boom")  # a page handler that raises: the exception, readable
    assert boom.status == 500
    assert b"LookupError in page" in boom.body and b"no such thing in v1" in boom.body
    tab = Tab(running.port)
    try:
        tab.wait(lambda t: "v1 count=0" in t.view, "the first render")

        running.write("v2")
        wait_until(lambda: running.get("/version").body.startswith(b"v2 "), 20, "the change served")
        tab.wait(lambda t: "v2 count=0" in t.view, "the tab revived on the changed code")

        running.write("v3", extra="\nraise RuntimeError('half-edited')\n")  # an import error
        wait_until(lambda: running.get("/version").status == 500, 20, "the error served")
        page = running.get("/")
        assert b"RuntimeError in loading reload_app:app" in page.body and b"half-edited" in page.body
        tab.wait(lambda t: "via-dev-error" in t.view and "half-edited" in t.view, "the error over the tab")

        running.write("v4")
        wait_until(lambda: running.get("/version").body.startswith(b"v4 "), 20, "the fixed code served")
        tab.wait(lambda t: "v4 count=0" in t.view, "the tab back on the fixed code")
        assert tab.failures == []
    finally:
        tab.close()
    assert running.stop() == 0
