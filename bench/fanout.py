"""Shared machinery of the fan-out benchmarks: servers of several kinds, thousands of tabs whose
streams are decoded and checked event by event, and CPU windows.

* :func:`launch` starts a server for one measurement pinned with ``taskset -c 1``: the native
  one (``pyvia run``, through :func:`bench.server.start_server` and its gates) or an ASGI server
  (uvicorn with uvloop + httptools, granian, hypercorn) serving ``pyvia.asgi.asgi(app)``. Every
  start is gated: ``GET /`` must answer a real page and every process of the server's tree must
  be pinned to CPU 1.
* :class:`TabStream` is one tab's ``/_sse`` connection as a raw ``asyncio.Protocol``: it parses
  the head and the chunked body, decodes ``zstd`` (a new decompressor after each frame end) or
  ``br`` or ``gzip`` incrementally, splits events and hands each to a :class:`Hub`. It counts wire bytes
  (content-coded payload), decoded bytes and events, and timestamps each read with
  ``perf_counter`` (CLOCK_MONOTONIC, shared with the server process).
* :func:`open_tabs` opens N tabs the way a browser does: ``GET /`` on one of S keep-alive
  "browser" connections (each its own session cookie), then the stream on a new connection,
  counted only once the stream's first event (``{"_disconnected":false}``) arrived.
* :class:`Meter` is a measurement window: server CPU (``utime+stime`` ticks and the per-process
  CPU clock, summed over the tree), wall time, harness CPU, and what other processes took of the
  server's core (the machine is shared: such a window is flagged ``noisy``).
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from bench import proc
from bench.client import BodyDecoder, Connection, ProtocolError, Response, boot_signals, build_request, stream_target
from bench.server import PAGE_MARKER, REPO, SERVER_CPU, Server, free_port, start_server

__all__ = [
    "CLIENT_CPU",
    "Browser",
    "Hub",
    "Meter",
    "TabStream",
    "bound_socket",
    "env_record",
    "ephemeral_ports",
    "launch",
    "open_tabs",
    "pin_client",
    "raise_fd_limit",
    "server_versions",
    "source_addresses",
    "stream_fds_needed",
    "wait_quiet",
]

CLIENT_CPU = 0
SESSION_COOKIE = "via_session_id"
NOISY = 0.05  # others took more than 5% of the server's core: CPU/op holds, latency may not
_BIN = Path(sys.executable).parent


def pin_client() -> None:
    os.sched_setaffinity(0, {CLIENT_CPU})


def env_record() -> dict[str, str]:
    """Environment settings that change what a server measures (allocator tunables, Python flags)."""
    return {k: v for k, v in os.environ.items() if k.startswith(("GLIBC_", "MALLOC_", "PYTHON", "PYVIA_", "BENCH_"))}


def server_versions() -> dict[str, str]:
    from importlib import metadata

    out = {}
    for name in ("uvicorn", "granian", "hypercorn", "zstandard", "brotli"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "absent"
    return out


# --- servers ---------------------------------------------------------------------------------------


def asgi_command(kind: str, asgi_spec: str, port: int) -> list[str]:
    """The command line of an ASGI server serving ``asgi_spec`` on one core."""
    if kind == "uvicorn":
        return [
            str(_BIN / "uvicorn"),
            asgi_spec,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--loop",
            "uvloop",
            "--http",
            "httptools",
            "--no-access-log",
            "--log-level",
            "warning",
            "--backlog",
            "4096",
            "--timeout-keep-alive",
            "600",
            "--lifespan",
            "on",
        ]
    if kind == "granian":
        # --backpressure: granian counts open streams as requests in flight; its default
        # (backlog/workers = 1024) leaves streams past 1,024 without a response (machine-limits §2).
        return [
            str(_BIN / "granian"),
            "--interface",
            "asgi",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            "1",
            "--runtime-threads",
            "1",
            "--loop",
            "uvloop",
            "--http",
            "1",
            "--no-ws",
            "--log-level",
            "warning",
            "--backlog",
            "4096",
            "--backpressure",
            "16384",
            asgi_spec,
        ]
    if kind == "hypercorn":
        return [
            str(_BIN / "hypercorn"),
            asgi_spec,
            "--bind",
            f"127.0.0.1:{port}",
            "--worker-class",
            "uvloop",
            "--workers",
            "1",
            "--backlog",
            "4096",
            "--keep-alive",
            "600",
            "--log-level",
            "warning",
        ]
    raise ValueError(f"unknown server kind {kind!r}")


async def launch(
    kind: str, app_spec: str, asgi_spec: str | None = None, env: dict[str, str] | None = None, timeout: float = 30.0
) -> Server:
    """A fresh server of ``kind`` ("native" or an ASGI server), gated and pinned to CPU 1.

    It serves the framework of this checkout (``src`` first on the path), not whichever one the
    environment has installed, so a bench run in a git worktree measures that worktree.
    """
    saved = dict(os.environ)
    os.environ.update(env or {})
    src = str(REPO / "src")
    try:
        if kind == "native":
            return await start_server(app_spec, "cli", timeout=timeout, pyvia_src=src)
        assert asgi_spec is not None
        port = free_port()
        command = asgi_command(kind, asgi_spec, port)
        full_env = dict(os.environ, PYVIA_SECRET="bench", PYTHONPATH=f"{src}{os.pathsep}{REPO}")
    finally:
        os.environ.clear()
        os.environ.update(saved)
    fd, name = tempfile.mkstemp(prefix=f"pyvia-bench-{kind}-", suffix=".log")
    with os.fdopen(fd, "wb") as log:
        process = subprocess.Popen(
            ["taskset", "-c", SERVER_CPU, *command],
            cwd=REPO,
            env=full_env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    server = Server(process, port, command, Path(name))
    try:
        await _gate(server, timeout)
    except BaseException:
        await server.stop()
        raise
    return server


async def _gate(server: Server, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    last: BaseException | None = None
    while time.monotonic() < deadline:
        if not server.alive():
            raise RuntimeError(f"server exited with {server.process.returncode}:\n{server.log_tail()}")
        try:
            conn = await Connection.open("127.0.0.1", server.port, timeout=1.0)
        except OSError as exc:
            last = exc
            await asyncio.sleep(0.1)
            continue
        try:
            response = await conn.request(build_request("GET", "/", server.host), timeout=10.0)
        finally:
            conn.close()
        if response.status != 200 or PAGE_MARKER not in response.body:
            raise RuntimeError(f"GET / answered {response.status} without the via-boot marker")
        await asyncio.sleep(0.3)  # granian: let the worker process settle before reading its tree
        for pid in proc.tree_pids(server.pid):
            pinned = proc.affinity_of(pid)
            if pinned != SERVER_CPU:
                raise RuntimeError(f"server process {pid} runs on CPUs {pinned!r}, expected {SERVER_CPU!r}")
        return
    raise RuntimeError(f"server not ready within {timeout} s ({last}):\n{server.log_tail()}")


# --- measurement windows ---------------------------------------------------------------------------


@dataclass
class Meter:
    """Server CPU, wall time and noise between :meth:`start` and :meth:`stop`."""

    server: Server
    wall: float = 0.0
    cpu: float = 0.0  # utime+stime ticks (10 ms), summed over the tree
    cpu_clock: float = 0.0  # the per-process CPU clocks (ns), summed over the tree
    cpu_sys: float = 0.0  # the kernel's share of the ticks (send() on loopback does the peer's receive too)
    client_cpu: float = 0.0
    others: float = 0.0  # share of the server's core other processes (and steal) took
    _t: tuple[float, ...] = field(default=(), repr=False)

    def start(self) -> Meter:
        busy, steal = proc.core_times(int(SERVER_CPU))
        user, system = proc.cpu_split(self.server.pid)
        self._t = (
            time.perf_counter(),
            user + system,
            proc.cpu_seconds_precise(self.server.pid),
            time.process_time(),
            busy,
            steal,
            system,
        )
        return self

    def stop(self) -> Meter:
        wall0, cpu0, clock0, client0, busy0, steal0, sys0 = self._t
        self.wall = time.perf_counter() - wall0
        self.client_cpu = time.process_time() - client0
        user, system = proc.cpu_split(self.server.pid)
        self.cpu = user + system - cpu0
        self.cpu_sys = system - sys0
        self.cpu_clock = proc.cpu_seconds_precise(self.server.pid) - clock0
        busy, steal = proc.core_times(int(SERVER_CPU))
        self.others = max(0.0, (busy - busy0) - self.cpu + (steal - steal0)) / self.wall if self.wall else 0.0
        return self

    @property
    def noisy(self) -> bool:
        return self.others > NOISY

    def as_dict(self) -> dict[str, Any]:
        return {
            "wall_s": self.wall,
            "server_cpu_s": self.cpu,
            "server_cpu_clock_s": self.cpu_clock,
            "server_sys_share": self.cpu_sys / self.cpu if self.cpu else 0.0,
            "client_cpu_s": self.client_cpu,
            "server_busy": self.cpu_clock / self.wall if self.wall else 0.0,
            "client_busy": self.client_cpu / self.wall if self.wall else 0.0,
            "others_on_server_core": self.others,
            "noisy": self.noisy,
        }


# --- tabs ------------------------------------------------------------------------------------------


class Hub:
    """Receives every tab's events; tracks one shared signal and rounds of "everyone has value v".

    A round is armed with a target value; each tab that sees the signal reach it is counted once
    with the arrival time of the read that carried it; ``done`` resolves when all are counted.
    ``check_view`` compares the ``data-n`` a view frame carries with the signal that follows it
    in the same flush (a broadcast writes the view, then the signals, in one write).
    """

    def __init__(self, key: str = "_route__n", check_view: bool = False) -> None:
        self.key = key
        self.check_view = check_view
        self.round = 0
        self.target: Any = None
        self.expected = 0
        self.times: list[float] = []
        self.done: asyncio.Future[None] | None = None
        self.mismatches = 0
        self.regressions = 0

    def arm(self, target: Any, tabs: int) -> asyncio.Future[None]:
        self.round += 1
        self.target = target
        self.expected = tabs
        self.times = []
        self.done = asyncio.get_running_loop().create_future()
        if tabs == 0:
            self.done.set_result(None)
        return self.done

    def on_signals(self, tab: TabStream, values: dict[str, Any], now: float) -> None:
        if self.key not in values:
            return
        value = values[self.key]
        if tab.value is not None and isinstance(value, int) and value < tab.value:
            self.regressions += 1
        tab.value = value
        if self.check_view and tab.view_value is not None and tab.view_value != value:
            self.mismatches += 1
        if self.target is not None and tab.round != self.round and value >= self.target:
            tab.round = self.round
            self.times.append(now)
            if len(self.times) >= self.expected and self.done is not None and not self.done.done():
                self.done.set_result(None)

    def on_elements(self, tab: TabStream, raw: bytes, now: float) -> None:
        if self.check_view:
            at = raw.find(b'data-n="')
            if at >= 0:
                end = raw.find(b'"', at + 8)
                tab.view_value = int(raw[at + 8 : end])


_HEAD, _SIZE, _DATA, _END = range(4)
_SIGNALS = b"event: datastar-patch-signals\n"
_ELEMENTS = b"event: datastar-patch-elements\n"
_SIGNALS_DATA = b"data: signals "


class TabStream(asyncio.Protocol):
    """One tab's event stream on its own connection (see the module docstring)."""

    def __init__(self, hub: Hub, request: bytes, coding: str) -> None:
        self.hub = hub
        self.request = request
        self.coding = coding
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.events = bytearray()
        self.state = _HEAD
        self.remaining = 0
        self.status = 0
        self.headers: dict[str, str] = {}
        self.opened: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.closed = False
        self.error: str | None = None
        self.raw_bytes = 0  # everything read, head and chunk framing included
        self.wire = 0  # chunk payloads: the content-coded body
        self.decoded = 0  # the body after decoding: the events' own bytes
        self.n_signals = 0
        self.n_elements = 0
        self.n_comments = 0
        self.n_unknown = 0
        self.value: Any = None
        self.view_value: Any = None
        self.round = 0
        self.first_at = 0.0
        self.last_at = 0.0
        #: Read and count, parse nothing: for a load whose events are not checked, whose reader
        #: must cost the client as little as a reader can.
        self.drain = False
        self._decoder = BodyDecoder(coding)

    @property
    def frames(self) -> int:
        """zstd frames ended (an encoder released mid-stream ends one)."""
        return self._decoder.frames

    # asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.transport.write(self.request)  # type: ignore[union-attr]

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if not self.opened.done():
            self.opened.set_exception(ConnectionError(f"stream closed before its first event ({exc})"))

    def data_received(self, data: bytes) -> None:
        self.raw_bytes += len(data)
        if self.drain:
            return
        now = time.perf_counter()
        self.last_at = now
        buf = self.buf
        buf += data
        try:
            self._parse(now)
        except Exception as exc:  # a malformed stream is a failed tab, not a crashed harness
            self._fail(f"{type(exc).__name__}: {exc}")

    # parsing

    def _fail(self, why: str) -> None:
        if self.error is None:
            self.error = why
        if not self.opened.done():
            self.opened.set_exception(ProtocolError(why))
        self.close()

    def _parse(self, now: float) -> None:
        buf = self.buf
        while buf:
            state = self.state
            if state == _SIZE:
                end = buf.find(b"\r\n")
                if end < 0:
                    return
                size = int(bytes(buf[:end]).split(b";", 1)[0], 16)
                del buf[: end + 2]
                if size == 0:
                    self.state = _END
                    self.close()
                    return
                self.remaining = size
                self.state = _DATA
            elif state == _DATA:
                n = self.remaining
                if len(buf) < n + 2:
                    return
                payload = bytes(buf[:n])
                del buf[: n + 2]
                self.state = _SIZE
                self.wire += n
                self._body(payload, now)
            elif state == _HEAD:
                end = buf.find(b"\r\n\r\n")
                if end < 0:
                    return
                self._head(bytes(buf[:end]))
                del buf[: end + 4]
                self.state = _SIZE
            else:
                return

    def _head(self, head: bytes) -> None:
        lines = head.decode("latin-1").split("\r\n")
        self.status = int(lines[0].split(" ", 2)[1])
        for line in lines[1:]:
            name, _, value = line.partition(":")
            self.headers[name.strip().lower()] = value.strip()
        if self.status != 200:
            raise ProtocolError(f"stream answered {self.status}")
        if "chunked" not in self.headers.get("transfer-encoding", ""):
            raise ProtocolError(f"stream not chunked: {self.headers}")
        got = self.headers.get("content-encoding", "identity")
        if got != self.coding:
            raise ProtocolError(f"asked for {self.coding}, stream has content-encoding {got}")

    def _body(self, payload: bytes, now: float) -> None:
        data = self._decoder.decode(payload)
        if not data:
            return
        self.decoded += len(data)
        events = self.events
        events += data
        start = 0
        hub = self.hub
        while (end := events.find(b"\n\n", start)) >= 0:
            raw = bytes(events[start:end])
            start = end + 2
            if raw.startswith(_SIGNALS):
                self.n_signals += 1
                at = raw.find(_SIGNALS_DATA)
                values = orjson.loads(raw[at + len(_SIGNALS_DATA) :])
                # The connect event. What the tab missed between its page view and now (a held view,
                # queued signals) is written just before it, so other events may come first.
                if not self.opened.done() and values.get("_disconnected") is False:
                    self.first_at = now
                    self.opened.set_result(None)
                    values = {k: v for k, v in values.items() if k != "_disconnected"}
                    if not values:
                        continue
                hub.on_signals(self, values, now)
            elif raw.startswith(_ELEMENTS):
                self.n_elements += 1
                hub.on_elements(self, raw, now)
            elif raw.startswith(b":"):
                self.n_comments += 1
            elif raw.startswith(b"id: ") and b"\n" not in raw:
                pass  # the id that ends each frame of a tab's stream
            else:
                self.n_unknown += 1
        if start:
            del events[:start]

    def close(self) -> None:
        if self.transport is not None and not self.closed:
            self.closed = True
            self.transport.close()


