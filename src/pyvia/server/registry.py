"""The open connections of one native server: what they hold, the caps, and the shedding flag.

Capacity is counted in O(1) at accept, at stream start and at close (per-address dicts that hold
only addresses with something open); a request pays one flag test (``shedding``). Every cap
answers a 503 with ``Retry-After`` at once: nothing waits for capacity. Every refusal the server
makes by itself is counted by the registry's base :class:`~pyvia.server.refusals.RefusalCounts`
and logged by its :class:`RefusalLog`, one line each, rate-limited.

What the registry holds besides: the loop probe that sets ``shedding``
(:mod:`pyvia.server.loop_probe`), the overload verdicts (:mod:`pyvia.server.overload`), the
listen queue drained while overloaded (:mod:`pyvia.server.backlog`) and the deadline sweep
(:mod:`pyvia.server.sweep`). The per-connection and per-request calls stay here, so none of them
goes through one of those."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from pyvia.server import closing
from pyvia.server.backlog import BacklogDrain
from pyvia.server.http import HostPolicy, PeerExemption, ServerLimits
from pyvia.server.loop_probe import LoopProbe
from pyvia.server.overload import QUEUE_SAMPLE, Overload
from pyvia.server.refusals import REFUSAL_STATUSES, TIMEOUT_PHASES, UNAVAILABLE_REASONS, RefusalCounts, RefusalLog
from pyvia.server.states import ConnState
from pyvia.server.sweep import DeadlineSweep

if TYPE_CHECKING:
    from pyvia.server.connection import HttpProtocol

__all__ = [
    "QUEUE_SAMPLE",
    "REFUSAL_STATUSES",
    "TIMEOUT_PHASES",
    "UNAVAILABLE_REASONS",
    "ConnectionRegistry",
    "RefusalLog",
]


class ConnectionRegistry(RefusalCounts):
    """The open connections of one server, what they hold, and whether new requests are shed.

    The runner creates one per server; each :class:`HttpProtocol` adds itself when it connects.
    One ``call_later`` chain, every ``interval`` seconds, closes the connections whose deadline
    has passed (:class:`~pyvia.server.sweep.DeadlineSweep`; DESIGN.md: one periodic sweep,
    nothing per connection while idle).

    It also keeps the capacity counts of :class:`~pyvia.server.http.ServerLimits`: connections and
    streams in total and per peer address (only addresses with something open have an entry, so
    the tables are bounded by the connection cap), requests the app still owes, and whether the
    loop is late (a probe timer every ``shed_after / 20`` s) or new connections waited too long in
    the listen backlog (:meth:`late_accept`, judged by its :class:`~pyvia.server.overload.Overload`).
    ``max_connections`` and
    ``max_streams`` (and the per-address ones) are the effective caps: the runner derives the
    ``None`` ones from the fd limit; here ``None`` in both the keyword and the limits means no cap.
    """

    __slots__ = (
        "_connections",
        "_exempt",
        "_max_conn_ip",
        "_max_stream_ip",
        "_waiter",
        "accepted",
        "backlog",
        "by_ip",
        "connections",
        "deadlines",
        "dispatched",
        "hosts",
        "idle",
        "in_flight",
        "lag",
        "lagging",
        "loop",
        "loop_probe",
        "max_connections",
        "max_in_flight",
        "max_streams",
        "on_count",
        "overload",
        "shedding",
        "streams",
        "streams_by_ip",
    )

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        interval: float = 1.0,
        limits: ServerLimits | None = None,
        *,
        max_connections: int | None = None,
        max_streams: int | None = None,
        max_connections_per_ip: int | None = None,
        max_streams_per_ip: int | None = None,
    ) -> None:
        limits = limits if limits is not None else ServerLimits()
        super().__init__(loop, limits)
        self.loop = loop
        self._connections: set[HttpProtocol] = set()
        #: The sweep that times out the connections whose deadline passed.
        self.deadlines = DeadlineSweep(loop, interval)
        self._waiter: asyncio.Future[None] | None = None
        big = 1 << 62
        self.max_connections = max_connections if max_connections is not None else (limits.max_connections or big)
        self.max_streams = max_streams if max_streams is not None else (limits.max_streams or big)
        self.max_in_flight = limits.max_in_flight
        self._max_conn_ip = _first(max_connections_per_ip, limits.max_connections_per_ip, big)
        self._max_stream_ip = _first(max_streams_per_ip, limits.max_streams_per_ip, big)
        self._exempt = PeerExemption(limits.per_ip_exempt)
        #: Whether a ``Host`` value names this server (``allowed_hosts``), with its verdicts cached.
        self.hosts = HostPolicy(limits.allowed_hosts)
        #: Whether the probe waits its idle period (:meth:`wake` ends that at the first arrival).
        self.idle = False
        #: The timer that measures how late the loop runs and sets ``shedding``, ``lag``, ``idle``.
        self.loop_probe = LoopProbe(self, limits.shed_after)
        #: Whether the loop's turns or the listen queue say the server is overloaded.
        self.overload = Overload(loop, limits)
        #: Requests handed to the app (or shed) so far; the probe compares it to what it last saw.
        self.dispatched = 0
        #: Admitted connections (refused ones still closing are not counted).
        self.connections = 0
        #: Open streams.
        self.streams = 0
        #: Peer address -> open connections / streams, for the addresses the per-IP caps apply to.
        self.by_ip: dict[str, int] = {}
        self.streams_by_ip: dict[str, int] = {}
        #: Requests whose answer the app still owes (awaitables being awaited).
        self.in_flight = 0
        #: How late the last loop probe ran, in seconds, and whether that is past ``shed_after``.
        self.lag = 0.0
        self.lagging = False
        #: True while new requests are answered 503: the loop is late or ``in_flight`` is full.
        self.shedding = False
        # Totals for /metrics (pyvia.ops.metrics), each counted where it happens, off the hot path.
        #: Connections admitted since the start.
        self.accepted = 0
        #: The listen queue the probe drains while overloaded (:meth:`listen`).
        self.backlog = BacklogDrain(self, self.overload)
        #: Called with the number of open connections after each change (the balanced acceptor
        #: of several workers publishes it to its peers, :mod:`pyvia.server.balance`).
        self.on_count: Callable[[int], object] | None = None

    def __len__(self) -> int:
        return len(self._connections)

    def __iter__(self) -> Iterator[HttpProtocol]:
        return iter(list(self._connections))

    def add(self, conn: HttpProtocol) -> None:
        self._connections.add(conn)
        self.deadlines.watched.add(conn)
        if self.on_count is not None:
            self.on_count(len(self._connections))

    def discard(self, conn: HttpProtocol) -> None:
        self._connections.discard(conn)
        self.deadlines.watched.discard(conn)
        if self.on_count is not None:
            self.on_count(len(self._connections))
        if not self._connections and self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    # --- capacity: O(1) at accept, stream start and close ----------------------------------------

    def admit(self, conn: HttpProtocol) -> bool:
        """Count a new connection, or refuse it (False) when a connection cap is reached."""
        if self.connections >= self.max_connections:
            self.refused_connections += 1
            self.unavailable["connections"] += 1
            self.log_refusal(
                503,
                "refused a connection from %s with 503: %d connections open, the cap (max_connections)",
                conn.client,
                self.connections,
            )
            return False
        address = conn.client
        if not self._exempt(address):
            count = self.by_ip.get(address, 0)
            if count >= self._max_conn_ip:
                self.refused_connections += 1
                self.unavailable["connections_per_ip"] += 1
                self.log_refusal(
                    503,
                    "refused a connection from %s with 503: %d connections open from that "
                    "address, the cap (max_connections_per_ip)",
                    address,
                    count,
                )
                return False
            self.by_ip[address] = count + 1
            conn.ip_key = address
        conn.admitted = True
        self.connections += 1
        self.accepted += 1
        if self.idle:
            self.wake()
        return True

    def release(self, conn: HttpProtocol) -> None:
        """Uncount a connection that is gone (its stream too, if it had one)."""
        if conn.stream_counted:
            self.stream_ended(conn)
        if conn.admitted:
            conn.admitted = False
            self.connections -= 1
            key = conn.ip_key
            if key is not None:
                _decrement(self.by_ip, key)
        if conn.refusing:
            conn.refusing = False
            self.lingering_refusals -= 1

    def stream_started(self, conn: HttpProtocol) -> bool:
        """Count a stream about to open on ``conn``, or refuse it (False) at a stream cap."""
        if self.streams >= self.max_streams:
            self.refused_streams += 1
            self.unavailable["streams"] += 1
            self.log_refusal(
                503,
                "refused a stream to %s with 503: %d streams open, the cap (max_streams)",
                conn.client,
                self.streams,
            )
            return False
        key = conn.ip_key
        if key is not None:
            count = self.streams_by_ip.get(key, 0)
            if count >= self._max_stream_ip:
                self.refused_streams += 1
                self.unavailable["streams_per_ip"] += 1
                self.log_refusal(
                    503,
                    "refused a stream to %s with 503: %d streams open from that address, the cap (max_streams_per_ip)",
                    key,
                    count,
                )
                return False
            self.streams_by_ip[key] = count + 1
        conn.stream_counted = True
        self.streams += 1
        self.deadlines.watched.discard(conn)  # an open stream has no deadline
        return True

    def stream_ended(self, conn: HttpProtocol) -> None:
        if conn.stream_counted:
            conn.stream_counted = False
            self.streams -= 1
            key = conn.ip_key
            if key is not None:
                _decrement(self.streams_by_ip, key)
        if conn.state is not ConnState.CLOSED:  # it answers again, or closes: a deadline may run
            self.deadlines.watched.add(conn)

    def task_started(self) -> None:
        self.in_flight += 1
        if self.in_flight >= self.max_in_flight:
            self.shedding = True

    def task_done(self) -> None:
        self.in_flight -= 1
        if self.shedding and not self.lagging and self.in_flight < self.max_in_flight:
            self.shedding = False

    def late_accept(self, sock: socket.socket | None) -> float:
        """How long a connection just accepted waited in the listen queue, when its request must be
        answered 503 (else -1): longer than ``SERVE_WITHIN`` of ``shed_after`` while the server is
        overloaded (:meth:`Overload.late` says how that is judged). Count it with :meth:`shed_late`."""
        return self.overload.late(sock, accept=True)

    def late_request(self, sock: socket.socket | None) -> float:
        """How long a request about to be answered waited, when it must get a 503 instead (else
        -1): it waited longer than ``SERVE_WITHIN`` of ``shed_after`` (unread in its socket behind long loop
        turns, or behind the requests ahead of it) while the server is overloaded. Count it with
        :meth:`shed_late`."""
        return self.overload.late(sock, accept=False)

    def shed(self, client: str, path: str) -> None:
        """Count (and log) a request answered 503 by load shedding (the app's work in flight, or a late loop)."""
        self.shed_requests += 1
        if self.in_flight >= self.max_in_flight:
            self.unavailable["in_flight"] += 1
            self.log_refusal(
                503,
                "shed a request from %s for %s with 503: %d answers in flight, the cap (max_in_flight)",
                client,
                path,
                self.in_flight,
            )
        else:
            self.unavailable["loop_lag"] += 1
            self.log_refusal(
                503,
                "shed a request from %s for %s with 503: the server is overloaded (the loop ran %.0f ms late)",
                client,
                path,
                self.lag * 1000,
            )

    def buffered_bytes(self) -> int:
        """Bytes every transport of this server still holds for its peer (O(connections)), those
        of connections already closing included: a closed transport keeps its buffer until the
        peer reads it or the send deadline aborts it."""
        total = 0
        for conn in self._connections:
            total += conn.unsent
        return total

    def stats(self) -> dict[str, float]:
        """What the server holds and has refused, for metrics (``buffered_bytes`` walks every connection).

        Besides the gauges and the older totals: ``accepted``, ``smuggling``, ``hosts_refused``, and one key per
        reason, phase and status: ``unavailable.<reason>``, ``timeouts.<phase>``, ``refused.<status>``.
        """
        return {
            "connections": self.connections,
            "max_connections": self.max_connections,
            "streams": self.streams,
            "max_streams": self.max_streams,
            "max_connections_per_ip": self._max_conn_ip,
            "max_streams_per_ip": self._max_stream_ip,
            "in_flight": self.in_flight,
            "max_in_flight": self.max_in_flight,
            "addresses": len(self.by_ip),
            "lag_seconds": self.lag,
            "shedding": int(self.shedding),
            "buffered_bytes": self.buffered_bytes(),
            "accepted": self.accepted,
            **self.refusal_stats(),
        }

    # --- timers ---------------------------------------------------------------------------------------

    def start(self) -> None:
        """Start the sweep (and the lag probe, when ``shed_after`` is set)."""
        now = self.loop.time()
        self.deadlines.start(now)
        self.loop_probe.start(now)

    def stop(self) -> None:
        """Stop the sweep and the probe (and end the lingering refusals of the listen queue)."""
        self.backlog.stop()
        self.deadlines.stop()
        self.loop_probe.stop()

    def listen(self, sock: socket.socket, hand_over: Callable[[socket.socket], object]) -> None:
        """Let the probe take over ``sock``'s accept queue whenever it is not kept short.

        uvloop accepts one connection per loop turn: when turns take tens of milliseconds (a
        loaded server) and connections arrive faster than that, the listen queue grows for
        seconds, then overflows, and new connections get nothing at all (the attack saw 17 of 40
        unanswered after 10 s) while every open connection is served. So each probe looks at the
        queue. While the server is overloaded it accepts all that waits and answers the 503 at
        once, written on the raw socket (no transport, no task: a few microseconds each), to each
        that waited more than half of ``SERVE_WITHIN`` of ``shed_after``, unless it asks for a
        path never shed or has sent nothing yet: a connection handed to the loop is read three or
        four turns later, so only a young one can still be served in time; up to 16 of those a
        probe go to ``hand_over``. Otherwise, when the first connection waited more than
        ``SERVE_WITHIN`` of ``shed_after``, it hands what waits to ``hand_over`` (up to 16 a probe:
        each brings its work into the next turns) to be served.
        """
        self.backlog.listening.append((sock, hand_over))

    def stop_listening(self) -> None:
        """Forget the listening sockets (the server stopped accepting)."""
        self.backlog.listening = []

    def drain_backlog(self, limit: int = 4096, hand_over_at_most: int = 16) -> int:
        """Accept what waits in the listen queues (see :meth:`listen`); how many were refused
        (:meth:`BacklogDrain.drain`)."""
        return self.backlog.drain(limit, hand_over_at_most)

    @property
    def busy(self) -> bool:
        """Whether loop turns keep running long (:attr:`Overload.busy`)."""
        return self.overload.busy

    @busy.setter
    def busy(self, value: bool) -> None:
        self.overload.busy = value

    @property
    def queue_late(self) -> bool:
        """Whether the listen backlog is overloaded (:attr:`Overload.queue_late`)."""
        return self.overload.queue_late

    @queue_late.setter
    def queue_late(self, value: bool) -> None:
        self.overload.queue_late = value

    def wake(self) -> None:
        """A connection or a request came while the probe waited its idle period (:meth:`LoopProbe.wake`)."""
        self.loop_probe.wake()

    def sweep(self, now: float) -> None:
        """Time out every connection whose deadline is at or before ``now``."""
        self.deadlines.sweep(now)

    def shutdown(self) -> None:
        """Close idle connections; busy ones close once their response is written."""
        for conn in list(self._connections):
            closing.shutdown(conn)

    def abort_all(self) -> None:
        """Close every connection now, whatever it is doing (the end of the shutdown budget)."""
        for conn in list(self._connections):
            conn.abort()

    async def wait_empty(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the last connection to go; True if none is left."""
        if not self._connections:
            return True
        self._waiter = self.loop.create_future()
        try:
            await asyncio.wait_for(asyncio.shield(self._waiter), max(timeout, 0.0))
        except TimeoutError:
            return not self._connections
        finally:
            self._waiter = None
        return True


def _first(*values: int | None) -> int:
    return next(v for v in values if v is not None)


def _decrement(counts: dict[str, int], key: str) -> None:
    count = counts.get(key, 0) - 1
    if count > 0:
        counts[key] = count
    else:
        counts.pop(key, None)
