"""What ``python -m bench.scale`` relies on: streams from several loopback source addresses, the
open-file limit it raises, and a small run on two workers whose broadcast reaches every tab."""

from __future__ import annotations

import asyncio
import os
import re
import resource
import socket
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from bench.fanout import bound_socket, raise_fd_limit, source_addresses, stream_fds_needed

from pyvia.server.http import derive_max_connections, derive_max_streams

ROOT = Path(__file__).resolve().parents[2]


def test_source_addresses_cover_the_connections_at_most_per_address_each() -> None:
    assert source_addresses(10, 20_000) == ["127.0.0.1"]
    assert source_addresses(50_000, 18_000) == ["127.0.0.1", "127.0.0.2", "127.0.0.3"]
    assert len(source_addresses(36_000, 18_000)) == 2
    with pytest.raises(ValueError):
        source_addresses(10, 0)
    with pytest.raises(ValueError):
        source_addresses(255 * 10, 10)


@pytest.mark.parametrize("tabs", [10, 5000, 20_000, 50_000])
def test_the_fd_limit_asked_for_lets_the_server_hold_the_streams(tabs: int) -> None:
    fds = stream_fds_needed(tabs)
    assert derive_max_streams(derive_max_connections(fds)) >= tabs + 100
    assert fds < 2 * (tabs + 100) + 100  # not wildly more than the caps need


def test_a_bound_socket_connects_from_its_address_and_gets_its_port_at_connect() -> None:
    async def main() -> list[tuple[str, int]]:
        listener = socket.create_server(("127.0.0.1", 0))
        listener.setblocking(False)
        port = listener.getsockname()[1]
        loop = asyncio.get_running_loop()
        peers, socks = [], []
        try:
            for source in ("127.0.0.2", "127.0.0.3"):
                sock = bound_socket(source)
                socks.append(sock)
                assert sock.getsockname() == (source, 0)  # no port taken at bind
                await loop.sock_connect(sock, ("127.0.0.1", port))
                assert sock.getsockname()[0] == source and sock.getsockname()[1] > 0
                conn, peer = await loop.sock_accept(listener)
                conn.close()
                peers.append(peer)
        finally:
            for sock in socks:
                sock.close()
            listener.close()
        return peers

    peers = asyncio.run(main())
    assert [p[0] for p in peers] == ["127.0.0.2", "127.0.0.3"]


def test_raise_fd_limit_lifts_the_soft_limit_and_leaves_a_higher_one() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert raise_fd_limit(min(soft, 64)) == (soft, hard)  # enough already: nothing changes
    low = min(256, hard // 2)
    code = (
        "import resource; from bench.fanout import raise_fd_limit\n"
        f"resource.setrlimit(resource.RLIMIT_NOFILE, ({low}, {hard}))\n"
        f"print(*raise_fd_limit({low * 2}))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [str(low * 2), str(hard)]


def test_scale_run_on_two_workers_reaches_every_tab_from_several_addresses() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYVIA_")}
    argv = ["--tabs", "40", "--workers", "2", "--clients", "2", "--per-address", "15", "--rounds", "1"]
    done = subprocess.run(
        [sys.executable, "-m", "bench.scale", *argv, "--idle-seconds", "0.2"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    out = done.stdout + done.stderr
    found = re.search(r"^# raw results: (\S+)$", out, re.M)
    assert found, out
    path = Path(found.group(1))
    records = [orjson.loads(line) for line in path.read_bytes().splitlines()]
    path.unlink()
    assert done.returncode == 0, out
    summary = next(r for r in records if r["type"] == "summary")
    assert summary["tabs"] == 40 and summary["failed"] == 0 and summary["sources"] == 3, summary
    assert len(summary["connections_by_worker"]) == 2 and min(summary["connections_by_worker"]) > 0, summary
    rounds = [r for r in records if r["type"] == "round"]
    assert rounds and all(r["reached"] == 40 and r["late"] == 0 for r in rounds)
