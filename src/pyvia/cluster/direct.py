"""A direct channel between workers and nodes, for forwarded actions.

Forwarding an action through the broker costs two hops and nats-py's per-message work: measured,
a request/reply through a local NATS costs several times the action itself in client CPU
(``bench/RESULTS-2.md``). Workers on one machine can instead talk over a unix socket: each
worker serves one at ``<tmp>/pyvia-<uid>/<prefix>-<node>.sock`` (a directory only its user can
enter) and writes the path next to its node id in the directory, so a worker on the same machine
connects straight to the owner. Nodes on other machines see no such file; with
``cluster_address`` set each worker also serves the channel on TCP, and they connect there
(else they use the broker).

A TCP connection starts with a handshake in which each side proves it knows the app's secret,
without sending it: each sends ``_MAGIC`` and a random nonce, then an HMAC-SHA256 of both nonces
and its role under a key derived from the secret (:func:`channel_key`); the server answers only
once the client's proof checked out. A peer that sends anything else, more, or too late is cut
off. The channel is not encrypted: it is for a private network, as NATS without TLS is.

Frames: ``!IQB`` (body length, request id, kind) then the body; kind 0 is a request or a reply,
1 an error reply (the handler raised; its text follows).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import hmac
import inspect
import logging
import os
import secrets
import socket
import struct
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

__all__ = ["Address", "DirectClient", "DirectServer", "Reply", "Unreachable", "channel_key", "socket_path"]

log = logging.getLogger("pyvia.cluster")

_HEAD = struct.Struct("!IQB")
_MAX_FRAME = 64 * 1024 * 1024
Handler = Callable[[bytes], "bytes | Awaitable[bytes]"]
#: A unix socket's path, or a TCP (host, port).
Address = str | tuple[str, int]
HANDSHAKE_TIMEOUT = 5.0  # to connect, and then to prove the secret
RETRY_AFTER = 30.0  # a node whose TCP channel failed is reached through the engine this long
_MAGIC = b"pyvia-d1"
_NONCE = 16
_HELLO = len(_MAGIC) + _NONCE
_PROOF = 32  # HMAC-SHA256
_SWEEP = 1.0  # at most this late, a request's timeout


class Unreachable(ConnectionError):
    """The TCP channel to a node could not be opened (refused, timed out, or the handshake
    failed): nothing was sent, the request can go another way."""


def channel_key(secret: bytes, prefix: str) -> bytes:
    """The key the TCP handshake proves, from the app secret every node shares (never the secret itself)."""
    return hashlib.sha256(b"pyvia direct channel\0" + secret + b"\0" + prefix.encode()).digest()


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
        self.loop = asyncio.get_running_loop()  # kept: asking for it is a getpid() system call on 3.11
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
            body = bytes(buf[_HEAD.size : end])
            del buf[:end]
            self.on_frame(rid, kind, body)

    def on_frame(self, rid: int, kind: int, body: bytes) -> None:
        raise NotImplementedError

    def send(self, rid: int, kind: int, body: bytes) -> None:
        """Queue a frame; the frames of one loop turn go out in one write (a socket write and the
        other worker's wake-up cost more than the frame itself)."""
        if not self._out:
            self.loop.call_soon(self._flush)
        self._out.append(_HEAD.pack(len(body), rid, kind))
        self._out.append(body)

    def _flush(self) -> None:
        out, self._out = self._out, []
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(b"".join(out))


class _Serving(_Framer):
    def __init__(self, handler: Handler, tasks: set[asyncio.Task[None]], open_: set[Any]) -> None:
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


class _Handshake(asyncio.Protocol):
    """The first bytes of a TCP channel (see the module docstring); once both sides proved the
    key, the connection is handed to ``framer``. ``done`` (a client's) tells how it went."""

    def __init__(self, key: bytes, framer: _Framer, *, server: bool, open_: set[Any] | None = None) -> None:
        self.key = key
        self.framer = framer
        self.server = server
        self.open = open_
        self.nonce = secrets.token_bytes(_NONCE)
        self.theirs = b""
        self.buf = bytearray()
        self.transport: asyncio.Transport | None = None
        self.reason = "the peer closed the connection during the handshake"
        self.done: asyncio.Future[_Framer] | None = None if server else asyncio.get_running_loop().create_future()
        self._timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # a stream transport
        transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.open is not None:
            self.open.add(self)
        self._timer = asyncio.get_running_loop().call_later(HANDSHAKE_TIMEOUT, self._refuse, "no handshake in time")
        transport.write(_MAGIC + self.nonce)  # type: ignore[attr-defined]

    def data_received(self, data: bytes) -> None:
        buf = self.buf
        buf += data
        if len(buf) > _HELLO + _PROOF:
            self._refuse("more bytes than a handshake")
        elif buf[: len(_MAGIC)] != _MAGIC[: len(buf)]:
            self._refuse("not a pyvia direct channel")
        elif not self.theirs and len(buf) >= _HELLO:
            self.theirs = bytes(buf[len(_MAGIC) : _HELLO])
            if not self.server:
                self._send_proof()
        if len(buf) == _HELLO + _PROOF and self.transport is not None and not self.transport.is_closing():
            if not hmac.compare_digest(bytes(buf[_HELLO:]), self._proof(not self.server)):
                self._refuse("wrong secret")
            else:
                if self.server:  # only now: an unproven peer learns nothing
                    self._send_proof()
                self._ready()

    def _proof(self, server: bool) -> bytes:
        client_nonce, server_nonce = (self.theirs, self.nonce) if self.server else (self.nonce, self.theirs)
        role = b"server" if server else b"client"
        return hmac.new(self.key, role + client_nonce + server_nonce, hashlib.sha256).digest()

    def _send_proof(self) -> None:
        assert self.transport is not None
        self.transport.write(self._proof(self.server))

    def _ready(self) -> None:
        assert self.transport is not None and self._timer is not None
        self._timer.cancel()
        if self.open is not None:
            self.open.discard(self)
        self.transport.set_protocol(self.framer)
        self.framer.connection_made(self.transport)
        if self.done is not None:
            self.done.set_result(self.framer)

    def _refuse(self, reason: str) -> None:
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        self.reason = reason
        if self.server:  # a client says it once per retry (DirectClient)
            host, port = (transport.get_extra_info("peername") or ("?", "?"))[:2]
            log.warning("refused a direct channel from %s port %s: %s", host, port, reason)
        transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._timer is not None:
            self._timer.cancel()
        if self.open is not None:
            self.open.discard(self)
        if self.done is not None and not self.done.done():
            self.done.set_exception(ConnectionError(self.reason))


class DirectServer:
    """Serves ``handler(body) -> reply`` (or an awaitable reply) on a unix socket, or on TCP to
    the peers that prove ``key`` (``address`` has the port in use once started)."""

    def __init__(self, address: Address, handler: Handler, key: bytes | None = None) -> None:
        if not isinstance(address, str) and key is None:
            raise ValueError("a TCP direct channel needs a key (channel_key)")
        self.address = address
        self.handler = handler
        self.key = key
        self._server: asyncio.AbstractServer | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._open: set[Any] = set()  # connections, and TCP handshakes in progress

    def _accept(self) -> asyncio.Protocol:
        conn = _Serving(self.handler, self._tasks, self._open)
        if isinstance(self.address, str):
            return conn
        assert self.key is not None
        return _Handshake(self.key, conn, server=True, open_=self._open)

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        if isinstance(self.address, str):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.address)  # left by a worker that was killed
            self._server = await loop.create_unix_server(self._accept, self.address)
            os.chmod(self.address, 0o600)
        else:
            host, port = self.address
            self._server = await loop.create_server(self._accept, host, port)
            self.address = (host, self._server.sockets[0].getsockname()[1])

    async def drain(self, timeout: float) -> None:
        """Wait (``timeout`` s at most) for the requests being answered to be answered."""
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=timeout)

    async def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.close()
            for conn in list(self._open):  # the worker is going: its peers must see it gone
                if conn.transport is not None:
                    conn.transport.close()
            for task in list(self._tasks):
                task.cancel()
            if isinstance(self.address, str):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self.address)