_STREAM_HEADERS = [("Accept", "text/event-stream"), ("Datastar-Request", "true")]


class Browser:
    """One keep-alive connection with one session cookie: page views and actions."""

    def __init__(self, conn: Connection, host: str) -> None:
        self.conn = conn
        self.host = host
        self.cookie: str | None = None
        self.ctx_ids: list[str] = []

    @classmethod
    async def open(cls, host: str, port: int) -> Browser:
        return cls(await Connection.open("127.0.0.1", port), host)

    def cookie_headers(self) -> list[tuple[str, str]]:
        return [("Cookie", f"{SESSION_COOKIE}={self.cookie}")] if self.cookie else []

    async def page(self, path: str = "/", timeout: float = 10.0) -> tuple[Response, str]:
        """``GET path``; keeps the session cookie; returns the response and the tab's context id."""
        response = await self.conn.request(build_request("GET", path, self.host, self.cookie_headers()), timeout)
        if response.status != 200:
            raise ProtocolError(f"page view answered {response.status}")
        if self.cookie is None:
            self.cookie = response.cookie(SESSION_COOKIE)
        ctx = boot_signals(response.body).get("via_ctx")
        if not isinstance(ctx, str):
            raise ProtocolError("page without a via_ctx seed")
        return response, ctx

    def action_request(self, name: str, ctx_id: str) -> bytes:
        headers = [
            ("Origin", f"http://{self.host}"),
            ("Content-Type", "application/json"),
            ("Datastar-Request", "true"),
            *self.cookie_headers(),
        ]
        return build_request("POST", f"/_action/{name}", self.host, headers, orjson.dumps({"via_ctx": ctx_id}))


