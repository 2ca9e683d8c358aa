"""A throwaway PostgreSQL server for the database tests, from Debian's ``postgresql`` package.

``initdb`` into a temporary folder, ``pg_ctl start`` on a free loopback port with trust
authentication, ``pg_ctl stop`` at the end. PostgreSQL refuses to run as root, so as root the
folder is given to the ``postgres`` user and the tools run through ``runuser -u postgres``.
A missing installation is an error (the test fails), never a skip.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from tests.processes import free_port


def find_pg_bin() -> Path:
    """The folder of ``initdb``/``pg_ctl``: Debian keeps them in /usr/lib/postgresql/<version>/bin."""
    found = shutil.which("initdb")
    if found:
        return Path(found).resolve().parent
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[-3]))
    if versions:
        return Path(versions[-1]).parent
    raise FileNotFoundError("PostgreSQL is missing (no initdb): apt-get install -y postgresql (scripts/install test)")


class PostgresServer:
    """``postgresql://postgres@127.0.0.1:PORT/postgres``, started by :meth:`start`, gone after :meth:`stop`."""

    def __init__(self) -> None:
        self.bin = find_pg_bin()
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="pyvia-pg-"))
        self.data = self.dir / "data"
        self.as_root = os.geteuid() == 0

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, *command: str, timeout: float = 60) -> None:
        argv = [str(self.bin / command[0]), *command[1:]]
        if self.as_root:
            argv = ["runuser", "-u", "postgres", "--", *argv]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} exited with {done.returncode}:\n{done.stdout}\n{done.stderr}")

    def start(self) -> str:
        if self.as_root:
            shutil.chown(self.dir, "postgres", "postgres")
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync")
        options = (
            f"-p {self.port} -c listen_addresses=127.0.0.1 -c unix_socket_directories={self.dir} "
            "-c fsync=off -c max_connections=100"
        )
        self._run(
            "pg_ctl",
            "-D",
            str(self.data),
            "-o",
            options,
            "-l",
            str(self.dir / "server.log"),
            "-w",
            "-t",
            "60",
            "start",
            timeout=90,
        )
        return self.url

    def stop(self) -> None:
        if self.data.exists():
            with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):  # already gone
                self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")
        shutil.rmtree(self.dir, ignore_errors=True)
