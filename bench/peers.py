"""``peers``: pyvia side by side with stario, datastar-py and StarHTML, each installed from PyPI at run time.

Each contender serves the same app (``bench/peer_apps``: the same words, written in each one's
own idiom) and gets the same workloads, interleaved A B C A B C over ``--reps`` repetitions, a
fresh server per measurement pinned to CPU 1 (the harness runs on CPU 0):

1. ``page``: keep-alive ``GET /`` of the counter (a page with a count and a + button, about
   1 KB of app markup) from C connections, closed loop: server CPU per page view;
2. ``roundtrip``: C tabs (page view, then the tab's stream), each driven by its own connection:
   POST the + action and wait until the tab's stream carries the new count: server CPU per
   round trip;
3. ``idle``: N connected tabs (page view and stream each) and no traffic: server CPU per
   second of wall time; and 5., the same run: server RSS per connected tab;
4. ``broadcast``: N tabs on ``/board``; ``POST /bump`` makes the server send every tab the same
   300-byte fragment and the new value (closed loop: the next bump once every tab has decoded
   the value): server CPU per receiving tab, and the decoded (and wire) bytes each tab got per
   broadcast, per stream coding (identity, zstd, br; a peer without stream compression runs
   identity only);
6. ``doc``: keep-alive ``GET /doc``, a documentation page of about 20 KB: server CPU per page.

Every answer is verified: a page needs its status and its marker, a round trip counts only when
the stream carried exactly the next count, a broadcast round only when every tab decoded the
value with its fragment (``data-n``) agreeing; idle tabs must all still be open at the end. A
repetition with any failure is DIRTY (left out of the medians, and the command exits 1); one
where other processes took more than 5% of a core is noisy (flagged, kept). The summary gives
each figure's median (min-max) per contender and pyvia's ratio to the best peer (lower is
better for every figure).

The peers are installed into virtualenvs under ``--venvs`` (``pip install --upgrade`` of their
requirement each run, so the newest release within the bounds below is measured), all on one
interpreter of at least Python 3.12 (stario's floor; ``--python`` chooses it). pyvia runs on that
interpreter too, from this checkout's ``src/``, with its runtime dependencies in a virtualenv
of its own (``--pyvia-python project`` serves it from the project's interpreter instead).
StarHTML (on uvicorn, with its compression middleware) is the fourth contender; NiceGUI is not
part of this harness: it speaks Socket.IO, not SSE, and would need a client of its own.
"""

from __future__ import annotations

import argparse
import asyncio
import glob
import html
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import orjson

from bench import proc
from bench.client import Connection, ProtocolError, Response, boot_signals, build_request, posted, stream_target
from bench.fanout import Hub, TabStream, wait_quiet
from bench.peer_apps.content import DOC_MARKER, VIEW_BYTES
from bench.report import fmt, percentile, spread
from bench.server import REPO, SERVER_CPU, Server, free_port, server_env
from bench.window import Window

__all__ = [
    "CONTENDERS",
    "Contender",
    "Dialect",
    "add_arguments",
    "broadcast",
    "default_venvs",
    "ensure_venv",
    "find_python",
    "idle",
    "main",
    "pages",
    "roundtrip",
    "start",
    "summarise",
    "summary_table",
]

APPS = REPO / "bench" / "peer_apps"
#: The counter's two elements: the count and the + button (attribute order differs between frameworks).
COUNTER_MARKERS = (b'id="count"', b'id="inc"')
WORKLOADS = ("page", "roundtrip", "idle", "broadcast", "doc")
#: Every figure, in the order of the summary: (key, what it is, unit, digits).
FIGURES: tuple[tuple[str, str, str, int], ...] = (
    ("page_us", "small live page, server CPU per GET (keep-alive)", "µs", 1),
    ("roundtrip_us", "private round trip (POST, patch on the tab's stream)", "µs", 1),
    ("idle_ms_per_s", "idle server CPU with {n} connected tabs", "ms/s", 2),
    ("rss_kb_per_tab", "idle connected tab, RSS, at {n} tabs", "KB", 2),
    ("broadcast_us_per_tab", "one broadcast, CPU per receiving tab ({coding}, {n} tabs)", "µs", 2),
    ("broadcast_decoded_bytes", "bytes each tab decoded per broadcast ({coding})", "B", 0),
    ("broadcast_wire_bytes", "bytes on the wire per tab and broadcast ({coding})", "B", 0),
    ("doc_us", "20 KB documentation page, server CPU per GET", "µs", 1),
    ("page_bytes", "counter page size", "B", 0),
    ("doc_bytes", "documentation page size", "B", 0),
)
#: Figures that describe the pages rather than measure the servers: no ratio.
INFO_ONLY = {"page_bytes", "doc_bytes"}


