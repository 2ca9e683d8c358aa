"""Helpers for the security tests: clients from any loopback address, apps, a server in its own process.

Loopback is all of 127/8, so a client bound to 127.0.0.2 is another peer address to the server:
that is how the per-address caps are shown to spare other clients.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pyvia.http import Request, Response, StreamResponse, StreamSink
from tests.helpers import RawClient

ROOT = Path(__file__).resolve().parents[2]
SSE = [("content-type", "text/event-stream"), ("cache-control", "no-cache")]


class Client(RawClient):
    """A :class:`RawClient` whose socket is bound to ``source`` (another peer address on loopback)."""

    def __init__(self, host: str, port: int, *, source: str = "127.0.0.1", timeout: float = 5.0) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout, source_address=(source, 0))
        self.buffer = b""


class LimitsApp:
    """Plain answers, held streams, slow async answers, and a handler that blocks the loop."""

    def __init__(self) -> None:
        self.sinks: list[StreamSink] = []
        self.closed_calls = 0
        self.handled = 0
        self.lock = threading.Lock()

    async def startup(self) -> None:
        pass

    async def shutdown(self, budget: float) -> None:
        for sink in list(self.sinks):
            sink.close()

    def handle(self, request: Request) -> Any:
        with self.lock:
            self.handled += 1
        path = request.path
        if path == "/hold":
            return StreamResponse(SSE, self._open, self._closed)
        if path == "/slow":
            return self._slow(float(request.query.get("s", "0.5")))
        if path == "/burn":  # blocks the event loop: CPU overload in one request
            until = time.perf_counter() + float(request.query.get("s", "0.5"))
            while time.perf_counter() < until:
                pass
        if path == "/big":
            return Response(200, [("content-type", "application/octet-stream")], b"x" * int(request.query["n"]))
        return Response(200, [("content-type", "text/plain")], b"ok %d" % len(request.body))

    async def _slow(self, seconds: float) -> Response:
        await asyncio.sleep(seconds)
        return Response(200, [("content-type", "text/plain")], b"slow")

    def _open(self, sink: StreamSink) -> None:
        self.sinks.append(sink)
        sink.write(b": open\n\n")

    def _closed(self) -> None:
        with self.lock:
            self.closed_calls += 1


#: For :class:`ServerProcess`: ``tests.security.servers:LIMITS_APP``.
LIMITS_APP = LimitsApp()


def status_of(client: RawClient) -> int:
    return client.read_response().status


# --- a server in its own process ----------------------------------------------------------------------


def serve_main() -> None:
    """``python -m tests.security.servers MODULE:ATTR LIMITS_JSON``: serve on a free port, print it."""
    import uvloop

    from pyvia.server.http import ServerLimits
    from pyvia.server.runner import serve

    target, limits_json = sys.argv[1], sys.argv[2]
    module, _, attr = target.partition(":")
    app = getattr(importlib.import_module(module), attr)
    limits = ServerLimits(**json.loads(limits_json))

    import pyvia.server.runner as runner

    registries: list[Any] = []

    class Registry(runner.ConnectionRegistry):  # type: ignore[misc]
        """Remembers itself, so its counts can be printed when the server stops."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            registries.append(self)

        def probe(self, now: float) -> None:
            super().probe(now)
            self.max_lag = max(getattr(self, "max_lag", 0.0), self.lag)  # type: ignore[attr-defined]

    runner.ConnectionRegistry = Registry  # type: ignore[misc]

    def ready(host: str, port: int) -> None:
        print(f"PORT {port}", flush=True)

    uvloop.run(serve(app, host="127.0.0.1", port=0, limits=limits, ready=ready, graceful_timeout=1.0))
    for registry in registries:
        stats = registry.stats()
        stats["max_lag_seconds"] = getattr(registry, "max_lag", 0.0)
        usage = resource.getrusage(resource.RUSAGE_SELF)
        stats["cpu_seconds"] = usage.ru_utime + usage.ru_stime
        print("STATS " + json.dumps(stats), flush=True)


class ServerProcess:
    """A native server in a subprocess (its own GIL and, when ``taskset`` exists, its own CPU)."""

    def __init__(
        self, app: str, limits: dict[str, Any] | None = None, *, cpu: int | None = 1, env: dict[str, str] | None = None
    ) -> None:
        command = [sys.executable, "-m", "tests.security.servers", app, json.dumps(limits or {})]
        if cpu is not None and shutil.which("taskset") and (os.cpu_count() or 1) > cpu:
            command = ["taskset", "-c", str(cpu), *command]
        self.proc = subprocess.Popen(
            command,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            env={**os.environ, "PYVIA_SECRET": "security-test-secret", **(env or {})},
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().decode()
        if not line.startswith("PORT "):
            self.stop()
            raise RuntimeError(f"the server process did not start: {line!r}")
        self.address = ("127.0.0.1", int(line.split()[1]))
        self.stats: dict[str, Any] = {}

    def stop(self) -> dict[str, Any]:
        """Stop the process by its pid (SIGTERM, then SIGKILL); the registry counts it printed."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        stats: dict[str, Any] = {}
        if self.proc.stdout is not None:
            for line in self.proc.stdout.read().decode().splitlines():
                if line.startswith("STATS "):
                    stats = json.loads(line[6:])
            self.proc.stdout.close()
        self.stats = stats
        return stats


@contextlib.contextmanager
def server_process(app: str, limits: dict[str, Any] | None = None, **options: Any) -> Iterator[ServerProcess]:
    """A :class:`ServerProcess` for the block: ``.address`` to connect, ``.stats`` after it."""
    server = ServerProcess(app, limits, **options)
    try:
        yield server
    finally:
        server.stop()


if __name__ == "__main__":
    serve_main()
