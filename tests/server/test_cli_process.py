"""``python -m pyvia run`` as a process: it serves, logs where, and stops cleanly on SIGTERM."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import RawClient, get

APP = """
from pyvia import App, Response

app = App()


@app.route("GET", "/ping")
def ping(request):
    return Response.text("pong")
"""


def read_line_with(proc: subprocess.Popen[bytes], needle: bytes, timeout: float = 10.0) -> bytes:
    assert proc.stderr is not None
    seen = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if select.select([proc.stderr], [], [], 0.1)[0]:
            line = proc.stderr.readline()
            seen += line
            if needle in line:
                return line
            if not line:
                break
    raise AssertionError(f"{needle!r} not logged; stderr so far: {seen!r}")


def test_pyvia_run_serves_and_stops_on_sigterm(tmp_path: Path) -> None:
    (tmp_path / "pingapp.py").write_text(APP)
    with __import__("socket").socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "pyvia", "run", "pingapp:app", "--port", str(port)],
        cwd=tmp_path,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        stderr=subprocess.PIPE,
    )
    try:
        line = read_line_with(proc, b"pyvia listening on")
        assert f"pyvia listening on http://127.0.0.1:{port}".encode() in line
        with RawClient("127.0.0.1", port) as idle:
            idle.send(get("/ping"))
            response = idle.read_response()
            assert (response.status, response.body) == (200, b"pong")
            began = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=10) == 0
            assert time.monotonic() - began < 3.0  # within the default graceful budget
            assert idle.is_closed_by_peer()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        assert proc.stderr is not None
        proc.stderr.close()


def test_pyvia_run_with_a_bad_reference_exits_2_without_a_traceback(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pyvia", "run", "nowhere:app"], cwd=tmp_path, capture_output=True, timeout=30
    )
    assert done.returncode == 2
    assert b"no module named 'nowhere'" in done.stderr and b"Traceback" not in done.stderr


@pytest.mark.parametrize("workers", ["1", "2"])
def test_pyvia_run_serves_with_the_limits_of_pyvia_toml_and_set(tmp_path: Path, workers: str) -> None:
    # The file caps the headers, --set the URL; with 2 workers each worker reads both.
    (tmp_path / "pingapp.py").write_text(APP)
    (tmp_path / "pyvia.toml").write_text("[server]\nmax_header_count = 3\nmax_request_line = 16\n")
    with __import__("socket").socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pyvia",
            "run",
            "pingapp:app",
            "--port",
            str(port),
            "--workers",
            workers,
            "--set",
            "max_request_line=64",
        ],
        cwd=tmp_path,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        stderr=subprocess.PIPE,
    )
    try:
        read_line_with(proc, b"pyvia listening on", timeout=30)
        answers = {}
        for name, request in {
            "control": get("/ping"),
            "four headers": b"GET /ping HTTP/1.1\r\nHost: x\r\nA: 1\r\nB: 2\r\nC: 3\r\n\r\n",
            "a 40-byte URL": get("/ping?" + "q" * 34),
            "a 70-byte URL": get("/ping?" + "q" * 64),
        }.items():
            with RawClient("127.0.0.1", port) as client:
                client.send(request)
                answers[name] = client.read_response().status
        assert answers == {"control": 200, "four headers": 431, "a 40-byte URL": 200, "a 70-byte URL": 414}
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            assert proc.stderr is not None
            proc.stderr.close()
