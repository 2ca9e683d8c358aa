"""``reconnect``: N tabs on a page updating 10 times a second lose their streams at once → the server's
CPU and bytes to bring every tab back, with frame replay against a full render.

Each tab opens the page, then its stream (with the page's cookie, as a browser does), and reads it,
keeping the id of the last frame. A storm: every tab stops reading for ``--pause`` seconds (what the
server writes meanwhile sits in the sockets: a network that went quiet), then every socket is reset
(what it held is lost) and every tab reconnects at once with ``last-event-id``, as Datastar's retry
does. A tab is back when its new stream's connect event arrives (it comes after the replayed
frames, or after the full render). Measured per storm, from the first reconnect to the last tab
back: the server's CPU, the bytes the new streams carried before their connect event, the time.

Two servers are run, one after the other: ``replay`` (the default config) and ``full``
(``replay_tab_bytes = 0``: every reconnect that missed a frame gets a full render). The server's
own counts (``/metrics``) must show one resume (or one full render) per tab per storm, else the
run is dirty.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import re
import socket
import struct
import time
from typing import Any

from bench.fanout import wait_quiet
from bench.report import fmt, spread
from bench.window import Window

__all__ = ["DEFAULT_APP", "add_arguments", "main"]

DEFAULT_APP = "bench.apps_reconnect:app"
MODES = {"replay": {}, "full": {"PYVIA_APP__REPLAY_TAB_BYTES": "0"}}
_SEED = re.compile(rb'data-signals="([^"]*)"')
_CTX = re.compile(rb"&quot;via_ctx&quot;:&quot;([^&]+)&quot;")
_ID = re.compile(rb"^id: (\S+)$", re.MULTILINE)
_CONNECTED = b'"_disconnected":false'


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-n", "--tabs", type=int, default=1000, help="tabs (default 1000)")
    parser.add_argument("-r", "--repeat", type=int, default=3, help="measured storms per mode (default 3)")
    parser.add_argument(
        "--pause",
        type=float,
        default=1.0,
        help="seconds the tabs stop reading before the reset (default 1: about 10 frames each)",
    )
    parser.add_argument("--modes", default="replay,full", help="which servers to run (default replay,full)")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds for every tab to be back")


class Tab:
    """One tab: its page's context id, and its stream, read until told to stop."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.ctx = ""
        self.cookie = ""
        self.last_id: str | None = None
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.reading = asyncio.Event()
        self.task: asyncio.Task[None] | None = None
        self.back = asyncio.Event()
        self.bytes_until_back = 0
        self.frames = 0

    async def open(self, cookie: str) -> None:
        reader, writer = await asyncio.open_connection(self.host, self.port)
        extra = f"Cookie: {cookie}\r\n" if cookie else ""
        writer.write(f"GET / HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n{extra}\r\n".encode())
        head = await reader.readuntil(b"\r\n\r\n")
        length = int(re.search(rb"(?i)content-length: (\d+)", head).group(1))  # type: ignore[union-attr]
        body = await reader.readexactly(length)
        found = _CTX.search(body)
        if found is None:
            raise RuntimeError(f"no context id in the page: {body[:200]!r}")
        self.ctx = found.group(1).decode()
        cookie_line = re.search(rb"(?i)set-cookie: ([^;\r]+)", head)
        self.cookie = cookie_line.group(1).decode() if cookie_line else cookie
        writer.close()
        await self.connect(first=True)

    async def connect(self, first: bool = False) -> None:
        reader, writer = await asyncio.open_connection(self.host, self.port)
        query = f"%7B%22via_ctx%22%3A%22{self.ctx}%22%7D"
        resume = f"last-event-id: {self.last_id}\r\n" if self.last_id and not first else ""
        writer.write(
            f"GET /_sse?datastar={query} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
            f"Cookie: {self.cookie}\r\n{resume}\r\n".encode()
        )
        head = await reader.readuntil(b"\r\n\r\n")
        if not head.startswith(b"HTTP/1.1 200"):
            raise RuntimeError(f"stream answered {head[:40]!r}")
        self.reader, self.writer = reader, writer
        self.back.clear()
        self.bytes_until_back = 0
        self.reading.set()
        self.task = asyncio.get_running_loop().create_task(self._read())

    async def _read(self) -> None:
        reader = self.reader
        assert reader is not None
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError, ValueError):
            while True:
                await self.reading.wait()
                size = int((await reader.readline()).strip(), 16)
                chunk = await reader.readexactly(size + 2)
                if not size:
                    return
                self.frames += 1
                ids = _ID.findall(chunk)
                if ids:
                    self.last_id = ids[-1].decode()
                if not self.back.is_set():
                    self.bytes_until_back += size
                    if _CONNECTED in chunk:
                        self.back.set()

    def reset(self) -> None:
        """Drop the connection with a reset: what the socket held unread is lost."""
        writer, self.writer = self.writer, None
        if writer is not None:
            sock = writer.get_extra_info("socket")
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()
        if self.task is not None:
            self.task.cancel()


