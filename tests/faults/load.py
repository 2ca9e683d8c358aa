"""Tabs and clicks against ``examples.shared_counter`` while a fault happens, every answer counted.

A :class:`Load` opens tabs (a page and its stream each, like a browser) and clicks ``+1`` from a
few keep-alive connections, as fast as the server answers, until told to stop. Each click ends
as exactly one of:

* **acknowledged**: answered 200, so it must be in the count, once;
* **refused**: answered, not 200 (a 503 while the engine is away): it may or may not be applied;
* **unknown**: the connection broke after the request went out and before the whole answer
  came (*cut mid-answer* when some of the answer had come): it may or may not be applied.

A request that finds its reused keep-alive connection closed before any byte of an answer is
sent again on a new one only when the server closed the connection on its own (a draining
worker closes idle connections): that is the retry HTTP clients make (RFC 9110 §9.2.2), and it
is counted. After a kill nothing is retried: the killed worker may have run it.

Tabs reconnect their stream when it ends, after 100 ms, as Datastar does, and follow the count
the server shows them. A stream for a tab its server no longer holds is answered ``_via_revive``,
and the tab opens it again with a POST carrying its snapshot, as the page does. A tab is *lost*
when its page would have to reload: a reconnect refused, or answered with a reload. Everything
is loopback and bounded in time.
"""

from __future__ import annotations

import asyncio
import contextlib
import html
import json
import re
import time
from dataclasses import dataclass, field
from urllib.parse import quote

HOST = "127.0.0.1"
SEED = re.compile(r"data-signals='([^']*)'|data-signals=\"([^\"]*)\"")
COUNT = re.compile(rb'id="count">(\d+)<')
SNAPSHOT = "_via_snap"
SNAPSHOT_SEEN = re.compile(rb'"_via_snap":"([^"]+)"')


@dataclass
class Tally:
    acknowledged: int = 0
    refused: dict[int, int] = field(default_factory=dict)
    unknown: int = 0
    cut_mid_answer: int = 0
    retried: int = 0

    @property
    def sent(self) -> int:
        return self.acknowledged + sum(self.refused.values()) + self.unknown


class Closed(Exception):
    """The connection ended; ``partial``: some of the answer had come."""

    def __init__(self, partial: bool) -> None:
        super().__init__("partial answer" if partial else "no answer")
        self.partial = partial


