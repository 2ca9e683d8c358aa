"""What a tab costs the engine: a worker reads nothing it already knows (a session it just made,
a directory entry it wrote itself). Counted on a real Redis with ``INFO commandstats``."""

from __future__ import annotations

import re
import secrets
import socket
import time

from pyvia.cluster import ENGINE_URL_ENV
from tests.cluster.test_shared_state import Tab, get_status
from tests.processes import ServerProcess, free_port

APP = "tests.cluster.apps:visits"


def _redis(url: str, *command: str) -> bytes:
    """One command over RESP, without a client library: the reply's raw bytes."""
    host, port = re.match(r"redis://([^:/]+):(\d+)", url).groups()  # type: ignore[union-attr]
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        sock.sendall(
            f"*{len(command)}\r\n".encode() + b"".join(f"${len(part)}\r\n{part}\r\n".encode() for part in command)
        )
        data = b""
        while not data.endswith(b"\r\n") or (data.startswith(b"$") and data.count(b"\r\n") < 2):
            data += sock.recv(65536)
        return data


def _reads(url: str) -> int:
    """Reads of a key's value so far (the engine's ``get`` is one HMGET)."""
    found = re.search(rb"cmdstat_hmget:calls=(\d+)", _redis(url, "INFO", "commandstats"))
    return int(found.group(1)) if found else 0


def _directory_entries(url: str, prefix: str) -> int:
    return len(re.findall(rb"\$\d+\r\n", _redis(url, "KEYS", f"{prefix}:{{directory}}:*")))


def test_new_tabs_and_their_end_read_nothing_from_the_engine(redis_url: str) -> None:
    prefix = "t" + secrets.token_hex(6)
    env = {
        ENGINE_URL_ENV: redis_url,
        "PYVIA_APP__ENGINE_PREFIX": prefix,
        "PYVIA_APP__CLEANUP_DELAY": "0.2",
        "PYVIA_APP__SWEEP_INTERVAL": "0.1",
    }
    node = ServerProcess(APP, free_port(), env=env)
    node.start()
    try:
        deadline = time.monotonic() + 20
        while get_status(node.port, "/_ready") != 200:
            assert time.monotonic() < deadline, "the node never became ready"
            time.sleep(0.05)
        before, started = _reads(redis_url), time.monotonic()
        tabs = [Tab(node.port) for _ in range(30)]  # each a new visitor: a session made here
        for tab in tabs:
            tab.connect(node.port)
            tab.wait_for(r'"_disconnected":false')
        assert _directory_entries(redis_url, prefix) == 30
        for tab in tabs:
            tab.close()
        deadline = time.monotonic() + 10
        while _directory_entries(redis_url, prefix):  # each destroyed tab drops its entry
            assert time.monotonic() < deadline, "directory entries left behind"
            time.sleep(0.05)
        reads, seconds = _reads(redis_url) - before, time.monotonic() - started
        # Only the timers lease is read (once a second): before, each tab's stream read its
        # session and each end read the tab's directory entry, 60 reads for 30 tabs.
        assert reads <= seconds + 2, (reads, seconds)
    finally:
        node.stop()