async def _metrics(host: str, port: int) -> dict[str, float]:
    reader, writer = await asyncio.open_connection(host, port)
    writer.write(f"GET /metrics HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
    text = (await reader.read()).decode(errors="replace")
    writer.close()
    out = {}
    for name in (
        "pyvia_stream_resumes_total",
        "pyvia_stream_full_renders_total",
        "pyvia_stream_replayed_frames_total",
        "pyvia_replay_buffer_bytes",
    ):
        found = re.search(rf"^{name} (\S+)$", text, re.MULTILINE)
        out[name] = float(found.group(1)) if found else float("nan")
    return out


async def _storm(tabs: list[Tab], pause: float, timeout: float) -> tuple[float, list[int]]:
    for tab in tabs:
        tab.reading.clear()  # the network goes quiet: frames pile up in the sockets
    await asyncio.sleep(pause)
    for tab in tabs:
        tab.reset()
    await asyncio.sleep(0.05)  # the resets reach the server
    began = time.perf_counter()
    await asyncio.gather(*(tab.connect() for tab in tabs))
    await asyncio.wait_for(asyncio.gather(*(tab.back.wait() for tab in tabs)), timeout)
    return (time.perf_counter() - began) * 1e3, [tab.bytes_until_back for tab in tabs]


async def _run_mode(args: argparse.Namespace, session: Any, mode: str) -> dict[str, Any]:
    session.env = dict(MODES[mode])
    server = await session.start()
    tabs: list[Tab] = []
    try:
        cookie = ""
        for _ in range(args.tabs):
            tab = Tab("127.0.0.1", server.port)
            await tab.open(cookie)
            cookie = tab.cookie
            tabs.append(tab)
        await asyncio.sleep(1.0)  # every tab receives ticks
        before = await _metrics("127.0.0.1", server.port)
        records = []
        for i in range(args.repeat):
            await wait_quiet(max_wait=3.0)
            window = Window(server).start()
            ms, sizes = await _storm(tabs, args.pause, args.timeout)
            window.stop()
            record = {
                "type": "storm",
                "mode": mode,
                "storm": i + 1,
                "tabs": len(tabs),
                "ms_to_last_tab": ms,
                "server_cpu_ms": window.server_cpu_precise * 1e3,
                "bytes": sum(sizes),
                "bytes_per_tab": spread(sizes),
                **window.as_dict(),
            }
            session.recorder.write(record)
            records.append(record)
            print(
                f"{mode} storm {i + 1}: {len(tabs)} tabs back in {ms:.0f} ms; server CPU "
                f"{record['server_cpu_ms']:.0f} ms; {record['bytes'] / 1024:.0f} KiB before the connect events "
                f"({fmt(record['bytes_per_tab'])} B per tab){' NOISY' if record['noisy'] else ''}",
                flush=True,
            )
            await asyncio.sleep(0.5)
        after = await _metrics("127.0.0.1", server.port)
    finally:
        for tab in tabs:
            tab.reset()
        await session.stop(server)
    counts = {k: after[k] - before[k] for k in before}
    expected = "pyvia_stream_resumes_total" if mode == "replay" else "pyvia_stream_full_renders_total"
    dirty = counts[expected] != args.tabs * args.repeat
    summary = {
        "type": "mode",
        "mode": mode,
        "tabs": len(tabs),
        "server": counts,
        "dirty": dirty,
        "server_cpu_ms": spread([r["server_cpu_ms"] for r in records]),
        "kib": spread([r["bytes"] / 1024 for r in records]),
        "ms_to_last_tab": spread([r["ms_to_last_tab"] for r in records]),
        "noisy_storms": [r["storm"] for r in records if r["noisy"]],
    }
    session.recorder.write(summary)
    return summary


async def main(args: argparse.Namespace, session: Any) -> dict[str, Any]:
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if not modes or any(m not in MODES for m in modes):
        raise SystemExit(f"--modes: a list of {', '.join(MODES)}")
    results = [await _run_mode(args, session, mode) for mode in modes]
    print("summary: median (min-max) over storms")
    for r in results:
        print(
            f"  {r['mode']:6}  server CPU {fmt(r['server_cpu_ms'])} ms   bytes {fmt(r['kib'])} KiB   "
            f"every tab back {fmt(r['ms_to_last_tab'])} ms   server counts {r['server']}"
            f"{'  DIRTY' if r['dirty'] else ''}{'  noisy: ' + str(r['noisy_storms']) if r['noisy_storms'] else ''}"
        )
    summary = {"type": "summary", "modes": results, "dirty": any(r["dirty"] for r in results)}
    session.recorder.write(summary)
    return summary