class _Calling(_Framer):
    def __init__(self, client: DirectClient) -> None:
        super().__init__()
        self.client = client

    def on_frame(self, rid: int, kind: int, body: bytes) -> None:
        waiting = self.client.pending.pop(rid, None)
        if waiting is None:
            return  # timed out meanwhile
        waiting[0](body if kind == 0 else RuntimeError(f"the owner failed: {body.decode(errors='replace')}"))

    def connection_lost(self, exc: Exception | None) -> None:
        self.client.lost(self)


#: Called once with the owner's reply, or with why there is none (TimeoutError, ConnectionError,
#: RuntimeError when the owner's handler failed).
Reply = Callable[["bytes | Exception"], None]


def _settle(fut: asyncio.Future[bytes], result: bytes | Exception) -> None:
    if fut.done():
        return  # the caller stopped waiting
    if isinstance(result, Exception):
        fut.set_exception(result)
    else:
        fut.set_result(result)


class DirectClient:
    """One connection to another worker's :class:`DirectServer`, made on first use, requests multiplexed.

    Over TCP (``address`` a (host, port), ``key`` the :func:`channel_key`), a connection or
    handshake that fails raises :class:`Unreachable`, and so does every request for
    ``RETRY_AFTER`` seconds after, without trying: the caller goes through the engine meanwhile.
    """

    def __init__(self, address: Address, key: bytes | None = None) -> None:
        self.address = address
        self.key = key
        #: request id -> (where its reply goes, its deadline on the loop's clock)
        self.pending: dict[int, tuple[Reply, float]] = {}
        self._sweep: asyncio.TimerHandle | None = None
        self._conn: _Calling | None = None
        self._connecting: asyncio.Future[_Calling] | None = None
        self._next = 0
        self._retry_at = 0.0

    async def _connection(self) -> _Calling:
        if self._conn is not None:
            return self._conn
        if self._connecting is None:
            if time.monotonic() < self._retry_at:
                raise Unreachable("failed a moment ago")
            self._connecting = asyncio.ensure_future(self._connect())
        try:
            return await asyncio.shield(self._connecting)
        finally:
            if self._connecting is not None and self._connecting.done():
                self._connecting = None

    async def _connect(self) -> _Calling:
        loop = asyncio.get_running_loop()
        if isinstance(self.address, str):
            _, conn = await loop.create_unix_connection(lambda: _Calling(self), self.address)
        else:
            assert self.key is not None
            shake = _Handshake(self.key, _Calling(self), server=False)
            host, port = self.address
            await asyncio.wait_for(loop.create_connection(lambda: shake, host, port), HANDSHAKE_TIMEOUT)
            assert shake.done is not None
            conn = await shake.done  # type: ignore[assignment]  # its framer is a _Calling
        self._conn = conn
        return conn

    async def request(self, body: bytes, timeout: float) -> bytes:
        """The owner's reply; ConnectionError when the owner is not there (or went away meanwhile)."""
        try:
            await self._connection()
        except OSError as exc:
            raise self._unreachable(exc) from exc
        fut: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        if not self.send(body, timeout, functools.partial(_settle, fut)):  # it closed while we resumed
            raise ConnectionError("the owner closed the direct channel")
        return await fut

    def send(self, body: bytes, timeout: float, reply: Reply) -> bool:
        """Send a request on the open connection; ``reply`` gets the answer, or why there is none.
        No task nor future: a relayed action's hot path. False when no connection is open yet
        (:meth:`request` opens one)."""
        conn = self._conn
        if conn is None:
            return False
        self._next += 1
        rid = self._next
        loop = conn.loop
        self.pending[rid] = (reply, loop.time() + timeout)
        if self._sweep is None:
            self._sweep = loop.call_later(min(timeout, _SWEEP), self._expire)
        conn.send(rid, 0, body)
        return True

    def _expire(self) -> None:
        """Fail the requests past their deadline: one timer for all of them, checked at most
        every ``_SWEEP`` s, since a timer per request costs more than the relay's own work."""
        self._sweep = None
        if not self.pending:
            return
        loop = asyncio.get_running_loop()
        now = loop.time()
        late = [rid for rid, (_, deadline) in self.pending.items() if deadline <= now]
        for rid in late:
            self.pending.pop(rid)[0](TimeoutError("no answer in time"))
        if self.pending:
            soonest = min(deadline for _, deadline in self.pending.values())
            self._sweep = loop.call_later(min(max(soonest - now, 0.0), _SWEEP), self._expire)

    def _unreachable(self, exc: OSError) -> ConnectionError:
        if isinstance(self.address, str):
            return ConnectionError(f"no worker listens at {self.address}")
        now = time.monotonic()
        if now >= self._retry_at:
            self._retry_at = now + RETRY_AFTER
            log.warning(
                "no direct channel to %s port %s (%s): through the engine for %d s",
                *self.address,
                str(exc) or type(exc).__name__,
                RETRY_AFTER,
            )
        return Unreachable(f"no direct channel to {self.address[0]} port {self.address[1]}")

    def lost(self, conn: _Calling) -> None:
        if self._conn is conn:
            self._conn = None
        pending, self.pending = self.pending, {}
        for reply, _ in pending.values():
            reply(ConnectionError("the owner closed the direct channel"))

    def close(self) -> None:
        if self._sweep is not None:
            self._sweep.cancel()
            self._sweep = None
        conn = self._conn
        if conn is not None and conn.transport is not None:
            conn.transport.close()
