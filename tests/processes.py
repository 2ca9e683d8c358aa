"""Servers in subprocesses: what a test needs to restart a real server process."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"nothing listens on port {port} after {timeout} s")


class ServerProcess:
    """``pyvia run APP`` in a subprocess, restartable on the same port."""

    def __init__(
        self,
        app: str,
        port: int,
        secret: str = "browser-test-secret",
        *,
        tls: tuple[str, str] | None = None,
        env: dict[str, str] | None = None,
        extra: tuple[str, ...] = (),
        log: Path | None = None,
    ) -> None:
        """``log``: a file the server's output is appended to (else it goes to the test's)."""
        self.app = app
        self.log = log
        self.port = port
        self.extra = extra
        self.env = {**os.environ, "PYVIA_SECRET": secret, **(env or {})}
        self.tls = tls
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        command = [sys.executable, "-m", "pyvia", "run", self.app, "--host", "127.0.0.1", "--port", str(self.port)]
        if self.tls is not None:
            command += ["--cert", self.tls[0], "--key", self.tls[1]]
        command += self.extra
        if self.log is None:
            self.proc = subprocess.Popen(command, cwd=ROOT, env=self.env)
        else:
            with self.log.open("ab") as out:
                self.proc = subprocess.Popen(command, cwd=ROOT, env=self.env, stdout=out, stderr=out)
        wait_for_port(self.port)

    def stop(self) -> None:
        if self.proc is None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def restart(self) -> None:
        self.stop()
        self.start()