# --- source addresses and open files, for tens of thousands of tabs -------------------------------

#: Linux's ``IP_BIND_ADDRESS_NO_PORT`` (Python 3.11 lacks the name): a socket bound to an address
#: with port 0 gets its port at ``connect``, unique per (source, destination), not at ``bind``,
#: where every address would draw from one shared pool of ephemeral ports.
IP_BIND_ADDRESS_NO_PORT = getattr(socket, "IP_BIND_ADDRESS_NO_PORT", 24)
PORT_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def ephemeral_ports() -> int:
    """How many ephemeral ports the kernel hands out (``net.ipv4.ip_local_port_range``): the most
    connections one source address can hold to one destination address and port."""
    try:
        low, high = (int(v) for v in PORT_RANGE.read_text().split()[:2])
    except (OSError, ValueError):
        return 28232  # Linux's default range, 32768-60999
    return high - low + 1


def source_addresses(connections: int, per_address: int) -> list[str]:
    """Loopback source addresses (127.0.0.1, .2, ...) enough for ``connections`` to one server
    port at most ``per_address`` each: all of 127.0.0.0/8 is local on Linux, and each address
    has its own ephemeral ports towards the same destination."""
    if per_address < 1:
        raise ValueError(f"per_address must be positive, got {per_address}")
    count = max(1, -(-connections // per_address))
    if count > 254:
        raise ValueError(f"{connections} connections at {per_address} per address need {count} addresses (> 254)")
    return [f"127.0.0.{i}" for i in range(1, count + 1)]


def bound_socket(source: str) -> socket.socket:
    """A non-blocking TCP socket bound to ``source`` whose port the kernel picks at connect."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, 1)
        sock.bind((source, 0))
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


def stream_fds_needed(tabs: int, spare: int = 100) -> int:
    """The ``RLIMIT_NOFILE`` a pyvia server needs to hold ``tabs`` streams (plus ``spare``
    streams: a gate, a reload) under its derived caps: it keeps a tenth of its files
    for itself and lets streams take nine tenths of the connections (``pyvia.server.http``)."""
    from pyvia.server.http import derive_max_connections, derive_max_streams

    fds = -(-(tabs + spare) * 100 // 81) + 64
    while derive_max_streams(derive_max_connections(fds)) < tabs + spare:
        fds += 1024
    return fds


def raise_fd_limit(need: int) -> tuple[int, int]:
    """Raise this process's soft and hard ``RLIMIT_NOFILE`` to at least ``need`` (children inherit
    both); ``(soft, hard)`` after. Raising the hard limit needs root (CAP_SYS_RESOURCE) and at most
    ``fs.nr_open``: PermissionError or ValueError otherwise, the limits left as they were."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    infinite = resource.RLIM_INFINITY
    new_hard = hard if hard == infinite or hard >= need else need
    new_soft = soft if soft == infinite or soft >= need else need
    if (new_soft, new_hard) != (soft, hard):
        resource.setrlimit(resource.RLIMIT_NOFILE, (new_soft, new_hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)


async def open_stream(
    host: str,
    port: int,
    browser: Browser,
    ctx_id: str,
    hub: Hub,
    coding: str,
    timeout: float = 10.0,
    source: str | None = None,
) -> TabStream:
    """One tab's stream; from ``source`` (a local address) when given, else from 127.0.0.1."""
    headers = [*_STREAM_HEADERS, *browser.cookie_headers()]
    if coding != "identity":
        headers.append(("Accept-Encoding", coding))
    request = build_request("GET", stream_target({"via_ctx": ctx_id}), host, headers)
    loop = asyncio.get_running_loop()
    if source is None:
        connecting = loop.create_connection(lambda: TabStream(hub, request, coding), "127.0.0.1", port)
    else:
        connecting = _connect_from(source, port, lambda: TabStream(hub, request, coding))
    _, tab = await asyncio.wait_for(connecting, timeout)
    try:
        await asyncio.wait_for(asyncio.shield(tab.opened), timeout)
    except BaseException:
        tab.close()
        raise
    return tab


async def open_tabs(
    host: str,
    port: int,
    n: int,
    hub: Hub,
    coding: str = "identity",
    browsers: list[Browser] | None = None,
    sessions: int = 16,
    path: str = "/",
    failures: Counter[str] | None = None,
    deadline_s: float = 120.0,
    sources: list[str] | None = None,
) -> tuple[list[Browser], list[TabStream]]:
    """Open ``n`` tabs spread over ``sessions`` browsers (page view, then stream), 16 at a time.

    With ``sources``, the streams come from those local addresses in turn (more connections to
    one server port than one address has ephemeral ports, :func:`source_addresses`)."""
    if browsers is None:
        browsers = [await Browser.open(host, port) for _ in range(sessions)]
    failures = failures if failures is not None else Counter()
    tabs: list[TabStream] = []
    shares = [n // len(browsers) + (1 if i < n % len(browsers) else 0) for i in range(len(browsers))]
    deadline = time.monotonic() + deadline_s

    turn = 0

    async def one(browser: Browser, share: int) -> None:
        nonlocal turn
        for _ in range(share):
            if time.monotonic() > deadline:
                failures["deadline"] += 1
                return
            source = None
            if sources:
                source = sources[turn % len(sources)]
                turn += 1
            try:
                _, ctx_id = await browser.page(path)
                tab = await open_stream(host, port, browser, ctx_id, hub, coding, source=source)
            except (OSError, TimeoutError, ProtocolError) as exc:
                failures[f"{type(exc).__name__}: {str(exc)[:80]}"] += 1
                if browser.conn.closed:
                    browser.conn = await Connection.open("127.0.0.1", port)
                continue
            browser.ctx_ids.append(ctx_id)
            tabs.append(tab)

    await asyncio.gather(*(one(b, s) for b, s in zip(browsers, shares, strict=True)))
    return browsers, tabs


async def _connect_from(source: str, port: int, factory: Any) -> tuple[asyncio.BaseTransport, TabStream]:
    loop = asyncio.get_running_loop()
    sock = bound_socket(source)
    try:
        await loop.sock_connect(sock, ("127.0.0.1", port))
    except BaseException:
        sock.close()
        raise
    transport, protocol = await loop.create_connection(factory, sock=sock)
    return transport, protocol


async def get_json(conn: Connection, host: str, method: str, target: str, timeout: float = 10.0) -> dict[str, Any]:
    response = await conn.request(build_request(method, target, host), timeout)
    if response.status != 200:
        raise ProtocolError(f"{method} {target} answered {response.status}: {response.body[:200]!r}")
    value: dict[str, Any] = orjson.loads(response.body)
    return value


async def wait_quiet(max_wait: float = 30.0, threshold: float = 0.05, sample: float = 0.5) -> dict[str, float]:
    """Wait (up to ``max_wait`` s) until other processes leave both cores nearly idle.

    The machine is shared with other work that is not pinned: a window measured while something
    else runs on the server's core has the right CPU per operation but not the right latency.
    Core 1's busy time includes our idle server (a few ms a second); core 0's excludes this
    harness's own CPU. Returns the seconds waited and the last shares seen.
    """
    started = time.monotonic()
    while True:
        s1, c0, me = proc.core_times(int(SERVER_CPU))[0], proc.core_times(CLIENT_CPU)[0], time.process_time()
        await asyncio.sleep(sample)
        busy1 = (proc.core_times(int(SERVER_CPU))[0] - s1) / sample
        busy0 = max(0.0, (proc.core_times(CLIENT_CPU)[0] - c0) - (time.process_time() - me)) / sample
        waited = time.monotonic() - started
        if (busy1 <= threshold and busy0 <= threshold) or waited >= max_wait:
            return {"waited_s": waited, "server_core_busy": busy1, "client_core_others": busy0}
