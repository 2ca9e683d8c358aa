"""A direct channel between the workers of one machine, for forwarded actions.

Forwarding an action through the broker costs two hops and nats-py's per-message work: measured,
a request/reply through a local NATS is ~110 µs of client CPU, several times the action itself
(``bench/RESULTS-2.md``). Workers on one machine can instead talk over a unix socket: each
worker serves one at ``<tmp>/pyvia-<uid>/<prefix>-<node>.sock`` (a directory only its user can
enter) and writes the path next to its node id in the directory, so a worker on the same machine
connects straight to the owner. Workers on other machines see no such file and use the broker.

Frames: ``!IQB`` (body length, request id, kind) then the body; kind 0 is a request or a reply,
1 an error reply (the handler raised; its text follows).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import os
import struct
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path

__all__ = ["DirectClient", "DirectServer", "socket_path"]

log = logging.getLogger("pyvia.cluster")

_HEAD = struct.Struct("!IQB")
_MAX_FRAME = 64 * 1024 * 1024
Handler = Callable[[bytes], "bytes | Awaitable[bytes]"]


def socket_path(prefix: str, node: str) -> str:
    """Where the worker ``node`` of app ``prefix`` listens; its directory is made private."""
    folder = Path(tempfile.gettempdir()) / f"pyvia-{os.getuid()}"
    folder.mkdir(mode=0o700, exist_ok=True)
    if folder.stat().st_uid != os.getuid() or folder.stat().st_mode & 0o077:
        raise PermissionError(f"{folder} must belong to this user and be private (mode 700)")
    return str(folder / f"{prefix}-{node}.sock")


class _Framer(asyncio.Protocol):
    """Splits the byte stream into frames and hands each to ``on_frame``."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self._buf = bytearray()
        self._out: list[bytes] = []  # frames to write at the end of this loop turn

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # a stream transport

    def data_received(self, data: bytes) -> None:
        buf = self._buf
        buf += data
        while len(buf) >= _HEAD.size:
            size, rid, kind = _HEAD.unpack_from(buf)
            if size > _MAX_FRAME:
                log.warning("dropped a direct channel sending a %d-byte frame", size)
                assert self.transport is not None
                self.transport.close()
                return
            end = _HEAD.size + size
            if len(buf) < end:
                return
            body = bytes(buf[_HEAD.size:end])
            del buf[:end]
            self.on_frame(rid, kind, body)

    def on_frame(self, rid: int, kind: int, body: bytes) -> None:
        raise NotImplementedError

    def send(self, rid: int, kind: int, body: bytes) -> None:
        """Queue a frame; the frames of one loop turn go out in one write (a socket write and the
        other worker's wake-up cost more than the frame itself)."""
        if not self._out:
            asyncio.get_running_loop().call_soon(self._flush)
        self._out.append(_HEAD.pack(len(body), rid, kind))
        self._out.append(body)

    def _flush(self) -> None:
        out, self._out = self._out, []
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(b"".join(out))


class _Serving(_Framer):
    def __init__(self, handler: Handler, tasks: set[asyncio.Task[None]], open_: set[_Serving]) -> None:
        super().__init__()
        self.handler = handler
        self.tasks = tasks
        self.open = open_

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self.open.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.open.discard(self)

    def on_frame(self, rid: int, kind: int, body: bytes) -> None:
        try:
            result = self.handler(body)
        except Exception as exc:
            log.exception("a forwarded request failed")
            self.send(rid, 1, repr(exc).encode())
            return
        if inspect.isawaitable(result):
            task = asyncio.ensure_future(self._finish(rid, result))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)
        else:
            self.send(rid, 0, result)

    async def _finish(self, rid: int, pending: Awaitable[bytes]) -> None:
        try:
            reply = await pending
        except Exception as exc:
            log.exception("a forwarded request failed")
            self.send(rid, 1, repr(exc).encode())
            return
        self.send(rid, 0, reply)


class DirectServer:
    """Serves ``handler(body) -> reply`` (or an awaitable reply) on a unix socket."""

    def __init__(self, path: str, handler: Handler) -> None:
        self.path = path
        self.handler = handler
        self._server: asyncio.AbstractServer | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._open: set[_Serving] = set()

    async def start(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)  # left by a worker that was killed
        loop = asyncio.get_running_loop()
        self._server = await loop.create_unix_server(lambda: _Serving(self.handler, self._tasks, self._open), self.path)
        os.chmod(self.path, 0o600)

    async def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.close()
            for conn in list(self._open):  # the worker is going: its peers must see it gone
                if conn.transport is not None:
                    conn.transport.close()
            for task in list(self._tasks):
                task.cancel()
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)


class _Calling(_Framer):
    def __init__(self, client: DirectClient) -> None:
        super().__init__()
        self.client = client

    def on_frame(self, rid: int, kind: int, body: bytes) -> None:
        fut = self.client.pending.pop(rid, None)
        if fut is None or fut.done():
            return
        if kind == 0:
            fut.set_result(body)
        else:
            fut.set_exception(RuntimeError(f"the owner failed: {body.decode(errors='replace')}"))

    def connection_lost(self, exc: Exception | None) -> None:
        self.client.lost(self)


def _expire(fut: asyncio.Future[bytes]) -> None:
    if not fut.done():
        fut.set_exception(TimeoutError("no answer in time"))


class DirectClient:
    """One connection to another worker's :class:`DirectServer`, made on first use, requests multiplexed."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.pending: dict[int, asyncio.Future[bytes]] = {}
        self._conn: _Calling | None = None
        self._connecting: asyncio.Future[_Calling] | None = None
        self._next = 0

    async def _connection(self) -> _Calling:
        if self._conn is not None:
            return self._conn
        if self._connecting is None:
            self._connecting = asyncio.ensure_future(self._connect())
        try:
            return await asyncio.shield(self._connecting)
        finally:
            if self._connecting is not None and self._connecting.done():
                self._connecting = None

    async def _connect(self) -> _Calling:
        loop = asyncio.get_running_loop()
        _, conn = await loop.create_unix_connection(lambda: _Calling(self), self.path)
        self._conn = conn
        return conn

    async def request(self, body: bytes, timeout: float) -> bytes:
        """The owner's reply; ConnectionError when the owner is not there (or went away meanwhile)."""
        try:
            conn = await self._connection()
        except (FileNotFoundError, ConnectionRefusedError) as exc:
            raise ConnectionError(f"no worker listens at {self.path}") from exc
        self._next += 1
        rid = self._next
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[bytes] = loop.create_future()
        self.pending[rid] = fut
        conn.send(rid, 0, body)
        timer = loop.call_later(timeout, _expire, fut)  # cheaper than wait_for on this hot path
        try:
            return await fut
        finally:
            timer.cancel()
            self.pending.pop(rid, None)

    def lost(self, conn: _Calling) -> None:
        if self._conn is conn:
            self._conn = None
        pending, self.pending = self.pending, {}
        for fut in pending.values():
            if not fut.done():
                fut.set_exception(ConnectionError("the owner closed the direct channel"))

    def close(self) -> None:
        conn = self._conn
        if conn is not None and conn.transport is not None:
            conn.transport.close()