# --- the contenders -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Dialect:
    """How a contender's tabs talk: where streams and actions go, and what their signals are called.

    pyvia's are its own (``/_sse``, ``/_action/increment``, server-owned ids with a ``_``, a
    connect event); the peers' apps share one (``/stream``, ``/increment``, a ``tab`` signal, the
    current value as the stream's first event).
    """

    name: str
    count_key: str
    board_key: str

    @property
    def pyvia(self) -> bool:
        return self.name == "pyvia"

    def tab_signals(self, body: bytes) -> dict[str, Any]:
        """The signals the page seeds: what the tab's stream and actions identify it with."""
        if self.pyvia:
            seed = boot_signals(body)
            if not isinstance(seed.get("via_ctx"), str):
                raise ProtocolError("page without a via_ctx seed")
            return seed
        found: dict[str, Any] = {}
        match = _DATA_SIGNALS.search(body)
        if match is not None:  # data-signals='{"tab": ..., "count": 0}'
            found.update(orjson.loads(html.unescape((match.group(1) or match.group(2)).decode())))
        for one in _DATA_SIGNAL.finditer(body):  # data-signals:tab__ifmissing='"..."' (StarHTML's form)
            found[one.group(1).decode()] = orjson.loads(html.unescape((one.group(2) or one.group(3)).decode()))
        if not found:
            raise ProtocolError("page without data-signals")
        return found

    def stream_target(self, page: str, signals: dict[str, Any]) -> str:
        if self.pyvia:
            return stream_target(signals)
        base = "/stream" if page == "/" else f"{page}/stream"
        if "tab" not in signals:
            return base
        return f"{base}?datastar=" + quote(orjson.dumps({"tab": signals["tab"]}).decode(), safe="")

    def action(self, host: str, signals: dict[str, Any], cookies: list[tuple[str, str]]) -> bytes:
        """The POST Datastar sends for the + button."""
        headers = [("Content-Type", "application/json"), ("Datastar-Request", "true"), *cookies]
        if self.pyvia:
            headers.insert(0, ("Origin", f"http://{host}"))
            return build_request("POST", "/_action/increment", host, headers, orjson.dumps(posted(signals)))
        body = {k: v for k, v in signals.items() if not k.startswith("_")}
        return build_request("POST", "/increment", host, headers, orjson.dumps(body))


_DATA_SIGNALS = re.compile(rb"""data-signals=(?:'([^']*)'|"([^"]*)")""")
_DATA_SIGNAL = re.compile(rb"""data-signals:([A-Za-z0-9_-]+?)(?:__[A-Za-z0-9_.]+)?=(?:'([^']*)'|"([^"]*)")""")
PYVIA = Dialect("pyvia", count_key="_count", board_key="_route__n")
PEER = Dialect("peer", count_key="count", board_key="n")


@dataclass(frozen=True)
class Contender:
    """One framework: what to install, how to serve its app, which stream codings it has."""

    name: str
    requirements: tuple[str, ...]
    #: Distributions whose installed versions the provenance records.
    versions: tuple[str, ...]
    codings: tuple[str, ...]
    dialect: Dialect

    def command(self, python: Path, port: int) -> list[str]:
        if self.name == "pyvia":
            return [
                str(python),
                "-m",
                "pyvia",
                "run",
                "bench.peer_apps.pyvia_app:app",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
            ]
        if self.name == "stario":
            return [str(python), str(APPS / "stario_app.py")]
        module = "starhtml_app" if self.name == "starhtml" else "datastar_starlette_app"
        return [
            str(python),
            "-m",
            "uvicorn",
            f"{module}:app",
            "--app-dir",
            str(APPS),
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
            "75",
            "--timeout-graceful-shutdown",
            "2",
        ]

    def env(self, port: int) -> dict[str, str]:
        if self.name == "pyvia":
            return server_env(pyvia_src=str(REPO / "src"))
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYVIA_", "STARIO_", "PYTHONPATH"))}
        if self.name == "stario":
            # noop tracer: stario's default writes a JSON span per request (machine-limits.md §1b);
            # keep-alive as long as pyvia's and uvicorn's here.
            env.update(
                STARIO_HOST="127.0.0.1",
                STARIO_PORT=str(port),
                STARIO_BACKLOG="4096",
                STARIO_TRACER="noop",
                STARIO_REQUESTS_KEEP_ALIVE_TIMEOUT="75",
                STARIO_GRACEFUL_SHUTDOWN_TIMEOUT="2",
            )
        return env


def _pyvia_requirements() -> tuple[str, ...]:
    with (REPO / "pyproject.toml").open("rb") as f:
        return tuple(tomllib.load(f)["project"]["dependencies"])


CONTENDERS: dict[str, Contender] = {
    "pyvia": Contender(
        "pyvia",
        _pyvia_requirements(),
        ("uvloop", "httptools", "orjson", "Jinja2", "brotli", "zstandard"),
        ("identity", "zstd", "br"),
        PYVIA,
    ),
    "stario": Contender("stario", ("stario[uvloop]>=5,<6",), ("stario", "uvloop"), ("identity", "zstd", "br"), PEER),
    "datastar-py": Contender(
        "datastar-py",
        ("datastar-py>=1,<2", "starlette", "uvicorn", "uvloop", "httptools", "Jinja2"),
        ("datastar-py", "starlette", "uvicorn", "uvloop", "httptools", "Jinja2"),
        ("identity",),
        PEER,
    ),
    "starhtml": Contender(
        "starhtml",
        ("starhtml", "uvicorn", "uvloop", "httptools"),
        ("starhtml", "starlette", "starlette-compress", "uvicorn", "uvloop", "httptools"),
        ("identity", "zstd", "br"),
        PEER,
    ),
}


# --- interpreters and virtualenvs -----------------------------------------------------------------


def _version_of(python: str) -> tuple[int, int] | None:
    try:
        out = subprocess.run(
            [python, "-c", "import sys; print(*sys.version_info[:2])"],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        ).stdout.split()
    except (OSError, subprocess.SubprocessError):
        return None
    return int(out[0]), int(out[1])


def find_python(wanted: str | None) -> tuple[str, tuple[int, int]]:
    """The interpreter for every venv: ``wanted``, else the newest CPython >= 3.12 found."""
    if wanted:
        version = _version_of(wanted)
        if version is None:
            raise RuntimeError(f"--python {wanted}: cannot run it")
        return wanted, version
    candidates = sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.1[2-9]*/bin/python3")), reverse=True)
    candidates += [p for name in ("python3.14", "python3.13", "python3.12") if (p := shutil.which(name))]
    found = [(v, p) for p in candidates if (v := _version_of(p)) is not None and v >= (3, 12)]
    if not found:
        raise RuntimeError("no Python >= 3.12 found (stario's floor): name one with --python")
    version, python = max(found)
    return python, version


