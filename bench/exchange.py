"""The open loop's client: one request at a time per connection, only the answer's status kept.

Why not :class:`bench.client.Connection`: at twice the server's capacity the generator has one
core for as many arrivals a second as the server gets, and every microsecond it spends is time an
answer waits in its socket buffer, counted as the server's latency. So no future, no header dict,
no task per keep-alive request: an :class:`Exchange` parses the status line and the body's
length, then calls its owner back with ``(exchange, outcome, done)``. The outcome is a status
code, ``"reset"`` (closed or refused before a complete answer) or ``"timeout"``.

And a saturated client still delays what it measures: an answer parsed late in a long turn of
its loop looks late. So each answer also carries when its last bytes reached this socket in the
kernel (``arrived``: now less ``TCP_INFO``'s ``tcpi_last_data_recv``, in ms at the kernel's tick,
4 ms here), and when its request was written (``written``): between the two is the server's own
time (on loopback a write is delivered within the writer's system call).

The server's answers here are ``content-length`` framed (pages, action answers, refusals); a
chunked body is read to its last chunk, one without either to the connection's end.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import time
from collections.abc import Callable
from typing import Any

__all__ = ["Exchange", "visit"]

_perf = time.perf_counter
#: ``TCP_INFO`` (Linux): ``tcpi_last_data_recv``, ms since the socket last received data, at 52.
_TCP_INFO = getattr(socket, "TCP_INFO", None)
_LENGTH = b"\r\ncontent-length:"
_CHUNKED = b"\r\ntransfer-encoding: chunked"
_CLOSE = b"\r\nconnection: close"
_LAST_CHUNK = b"\r\n0\r\n\r\n"
_HEAD, _LENGTH_BODY, _CHUNKED_BODY, _TO_CLOSE, _IDLE = range(5)

Done = Callable[["Exchange", "int | str", float], None]


class Exchange(asyncio.Protocol):
    """A connection that answers one request at a time to ``on_done``; ``tag`` is the caller's."""

    __slots__ = (
        "_buf",
        "_keep",
        "_need",
        "_sock",
        "_state",
        "_status",
        "_timer",
        "arrived",
        "closed",
        "on_done",
        "once",
        "tag",
        "transport",
        "written",
    )

    def __init__(self, on_done: Done, tag: Any = None, once: bool = False) -> None:
        self.on_done = on_done
        self.tag = tag
        #: Closed after its first answer (a first visit), as if the server had said ``close``.
        self.once = once
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self._buf = bytearray()
        self._state = _IDLE
        self._status = 0
        self._need = 0
        self._keep = True
        self._timer: asyncio.TimerHandle | None = None
        self._sock: Any = None
        #: ``perf_counter()`` when the request was written, and when its answer's last bytes
        #: arrived in the kernel (when no answer came: when the client saw the reset or timeout).
        self.written = 0.0
        self.arrived = 0.0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self._sock = transport.get_extra_info("socket")
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def send(self, raw: bytes, timeout: float, tag: Any = None) -> None:
        """Write one request; its outcome goes to ``on_done`` (at once if the connection is gone)."""
        self.tag = tag
        if self.closed or self.transport is None:
            self.on_done(self, "reset", _perf())
            return
        self._state = _HEAD
        self._timer = asyncio.get_running_loop().call_later(timeout, self._time_out)
        self.written = _perf()
        self.transport.write(raw)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            if self.transport is not None:
                self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self._state == _TO_CLOSE:
            self._answer()
        elif self._state != _IDLE:
            self._end("reset")

    def data_received(self, data: bytes) -> None:
        buf = self._buf
        buf += data
        if self._state == _HEAD:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = bytes(buf[:end]).lower()
            del buf[: end + 4]
            try:
                self._status = int(head[9:12])
            except ValueError:
                self._end("reset")
                self.close()
                return
            self._keep = _CLOSE not in head
            at = head.find(_LENGTH)
            if at >= 0:
                stop = head.find(b"\r", at + 2)
                self._need = int(head[at + len(_LENGTH) : stop if stop >= 0 else len(head)])
                self._state = _LENGTH_BODY
            elif _CHUNKED in head:
                self._state = _CHUNKED_BODY
            elif self._status in (204, 304):
                self._need, self._state = 0, _LENGTH_BODY
            else:
                self._state = _TO_CLOSE
        if self._state == _LENGTH_BODY and len(buf) >= self._need:
            del buf[: self._need]
            self._answer()
        elif self._state == _CHUNKED_BODY and (end := buf.find(_LAST_CHUNK)) >= 0:
            del buf[: end + len(_LAST_CHUNK)]
            self._answer()

    def _answer(self) -> None:
        now = _perf()
        self.arrived = max(self.written, now - self._last_data_age())
        if self.once or not self._keep:
            self.close()
        self._end(self._status, now)

    def _last_data_age(self) -> float:
        if _TCP_INFO is None or self._sock is None:
            return 0.0
        try:
            info = self._sock.getsockopt(socket.IPPROTO_TCP, _TCP_INFO, 56)
        except OSError:
            return 0.0
        return float(struct.unpack_from("I", info, 52)[0]) / 1000 if len(info) >= 56 else 0.0

    def _end(self, outcome: int | str, now: float = 0.0) -> None:
        now = now or _perf()
        if isinstance(outcome, str):  # no answer: nothing arrived
            self.arrived = now
        self._state = _IDLE
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.on_done(self, outcome, now)

    def _time_out(self) -> None:
        self._timer = None
        self._end("timeout")
        self.close()  # the rest of a late answer would be read as the next one


async def visit(host: str, port: int, raw: bytes, timeout: float, on_done: Done, tag: Any = None) -> None:
    """A new connection, one request, closed after its answer (a first visit)."""
    loop = asyncio.get_running_loop()
    exchange = Exchange(on_done, tag, once=True)
    deadline = loop.time() + timeout
    try:
        async with asyncio.timeout_at(deadline):
            await loop.create_connection(lambda: exchange, host, port)
    except TimeoutError:
        on_done(exchange, "timeout", _perf())
        return
    except OSError:
        on_done(exchange, "reset", _perf())
        return
    exchange.send(raw, max(0.001, deadline - loop.time()), tag)
