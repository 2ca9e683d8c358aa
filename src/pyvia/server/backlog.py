"""The listen queue taken over by the loop probe while the native server is overloaded.

uvloop accepts one connection per loop turn, so under load the kernel's queue stands for seconds
and then overflows. Each probe looks at it (:meth:`BacklogDrain.drain`): what cannot be served in
time is answered 503 on the raw socket, what can is handed to the loop. Separate from the registry
because it works on raw sockets, not on connections: it has its own lingering closes and timers.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import struct
from collections.abc import Callable
from typing import TYPE_CHECKING

from pyvia.server.overload import SERVE_WITHIN, TCP_INFO, Overload

if TYPE_CHECKING:
    import asyncio

    from pyvia.server.registry import ConnectionRegistry

__all__ = ["BacklogDrain"]

logger = logging.getLogger("pyvia.server")

#: Seconds a connection refused from the listen queue keeps reading (and dropping) after its 503,
#: and how many may do so at once (the lingering close of HttpProtocol, for raw sockets).
_RAW_LINGER = 2.0
_MAX_RAW_LINGER = 1024


class BacklogDrain:
    """The listening sockets of one server whose queue the probe drains, and the refused ones lingering.

    Held by the :class:`~pyvia.server.registry.ConnectionRegistry`, whose counts and refusal log it
    uses, with its :class:`~pyvia.server.overload.Overload`, which it samples and may declare busy.
    """

    __slots__ = ("_overload", "_raw", "_registry", "listening")

    def __init__(self, registry: ConnectionRegistry, overload: Overload) -> None:
        self._registry = registry
        self._overload = overload
        #: Listening sockets whose queue the probe drains while overloaded, each with how to hand
        #: a young connection to the loop (:meth:`ConnectionRegistry.listen`).
        self.listening: list[tuple[socket.socket, Callable[[socket.socket], object]]] = []
        #: fd -> the socket refused from the listen queue and lingering, with its timer.
        self._raw: dict[int, tuple[socket.socket, asyncio.TimerHandle]] = {}

    def stop(self) -> None:
        """Forget the listening sockets and end the lingering refusals."""
        self.listening = []
        for fd in list(self._raw):
            self._end_raw(fd)

    def drain(self, limit: int = 4096, hand_over_at_most: int = 16) -> int:
        """Accept what waits in the listen queues (see :meth:`ConnectionRegistry.listen`); how many
        were refused.

        Every connection taken is a sample of the wait (the window of :meth:`Overload.late`), so a
        standing queue is seen even while uvloop accepts too few to sample.
        """
        overload = self._overload
        shed_after = overload.limits.shed_after or 0.0
        overloaded = overload.queue_late or overload.busy or self._registry.lagging
        refused = 0
        handed = 0
        for sock, hand_over in self.listening:
            for _ in range(limit):
                if handed >= hand_over_at_most and not overloaded:
                    return refused  # the rest waits for the next probe: one turn can hold so many
                try:
                    conn, peer = sock.accept()
                except (BlockingIOError, InterruptedError):
                    break
                except OSError as exc:  # EMFILE, ENFILE…: uvloop's own accept reports it
                    logger.debug("draining the listen queue: %s", exc)
                    break
                waited = _last_data_age(conn)
                overload.window_samples += 1
                if waited < overload.window_min:
                    overload.window_min = waited
                if not overloaded and overload.slow_turns >= 2 and waited > shed_after * SERVE_WITHIN:
                    # The queue is not kept short and turns have been long more than once: the
                    # onset of an overload, before it has lasted a whole shed_after. What is handed
                    # to the loop now would be served several long turns later.
                    overloaded = overload.busy = True
                    overload.busy_until = overload.loop.time() + 2 * shed_after
                # One taken from the queue is read three or four turns later (the loop adopts it in
                # a task, then reads it): while overloaded only a young one can still be served in
                # time (a few a probe, so new connections keep being served too); the others are
                # refused.
                if (
                    overloaded
                    and (waited > shed_after * SERVE_WITHIN / 2 or handed >= hand_over_at_most)
                    and not self._asks_exempt(conn)
                    and _has_data(conn)
                ):
                    refused += 1
                    self._refuse_raw(conn, str(peer[0]) if isinstance(peer, tuple) else "", waited)
                    continue
                conn.setblocking(False)
                hand_over(conn)
                handed += 1
                if not overloaded and waited < shed_after * SERVE_WITHIN:
                    break  # a short queue: uvloop keeps up with it
        return refused

    def _asks_exempt(self, conn: socket.socket) -> bool:
        """Whether the request waiting on ``conn`` is for a path never shed (``shed_exempt``: a
        health probe must not fail because the server is busy), read without taking it."""
        try:
            head = conn.recv(512, socket.MSG_PEEK | socket.MSG_DONTWAIT)
        except OSError:
            return False
        target = head.split(b" ", 2)[1] if head.count(b" ") >= 2 else b""
        path = target.partition(b"?")[0].decode("latin-1")
        return path in self._overload.limits.shed_exempt

    def _refuse_raw(self, conn: socket.socket, client: str, waited: float) -> None:
        """The 503 of a connection that waited too long, written on the socket itself.

        The request it sent is read first. When that was a whole head without a body, the socket
        closes at once; otherwise a lingering close, as for any refusal: the write side ends (FIN)
        and what the client still sends is read and dropped for a moment, because closing with
        unread bytes (or bytes on the way) sends RST, which can destroy the 503 before the client
        reads it. Past ``_MAX_RAW_LINGER`` refusals lingering at once, the socket closes at once.
        """
        registry = self._registry
        registry.shed_requests += 1
        registry.refused_connections += 1
        registry.unavailable["backlog"] += 1
        registry.log_refusal(
            503,
            "refused a connection from %s with 503: it waited %.2f s in the listen backlog (shed_after %s s)",
            client or "?",
            waited,
            registry.limits.shed_after,
        )
        sent = b""
        try:
            conn.setblocking(False)
            with contextlib.suppress(OSError):
                sent = conn.recv(65536)
            conn.send(registry.refusal)
            conn.shutdown(socket.SHUT_WR)
        except OSError:
            conn.close()
            return
        whole = sent.endswith(b"\r\n\r\n") and b"content-length" not in sent.lower() and b"chunked" not in sent.lower()
        if whole or len(self._raw) >= _MAX_RAW_LINGER:
            conn.close()  # nothing more is on the way: no RST can follow
            return
        fd = conn.fileno()

        def done() -> None:
            self._end_raw(fd)

        def readable() -> None:
            try:
                if conn.recv(65536):
                    return  # dropped
            except BlockingIOError:
                return
            except OSError:
                pass
            done()  # EOF or an error: the client has gone

        loop = registry.loop
        try:
            loop.add_reader(fd, readable)
        except Exception:  # a loop without add_reader (or the fd refused): close now
            conn.close()
            return
        self._raw[fd] = (conn, loop.call_later(_RAW_LINGER, done))

    def _end_raw(self, fd: int) -> None:
        found = self._raw.pop(fd, None)
        if found is None:
            return
        conn, handle = found
        handle.cancel()
        with contextlib.suppress(Exception):
            self._registry.loop.remove_reader(fd)
        conn.close()


def _last_data_age(sock: socket.socket) -> float:
    """Seconds since ``sock`` last received data (``TCP_INFO``), or 0 when unknown."""
    try:
        info = sock.getsockopt(socket.IPPROTO_TCP, TCP_INFO, 104)  # type: ignore[arg-type]
    except (OSError, AttributeError, ValueError, TypeError):
        return 0.0
    return float(struct.unpack_from("I", info, 52)[0]) / 1000 if len(info) >= 56 else 0.0


def _has_data(sock: socket.socket) -> bool:
    """Whether the client of a just-accepted socket has sent anything yet (read without taking it)."""
    try:
        return bool(sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT))
    except OSError:  # nothing yet (EAGAIN), or it has gone
        return False