def default_venvs() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "pyvia-bench" / "peers"


def ensure_venv(
    contender: Contender, python: str, version: tuple[int, int], root: Path, install: bool = True
) -> tuple[Path, dict[str, str]]:
    """The contender's virtualenv (made if missing, its requirements upgraded) and its versions."""
    venv = root / f"{contender.name}-py{version[0]}.{version[1]}"
    interpreter = venv / "bin" / "python"
    if not interpreter.exists():
        subprocess.run([python, "-m", "venv", str(venv)], check=True, timeout=300)
        install = True
    if install:
        started = time.monotonic()
        result = subprocess.run(
            [
                str(interpreter),
                "-m",
                "pip",
                "install",
                "-q",
                "--disable-pip-version-check",
                "--upgrade",
                *contender.requirements,
            ],
            capture_output=True,
            text=True,
            timeout=900,
        )
        if result.returncode:
            raise RuntimeError(
                f"installing {contender.name} ({' '.join(contender.requirements)}) failed:\n{result.stderr[-2000:]}"
            )
        print(
            f"# {contender.name}: pip install --upgrade {' '.join(contender.requirements)} "
            f"({time.monotonic() - started:.1f} s)",
            flush=True,
        )
    code = (
        "import json, sys; from importlib import metadata as m\n"
        "def v(n):\n    try: return m.version(n)\n    except m.PackageNotFoundError: return 'absent'\n"
        f"print(json.dumps({{n: v(n) for n in {list(contender.versions)!r}}}))"
    )
    out = subprocess.run([str(interpreter), "-c", code], capture_output=True, text=True, timeout=60, check=True)
    versions: dict[str, str] = json.loads(out.stdout)
    versions["python"] = ".".join(map(str, version))
    return interpreter, versions


# --- servers --------------------------------------------------------------------------------------


