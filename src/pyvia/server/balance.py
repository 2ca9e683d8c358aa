"""Least-connections accept between the workers of one ``pyvia run --workers N``.

The workers share one listening socket (:mod:`pyvia.server.supervisor` holds it, so a rolling
reload never refuses a connection). Left to uvloop, a worker accepts until the queue is empty
(libuv loops on ``accept`` until EAGAIN), so whichever wakes first takes a whole burst: 64 tabs
opened at once were measured landing very unevenly on two workers. A tab lives on the worker
its stream connected to and its actions run there, so that split kept 2 workers well below twice
the throughput of one (bench/RESULTS-2.md, section 7a).

So with several workers each one accepts by itself (:class:`BalancedAcceptor`), one connection
at a time (libuv's ``UV_TCP_SINGLE_ACCEPT`` idea), like nginx's ``accept_disabled``: a worker
holding more connections than the least loaded live peer (by more than :data:`SLACK`) leaves the
socket alone, and that peer takes the connection. The counts live in a small table shared by the
workers of one supervisor (:class:`BalanceTable`, an anonymous ``memfd`` mapped by each): one slot
per worker *process* (during a reload the old and the new worker of one id both live), holding
its open connections, a heartbeat and whether it is waiting. A worker that waits listens on its
slot's doorbell (an ``eventfd``): a peer that finds the queue non-empty while the only less
loaded workers are waiting rings them instead of waiting too, so the queue is never left alone
(and after :data:`_DEFER` a waiting worker looks again anyway). The supervisor hands out a free
slot when it starts a worker and clears it when the process exits. A peer whose heartbeat is
older than :data:`STALE_MS` (a stuck loop) or whose slot is cleared (dead, or stopping) makes
nobody wait, so a killed worker never stalls the others.

Why not ``SO_REUSEPORT`` (one socket per worker, the kernel hashing connections over them): a
hash splits tabs unevenly enough to keep the ratio well under 2x in many runs (bench/RESULTS-2.md,
section 7a), and the connections queued on a worker's own socket are lost when it exits, where the
one shared socket keeps them for the others through a reload.

Each slot is three aligned 64-bit words written only by the process that owns it (the supervisor
writes a slot only while no live worker has it), so readers never see half a value.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import mmap
import os
import socket
import ssl
import time
from collections.abc import Callable

__all__ = ["BALANCE_FD_ENV", "BALANCE_SLOT_ENV", "SLACK", "STALE_MS", "BalanceTable", "BalancedAcceptor", "now_ms"]

logger = logging.getLogger("pyvia.server")

#: The environment names under which a worker finds the table's descriptor and its slot.
BALANCE_FD_ENV = "PYVIA_BALANCE_FD"
BALANCE_SLOT_ENV = "PYVIA_BALANCE_SLOT"

#: A peer whose heartbeat is older than this (ms) is not waited for: its loop is stuck.
STALE_MS = 1000
#: Seconds between heartbeats (also written at each accept).
_HEARTBEAT = 0.25
#: Seconds a busier worker leaves the socket to its peers before it looks again, unless a peer
#: wakes it sooner (its doorbell): the peer it waited for grew busier, or died.
_DEFER = 0.01
#: Connections a worker may hold above the least loaded peer and still accept. With none, two
#: workers hand every new connection over by doorbell, which cost CPU per connection and cut
#: the rate of short connections; with one, a burst of tabs still splits evenly.
SLACK = 1
#: Connections one wake may accept while this worker stays the least loaded.
_BATCH = 16
#: Seconds without accepting after the process or system ran out of descriptors (asyncio's delay).
_OUT_OF_FILES = 1.0

_WORDS = 3  # per slot: open connections, heartbeat (CLOCK_MONOTONIC ms; 0 = no live worker), paused
_COUNT, _BEAT, _PAUSED = 0, 1, 2


def now_ms() -> int:
    """CLOCK_MONOTONIC in ms: one clock for every process of the machine (Linux)."""
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1_000_000


class BalanceTable:
    """Open connections and heartbeats of the workers, in memory shared by their processes, and
    a doorbell (an eventfd) per slot to wake a worker that is leaving the socket alone."""

    __slots__ = ("_map", "_words", "bells", "fd", "slots")

    def __init__(self, fd: int, bells: list[int]) -> None:
        size = os.fstat(fd).st_size
        if size != 8 * _WORDS * len(bells) or not bells:
            raise ValueError(f"fd {fd} is not a balance table of {len(bells)} slots ({size} bytes)")
        self.fd = fd
        self.bells = bells
        self.slots = len(bells)
        self._map = mmap.mmap(fd, size)
        self._words = memoryview(self._map).cast("q")

    @classmethod
    def create(cls, slots: int) -> BalanceTable:
        """A zeroed table of ``slots`` slots (the supervisor's; workers inherit :meth:`fds`)."""
        fds = [os.memfd_create("pyvia-balance")]
        try:
            os.ftruncate(fds[0], slots * 8 * _WORDS)
            fds += [os.eventfd(0, os.EFD_NONBLOCK) for _ in range(slots)]
            return cls(fds[0], fds[1:])
        except BaseException:
            for fd in fds:
                os.close(fd)
            raise

    @classmethod
    def from_env(cls, text: str) -> BalanceTable:
        """The table named by :meth:`describe` (a worker's ``PYVIA_BALANCE_FD``)."""
        fds = [int(part) for part in text.split(",")]
        return cls(fds[0], fds[1:])

    def describe(self) -> str:
        return ",".join(str(fd) for fd in self.fds())

    def fds(self) -> list[int]:
        """The descriptors a worker inherits: the table's, then each slot's doorbell."""
        return [self.fd, *self.bells]

    def close(self) -> None:
        self._words.release()
        self._map.close()
        for fd in self.fds():
            with contextlib.suppress(OSError):
                os.close(fd)

    def clear(self, slot: int) -> None:
        """No live worker in ``slot`` (its process exited, or it stopped accepting)."""
        self._words[slot * _WORDS + _BEAT] = 0
        self._words[slot * _WORDS + _COUNT] = 0
        self._words[slot * _WORDS + _PAUSED] = 0

    def set_paused(self, slot: int, paused: bool) -> None:
        """Whether the worker in ``slot`` is leaving the socket alone for now (not to be waited for)."""
        self._words[slot * _WORDS + _PAUSED] = paused

    def set_count(self, slot: int, count: int) -> None:
        self._words[slot * _WORDS + _COUNT] = count

    def beat(self, slot: int, now: int) -> None:
        self._words[slot * _WORDS + _BEAT] = now

    def count(self, slot: int) -> int:
        return self._words[slot * _WORDS + _COUNT]

    def live(self, now: int) -> dict[int, int]:
        """Slot -> open connections, for the workers whose heartbeat is fresh."""
        words = self._words
        return {
            slot: words[slot * _WORDS + _COUNT]
            for slot in range(self.slots)
            if now - words[slot * _WORDS + _BEAT] <= STALE_MS and words[slot * _WORDS + _BEAT]
        }

    def wait_for(self, slot: int, now: int) -> list[int] | None:
        """Whether ``slot`` leaves the next connection to a peer: None when it holds at most
        :data:`SLACK` more connections than every live peer (it accepts). Else it waits, and the
        list names the peers to wake first: the paused ones among the less loaded, when none of
        those is accepting (two workers each waiting for the other would leave the queue unserved)."""
        words = self._words
        own = words[slot * _WORDS + _COUNT]
        paused: list[int] | None = None
        for peer in range(self.slots):
            if peer == slot:
                continue
            base = peer * _WORDS
            beat = words[base + _BEAT]
            if beat and now - beat <= STALE_MS and words[base + _COUNT] < own - SLACK:
                if not words[base + _PAUSED]:
                    return []
                if paused is None:
                    paused = []
                paused.append(peer)
        return paused

    def ring(self, slot: int) -> None:
        """Wake the worker of ``slot``: it looks at the socket again."""
        with contextlib.suppress(BlockingIOError):  # already rung
            os.eventfd_write(self.bells[slot], 1)


class BalancedAcceptor:
    """Accepts on a shared listening socket when this worker is the least loaded (module doc).

    Stands in for the ``asyncio.Server`` of ``loop.create_server`` in the runner's stop:
    :meth:`close` stops accepting (and clears the slot, so no peer waits for this worker),
    :meth:`wait_closed` waits for the connections still in their TLS handshake. Every accepted
    connection goes to uvloop through ``connect_accepted_socket`` with the same protocol, so
    admission, backlog shedding and TLS are those of ``create_server``.
    """

    __slots__ = (
        "_beat_handle",
        "_closed",
        "_factory",
        "_listening",
        "_loop",
        "_pending",
        "_reading",
        "_retry",
        "_sock",
        "_ssl",
        "_ssl_timeout",
        "_table",
        "_unregistered",
        "connections",
        "slot",
    )

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        sock: socket.socket,
        factory: Callable[[], asyncio.Protocol],
        table: BalanceTable,
        slot: int,
        *,
        ssl_context: ssl.SSLContext | None = None,
        ssl_handshake_timeout: float | None = None,
    ) -> None:
        self._loop = loop
        self._sock = sock
        self._factory = factory
        self._table = table
        self.slot = slot
        self._ssl = ssl_context
        self._ssl_timeout = ssl_handshake_timeout if ssl_context is not None else None
        #: Open connections, as the registry counts them (:meth:`counted`).
        self.connections = 0
        self._pending: set[asyncio.Task[object]] = set()  # handing over (a TLS handshake, at most)
        self._unregistered = 0  # accepted, not yet in the registry (counted, or peers would take too many)
        self._reading = False
        self._listening = False  # paused, and waiting for the doorbell
        self._closed = False
        self._retry: asyncio.TimerHandle | None = None
        self._beat_handle: asyncio.TimerHandle | None = None

    def start(self, backlog: int) -> None:
        self._sock.listen(backlog)
        self._sock.setblocking(False)
        self._publish()
        self._heartbeat()
        self._resume()

    def counted(self, connections: int) -> None:
        """The registry's count changed: a connection opened (one handed over here, or passed by
        another worker: :meth:`incoming`) or closed."""
        if connections > self.connections:
            self._unregistered = max(0, self._unregistered - (connections - self.connections))
        self.connections = connections
        if not self._closed:
            self._publish()

    def incoming(self) -> None:
        """A connection another worker passed is being handed to uvloop: count it already."""
        self._unregistered += 1
        if not self._closed:
            self._publish()

    def incoming_failed(self) -> None:
        """That connection never reached the registry."""
        self._unregistered = max(0, self._unregistered - 1)
        if not self._closed:
            self._publish()

    def load(self) -> int:
        """Open connections, with those accepted or passed here and not yet in the registry."""
        return self.connections + self._unregistered

    def _publish(self) -> None:
        self._table.set_count(self.slot, self.load())

    def _heartbeat(self) -> None:
        self._table.beat(self.slot, now_ms())
        self._beat_handle = self._loop.call_later(_HEARTBEAT, self._heartbeat)

    def _resume(self) -> None:
        if self._retry is not None:
            self._retry.cancel()
            self._retry = None
        if self._listening:
            self._loop.remove_reader(self._table.bells[self.slot])
            self._listening = False
        if not self._closed and not self._reading:
            self._loop.add_reader(self._sock.fileno(), self._on_readable)
            self._reading = True
            self._table.set_paused(self.slot, False)

    def _pause(self, delay: float, *, bell: bool = True) -> None:
        """Leave the socket alone for ``delay`` seconds, or (``bell``) until a peer rings."""
        if self._reading:
            self._loop.remove_reader(self._sock.fileno())
            self._reading = False
            self._table.set_paused(self.slot, True)
        if bell and not self._listening:
            self._loop.add_reader(self._table.bells[self.slot], self._on_bell)
            self._listening = True
        if self._retry is None:
            self._retry = self._loop.call_later(delay, self._resume)

    def _on_bell(self) -> None:
        with contextlib.suppress(BlockingIOError):
            os.eventfd_read(self._table.bells[self.slot])
        self._resume()

    def _on_readable(self) -> None:
        table, slot = self._table, self.slot
        for _ in range(_BATCH):
            now = now_ms()
            wake = table.wait_for(slot, now)
            if wake is not None:
                for peer in wake:
                    table.ring(peer)
                self._pause(_DEFER)
                return
            try:
                conn, _ = self._sock.accept()
            except (BlockingIOError, InterruptedError, ConnectionAbortedError):
                return  # a peer took it, or the client left while queued
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    logger.error("accept: %s; not accepting for %.0f s", exc, _OUT_OF_FILES)
                    self._pause(_OUT_OF_FILES, bell=False)
                    return
                raise
            table.beat(slot, now)
            task: asyncio.Task[object] = self._loop.create_task(
                self._loop.connect_accepted_socket(
                    self._factory, conn, ssl=self._ssl, ssl_handshake_timeout=self._ssl_timeout
                )
            )
            self._pending.add(task)
            task.add_done_callback(self._handed_over)
            self._unregistered += 1
            self._publish()

    def _handed_over(self, task: asyncio.Task[object]) -> None:
        self._pending.discard(task)
        if task.cancelled() or task.exception() is not None:
            # never reached the registry: a failed TLS handshake, a peer gone meanwhile
            self._unregistered = max(0, self._unregistered - 1)
            exc = None if task.cancelled() else task.exception()
            if exc is not None and not isinstance(exc, OSError):
                logger.error("error handing over an accepted connection", exc_info=exc)
            if not self._closed:
                self._publish()

    def close(self) -> None:
        """Stop accepting and leave the table: no peer waits for this worker any more."""
        if self._closed:
            return
        self._closed = True
        if self._reading:
            self._loop.remove_reader(self._sock.fileno())
            self._reading = False
        if self._listening:
            self._loop.remove_reader(self._table.bells[self.slot])
            self._listening = False
        for handle in (self._retry, self._beat_handle):
            if handle is not None:
                handle.cancel()
        self._retry = self._beat_handle = None
        self._table.clear(self.slot)
        self._sock.close()

    def is_serving(self) -> bool:
        return not self._closed

    async def wait_closed(self) -> None:
        """Until the connections accepted before :meth:`close` are handed over (TLS handshakes)."""
        if self._pending:
            await asyncio.wait(list(self._pending))
