"""Start a fresh pyvia server for one measurement, pinned to its own core, and stop it by its pid.

Every command gets a new process (ephpm-lessons §6.3 C: a fresh instance per point), pinned with
``taskset -c 1`` while the harness runs on CPU 0 (machine-limits.md, "Method"). Before any load
the start is gated: the startup log must announce the listener, the process must be pinned to
the core we asked for, and ``GET /`` must answer a real page (§6.3 B, configuration gates).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench import gcstats, proc
from bench.client import Connection, build_request

__all__ = ["REPO", "Server", "free_port", "server_command", "server_env", "start_server"]

REPO = Path(__file__).resolve().parent.parent
SERVER_CPU = "1"
CLIENT_CPU = 0
PAGE_MARKER = b'<meta id="via-boot"'


def free_port() -> int:
    """A loopback port nobody listens on right now (the server binds it a moment later)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def server_command(app: str, port: int, runner: str = "auto", prelude: str = "", as_module: bool = False) -> list[str]:
    """``pyvia run`` when the CLI exists (``runner="auto"``), else ``app.run()`` in ``python -c``.

    A ``prelude`` (Python run first in the server, e.g. :data:`bench.gcstats.PRELUDE`) needs the
    ``python -c`` form, or ``pyvia.cli.main`` called from it. ``as_module`` runs ``python -m
    pyvia run`` instead of the console script, whose entry point belongs to the installed
    version (an A/B with ``--pyvia-src`` serves another one).
    """
    script = Path(sys.executable).with_name("pyvia")
    has_cli = script.exists() and importlib.util.find_spec("pyvia.cli") is not None
    if runner == "cli" or (runner == "auto" and has_cli):
        if as_module and not prelude:
            return [sys.executable, "-m", "pyvia", "run", app, "--host", "127.0.0.1", "--port", str(port)]
        if not prelude:
            return [str(script), "run", app, "--host", "127.0.0.1", "--port", str(port)]
        code = (
            f"{prelude}import sys; from pyvia import cli\n"
            f"sys.argv = ['pyvia', 'run', {app!r}, '--host', '127.0.0.1', '--port', '{port}']\n"
            "sys.exit((getattr(cli, 'console_main', None) or cli.main)())\n"
        )  # as the script exits
        return [sys.executable, "-c", code]
    module, _, attr = app.partition(":")
    code = (
        f"{prelude}import sys; sys.path.insert(0, '.'); from {module} import {attr or 'app'} as app; "
        f"app.run(host='127.0.0.1', port={port})"
    )
    return [sys.executable, "-c", code]


class Server:
    """A running server process: its pid, port, log and the command that started it."""

    def __init__(
        self, process: subprocess.Popen[bytes], port: int, command: list[str], log_path: Path, gc_stats: bool = False
    ) -> None:
        self.process = process
        self.port = port
        self.command = command
        self.log_path = log_path
        self.gc_stats = gc_stats
        self.stop_seconds = 0.0
        self.killed = False

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    def cpu(self) -> float:
        return proc.cpu_seconds(self.pid)

    def cpu_split(self) -> tuple[float, float]:
        return proc.cpu_split(self.pid)

    def usage(self) -> tuple[float, float, int]:
        """(user s, system s, minor faults) of the server's process tree so far."""
        return proc.usage(self.pid)

    def cpu_precise(self) -> float:
        return proc.cpu_seconds_precise(self.pid)

    def rss_kb(self) -> int:
        return proc.rss_kb(self.pid)

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def alive(self) -> bool:
        return self.process.poll() is None

    async def stop(self, grace: float = 5.0) -> int | None:
        """SIGTERM, then SIGKILL (by pid, for the server and any descendant) after ``grace`` seconds."""
        pids = proc.tree_pids(self.pid) if self.alive() else []
        started = time.monotonic()
        if self.alive():
            self.process.send_signal(signal.SIGTERM)
        deadline = started + grace
        while self.alive() and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        self.killed = self.alive()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                if pid != self.pid or self.alive():
                    os.kill(pid, signal.SIGKILL)
        code = self.process.wait()
        self.stop_seconds = time.monotonic() - started
        return code


def server_env(extra: dict[str, str] | None = None, pyvia_src: str | None = None) -> dict[str, str]:
    """Our environment without any ``PYVIA_*`` of the caller's shell, plus the bench settings.

    ``pyvia_src`` (a checkout's ``src`` folder) goes first on ``PYTHONPATH``, ahead of the
    editable install, so one session can A/B two versions of the framework on the same app.

    pyvia reads ``PYVIA_<SECTION>__<KEY>`` overrides: only what the command sets may configure the
    run. (It also reads a ``pyvia.toml`` in its working directory, the repository root; the
    provenance records whether one is there.)
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYVIA_")}
    path = f"{pyvia_src}{os.pathsep}{REPO}" if pyvia_src else str(REPO)
    env.update(PYVIA_SECRET="bench", PYTHONPATH=path, **(extra or {}))
    return env


async def start_server(
    app: str,
    runner: str = "auto",
    gc_stats: bool = False,
    env: dict[str, str] | None = None,
    timeout: float = 20.0,
    pyvia_src: str | None = None,
) -> Server:
    """Start the server and pass the gates, or raise RuntimeError with the log's tail."""
    port = free_port()
    command = server_command(app, port, runner, gcstats.PRELUDE if gc_stats else "", as_module=bool(pyvia_src))
    env = server_env(env, pyvia_src)
    fd, name = tempfile.mkstemp(prefix="pyvia-bench-", suffix=".log")
    log_path = Path(name)
    with os.fdopen(fd, "wb") as log:
        process = subprocess.Popen(
            ["taskset", "-c", SERVER_CPU, *command],
            cwd=REPO,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    server = Server(process, port, command, log_path, gc_stats)
    try:
        await _wait_ready(server, timeout)
    except BaseException:
        await server.stop()
        raise
    return server


async def _wait_ready(server: Server, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    last_error: BaseException | None = None
    while time.monotonic() < deadline:
        if not server.alive():
            raise RuntimeError(f"server exited with {server.process.returncode}:\n{server.log_tail()}")
        try:
            conn = await Connection.open("127.0.0.1", server.port, timeout=1.0)
        except OSError as exc:
            last_error = exc
            await asyncio.sleep(0.05)
            continue
        try:
            response = await conn.request(build_request("GET", "/", server.host), timeout=5.0)
        finally:
            conn.close()
        if response.status != 200 or PAGE_MARKER not in response.body:
            raise RuntimeError(f"GET / answered {response.status} without the via-boot marker")
        listening = f"listening on http://127.0.0.1:{server.port}"
        if listening not in server.log_path.read_text(errors="replace"):
            raise RuntimeError(f"startup log lacks {listening!r}:\n{server.log_tail()}")
        pinned = proc.affinity_of(server.pid)
        if pinned != SERVER_CPU:
            raise RuntimeError(f"server runs on CPUs {pinned!r}, expected {SERVER_CPU!r}")
        return
    raise RuntimeError(f"server not ready within {timeout} s ({last_error}):\n{server.log_tail()}")
