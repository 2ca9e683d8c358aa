"""Real servers in subprocesses, a TCP proxy that can cut connections, and Debian's Chromium."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, sync_playwright

from tests.processes import ServerProcess, free_port, wait_for_port

__all__ = ["Proxy", "ServerProcess", "free_port", "wait_for_port"]

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    # pages in background tabs must not be throttled: tests drive several at once
    "--disable-renderer-backgrounding",
    "--disable-background-timer-throttling",
    "--disable-backgrounding-occluded-windows",
]


class Proxy:
    """A TCP proxy in a thread: lets a test cut every open connection, as a network failure would."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(128)
        self.port = self.listener.getsockname()[1]
        self.lock = threading.Lock()
        self.pairs: list[tuple[socket.socket, socket.socket]] = []
        self.requests: list[bytes] = []
        self.running = True
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while self.running:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
            except OSError:
                client.close()
                continue
            with self.lock:
                self.pairs.append((client, upstream))
            threading.Thread(target=self._pipe, args=(client, upstream, True), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client, False), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, from_client: bool) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if from_client:
                    self._request(data.split(b"\r\n", 1)[0], dst)
                elif not self._passes(src):
                    continue  # dropped on the way, as by a dying network
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
            if not from_client:  # the second pipe of the pair to end closes both sockets
                src.close()
                dst.close()

    def _request(self, line: bytes, upstream: socket.socket) -> None:
        """A request line on its way to the server (``upstream``: its connection there)."""
        with self.lock:
            self.requests.append(line)

    def _passes(self, upstream: socket.socket) -> bool:
        """Whether what the server sends on ``upstream`` reaches the browser (a subclass may drop it)."""
        return True

    def cut_all(self) -> None:
        with self.lock:
            pairs, self.pairs = self.pairs, []
        for pair in pairs:
            for s in pair:
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def stream_requests(self) -> int:
        with self.lock:
            return sum(1 for line in self.requests if line.startswith(b"GET /_sse"))

    def close(self) -> None:
        self.running = False
        self.listener.close()
        self.cut_all()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """Chromium for one test module. Playwright's sync API keeps an asyncio loop running in this
    thread while it is open, so it must be closed before other modules run their own loops."""
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: run scripts/install test (it installs Debian's chromium)")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        yield b
        b.close()