async def read_answer(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    """One HTTP/1.1 answer: status, headers (lower-case names), body (Content-Length only)."""
    got = False
    try:
        line = await reader.readline()
        if not line:
            raise Closed(False)
        got = True
        status = int(line.split()[1])
        headers: dict[str, str] = {}
        while True:
            line = await reader.readline()
            if not line:
                raise Closed(True)
            if line in (b"\r\n", b"\n"):
                break
            name, _, value = line.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        body = await reader.readexactly(int(headers.get("content-length", "0")))
    except (ConnectionError, asyncio.IncompleteReadError) as exc:
        raise Closed(got) from exc
    return status, headers, body


@dataclass
class Tab:
    ctx: str
    cookie: str
    count: int = -1  # what the view shows last
    reconnects: int = 0
    lost: list[str] = field(default_factory=list)  # why the page would have had to reload
    snapshot: str | None = None  # the signed snapshot of its server-owned signals, as last sent
    task: asyncio.Task[None] | None = None


class Load:
    """Tabs on ``tab_ports`` (one each in turn), clicks on ``port``."""

    def __init__(self, port: int, tab_ports: list[int], tabs: int = 10, connections: int = 6) -> None:
        self.port = port
        self.tab_ports = tab_ports
        self.tab_count = tabs
        self.connections = connections
        self.tabs: list[Tab] = []
        self.tally = Tally()
        self.retry_closed = True  # a server that closes an idle connection did not run what raced it
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    # --- tabs ----------------------------------------------------------------------------------

    async def open_tabs(self) -> None:
        for i in range(self.tab_count):
            port = self.tab_ports[i % len(self.tab_ports)]
            tab = await self._open_page(port)
            self.tabs.append(tab)
            tab.task = asyncio.ensure_future(self._follow(tab, port))

    async def _open_page(self, port: int) -> Tab:
        reader, writer = await asyncio.open_connection(HOST, port)
        try:
            writer.write(f"GET / HTTP/1.1\r\nHost: {HOST}:{port}\r\n\r\n".encode())
            status, headers, body = await read_answer(reader)
        finally:
            writer.close()
        assert status == 200, status
        found = SEED.search(body.decode())
        assert found, body[:300]
        seed = json.loads(html.unescape(found.group(1) or found.group(2)))
        cookie = headers["set-cookie"].split(";", 1)[0]
        return Tab(seed["via_ctx"], cookie)

    async def _follow(self, tab: Tab, port: int) -> None:
        """Keep the tab's stream open (reconnecting to ``self.port`` after the first), reading the count."""
        revive = False
        while True:
            try:
                revive = await self._stream(tab, port, revive)
            except (ConnectionError, OSError, asyncio.IncompleteReadError, ValueError):
                revive = False
            port = self.port
            if not revive:
                tab.reconnects += 1
                await asyncio.sleep(0.1)

    async def _stream(self, tab: Tab, port: int, revive: bool) -> bool:
        """One stream of the tab, as the page opens it: a GET naming the tab, or, when the server
        asked to revive it (``_via_revive``), a POST with its snapshot. True: revive next."""
        reader, writer = await asyncio.open_connection(HOST, port)
        try:
            if revive:
                body = json.dumps({"via_ctx": tab.ctx, **({SNAPSHOT: tab.snapshot} if tab.snapshot else {})}).encode()
                writer.write(
                    f"POST /_sse HTTP/1.1\r\nHost: {HOST}:{port}\r\nOrigin: http://{HOST}:{port}\r\n"
                    f"Cookie: {tab.cookie}\r\nContent-Type: application/json\r\n"
                    f"Content-Length: {len(body)}\r\n\r\n".encode()
                    + body
                )
            else:
                query = quote(json.dumps({"via_ctx": tab.ctx}))
                head = f"GET /_sse?datastar={query} HTTP/1.1\r\nHost: {HOST}:{port}\r\nCookie: {tab.cookie}\r\n\r\n"
                writer.write(head.encode())
            line = await reader.readline()
            if not line:
                return False
            status = int(line.split()[1])
            headers: dict[str, str] = {}
            while (header := await reader.readline()) not in (b"\r\n", b"\n", b""):
                name, _, value = header.decode("latin-1").partition(":")
                headers[name.strip().lower()] = value.strip()
            if status != 200:
                tab.lost.append(str(status))  # 204: the page must reload; anything else: refused
                await asyncio.sleep(0.4)
                return False
            if headers.get("content-type", "").startswith("application/json"):
                answer = await reader.readexactly(int(headers.get("content-length", "0")))
                return b"_via_revive" in answer and not revive  # this server asks for the snapshot
            buffer = b""
            while True:
                size_line = await reader.readline()
                if not size_line:
                    return False
                size = int(size_line.strip() or b"0", 16)
                if size == 0:
                    return False
                buffer += await reader.readexactly(size + 2)
                if b"location.reload" in buffer:
                    tab.lost.append("reload")
                for found in COUNT.finditer(buffer):
                    tab.count = int(found.group(1))
                for found in SNAPSHOT_SEEN.finditer(buffer):
                    tab.snapshot = found.group(1).decode()
                buffer = buffer[-400:]
        finally:
            writer.close()

    async def tabs_show(self, count: int, timeout: float) -> list[int]:
        """Wait until every tab shows ``count``; the counts they show then."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and any(tab.count != count for tab in self.tabs):
            await asyncio.sleep(0.05)
        return [tab.count for tab in self.tabs]

    # --- clicks --------------------------------------------------------------------------------

    def start_clicking(self) -> None:
        self._stop.clear()
        self._tasks = [asyncio.ensure_future(self._click(i)) for i in range(self.connections)]

    async def stop_clicking(self) -> None:
        self._stop.set()
        await asyncio.gather(*self._tasks)

    async def _click(self, index: int) -> None:
        reader: asyncio.StreamReader | None = None
        writer: asyncio.StreamWriter | None = None
        sent_on = 0  # requests answered on this connection
        turn = index
        retry: bytes | None = None
        while not self._stop.is_set() or retry is not None:
            if writer is None:
                try:
                    reader, writer = await asyncio.wait_for(asyncio.open_connection(HOST, self.port), 5)
                except (OSError, TimeoutError):
                    await asyncio.sleep(0.05)
                    continue
                sent_on = 0
            assert reader is not None
            if retry is not None:
                request, retry = retry, None
            else:
                tab = self.tabs[turn % len(self.tabs)]
                turn += self.connections
                body = json.dumps({"via_ctx": tab.ctx}).encode()
                request = (
                    f"POST /_action/increment HTTP/1.1\r\nHost: {HOST}:{self.port}\r\n"
                    f"Origin: http://{HOST}:{self.port}\r\nCookie: {tab.cookie}\r\n"
                    f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
                ).encode() + body
            try:
                writer.write(request)
                status, headers, _ = await asyncio.wait_for(read_answer(reader), 15)
            except (Closed, ConnectionError, TimeoutError) as exc:
                writer.close()
                writer = None
                partial = isinstance(exc, Closed) and exc.partial
                if not partial and sent_on and self.retry_closed:
                    self.tally.retried += 1
                    retry = request  # the server closed a connection it was done with
                    continue
                self.tally.unknown += 1
                self.tally.cut_mid_answer += partial
                continue
            sent_on += 1
            if status == 200:
                self.tally.acknowledged += 1
            else:
                self.tally.refused[status] = self.tally.refused.get(status, 0) + 1
                await asyncio.sleep(0.01)
            if headers.get("connection", "").lower() == "close":
                writer.close()
                writer = None
        if writer is not None:
            writer.close()

    async def close(self) -> None:
        for task in [*self._tasks, *(tab.task for tab in self.tabs if tab.task is not None)]:
            task.cancel()
        for task in [*self._tasks, *(tab.task for tab in self.tabs if tab.task is not None)]:
            with contextlib.suppress(BaseException):
                await task


async def shown_count(port: int) -> int:
    """The count a new visitor's page shows."""
    reader, writer = await asyncio.open_connection(HOST, port)
    try:
        writer.write(f"GET / HTTP/1.1\r\nHost: {HOST}:{port}\r\n\r\n".encode())
        status, _, body = await read_answer(reader)
    finally:
        writer.close()
    found = COUNT.search(body)
    assert status == 200 and found, (status, body[:300])
    return int(found.group(1))
