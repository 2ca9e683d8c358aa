"""Test helpers for the native server: run it in a thread, talk to it over raw sockets.

``running_server(app, **options)`` starts :func:`pyvia.server.runner.serve` on a free loopback
port in a background thread with its own uvloop loop and yields ``(host, port)``; leaving the
block stops it gracefully and re-raises anything the server raised. :class:`ServerThread` is the
same with a handle (``stop()`` returns how long the stop took). :class:`RawClient` speaks HTTP/1.1
by hand so tests control every byte. :class:`FakeTransport` and :class:`FakeLoop` run an
``HttpProtocol`` with no socket at all (unit and fuzz tests).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import uvloop

from pyvia.server.connection import ConnectionRegistry, HttpProtocol
from pyvia.server.http import ServerLimits
from pyvia.server.runner import serve

__all__ = ["FakeLoop", "FakeTransport", "RawClient", "RawResponse", "ServerThread", "make_protocol", "running_server"]


class ServerThread:
    """The native server on 127.0.0.1, on a free port, in a daemon thread with its own uvloop loop."""

    def __init__(self, app: Any, **options: Any) -> None:
        self.app = app
        self.options = options
        self.host = "127.0.0.1"
        self.port = 0
        self.loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._started = threading.Event()
        self._stop: asyncio.Event | None = None
        self._error: BaseException | None = None

    def start(self, timeout: float = 10.0) -> tuple[str, int]:
        self._thread = threading.Thread(target=self._main, name="pyvia-test-server", daemon=True)
        self._thread.start()
        if not self._started.wait(timeout):
            raise RuntimeError("the server did not start in time")
        if self._error is not None:
            raise self._error
        return self.host, self.port

    def stop(self, timeout: float = 10.0) -> float:
        """Ask for a graceful stop (like SIGTERM) and wait for ``serve`` to return; returns seconds taken."""
        assert self._thread is not None and self.loop is not None and self._stop is not None
        began = time.monotonic()
        with contextlib.suppress(RuntimeError):  # the loop already stopped on its own
            self.loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout)
        took = time.monotonic() - began
        if self._thread.is_alive():
            raise RuntimeError(f"the server did not stop within {timeout} s")
        if self._error is not None:
            raise self._error
        return took

    def call(self, fn: Any, *args: Any) -> None:
        """Run ``fn(*args)`` on the server's loop (thread-safe)."""
        assert self.loop is not None
        self.loop.call_soon_threadsafe(fn, *args)

    def _on_ready(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self._started.set()

    def _main(self) -> None:
        loop = uvloop.new_event_loop()
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
                self._started.set()

    async def _serve(self) -> None:
        self._stop = asyncio.Event()
        await serve(self.app, host=self.host, port=0, ready=self._on_ready, stop=self._stop, **self.options)


@contextlib.contextmanager
def running_server(app: Any, **options: Any) -> Iterator[tuple[str, int]]:
    """Serve ``app`` on a free loopback port for the duration of the block; yields (host, port)."""
    server = ServerThread(app, **options)
    address = server.start()
    try:
        yield address
    finally:
        server.stop()


@dataclass
class RawResponse:
    status: int
    reason: str
    headers: list[tuple[str, str]]
    body: bytes = b""
    head: bytes = b""
    chunks: list[bytes] = field(default_factory=list)

    def header(self, name: str) -> str | None:
        found = [v for n, v in self.headers if n.lower() == name.lower()]
        return found[-1] if found else None

    def cookie(self, name: str) -> str | None:
        """``name=value`` of the ``Set-Cookie`` that sets ``name`` (an answer may set several)."""
        for header, value in self.headers:
            if header.lower() == "set-cookie" and value.startswith(f"{name}="):
                return value.split(";", 1)[0]
        return None


class RawClient:
    """A blocking HTTP/1.1 client over one socket, byte-exact: nothing is added to what is sent."""

    def __init__(self, host: str, port: int, *, tls: ssl.SSLContext | None = None, timeout: float = 5.0):
        sock = socket.create_connection((host, port), timeout=timeout)
        if tls is not None:
            sock = tls.wrap_socket(sock, server_hostname=host)
        self.sock = sock
        self.buffer = b""

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _fill(self) -> bool:
        data = self.sock.recv(65536)
        if not data:
            return False
        self.buffer += data
        return True

    def read_until(self, marker: bytes) -> bytes:
        while marker not in self.buffer:
            if not self._fill():
                raise EOFError(f"connection closed before {marker!r}; got {self.buffer!r}")
        data, _, self.buffer = self.buffer.partition(marker)
        return data + marker

    def read_exact(self, n: int) -> bytes:
        while len(self.buffer) < n:
            if not self._fill():
                raise EOFError(f"connection closed after {len(self.buffer)} of {n} bytes")
        data, self.buffer = self.buffer[:n], self.buffer[n:]
        return data

    def read_head(self) -> RawResponse:
        head = self.read_until(b"\r\n\r\n")
        lines = head[:-4].decode("latin-1").split("\r\n")
        version, status, reason = [*lines[0].split(" ", 2), ""][:3]
        assert version == "HTTP/1.1", lines[0]
        headers = [tuple(line.split(": ", 1)) for line in lines[1:]]
        return RawResponse(int(status), reason, headers, head=head)  # type: ignore[arg-type]

    def read_chunk(self) -> bytes:
        """One chunk of a chunked body; b"" for the last one (its CRLF consumed)."""
        size_line = self.read_until(b"\r\n")
        size = int(size_line[:-2], 16)
        data = self.read_exact(size)
        assert self.read_exact(2) == b"\r\n", "chunk not followed by CRLF"
        return data

    def read_response(self, *, method: str = "GET") -> RawResponse:
        """Read one whole response (skipping nothing: a 1xx is returned as is)."""
        response = self.read_head()
        if method == "HEAD" or response.status < 200 or response.status in (204, 304):
            return response
        length = response.header("content-length")
        if length is not None:
            response.body = self.read_exact(int(length))
        elif (response.header("transfer-encoding") or "").lower() == "chunked":
            while chunk := self.read_chunk():
                response.chunks.append(chunk)
            response.body = b"".join(response.chunks)
        else:
            response.body = self.read_all()
        return response

    def read_all(self) -> bytes:
        """Everything until the server closes the connection."""
        while self._fill():
            pass
        data, self.buffer = self.buffer, b""
        return data

    def is_closed_by_peer(self, timeout: float = 2.0) -> bool:
        """True if the server closes the connection (EOF or reset) within ``timeout`` with nothing more sent."""
        self.sock.settimeout(timeout)
        try:
            return self.sock.recv(1) == b"" and not self.buffer
        except ConnectionResetError:
            return True
        except TimeoutError:
            return False


def get(path: str = "/", *, host: str = "localhost", extra: str = "") -> bytes:
    """A minimal GET request."""
    return f"GET {path} HTTP/1.1\r\nHost: {host}\r\n{extra}\r\n".encode()


def post(path: str, body: bytes, *, extra: str = "") -> bytes:
    """A POST with Content-Length."""
    return f"POST {path} HTTP/1.1\r\nHost: localhost\r\nContent-Length: {len(body)}\r\n{extra}\r\n".encode() + body


# --- no socket ---------------------------------------------------------------------------------


class FakeLoop:
    """The bit of an event loop a connection needs when every handler is synchronous: a clock."""

    def __init__(self) -> None:
        self.now = 1000.0

    def time(self) -> float:
        return self.now


class _FakeSocket:
    def __init__(self) -> None:
        self.options: list[tuple[int, int, int]] = []

    def setsockopt(self, level: int, option: int, value: int) -> None:
        self.options.append((level, option, value))


class FakeTransport(asyncio.Transport):
    """Records writes and flow-control calls; fails the test on a write after close."""

    def __init__(self, peer: tuple[str, int] = ("192.0.2.7", 50123)) -> None:
        super().__init__()
        self.peer = peer
        self.socket = _FakeSocket()
        self.writes: list[bytes] = []
        self.closed = False
        self.aborted = False
        self.eof_written = False
        self.reading_paused = False
        self.buffer_size = 0

    @property
    def output(self) -> bytes:
        return b"".join(self.writes)

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": self.peer, "socket": self.socket}.get(name, default)

    def write(self, data: bytes | bytearray | memoryview) -> None:
        assert not self.closed, f"write after close: {bytes(data)[:80]!r}"
        self.writes.append(bytes(data))

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.closed = self.aborted = True

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        self.closed = True  # no write may follow
        self.eof_written = True

    def is_closing(self) -> bool:
        return self.closed

    def pause_reading(self) -> None:
        assert not self.reading_paused, "pause_reading called twice"
        self.reading_paused = True

    def resume_reading(self) -> None:
        assert self.reading_paused, "resume_reading without pause_reading"
        self.reading_paused = False

    def is_reading(self) -> bool:
        return not self.reading_paused

    def get_write_buffer_size(self) -> int:
        return self.buffer_size


def make_protocol(
    app: Any, *, limits: ServerLimits | None = None, loop: Any = None, scheme: str = "http"
) -> tuple[HttpProtocol, FakeTransport, ConnectionRegistry]:
    """An ``HttpProtocol`` connected to a :class:`FakeTransport` (``loop`` defaults to a FakeLoop)."""
    registry = ConnectionRegistry(loop if loop is not None else FakeLoop())  # type: ignore[arg-type]
    protocol = HttpProtocol(app, registry, limits or ServerLimits(), scheme)
    transport = FakeTransport()
    protocol.connection_made(transport)
    return protocol, transport, registry


#: The id event that ends every frame of a tab's stream (``protocol.frame_id``).
FRAME_ID = re.compile(rb"id: [0-9a-f]+\.[0-9]+\n\n\Z")


def frame_body(chunk: bytes) -> bytes:
    """A tab stream's frame without the id event that ends it (which must be there)."""
    found = FRAME_ID.search(chunk)
    assert found is not None, f"no frame id at the end of {chunk!r}"
    return chunk[: found.start()]


def signals_event(chunk: bytes) -> dict[str, Any]:
    """The signals of one ``datastar-patch-signals`` event (a chunk holding exactly that event,
    and the frame id that ends it when it comes from a tab's stream)."""
    if FRAME_ID.search(chunk):
        chunk = frame_body(chunk)
    head, _, data = chunk.decode().partition("\ndata: signals ")
    assert head == "event: datastar-patch-signals" and data.endswith("\n\n"), chunk
    signals: dict[str, Any] = json.loads(data)
    return signals


#: The first frame of every tab's stream: the page is connected, its actions leave out every ``_``
#: signal, and its alert no longer says the connection is lost.
OPENING = (
    b"event: datastar-patch-signals\ndata: signals "
    b'{"_disconnected":false,"_via_filter":"(^|\\\\.)_","_via_lost":false}\n\n'
)
