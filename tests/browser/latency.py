"""A latency proxy: every byte crosses it ``delay`` seconds late in each direction, in order.

It runs its own asyncio loop in a thread on loopback, so a test's Chromium sees the round trip
of a real network (50 ms each way: 100 ms) while the server under test runs unchanged.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Iterator

__all__ = ["LatencyProxy", "latency_proxy"]


class LatencyProxy:
    """``127.0.0.1:port`` forwards to ``127.0.0.1:upstream_port`` with ``delay`` seconds each way."""

    def __init__(self, upstream_port: int, delay: float = 0.05) -> None:
        self.upstream_port = upstream_port
        self.delay = delay
        self.port = 0
        #: The first line of every request a client sent through the proxy, in order.
        self.request_lines: list[bytes] = []
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        #: While set, connections are refused at once (a server that is down).
        self.refusing = False
        ready = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(ready,), daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("the latency proxy did not start")

    def _run(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(asyncio.start_server(self._serve, "127.0.0.1", 0))
        self.port = self._server.sockets[0].getsockname()[1]
        ready.set()
        self._loop.run_forever()
        tasks = asyncio.all_tasks(self._loop)
        for task in tasks:
            task.cancel()
        self._loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
        if self._server is not None:
            self._loop.run_until_complete(self._server.wait_closed())
        self._loop.run_until_complete(asyncio.sleep(0.01))  # the closed transports let go of their sockets
        self._loop.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.refusing:
            writer.transport.abort()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        except OSError:
            writer.close()
            return
        except BaseException:  # the proxy closing: a writer left open warns once its loop is gone
            writer.close()
            raise
        self._writers.update((writer, up_writer))
        try:
            await asyncio.gather(self._pipe(reader, up_writer, True), self._pipe(up_reader, writer, False))
        finally:
            self._writers.difference_update((writer, up_writer))
            writer.close()
            up_writer.close()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, from_client: bool) -> None:
        """Copy ``reader`` to ``writer``, each chunk ``delay`` after it arrived (a queue keeps the order)."""
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def deliver() -> None:
            while True:
                due, data = await queue.get()
                if not data:
                    break
                wait = due - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                writer.write(data)
                with contextlib.suppress(ConnectionError):
                    await writer.drain()
            with contextlib.suppress(OSError):
                writer.write_eof()

        sender = asyncio.ensure_future(deliver())
        try:
            while data := await reader.read(65536):
                if from_client:
                    self.request_lines.extend(
                        line for line in data.split(b"\r\n") if line[:5] in (b"GET /", b"POST ", b"HEAD ")
                    )
                queue.put_nowait((time.monotonic() + self.delay, data))
        except ConnectionError:
            pass
        finally:
            queue.put_nowait((time.monotonic() + self.delay, b""))
            try:
                with contextlib.suppress(Exception):
                    await sender
            finally:  # also when cancelled (the proxy closing)
                writer.close()

    def requests_to(self, path_prefix: bytes) -> int:
        """How many requests went through for a path starting with ``path_prefix``."""
        return sum(1 for line in self.request_lines if line.split(b" ")[1].startswith(path_prefix))

    def go_down(self) -> None:
        """Cut every connection and refuse new ones, as a server that went away would."""
        self.refusing = True

        def cut() -> None:
            for writer in list(self._writers):
                writer.transport.abort()

        self._loop.call_soon_threadsafe(cut)

    def come_back(self) -> None:
        self.refusing = False

    def close(self) -> None:
        def stop() -> None:
            if self._server is not None:
                self._server.close()
            for writer in list(self._writers):
                writer.close()
            self._loop.stop()

        self._loop.call_soon_threadsafe(stop)
        self._thread.join(5)


@contextlib.contextmanager
def latency_proxy(upstream_port: int, delay: float = 0.05) -> Iterator[LatencyProxy]:
    proxy = LatencyProxy(upstream_port, delay)
    try:
        yield proxy
    finally:
        proxy.close()
