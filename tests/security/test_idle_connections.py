"""Many idle connections from one address (issue 7, item 5): past the per-address cap each new one
gets a fast 503 and is closed, the admitted ones stay usable, and another address is still served.

The suite opens ``IDLE`` = 2,000 (CI time; the fd limit here is 20,000 per process). Run the
issue's 10,000 by hand with ``PYVIA_IDLE_CONNECTIONS=10000``; the server runs in its own process
so the client's descriptors and the server's are counted separately.
"""

from __future__ import annotations

import os
import selectors
import socket
import time

from tests.helpers import get
from tests.security.servers import Client, server_process, status_of

IDLE = int(os.environ.get("PYVIA_IDLE_CONNECTIONS", "2000"))
CAP = IDLE // 2


def test_idle_connections_past_the_per_ip_cap_get_503_and_other_addresses_are_served() -> None:
    limits = {"max_connections_per_ip": CAP, "per_ip_exempt": [], "keep_alive_timeout": 120.0}
    with server_process("tests.security.servers:LIMITS_APP", limits) as server:
        host, port = server.address
        opened_at: dict[socket.socket, float] = {}
        for _ in range(IDLE):
            sock = socket.create_connection((host, port), timeout=5.0)
            sock.setblocking(False)
            opened_at[sock] = time.monotonic()
        answers: dict[socket.socket, bytes] = {}
        waited: list[float] = []
        with selectors.DefaultSelector() as selector:
            for sock in opened_at:
                selector.register(sock, selectors.EVENT_READ)
            deadline = time.monotonic() + 10.0
            while len(waited) < IDLE - CAP and time.monotonic() < deadline:
                for key, _ in selector.select(timeout=0.5):
                    sock = key.fileobj
                    assert isinstance(sock, socket.socket)
                    try:
                        data = sock.recv(4096)
                    except ConnectionResetError:
                        data = b""
                    answers[sock] = answers.get(sock, b"") + data
                    if not data:  # closed by the server after its answer
                        selector.unregister(sock)
                        waited.append(time.monotonic() - opened_at[sock])
            time.sleep(0.5)  # anything else the server meant to send has arrived by now
            for key, _ in selector.select(timeout=0):
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                answers[sock] = answers.get(sock, b"") + sock.recv(4096)
        refused = [s for s, data in answers.items() if data]
        idle = [s for s in opened_at if s not in answers]

        with Client(host, port, source="127.0.0.2") as other:  # another address: served
            other.send(get("/"))
            other_status = status_of(other)
        admitted = idle[0]
        admitted.setblocking(True)
        admitted.settimeout(5.0)
        admitted.sendall(get("/"))
        admitted_answer = admitted.recv(4096)  # an idle admitted connection still works
        for sock in opened_at:
            sock.close()
        time.sleep(0.3)
        with Client(host, port) as again:  # the address's connections are gone: served again
            again.send(get("/"))
            again_status = status_of(again)

    waited.sort()
    print(
        f"[idle] {IDLE} connections from 127.0.0.1, cap {CAP}: {len(idle)} held idle, {len(refused)} answered 503 "
        f"(time to the answer p50/max {waited[len(waited) // 2] * 1000:.0f}/{waited[-1] * 1000:.0f} ms); "
        f"127.0.0.2 served {other_status}; server counted {server.stats.get('refused_connections')} refusals"
    )
    assert len(refused) == IDLE - CAP, (len(refused), len(idle))
    assert len(idle) == CAP
    assert all(answers[s].startswith(b"HTTP/1.1 503 Service Unavailable\r\n") for s in refused)
    assert all(b"\r\nretry-after: 1\r\n" in answers[s] for s in refused)
    assert max(waited) < 5.0, max(waited)
    assert other_status == 200 and again_status == 200
    assert admitted_answer.startswith(b"HTTP/1.1 200 ")