async def start(contender: Contender, python: Path, timeout: float = 30.0) -> Server:
    """A fresh server of ``contender`` pinned to CPU 1, gated on a real counter page."""
    port = free_port()
    command = contender.command(python, port)
    fd, name = tempfile.mkstemp(prefix=f"pyvia-bench-peer-{contender.name}-", suffix=".log")
    with os.fdopen(fd, "wb") as log:
        process = subprocess.Popen(
            ["taskset", "-c", SERVER_CPU, *command],
            cwd=REPO,
            env=contender.env(port),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    server = Server(process, port, command, Path(name))
    try:
        await _gate(server, timeout)
    except BaseException:
        await server.stop(grace=2.0)
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
            await asyncio.sleep(0.05)
            continue
        try:
            response = await conn.request(build_request("GET", "/", server.host), timeout=10.0)
        finally:
            conn.close()
        if response.status != 200 or not all(m in response.body for m in COUNTER_MARKERS):
            raise RuntimeError(f"GET / answered {response.status} without the counter: {response.body[:200]!r}")
        for pid in proc.tree_pids(server.pid):
            pinned = proc.affinity_of(pid)
            if pinned != SERVER_CPU:
                raise RuntimeError(f"server process {pid} runs on CPUs {pinned!r}, expected {SERVER_CPU!r}")
        return
    raise RuntimeError(f"server not ready within {timeout} s ({last}):\n{server.log_tail()}")


# --- clients --------------------------------------------------------------------------------------


#: What Chromium sends besides Host and Cookie with a page view and with an ``EventSource``-like
#: fetch (``--browser-headers``): a tab's server keeps its latest request, and these are most of it.
BROWSER_PAGE_HEADERS = [
    ("Connection", "keep-alive"),
    ("sec-ch-ua", '"Chromium";v="131", "Not_A Brand";v="24"'),
    ("sec-ch-ua-mobile", "?0"),
    ("sec-ch-ua-platform", '"Linux"'),
    ("Upgrade-Insecure-Requests", "1"),
    (
        "User-Agent",
        "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36",
    ),
    ("Accept", "text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,*/*;q=0.8"),
    ("Sec-Fetch-Site", "none"),
    ("Sec-Fetch-Mode", "navigate"),
    ("Sec-Fetch-User", "?1"),
    ("Sec-Fetch-Dest", "document"),
    ("Accept-Language", "en-US,en;q=0.9"),
]  # and no Accept-Encoding: this client reads pages uncompressed
BROWSER_STREAM_HEADERS = [
    ("Connection", "keep-alive"),
    ("sec-ch-ua", '"Chromium";v="131", "Not_A Brand";v="24"'),
    ("sec-ch-ua-mobile", "?0"),
    ("sec-ch-ua-platform", '"Linux"'),
    (
        "User-Agent",
        "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36",
    ),
    ("Sec-Fetch-Site", "same-origin"),
    ("Sec-Fetch-Mode", "cors"),
    ("Sec-Fetch-Dest", "empty"),
    ("Accept-Language", "en-US,en;q=0.9"),
]


class Visitor:
    """One keep-alive connection and the cookies its answers set (pyvia's session), as a browser.

    ``browser``: send a browser's headers too (``BROWSER_PAGE_HEADERS``), not only Host and Cookie;
    ``fresh``: each page view on a connection of its own, closed once answered."""

    def __init__(self, server: Server, browser: bool = False, fresh: bool = False) -> None:
        self.server = server
        self.browser = browser
        self.fresh = fresh
        self.conn: Connection | None = None
        self.cookies: dict[str, str] = {}
        self._requests: dict[str, bytes] = {}

    def cookie_headers(self) -> list[tuple[str, str]]:
        return [("Cookie", "; ".join(f"{k}={v}" for k, v in self.cookies.items()))] if self.cookies else []

    async def send(self, raw: bytes, timeout: float = 10.0) -> Response:
        if self.conn is None or self.conn.closed:
            self.conn = await Connection.open("127.0.0.1", self.server.port)
        response = await self.conn.request(raw, timeout)
        if response.set_cookies:
            for line in response.set_cookies:
                name, _, value = line.split(";", 1)[0].strip().partition("=")
                self.cookies[name] = value
            self._requests.clear()
        return response

    async def get(self, path: str, timeout: float = 10.0) -> Response:
        raw = self._requests.get(path)
        if raw is None:
            headers = [*(BROWSER_PAGE_HEADERS if self.browser else ()), *self.cookie_headers()]
            raw = self._requests[path] = build_request("GET", path, self.server.host, headers)
        response = await self.send(raw, timeout)
        if self.fresh:
            self.close()
        return response

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()


class LiveTab(TabStream):
    """A tab's stream, plus what the round trip waits for: its count reaching ``expect``."""

    def __init__(self, hub: Hub, request: bytes, coding: str, signals: dict[str, Any]) -> None:
        super().__init__(hub, request, coding)
        self.signals = signals
        self.count: Any = None
        self.expect = 0
        self.waiter: asyncio.Future[float | None] | None = None
        #: The browser that opened it: its actions carry that browser's cookies (its session).
        self.visitor: Visitor | None = None


class LiveHub(Hub):
    """The fan-out Hub of ``bench.fanout`` (rounds of "every tab has value v"), which also opens a
    peer's tab on its first event and resolves a tab's round-trip waiter on its count."""

    def __init__(self, dialect: Dialect, check_view: bool = False) -> None:
        super().__init__(key=dialect.board_key, check_view=check_view)
        self.dialect = dialect

    def _opened(self, tab: TabStream, now: float) -> None:
        if not self.dialect.pyvia and not tab.opened.done():
            tab.first_at = now
            tab.opened.set_result(None)

    def on_signals(self, tab: TabStream, values: dict[str, Any], now: float) -> None:
        self._opened(tab, now)
        key = self.dialect.count_key
        if key in values and isinstance(tab, LiveTab):
            tab.count = values[key]
            waiter = tab.waiter
            if waiter is not None and not waiter.done() and isinstance(tab.count, int) and tab.count >= tab.expect:
                waiter.set_result(now if tab.count == tab.expect else None)
        super().on_signals(tab, values, now)

    def on_elements(self, tab: TabStream, raw: bytes, now: float) -> None:
        self._opened(tab, now)
        super().on_elements(tab, raw, now)


async def open_tab(
    visitor: Visitor, dialect: Dialect, hub: LiveHub, page: str, coding: str, timeout: float = 10.0
) -> LiveTab:
    """Page view, then the tab's stream on its own connection; returns once the stream opened."""
    response = await visitor.get(page, timeout)
    if response.status != 200:
        raise ProtocolError(f"GET {page} answered {response.status}")
    signals = dialect.tab_signals(response.body)
    headers = [("Accept", "text/event-stream"), ("Datastar-Request", "true"), *visitor.cookie_headers()]
    if visitor.browser:
        headers += BROWSER_STREAM_HEADERS
    if coding != "identity":
        headers.append(("Accept-Encoding", coding))
    request = build_request("GET", dialect.stream_target(page, signals), visitor.server.host, headers)
    loop = asyncio.get_running_loop()
    _, tab = await asyncio.wait_for(
        loop.create_connection(lambda: LiveTab(hub, request, coding, dict(signals)), "127.0.0.1", visitor.server.port),
        timeout,
    )
    try:
        await asyncio.wait_for(asyncio.shield(tab.opened), timeout)
    except BaseException:
        tab.close()
        raise
    if tab.count is None:  # pyvia seeds the count in the page; the peers' first event carries it
        tab.count = signals.get(dialect.count_key)
    tab.visitor = visitor
    return tab


async def open_tabs(
    server: Server,
    dialect: Dialect,
    hub: LiveHub,
    page: str,
    n: int,
    coding: str = "identity",
    visitors: int = 16,
    failures: Tally | None = None,
    browser: bool = False,
    fresh: bool = False,
) -> tuple[list[Visitor], list[LiveTab]]:
    """``n`` tabs spread over ``visitors`` browsers (each its own session), 16 opening at a time."""
    failures = failures if failures is not None else Tally()
    browsers = [Visitor(server, browser, fresh) for _ in range(max(1, min(visitors, n)))]
    tabs: list[LiveTab] = []
    shares = [n // len(browsers) + (1 if i < n % len(browsers) else 0) for i in range(len(browsers))]

    async def one(visitor: Visitor, share: int) -> None:
        for _ in range(share):
            try:
                tabs.append(await open_tab(visitor, dialect, hub, page, coding))
            except (OSError, TimeoutError, ProtocolError, ValueError) as exc:
                failures.fail(f"open: {type(exc).__name__}", str(exc)[:200])

    await asyncio.gather(*(one(b, s) for b, s in zip(browsers, shares, strict=True)))
    return browsers, tabs


# --- workloads ------------------------------------------------------------------------------------


class Tally:
    """What a window's requests came to: successes, refusals (the first kept whole) and errors."""

    def __init__(self) -> None:
        self.ok = 0
        self.failures: Counter[str] = Counter()
        self.first: str | None = None
        self.latencies: list[float] = []

    def fail(self, why: str, detail: str = "") -> None:
        self.failures[why] += 1
        if self.first is None:
            self.first = f"{why} {detail}"[:300]

    def absorb(self, earlier: Tally, prefix: str) -> None:
        """Count what failed before the window (warm-up, opening tabs) here too: the rep is dirty."""
        for why, count in earlier.failures.items():
            self.failures[f"{prefix}{why}"] += count
        if earlier.first is not None:
            self.first = f"{prefix}{earlier.first}"

    def record(self) -> dict[str, Any]:
        lat = sorted(self.latencies)
        return {
            "ok": self.ok,
            "failures": dict(self.failures),
            "first_failure": self.first,
            "p50_us": percentile(lat, 50) * 1e6,
            "p99_us": percentile(lat, 99) * 1e6,
        }


def _window_record(window: Window) -> dict[str, Any]:
    return {
        "wall_s": window.wall,
        "server_cpu_s": window.server_cpu,
        "server_cpu_clock_s": window.server_cpu_precise,
        "server_busy": window.server_busy,
        "client_busy": window.client_busy,
        "others_on_server_core": window.others_on_core,
        "others_on_client_core": window.others_on_client_core,
        "noisy": window.noisy,
    }


async def pages(server: Server, path: str, markers: tuple[bytes, ...], args: argparse.Namespace) -> dict[str, Any]:
    """C connections in a closed loop of ``GET path``; server CPU per verified page."""
    state = {"tally": Tally(), "running": True}
    sizes: list[int] = []

    async def worker() -> None:
        visitor = Visitor(server)
        perf = time.perf_counter
        try:
            while state["running"]:
                tally: Tally = state["tally"]  # type: ignore[assignment]
                t0 = perf()
                try:
                    response = await visitor.get(path)
                except (OSError, TimeoutError, ProtocolError) as exc:
                    tally.fail(type(exc).__name__, str(exc))
                    continue
                if response.status != 200:
                    tally.fail(f"status {response.status}", repr(response.body[:200]))
                elif not all(m in response.body for m in markers):
                    tally.fail("no marker", repr(response.body[:200]))
                else:
                    tally.ok += 1
                    tally.latencies.append(response.done - t0)
                    if not sizes:
                        sizes.append(len(response.body))
        finally:
            visitor.close()

    workers = [asyncio.ensure_future(worker()) for _ in range(args.concurrency)]
    await asyncio.sleep(args.warmup)
    warm: Tally = state["tally"]  # type: ignore[assignment]
    state["tally"] = tally = Tally()
    window = Window(server).start()
    await asyncio.sleep(args.duration)
    window.stop()
    state["running"] = False
    await asyncio.gather(*workers, return_exceptions=True)
    tally.absorb(warm, "warm-up: ")
    us = window.server_cpu_precise / tally.ok * 1e6 if tally.ok else float("nan")
    return {
        "figures": {
            ("doc_us" if path == "/doc" else "page_us"): us,
            ("doc_bytes" if path == "/doc" else "page_bytes"): sizes[0] if sizes else float("nan"),
        },
        "per_s": tally.ok / window.wall,
        **tally.record(),
        **_window_record(window),
    }


async def roundtrip(server: Server, dialect: Dialect, args: argparse.Namespace) -> dict[str, Any]:
    """C tabs, each driven by its own connection: POST +, wait for the next count on its stream."""
    hub = LiveHub(dialect)
    opening = Tally()
    visitors, tabs = await open_tabs(server, dialect, hub, "/", args.concurrency, failures=opening)
    state = {"tally": Tally(), "running": True}

    async def worker(visitor: Visitor, tab: LiveTab) -> None:
        perf = time.perf_counter
        loop = asyncio.get_running_loop()
        while state["running"]:
            tally: Tally = state["tally"]  # type: ignore[assignment]
            if not isinstance(tab.count, int):
                tally.fail("no count on the stream")
                return
            tab.expect = tab.count + 1
            tab.waiter = waiter = loop.create_future()
            raw = dialect.action(server.host, tab.signals, visitor.cookie_headers())
            t0 = perf()
            try:
                response = await visitor.send(raw, args.timeout)
                if not 200 <= response.status < 300:
                    tally.fail(f"status {response.status}", repr(response.body[:200]))
                    await asyncio.sleep(0.01)
                    continue
                seen = await asyncio.wait_for(waiter, args.timeout)
            except (OSError, TimeoutError, ProtocolError) as exc:
                tally.fail(type(exc).__name__, str(exc))
                if tab.closed:
                    return
                continue
            if seen is None:
                tally.fail("wrong count", f"expected {tab.expect}, stream has {tab.count}")
                continue
            tally.ok += 1
            tally.latencies.append(seen - t0)

    try:
        # each tab with the browser that opened it: tabs finish opening in any order, and a post
        # with another browser's cookie is (rightly) refused by pyvia, 403
        workers = [asyncio.ensure_future(worker(t.visitor, t)) for t in tabs if t.visitor is not None]
        await asyncio.sleep(args.warmup)
        warm: Tally = state["tally"]  # type: ignore[assignment]
        state["tally"] = tally = Tally()
        window = Window(server).start()
        await asyncio.sleep(args.duration)
        window.stop()
        state["running"] = False
        await asyncio.gather(*workers, return_exceptions=True)
    finally:
        for tab in tabs:
            tab.close()
        for visitor in visitors:
            visitor.close()
    tally.absorb(warm, "warm-up: ")
    tally.absorb(opening, "")
    if len(tabs) < args.concurrency:
        tally.fail("tabs opened", f"{len(tabs)} of {args.concurrency}")
    us = window.server_cpu_precise / tally.ok * 1e6 if tally.ok else float("nan")
    return {
        "figures": {"roundtrip_us": us},
        "per_s": tally.ok / window.wall,
        **tally.record(),
        **_window_record(window),
    }


async def idle(server: Server, dialect: Dialect, n: int, args: argparse.Namespace) -> dict[str, Any]:
    """N connected tabs and no traffic: server CPU per second, and RSS per tab."""
    hub = LiveHub(dialect)
    tally = Tally()
    warm = n // 10  # opened first: the baseline then has the code paths and pools of a tab in use
    how = {"browser": args.browser_headers, "fresh": args.new_connections}
    visitors, tabs = await open_tabs(server, dialect, hub, "/", warm, failures=tally, **how)
    await asyncio.sleep(min(args.settle, 0.5))
    rss0 = server.rss_kb()
    more_visitors, more = await open_tabs(server, dialect, hub, "/", n - warm, failures=tally, **how)
    visitors += more_visitors
    tabs += more
    try:
        for visitor in visitors:
            visitor.close()
        await asyncio.sleep(args.settle)
        rss1 = server.rss_kb()
        window = Window(server).start()
        await asyncio.sleep(args.idle_seconds)
        window.stop()
        alive = [t for t in tabs if not t.closed and t.error is None]
    finally:
        for tab in tabs:
            tab.close()
    tally.ok = len(alive)
    if len(alive) < n:
        tally.fail("tabs open at the end", f"{len(alive)} of {n}")
    return {
        "tabs": n,
        "figures": {
            "idle_ms_per_s": window.server_cpu_precise / window.wall * 1e3,
            "rss_kb_per_tab": (rss1 - rss0) / max(1, len(more)),
        },
        "rss_kb": [rss0, rss1],
        **tally.record(),
        **_window_record(window),
    }


async def broadcast(server: Server, dialect: Dialect, coding: str, args: argparse.Namespace) -> dict[str, Any]:
    """N tabs on /board; closed-loop bumps; CPU per receiving tab and bytes per tab and broadcast."""
    hub = LiveHub(dialect, check_view=True)
    tally = Tally()
    visitors, tabs = await open_tabs(server, dialect, hub, "/board", args.broadcast_tabs, coding, failures=tally)
    control = Visitor(server)
    value: int | None = None

    async def one_round() -> float | None:
        nonlocal value
        target = (value or 0) + 1  # a fresh server starts at 0: the bumps set 1, 2, 3...
        done = hub.arm(target, len(tabs))
        t0 = time.perf_counter()
        response = await control.send(build_request("POST", "/bump", server.host))
        if response.status != 200:
            tally.fail(f"bump status {response.status}", repr(response.body[:200]))
            return None
        value = int(orjson.loads(response.body)["n"])
        if value != target:
            tally.fail("bump set another value", f"{value}, expected {target}")
            return None
        try:
            await asyncio.wait_for(asyncio.shield(done), args.timeout * 5)
        except TimeoutError:
            tally.fail("broadcast not received", f"{len(hub.times)} of {len(tabs)} tabs had {value}")
            return None
        return max(hub.times) - t0

    try:
        for visitor in visitors:
            visitor.close()
        for _ in range(args.rounds_warmup):
            await one_round()
        decoded0, wire0 = sum(t.decoded for t in tabs), sum(t.wire for t in tabs)
        mismatches0 = hub.mismatches
        window = Window(server).start()
        for _ in range(args.rounds):
            took = await one_round()
            if took is None:
                break
            tally.ok += 1
            tally.latencies.append(took)
        window.stop()
        await asyncio.sleep(0.05)
        decoded, wire = sum(t.decoded for t in tabs) - decoded0, sum(t.wire for t in tabs) - wire0
        broken = [t for t in tabs if t.closed or t.error is not None]
    finally:
        control.close()
        for tab in tabs:
            tab.close()
    if hub.mismatches > mismatches0:
        tally.fail("fragment and signal disagree", f"{hub.mismatches - mismatches0} tab events")
    if broken:
        tally.fail("tabs closed or broken", f"{len(broken)}: {broken[0].error}")
    if len(tabs) < args.broadcast_tabs:
        tally.fail("tabs opened", f"{len(tabs)} of {args.broadcast_tabs}")
    tab_events = tally.ok * len(tabs)
    per = (lambda x: x / tab_events) if tab_events else (lambda x: float("nan"))
    return {
        "tabs": len(tabs),
        "coding": coding,
        "figures": {
            "broadcast_us_per_tab": per(window.server_cpu_precise * 1e6),
            "broadcast_decoded_bytes": per(decoded),
            "broadcast_wire_bytes": per(wire),
        },
        **tally.record(),
        **_window_record(window),
    }


# --- the run --------------------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--peers",
        default="pyvia,stario,datastar-py,starhtml",
        help=f"contenders, comma-separated, pyvia first (of {', '.join(CONTENDERS)})",
    )
    parser.add_argument("--workloads", default=",".join(WORKLOADS), help=f"of {', '.join(WORKLOADS)}")
    parser.add_argument("-r", "--reps", type=int, default=3, help="interleaved repetitions (default 3)")
    parser.add_argument("-c", "--concurrency", type=int, default=16, help="connections for page/roundtrip/doc (16)")
    parser.add_argument("-d", "--duration", type=float, default=5.0, help="seconds per measured window (default 5)")
    parser.add_argument("--warmup", type=float, default=1.0, help="seconds of warm-up before a window (default 1)")
    parser.add_argument("--idle-tabs", default="1000,10000", help="connected tabs for idle CPU and RSS (1000,10000)")
    parser.add_argument("--idle-seconds", type=float, default=10.0, help="seconds of idle CPU measured (default 10)")
    parser.add_argument(
        "--browser-headers",
        action="store_true",
        help="idle tabs open with Chromium's request headers, not only Host and Cookie (what a tab keeps)",
    )
    parser.add_argument(
        "--new-connections",
        action="store_true",
        help="idle tabs: each page view on a connection of its own, closed once answered (default: 16 kept alive)",
    )
    parser.add_argument("--settle", type=float, default=2.0, help="seconds after opening tabs before measuring (2)")
    parser.add_argument("--broadcast-tabs", type=int, default=1000, help="receiving tabs (default 1000)")
    parser.add_argument("--codings", default="identity,zstd,br", help="broadcast stream codings (identity,zstd,br)")
    parser.add_argument("--rounds", type=int, default=20, help="measured broadcasts per repetition (default 20)")
    parser.add_argument("--rounds-warmup", type=int, default=3, help="warm-up broadcasts (default 3)")
    parser.add_argument("--timeout", type=float, default=2.0, help="seconds to wait for an answer or a patch (2)")
    parser.add_argument(
        "--quiet-each",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="before each measurement wait up to this long for both cores to be quiet (default 0)",
    )
    parser.add_argument("--python", help="interpreter for every virtualenv (default: the newest Python >= 3.12)")
    parser.add_argument(
        "--pyvia-python",
        choices=("same", "project"),
        default="same",
        help="pyvia on the peers' interpreter (same, default) or on this one (project)",
    )
    parser.add_argument("--venvs", default=None, help=f"where the virtualenvs live ({default_venvs()})")
    parser.add_argument("--no-install", action="store_true", help="use the virtualenvs as they are (no pip run)")


def _plan(args: argparse.Namespace) -> list[tuple[str, Any]]:
    wanted = [w.strip() for w in args.workloads.split(",") if w.strip()]
    unknown = sorted(set(wanted) - set(WORKLOADS))
    if unknown:
        raise SystemExit(f"unknown workload(s) {', '.join(unknown)}: choose from {', '.join(WORKLOADS)}")
    plan: list[tuple[str, Any]] = []
    for name in WORKLOADS:
        if name not in wanted:
            continue
        if name == "idle":
            plan += [("idle", int(n)) for n in args.idle_tabs.split(",") if n.strip()]
        elif name == "broadcast":
            plan += [("broadcast", c.strip()) for c in args.codings.split(",") if c.strip()]
        else:
            plan.append((name, None))
    return plan


async def _measure(
    kind: str, param: Any, contender: Contender, server: Server, args: argparse.Namespace
) -> dict[str, Any]:
    if kind == "page":
        return await pages(server, "/", COUNTER_MARKERS, args)
    if kind == "doc":
        return await pages(server, "/doc", (DOC_MARKER.encode(),), args)
    if kind == "roundtrip":
        return await roundtrip(server, contender.dialect, args)
    if kind == "idle":
        return await idle(server, contender.dialect, int(param), args)
    return await broadcast(server, contender.dialect, str(param), args)


def _failed(why: str) -> dict[str, Any]:
    """The record of a measurement that could not run (its server did not pass the start gates)."""
    return {
        "figures": {},
        "ok": 0,
        "failures": {why.split(":", 1)[0]: 1},
        "first_failure": why[:600],
        "server_busy": 0.0,
        "client_busy": 0.0,
        "others_on_server_core": 0.0,
        "others_on_client_core": 0.0,
        "noisy": False,
    }


def _label(kind: str, param: Any) -> str:
    return kind if param is None else f"{kind} {param}"


def _print_rep(r: dict[str, Any]) -> None:
    figures = ", ".join(f"{k} {v:,.2f}" for k, v in r["figures"].items())
    failures = sum(r["failures"].values())
    print(
        f"  {r['label']:<20} rep {r['rep']} {r['contender']:<12} {figures}; ok {r['ok']:,}, "
        f"failures {failures}; server core {r['server_busy']:.0%}, client core {r['client_busy']:.0%}, "
        f"others {r['others_on_server_core']:.0%}/{r['others_on_client_core']:.0%}"
        f"{' NOISY' if r['noisy'] else ''}{' DIRTY' if r['dirty'] else ''}"
        f"{chr(10) + '    first failure: ' + str(r['first_failure']) if r['dirty'] else ''}",
        flush=True,
    )


async def main(args: argparse.Namespace, session: Any) -> dict[str, Any]:
    names = [n.strip() for n in args.peers.split(",") if n.strip()]
    unknown = [n for n in names if n not in CONTENDERS]
    if unknown or not names or names[0] != "pyvia":
        raise SystemExit(f"--peers: pyvia first, then any of {', '.join(CONTENDERS)} (got {args.peers!r})")
    contenders = [CONTENDERS[n] for n in names]
    python, version = find_python(args.python)
    root = Path(args.venvs) if args.venvs else default_venvs()
    root.mkdir(parents=True, exist_ok=True)
    interpreters: dict[str, Path] = {}
    versions: dict[str, dict[str, str]] = {}
    installing = []
    for contender in contenders:
        if contender.name == "pyvia" and args.pyvia_python == "project":
            interpreters["pyvia"] = Path(sys.executable)
            versions["pyvia"] = {"python": ".".join(map(str, sys.version_info[:2]))}
        else:  # the installs run side by side: pip mostly waits on the registry
            installing.append(contender)
    made = await asyncio.gather(
        *(asyncio.to_thread(ensure_venv, c, python, version, root, not args.no_install) for c in installing)
    )
    for contender, (interpreter, found) in zip(installing, made, strict=True):
        interpreters[contender.name], versions[contender.name] = interpreter, found
    record: dict[str, Any] = {
        "type": "peers",
        "interpreter": python,
        "venvs": str(root),
        "versions": versions,
        "commands": {c.name: c.command(interpreters[c.name], 0) for c in contenders},
        "loadavg": Path("/proc/loadavg").read_text().split()[:3],
    }
    session.recorder.write(record)
    for contender in contenders:
        listed = ", ".join(f"{k} {v}" for k, v in versions[contender.name].items())
        print(f"# {contender.name}: {listed}; {' '.join(record['commands'][contender.name])[:150]}")
    print("# NiceGUI: not in this harness (it speaks Socket.IO, not SSE: it would need a client of its own)")
    reps: list[dict[str, Any]] = []
    for kind, param in _plan(args):
        for rep in range(1, args.reps + 1):
            for contender in contenders:
                if kind == "broadcast" and param not in contender.codings:
                    continue  # no stream compression of that kind: nothing to measure
                if args.quiet_each:
                    await wait_quiet(max_wait=args.quiet_each)
                started = time.monotonic()
                try:
                    server = await start(contender, interpreters[contender.name])
                except RuntimeError as exc:  # a failed gate: this rep is lost, the run goes on
                    result = _failed(f"start: {exc}")
                    result.update(
                        type="rep",
                        label=_label(kind, param),
                        kind=kind,
                        param=param,
                        rep=rep,
                        contender=contender.name,
                        dirty=True,
                    )
                    session.recorder.write(result)
                    reps.append(result)
                    _print_rep(result)
                    continue
                started_in = time.monotonic() - started
                try:
                    result = await _measure(kind, param, contender, server, args)
                finally:
                    rss = server.rss_kb()
                    await server.stop(grace=3.0)
                result.update(
                    type="rep",
                    label=_label(kind, param),
                    kind=kind,
                    param=param,
                    rep=rep,
                    contender=contender.name,
                    dirty=bool(result["failures"]),
                    rss_kb_at_stop=rss,
                    start_seconds=started_in,
                    stop_seconds=server.stop_seconds,
                    killed=server.killed,
                )
                if result["dirty"] or server.killed:
                    result["log"] = str(server.log_path)  # kept: it may say why
                else:
                    server.log_path.unlink(missing_ok=True)
                session.recorder.write(result)
                reps.append(result)
                _print_rep(result)
    summary = summarise(reps, names)
    summary["loadavg_at_end"] = Path("/proc/loadavg").read_text().split()[:3]
    session.recorder.write(summary)
    print(summary_table(summary))
    print(f"# load average at the end: {' '.join(summary['loadavg_at_end'])}")
    return summary


# --- the summary ----------------------------------------------------------------------------------


def _figure_key(figure: str, r: dict[str, Any]) -> str:
    if figure in ("idle_ms_per_s", "rss_kb_per_tab"):
        return f"{figure}@{r['tabs']}"
    if figure.startswith("broadcast_"):
        return f"{figure}@{r['coding']}"
    return figure


def summarise(reps: list[dict[str, Any]], contenders: list[str]) -> dict[str, Any]:
    """Per figure and contender: the median (min-max) of its clean repetitions; pyvia / best peer."""
    values: dict[str, dict[str, list[float]]] = {}
    dirty: dict[str, dict[str, int]] = {}
    context: dict[str, dict[str, Any]] = {}
    for r in reps:
        for figure, value in r["figures"].items():
            key = _figure_key(figure, r)
            context.setdefault(key, {"figure": figure, "n": r.get("tabs"), "coding": r.get("coding")})
            cell = values.setdefault(key, {}).setdefault(r["contender"], [])
            if r["dirty"]:
                dirty.setdefault(key, {}).setdefault(r["contender"], 0)
                dirty[key][r["contender"]] += 1
            else:
                cell.append(float(value))
    rows = []
    order = {name: i for i, (name, *_rest) in enumerate(FIGURES)}
    seen = {key: i for i, key in enumerate(values)}  # within a figure, the order of the plan
    for key in sorted(values, key=lambda k: (order[context[k]["figure"]], seen[k])):
        cells = {name: spread(values[key].get(name, [])) for name in contenders if name in values[key]}
        peers = [cells[n]["median"] for n in contenders[1:] if n in cells and cells[n]["median"] == cells[n]["median"]]
        best = min(peers) if peers else float("nan")
        mine = cells["pyvia"]["median"] if "pyvia" in cells else float("nan")
        rows.append(
            {
                "key": key,
                **context[key],
                "cells": cells,
                "dirty": dirty.get(key, {}),
                "best_peer": best,
                "ratio": mine / best if best and context[key]["figure"] not in INFO_ONLY else float("nan"),
            }
        )
    dirty_reps = [(r["label"], r["contender"], r["rep"]) for r in reps if r["dirty"]]
    noisy_reps = [(r["label"], r["contender"], r["rep"]) for r in reps if r["noisy"]]
    return {
        "type": "summary",
        "contenders": contenders,
        "rows": rows,
        "dirty_reps": dirty_reps,
        "noisy_reps": noisy_reps,
        "dirty": bool(dirty_reps),
    }


def summary_table(summary: dict[str, Any]) -> str:
    """The side-by-side table: one row per figure, medians (min-max), DIRTY counts, pyvia / best peer."""
    contenders = summary["contenders"]
    meta = {name: (title, unit, digits) for name, title, unit, digits in FIGURES}
    lines = [
        "",
        "side by side: median (min-max) of the clean repetitions; lower is better; ratio = pyvia / the best peer",
        "| figure | unit | " + " | ".join(contenders) + " | pyvia / best |",
        "|---|---|" + "---|" * len(contenders) + "---|",
    ]
    for row in summary["rows"]:
        title, unit, digits = meta[row["figure"]]
        cells = []
        for name in contenders:
            cell = row["cells"].get(name)
            text = "—" if cell is None or cell["median"] != cell["median"] else fmt(cell, digits)
            if row["dirty"].get(name):
                text += f" DIRTY x{row['dirty'][name]}"
            cells.append(text)
        ratio = row["ratio"]
        lines.append(
            f"| {title.format(n=row['n'], coding=row['coding'])} | {unit} | "
            + " | ".join(cells)
            + f" | {'—' if ratio != ratio else f'{ratio:.2f}x'} |"
        )
    lines.append(
        f"a broadcast carries a {VIEW_BYTES}-byte fragment and the new value; pages are verified by "
        "their markers, round trips by the count on the stream, broadcasts by every tab's value"
    )
    lines.append(f"dirty repetitions: {summary['dirty_reps'] or 'none'}")
    lines.append(f"noisy repetitions (others took > 5% of a core): {summary['noisy_reps'] or 'none'}")
    return "\n".join(lines)
