"""The open connections of one native server: what they hold, the caps, and the one sweep.

Capacity is counted in O(1) at accept, at stream start and at close (per-address dicts that hold
only addresses with something open); a request pays one flag test (``shedding``). Every cap
answers a 503 with ``Retry-After`` at once: nothing waits for capacity. Every refusal the server
makes by itself is counted here and logged by :class:`RefusalLog`, one line each, rate-limited.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import struct
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from pyvia.clock import until_tick
from pyvia.ops import metrics
from pyvia.server import http as wire
from pyvia.server.http import HostPolicy, PeerExemption, ServerLimits

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

logger = logging.getLogger("pyvia.server")

#: One accepted connection in this many has its wait in the listen backlog measured (a
#: ``getsockopt`` call); the verdict holds for the accepts in between.
QUEUE_SAMPLE = 8
#: Linux's ``TCP_INFO``: ``tcpi_last_data_recv`` (ms since the last bytes arrived) is at offset 52.
_TCP_INFO = getattr(socket, "TCP_INFO", None)
#: While overloaded, a request (or a new connection) that waited more than this share of
#: ``shed_after`` is answered 503 when it is read: loop turns then stay about that long, so what
#: is served waited at most that, and its answer, or a 503, comes within ``shed_after``.
SERVE_WITHIN = 0.25
#: Overload holds while loop turns stay longer than this share of ``shed_after``.
_STILL_BUSY = SERVE_WITHIN / 2
#: Requests a long turn must carry to count as the queue of an overload (not a slow handler).
_LOADED_TURN = 8
#: Samples a window must hold for its least wait to stand for a queue (CoDel's standing queue).
_QUEUE_SAMPLES = 4
#: Seconds a connection refused from the listen queue keeps reading (and dropping) after its 503,
#: and how many may do so at once (the lingering close of HttpProtocol, for raw sockets).
_RAW_LINGER = 2.0
_MAX_RAW_LINGER = 1024
#: Seconds between probes while nothing comes (on the sweeps' grid: an idle server wakes once a
#: second); the first connection or request after such a probe brings the fast schedule back.
_IDLE_PROBE = 1.0
_NEVER = float("inf")

#: Why the server answered 503 by itself: a cap at accept (``connections``, ``connections_per_ip``),
#: a connection that waited too long in the listen backlog (``backlog``), a stream cap
#: (``streams``, ``streams_per_ip``), or load shedding of a request (``in_flight``, ``loop_lag``,
#: ``queued``: one that waited too long to be read).
UNAVAILABLE_REASONS = metrics.UNAVAILABLE_REASONS
#: Where a connection was timed out: its request head (408), its body (408), idle between
#: requests (closed silently), or a peer that stopped reading what it was sent (aborted).
TIMEOUT_PHASES = metrics.TIMEOUT_PHASES
#: The statuses the server refuses a request with before the app sees it (``wire.ERRORS``; 408 is
#: counted as a timeout, 500 is the server's own fault).
REFUSAL_STATUSES = tuple(int(status) for status in metrics.REFUSAL_STATUSES)


class RefusalLog:
    """One WARNING line per refusal the server makes by itself, rate-limited per status.

    A token bucket per status: ``burst`` lines at once, then ``rate`` a second; the lines held
    back are counted and named in the next line that goes out, so a flood of refusals costs the
    log a few lines a second and no traceback, and nothing is silently lost from the count.
    """

    __slots__ = ("_buckets", "_burst", "_clock", "_rate")

    def __init__(self, clock: Callable[[], float], *, rate: float = 1.0, burst: int = 10) -> None:
        self._clock = clock
        self._rate = rate
        self._burst = float(burst)
        #: status -> [allowance, last time, lines held back]
        self._buckets: dict[int, list[float]] = {}

    def __call__(self, status: int, message: str, *args: object) -> bool:
        """Log ``message % args`` (a sentence naming the peer and the reason) unless the status's
        bucket is empty; True when a line was written."""
        now = self._clock()
        bucket = self._buckets.get(status)
        if bucket is None:
            bucket = self._buckets[status] = [self._burst, now, 0.0]
        allowance = min(self._burst, bucket[0] + (now - bucket[1]) * self._rate)
        bucket[1] = now
        if allowance < 1.0:
            bucket[0] = allowance
            bucket[2] += 1
            return False
        bucket[0] = allowance - 1.0
        held, bucket[2] = int(bucket[2]), 0.0
        if held:
            logger.warning(message + " (and %d more %d refusals not logged since the last line)", *args, held, status)
        else:
            logger.warning(message, *args)
        return True


class ConnectionRegistry:
    """The open connections of one server, what they hold, and the single sweep that times them out.

    The runner creates one per server; each :class:`HttpProtocol` adds itself when it connects.
    One ``call_later`` chain, every ``interval`` seconds, closes the connections whose deadline
    has passed (DESIGN.md: one periodic sweep, nothing per connection while idle).

    It also keeps the capacity counts of :class:`~pyvia.server.http.ServerLimits`: connections and
    streams in total and per peer address (only addresses with something open have an entry, so
    the tables are bounded by the connection cap), requests the app still owes, and whether the
    loop is late (a probe timer every ``shed_after / 20`` s) or new connections waited too long in
    the listen backlog (:meth:`late_accept`). ``max_connections`` and
    ``max_streams`` (and the per-address ones) are the effective caps: the runner derives the
    ``None`` ones from the fd limit; here ``None`` in both the keyword and the limits means no cap.
    """

    __slots__ = (
        "_busy_until",
        "_connections",
        "_dispatched_seen",
        "_exempt",
        "_handle",
        "_interval",
        "_listening",
        "_max_conn_ip",
        "_max_stream_ip",
        "_measure_queue",
        "_probe",
        "_probe_accepted",
        "_probe_due",
        "_probe_every",
        "_quiet_probe_every",
        "_raw",
        "_sample_accept_in",
        "_sample_in",
        "_slow_since",
        "_slow_turns",
        "_waiter",
        "_was_late",
        "_window_end",
        "_window_min",
        "_window_samples",
        "accepted",
        "busy",
        "by_ip",
        "connections",
        "dispatched",
        "hosts",
        "hosts_refused",
        "idle",
        "in_flight",
        "lag",
        "lagging",
        "limits",
        "lingering_refusals",
        "log_refusal",
        "loop",
        "max_connections",
        "max_in_flight",
        "max_streams",
        "on_count",
        "on_lag",
        "queue_late",
        "refusal",
        "refused_connections",
        "refused_requests",
        "refused_streams",
        "shed_requests",
        "shedding",
        "smuggling",
        "streams",
        "streams_by_ip",
        "timeouts",
        "unavailable",
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
        self.loop = loop
        self.limits = limits
        self._interval = interval
        self._connections: set[HttpProtocol] = set()
        self._handle: asyncio.TimerHandle | None = None
        self._probe: asyncio.TimerHandle | None = None
        self._waiter: asyncio.Future[None] | None = None
        #: Listening sockets whose queue the probe drains while overloaded, each with how to hand
        #: a young connection to the loop (:meth:`listen`).
        self._listening: list[tuple[socket.socket, Callable[[socket.socket], object]]] = []
        #: fd -> the socket refused from the listen queue and lingering, with its timer.
        self._raw: dict[int, tuple[socket.socket, asyncio.TimerHandle]] = {}
        big = 1 << 62
        self.max_connections = max_connections if max_connections is not None else (limits.max_connections or big)
        self.max_streams = max_streams if max_streams is not None else (limits.max_streams or big)
        self.max_in_flight = limits.max_in_flight
        self._max_conn_ip = _first(max_connections_per_ip, limits.max_connections_per_ip, big)
        self._max_stream_ip = _first(max_streams_per_ip, limits.max_streams_per_ip, big)
        self._exempt = PeerExemption(limits.per_ip_exempt)
        #: Whether a ``Host`` value names this server (``allowed_hosts``), with its verdicts cached.
        self.hosts = HostPolicy(limits.allowed_hosts)
        self._probe_every = min(0.1, max(0.01, limits.shed_after / 20)) if limits.shed_after else 0.0
        self._quiet_probe_every = max(self._probe_every, limits.shed_after or 0.0, _IDLE_PROBE)
        #: Whether the probe waits its idle period (:meth:`wake` ends that at the first arrival).
        self.idle = False
        #: Told how late each probe ran (the app's loop-lag metric: one timer measures it, not two).
        self.on_lag: Callable[[float], None] | None = None
        self._probe_accepted = 0  # connections accepted when the last probe ran
        self._measure_queue = bool(limits.shed_after) and _TCP_INFO is not None
        self._sample_in = 1  # requests on open connections and new connections are sampled apart
        self._sample_accept_in = 1
        self._window_min = _NEVER
        self._window_samples = 0
        self._window_end = 0.0
        self._was_late = False
        #: Requests handed to the app (or shed) so far; the probe compares it to what it last saw.
        self.dispatched = 0
        self._dispatched_seen = 0
        self._slow_turns = 0  # long loop turns in a row, each carrying many requests
        self._slow_since = 0.0  # when the first of them began
        self._busy_until = 0.0
        #: True while loop turns keep running long: probes later than ``SERVE_WITHIN`` of
        #: ``shed_after`` for a whole ``shed_after`` (two at least), then while they stay half that
        #: late, then for twice ``shed_after`` more (so shedding does not flap).
        self.busy = False
        #: True while the listen backlog is overloaded (see :meth:`late_accept`).
        self.queue_late = False
        self._probe_due = 0.0
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
        #: The answer of a refused connection, built once.
        self.refusal = wire.service_unavailable(limits.retry_after, connection=wire.CONNECTION_CLOSE)
        self.lingering_refusals = 0
        #: Writes the one WARNING line of each refusal, rate-limited (:class:`RefusalLog`).
        self.log_refusal = RefusalLog(loop.time)
        self.refused_connections = 0
        self.refused_streams = 0
        #: Requests and new connections answered 503 by load shedding (lag, in-flight, backlog).
        self.shed_requests = 0
        # Totals for /metrics (pyvia.ops.metrics), each counted where it happens, off the hot path.
        #: Connections admitted since the start.
        self.accepted = 0
        #: 503s the server answered by itself, by reason (:data:`UNAVAILABLE_REASONS`).
        self.unavailable = dict.fromkeys(UNAVAILABLE_REASONS, 0)
        #: Connections timed out, by phase (:data:`TIMEOUT_PHASES`).
        self.timeouts = dict.fromkeys(TIMEOUT_PHASES, 0)
        #: Requests refused before the app, by status (:data:`REFUSAL_STATUSES`).
        self.refused_requests = dict.fromkeys(REFUSAL_STATUSES, 0)
        #: Of those, the ones refused for ambiguous framing (request smuggling), and for their ``Host``.
        self.smuggling = 0
        self.hosts_refused = 0
        #: Called with the number of open connections after each change (the balanced acceptor
        #: of several workers publishes it to its peers, :mod:`pyvia.server.balance`).
        self.on_count: Callable[[int], object] | None = None

    def __len__(self) -> int:
        return len(self._connections)

    def __iter__(self) -> Iterator[HttpProtocol]:
        return iter(list(self._connections))

    def add(self, conn: HttpProtocol) -> None:
        self._connections.add(conn)
        if self.on_count is not None:
            self.on_count(len(self._connections))

    def discard(self, conn: HttpProtocol) -> None:
        self._connections.discard(conn)
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
        return True

    def stream_ended(self, conn: HttpProtocol) -> None:
        if conn.stream_counted:
            conn.stream_counted = False
            self.streams -= 1
            key = conn.ip_key
            if key is not None:
                _decrement(self.streams_by_ip, key)

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
        overloaded (:meth:`_late` says how that is judged). Count it with :meth:`shed_late`."""
        return self._late(sock, accept=True)

    def late_request(self, sock: socket.socket | None) -> float:
        """How long a request about to be answered waited, when it must get a 503 instead (else
        -1): it waited longer than ``SERVE_WITHIN`` of ``shed_after`` (unread in its socket behind long loop
        turns, or behind the requests ahead of it) while the server is overloaded. Count it with
        :meth:`shed_late`."""
        return self._late(sock, accept=False)

    def shed_late(self, client: str, path: str, waited: float, *, accepted: bool = False) -> None:
        """Count (and log) a request answered 503 because it waited ``waited`` seconds, in the
        listen queue (``accepted``: its connection's first) or in its socket."""
        self.shed_requests += 1
        if accepted:
            self.unavailable["backlog"] += 1
            self.log_refusal(
                503,
                "shed a request from %s for %s with 503: it waited %.2f s in the listen backlog (shed_after %s s)",
                client or "?",
                path,
                waited,
                self.limits.shed_after,
            )
        else:
            self.unavailable["queued"] += 1
            self.log_refusal(
                503,
                "shed a request from %s for %s with 503: it waited %.2f s to be read (shed_after %s s)",
                client or "?",
                path,
                waited,
                self.limits.shed_after,
            )

    def _late(self, sock: socket.socket | None, *, accept: bool) -> float:
        """The wait of a request (or of a new connection's request) if it must be shed, else -1.

        The wait is how long ago its last bytes arrived, from ``TCP_INFO`` (Linux): a client
        sends a request in one piece and waits for the answer, so that is the time it spent
        unread, in the listen backlog or in its socket behind long loop turns (for an idle
        preconnect, the time since the handshake: at most). Off Linux, and for TLS (bytes arrive
        before they can be read), nothing is measured and only the loop lag sheds.

        CoDel's rule with a fixed target: the server is overloaded (``queue_late``) once every
        sample of a whole window of ``shed_after`` seconds waited longer than ``shed_after`` —
        a standing queue, not the burst a single pause leaves behind (a GC pass, a slow render:
        that queue drains by itself, and its young requests show up in the window). The window
        holds new connections only (their first request, and what the probe takes from the
        queue): requests on open connections are read within a turn or two even while the listen
        queue stands for seconds, so mixed in they would hide it; long turns judge those
        (``busy``). Until then
        one accept or request in ``QUEUE_SAMPLE`` pays the ``getsockopt``; while
        overloaded every one is measured and those that waited too long are answered 503 (a small
        fraction of a real request), so the queue drains and what is served waited at most
        ``shed_after``.
        """
        if not self._measure_queue or sock is None:
            return -1.0
        overloaded = self.queue_late or self.busy
        if not overloaded:
            if accept:
                self._sample_accept_in -= 1
                if self._sample_accept_in > 0:
                    return -1.0
                self._sample_accept_in = QUEUE_SAMPLE
            else:
                self._sample_in -= 1
                if self._sample_in > 0:
                    return -1.0
                self._sample_in = QUEUE_SAMPLE
        try:
            info = sock.getsockopt(socket.IPPROTO_TCP, _TCP_INFO, 104)  # type: ignore[arg-type]
        except (OSError, AttributeError, ValueError):  # a Unix socket, a transport without one
            return -1.0
        if len(info) < 56:
            return -1.0
        waited = float(struct.unpack_from("I", info, 52)[0]) / 1000
        if accept:  # the window judges the listen queue: requests on open connections wait elsewhere
            self._window_samples += 1
            if waited < self._window_min:
                self._window_min = waited
        shed_after = self.limits.shed_after
        if not overloaded and self._slow_turns >= 2 and shed_after is not None and waited > shed_after:
            # A long turn right after others: overloaded now, not at the next probe (which this
            # very turn delays), or the rest of it is served however late.
            self.busy = overloaded = True
            self._busy_until = self.loop.time() + 2 * shed_after
        if overloaded and shed_after is not None and waited > shed_after * SERVE_WITHIN:
            return waited
        return -1.0

    def _judge_backlog(self, now: float) -> None:
        """At the end of each window: overloaded if its least wait was over half of ``shed_after``
        and it held a queue's worth of samples (a few connections that waited through a cold
        start are not a standing queue); back to normal once a window saw a wait of a quarter of
        it or less (or no sample at all)."""
        if now < self._window_end:
            return
        least = self._window_min
        target = self.limits.shed_after
        assert target is not None
        if self.queue_late:
            self.queue_late = least > target / 4
        else:
            self.queue_late = self._window_samples >= _QUEUE_SAMPLES and least > target / 2
        self._window_min = _NEVER
        self._window_samples = 0
        self._window_end = now + target

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

    def refused(self, status: int, cause: str = "", client: str = "", reason: str = "") -> None:
        """Count (and log, with ``reason``) a request refused with ``status`` before the app saw it;
        ``cause`` is ``"smuggling"`` (ambiguous framing) or ``"host"`` (a ``Host`` this server
        does not serve)."""
        if status in self.refused_requests:
            self.refused_requests[status] += 1
        if cause == "smuggling":
            self.smuggling += 1
        elif cause == "host":
            self.hosts_refused += 1
        self.log_refusal(
            status,
            "refused a request from %s with %d: %s",
            client or "?",
            status,
            reason or wire.phrase(status).lower(),
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
            "refused_connections": self.refused_connections,
            "refused_streams": self.refused_streams,
            "shed_requests": self.shed_requests,
            "buffered_bytes": self.buffered_bytes(),
            "accepted": self.accepted,
            "smuggling": self.smuggling,
            "hosts_refused": self.hosts_refused,
            **{f"unavailable.{k}": v for k, v in self.unavailable.items()},
            **{f"timeouts.{k}": v for k, v in self.timeouts.items()},
            **{f"refused.{k}": v for k, v in self.refused_requests.items()},
        }

    # --- timers ---------------------------------------------------------------------------------------

    def start(self) -> None:
        """Start the sweep (and the lag probe, when ``shed_after`` is set)."""
        now = self.loop.time()
        if self._handle is None:
            self._handle = self.loop.call_later(until_tick(now, self._interval), self._sweep)
        if self._probe is None and self._probe_every:
            delay = until_tick(now, self._probe_every)
            self._probe_due = now + delay
            self._probe = self.loop.call_later(delay, self._on_probe)

    def stop(self) -> None:
        """Stop the sweep and the probe (and end the lingering refusals of the listen queue)."""
        self._listening = []
        for fd in list(self._raw):
            self._end_raw(fd)
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        if self._probe is not None:
            self._probe.cancel()
            self._probe = None

    def probe(self, now: float) -> None:
        """Record how late the probe due at ``_probe_due`` ran at ``now``; shed every new request
        while the loop stays late by twice ``shed_after``, and judge the long turns and the listen
        queue of the other rules (:meth:`_late`, :meth:`drain_backlog`).

        A loop turn that runs long (CPU overload on open connections: every ready socket's handler
        runs in one turn) makes the next probe late. One late probe is a pause (a GC pass, one slow
        handler) and sheds nothing; two in a row are a loop that cannot keep up, and the turns that
        follow answer 503 until a probe runs on time again: those are short, so shedding lasts
        about one probe period at a time.
        """
        shed_after = self.limits.shed_after
        self.lag = lag = max(0.0, now - self._probe_due)
        carried = self.dispatched - self._dispatched_seen
        self._dispatched_seen = self.dispatched
        late = shed_after is not None and lag > 2 * shed_after
        # Two probes in a row late by twice shed_after: a loop that stays late whatever it runs,
        # not one pause. (Turns late by less are the other rules', which look at what they carry.)
        self.lagging = lagging = late and self._was_late
        self._was_late = late
        # Long turns (each over SERVE_WITHIN of the target) for a whole shed_after, two at least:
        # requests read late in such turns waited up to a turn each, while the first ones read in
        # it did not, so the window's least wait stays low: CoDel's rule alone would never see this
        # queue. Such a turn must carry many requests: one pause (a collection), a slow handler or
        # the slow turns of a cold start (templates compiled, first imports) are not a queue.
        slow = shed_after is not None and lag > shed_after * SERVE_WITHIN and carried >= _LOADED_TURN
        if slow:
            if not self._slow_turns:
                self._slow_since = now - lag
            self._slow_turns += 1
        else:
            self._slow_turns = 0
        if shed_after is not None and (
            (self._slow_turns >= 2 and now - self._slow_since >= shed_after)
            or (self.busy and lag > shed_after * _STILL_BUSY)
        ):
            # Kept while turns stay even half that long (shedding holds them near SERVE_WITHIN),
            # and for twice shed_after after that, so shedding does not flap.
            self._busy_until = now + 2 * shed_after
        self.busy = now < self._busy_until
        self.shedding = lagging or self.in_flight >= self.max_in_flight
        self._probe_due = now + self._probe_every
        if self._measure_queue:
            self._judge_backlog(now)
            if self._listening:
                self.drain_backlog()

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
        self._listening.append((sock, hand_over))

    def stop_listening(self) -> None:
        """Forget the listening sockets (the server stopped accepting)."""
        self._listening = []

    def drain_backlog(self, limit: int = 4096, hand_over_at_most: int = 16) -> int:
        """Accept what waits in the listen queues (see :meth:`listen`); how many were refused.

        Every connection taken is a sample of the wait (:meth:`_late`'s window), so a standing
        queue is seen even while uvloop accepts too few to sample.
        """
        shed_after = self.limits.shed_after or 0.0
        overloaded = self.queue_late or self.busy or self.lagging
        refused = 0
        handed = 0
        for sock, hand_over in self._listening:
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
                self._window_samples += 1
                if waited < self._window_min:
                    self._window_min = waited
                if not overloaded and self._slow_turns >= 2 and waited > shed_after * SERVE_WITHIN:
                    # The queue is not kept short and turns have been long more than once: the
                    # onset of an overload, before it has lasted a whole shed_after. What is handed
                    # to the loop now would be served several long turns later.
                    overloaded = self.busy = True
                    self._busy_until = self.loop.time() + 2 * shed_after
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
        return path in self.limits.shed_exempt

    def _refuse_raw(self, conn: socket.socket, client: str, waited: float) -> None:
        """The 503 of a connection that waited too long, written on the socket itself.

        The request it sent is read first. When that was a whole head without a body, the socket
        closes at once; otherwise a lingering close, as for any refusal: the write side ends (FIN)
        and what the client still sends is read and dropped for a moment, because closing with
        unread bytes (or bytes on the way) sends RST, which can destroy the 503 before the client
        reads it. Past ``_MAX_RAW_LINGER`` refusals lingering at once, the socket closes at once.
        """
        self.shed_requests += 1
        self.refused_connections += 1
        self.unavailable["backlog"] += 1
        self.log_refusal(
            503,
            "refused a connection from %s with 503: it waited %.2f s in the listen backlog (shed_after %s s)",
            client or "?",
            waited,
            self.limits.shed_after,
        )
        sent = b""
        try:
            conn.setblocking(False)
            with contextlib.suppress(OSError):
                sent = conn.recv(65536)
            conn.send(self.refusal)
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

        try:
            self.loop.add_reader(fd, readable)
        except Exception:  # a loop without add_reader (or the fd refused): close now
            conn.close()
            return
        self._raw[fd] = (conn, self.loop.call_later(_RAW_LINGER, done))

    def _end_raw(self, fd: int) -> None:
        found = self._raw.pop(fd, None)
        if found is None:
            return
        conn, handle = found
        handle.cancel()
        with contextlib.suppress(Exception):
            self.loop.remove_reader(fd)
        conn.close()

    def _on_probe(self) -> None:
        now = self.loop.time()
        dispatched, accepted = self._dispatched_seen, self._probe_accepted  # as the last probe saw them
        self.probe(now)
        if self.on_lag is not None:
            self.on_lag(self.lag)
        self.idle = self.is_quiet(dispatched, accepted)
        every = self._quiet_probe_every if self.idle else self._probe_every
        self._probe_accepted = self.accepted
        delay = until_tick(now, every)
        self._probe_due = now + delay
        self._probe = self.loop.call_later(delay, self._on_probe)

    def wake(self) -> None:
        """A connection or a request came while the probe waited its idle period: probe on the
        fast schedule from now on, so a load that starts is judged within one ``shed_after``."""
        self.idle = False
        if self._probe is not None:
            self._probe.cancel()
            now = self.loop.time()
            delay = until_tick(now, self._probe_every)
            self._probe_due = now + delay
            self._probe = self.loop.call_later(delay, self._on_probe)

    def is_quiet(self, dispatched: int, accepted: int) -> bool:
        """Whether nothing came since the last probe saw ``dispatched`` requests and ``accepted``
        connections, nothing is owed and no overload rule is engaged: then the next probe may wait
        a second (``_IDLE_PROBE``, ``shed_after`` at least). An idle server wakes once a second
        instead of ``1 / _probe_every`` times; what comes next wakes the probe (:meth:`wake`)."""
        engaged = self.busy or self.queue_late or self.lagging or self.shedding or self._slow_turns > 0
        return self.dispatched == dispatched and self.accepted == accepted and not self.in_flight and not engaged

    def sweep(self, now: float) -> None:
        """Time out every connection whose deadline is at or before ``now``."""
        expired = [c for c in self._connections if 0.0 < c.deadline <= now]
        for conn in expired:
            try:
                conn.timeout()
            except Exception:  # a bug in one connection must not stop the sweep for the others
                logger.exception("error while timing out a connection")

    def _sweep(self) -> None:
        now = self.loop.time()
        self.sweep(now)
        self._handle = self.loop.call_later(until_tick(now, self._interval), self._sweep)

    def shutdown(self) -> None:
        """Close idle connections; busy ones close once their response is written."""
        for conn in list(self._connections):
            conn.shutdown()

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


def _last_data_age(sock: socket.socket) -> float:
    """Seconds since ``sock`` last received data (``TCP_INFO``), or 0 when unknown."""
    try:
        info = sock.getsockopt(socket.IPPROTO_TCP, _TCP_INFO, 104)  # type: ignore[arg-type]
    except (OSError, AttributeError, ValueError, TypeError):
        return 0.0
    return float(struct.unpack_from("I", info, 52)[0]) / 1000 if len(info) >= 56 else 0.0


def _has_data(sock: socket.socket) -> bool:
    """Whether the client of a just-accepted socket has sent anything yet (read without taking it)."""
    try:
        return bool(sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT))
    except OSError:  # nothing yet (EAGAIN), or it has gone
        return False


def _first(*values: int | None) -> int:
    return next(v for v in values if v is not None)


def _decrement(counts: dict[str, int], key: str) -> None:
    count = counts.get(key, 0) - 1
    if count > 0:
        counts[key] = count
    else:
        counts.pop(key, None)
