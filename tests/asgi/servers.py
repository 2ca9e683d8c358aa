"""ASGI servers on loopback for the adapter's tests, and the browser's side of a pyvia page.

:class:`ServerThread` runs uvicorn or hypercorn in a daemon thread with its own event loop, on a
socket bound to a free port, and runs code on that loop (``call``) so a test can read the app's
state without racing it. :class:`GranianProcess` runs granian, which has its own runtime, as a
subprocess. The page helpers speak raw HTTP/1.1 with :class:`tests.helpers.RawClient`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import html
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import quote

import uvloop

from tests.helpers import RawClient, RawResponse
from tests.processes import ROOT, free_port, wait_for_port

SEED = re.compile(r'data-signals="([^"]*)"')


class ServerThread:
    """An ASGI server (``"uvicorn"`` or ``"hypercorn"``) serving ``app`` on 127.0.0.1 in a thread."""

    def __init__(self, app: Any, server: str = "uvicorn", *, loop: str = "uvloop", **options: Any) -> None:
        self.app = app
        self.kind = server
        self.loop_kind = loop
        self.options = options
        self.host = "127.0.0.1"
        self.port = 0
        self.loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._uvicorn: Any = None
        self._error: BaseException | None = None

    def start(self, timeout: float = 10.0) -> ServerThread:
        self._thread = threading.Thread(target=self._main, name=f"{self.kind}-test-server", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout):
            raise RuntimeError(f"{self.kind} did not start within {timeout} s")
        if self._error is not None:
            raise self._error
        wait_for_port(self.port)
        return self

    def stop(self, timeout: float = 10.0) -> float:
        """Ask for a graceful stop (as SIGTERM would) and wait for it; returns the seconds taken."""
        assert self._thread is not None and self.loop is not None
        began = time.monotonic()
        if self._uvicorn is not None:
            self._uvicorn.should_exit = True
        elif self._stop is not None:
            with contextlib.suppress(RuntimeError):
                self.loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise RuntimeError(f"{self.kind} did not stop within {timeout} s")
        if self._error is not None:
            raise self._error
        return time.monotonic() - began

    def call(self, fn: Callable[[], Any], timeout: float = 5.0) -> Any:
        """Run ``fn()`` on the server's loop and return its result (thread-safe)."""
        assert self.loop is not None
        done: concurrent.futures.Future[Any] = concurrent.futures.Future()

        def run() -> None:
            try:
                done.set_result(fn())
            except BaseException as exc:
                done.set_exception(exc)

        self.loop.call_soon_threadsafe(run)
        return done.result(timeout)

    def wait_for(self, fn: Callable[[], Any], timeout: float = 5.0) -> Any:
        """Poll ``fn()`` on the server's loop until it returns something truthy."""
        deadline = time.monotonic() + timeout
        while True:
            value = self.call(fn)
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"condition still false after {timeout} s: last value {value!r}")
            time.sleep(0.02)

    def _main(self) -> None:
        loop = uvloop.new_event_loop() if self.loop_kind == "uvloop" else asyncio.new_event_loop()
        self.loop = loop
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(self._serve())
        except BaseException as exc:
            self._error = exc
        finally:
            try:
                tasks = [t for t in asyncio.all_tasks(loop) if not t.done()]
                for task in tasks:
                    task.cancel()
                if tasks:
                    loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
                loop.run_until_complete(loop.shutdown_asyncgens())
            finally:
                asyncio.set_event_loop(None)
                loop.close()
                self._ready.set()

    async def _serve(self) -> None:
        if self.kind == "uvicorn":
            await self._serve_uvicorn()
        elif self.kind == "hypercorn":
            await self._serve_hypercorn()
        else:
            raise ValueError(f"unknown server {self.kind!r}")

    async def _serve_uvicorn(self) -> None:
        import uvicorn

        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, 0))
        self.port = sock.getsockname()[1]
        options = {
            "lifespan": "on",
            "log_config": None,
            "log_level": "warning",
            "access_log": False,
            "timeout_graceful_shutdown": 2,
            **self.options,
        }
        server = uvicorn.Server(uvicorn.Config(self.app, **options))
        self._uvicorn = server
        watcher = asyncio.ensure_future(self._signal_ready(lambda: server.started))
        try:
            await server.serve(sockets=[sock])
        finally:
            watcher.cancel()
            sock.close()

    async def _serve_hypercorn(self) -> None:
        from hypercorn.asyncio import serve
        from hypercorn.config import Config

        self.port = free_port()
        config = Config()
        config.bind = [f"{self.host}:{self.port}"]
        config.graceful_timeout = 1.0
        config.accesslog = None
        config.errorlog = None
        for name, value in self.options.items():
            setattr(config, name, value)
        self._stop = asyncio.Event()
        watcher = asyncio.ensure_future(self._signal_ready(lambda: _listening(self.host, self.port)))
        try:
            await serve(self.app, config, shutdown_trigger=self._stop.wait)
        finally:
            watcher.cancel()

    async def _signal_ready(self, ready: Callable[[], bool]) -> None:
        while not ready():
            await asyncio.sleep(0.01)
        self._ready.set()


def _listening(host: str, port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex((host, port)) == 0


@contextlib.contextmanager
def serving(app: Any, server: str = "uvicorn", **options: Any) -> Iterator[ServerThread]:
    """Serve ``app`` for the duration of the block."""
    thread = ServerThread(app, server, **options).start()
    try:
        yield thread
    finally:
        thread.stop()


class GranianProcess:
    """``granian --interface asgi TARGET`` in a subprocess on a free loopback port."""

    def __init__(self, target: str, secret: str = "test-secret") -> None:
        self.target = target
        self.host = "127.0.0.1"
        self.port = free_port()
        self.env = {**os.environ, "PYVIA_SECRET": secret, "PYTHONPATH": str(ROOT)}
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> GranianProcess:
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "granian",
                "--interface",
                "asgi",
                "--host",
                self.host,
                "--port",
                str(self.port),
                "--workers",
                "1",
                "--log-level",
                "warning",
                self.target,
            ],
            cwd=ROOT,
            env=self.env,
        )
        try:
            wait_for_port(self.port, timeout=20)
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc is None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None


# --- the browser's side ----------------------------------------------------------------------------


def request(host: str, port: int, method: str, path: str, *, headers: str = "", body: bytes = b"") -> RawResponse:
    """One request on a new connection, read whole."""
    with RawClient(host, port) as client:
        length = f"Content-Length: {len(body)}\r\n" if body or method == "POST" else ""
        client.send(f"{method} {path} HTTP/1.1\r\nHost: {host}:{port}\r\n{length}{headers}\r\n".encode() + body)
        return client.read_response(method=method)


def open_page(host: str, port: int, path: str = "/") -> tuple[RawResponse, dict[str, Any], str]:
    """GET a page: the response, its seeded signals and the ``name=value`` of its session cookie."""
    page = request(host, port, "GET", path)
    assert page.status == 200, (page.status, page.body[:200])
    seed = json.loads(html.unescape(SEED.search(page.body.decode()).group(1)))  # type: ignore[union-attr]
    cookie = (page.header("set-cookie") or "").split(";", 1)[0]
    return page, seed, cookie


def open_stream(
    host: str, port: int, signals: dict[str, Any], cookie: str, path: str = "/_sse"
) -> tuple[RawClient, RawResponse]:
    """Open a tab's stream and read its head; the caller reads the events and closes the client."""
    client = RawClient(host, port)
    client.send(
        f"GET {path}?datastar={quote(json.dumps(signals))} HTTP/1.1\r\nHost: {host}:{port}\r\n"
        f"Cookie: {cookie}\r\n\r\n".encode()
    )
    return client, client.read_head()


def post_action(
    host: str, port: int, name: str, signals: dict[str, Any], cookie: str, prefix: str = "/_action/"
) -> RawResponse:
    """Post an action the way Datastar does: JSON signals, the page's Origin and Host."""
    return request(
        host,
        port,
        "POST",
        prefix + name,
        body=json.dumps(signals).encode(),
        headers=(f"Origin: http://{host}:{port}\r\nCookie: {cookie}\r\nContent-Type: application/json\r\n"),
    )


def read_events(client: RawClient, until: bytes, timeout: float = 5.0) -> bytes:
    """Read chunks of a stream until ``until`` appears; returns all that was read."""
    client.sock.settimeout(timeout)
    received = b""
    deadline = time.monotonic() + timeout
    while until not in received:
        if time.monotonic() > deadline:
            raise AssertionError(f"{until!r} not received within {timeout} s; got {received!r}")
        received += client.read_chunk()
    return received
