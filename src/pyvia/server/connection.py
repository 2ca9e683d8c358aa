"""One HTTP/1.1 connection of the native server, and the registry that times connections out.

:class:`HttpProtocol` is an ``asyncio.Protocol`` fed by httptools. Parser callbacks only collect
(uvicorn's rule); a complete request is answered at once when nothing is ahead of it, otherwise it
waits in a short pipeline queue so responses leave in request order. Refusals, head building and
chunk framing are the pure functions of :mod:`pyvia.server.http`.

Rules this module keeps:

1. One ``transport.write`` per complete response (head and body joined) and one per stream event.
2. A request costs no task unless ``App.handle`` returns an awaitable.
3. No timer per connection: a connection records a ``deadline`` and the one sweep of its
   :class:`ConnectionRegistry` enforces it. A deadline of 0 means "none": while the application
   owes a response, and for the whole life of a stream.
4. An application error becomes a plain 500 and is logged; the connection keeps serving.
5. Capacity is counted in O(1) at accept, at stream start and at close (per-address dicts that
   hold only addresses with something open); a request pays one flag test (``shedding``). Every
   cap answers a 503 with ``Retry-After`` at once: nothing waits for capacity.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import struct
from collections.abc import Awaitable, Callable, Iterator
from typing import TYPE_CHECKING, cast

from httptools import HttpParserError, HttpParserUpgrade, HttpRequestParser

from pyvia.http import Headers, Request, Response, StreamResponse
from pyvia.server import http as wire
from pyvia.server.http import HostPolicy, PeerExemption, ServerLimits

if TYPE_CHECKING:
    from pyvia.server import ServedApp

__all__ = ["REFUSAL_STATUSES", "TIMEOUT_PHASES", "UNAVAILABLE_REASONS", "ConnectionRegistry", "HttpProtocol"]

logger = logging.getLogger("pyvia.server")

# What the parser is in the middle of. Trailers arrive while _BODY and are ignored.
_IDLE, _HEAD, _BODY = 0, 1, 2

#: Seconds a refused connection keeps reading (and dropping) after its answer, so the bytes the
#: client is still sending do not make the kernel answer RST, which can destroy the unread
#: response on the client side (the "lingering close" of Apache and nginx).
_LINGER = 2.0
#: Refused connections allowed to linger at once; past it a refusal closes at once, so a flood of
#: refused connections cannot hold the descriptors the caps are there to keep.
_MAX_LINGERING_REFUSALS = 256
#: One accepted connection in this many has its wait in the listen backlog measured (a
#: ``getsockopt`` of ~2 µs); the verdict holds for the accepts in between.
_QUEUE_SAMPLE = 8
#: Linux's ``TCP_INFO``: ``tcpi_last_data_recv`` (ms since the last bytes arrived) is at offset 52.
_TCP_INFO = getattr(socket, "TCP_INFO", None)
_NEVER = float("inf")

_NO_HEADERS = Headers()
_NO_RAW_HEADERS: list[tuple[bytes, bytes]] = []  # never appended to: on_message_begin sets a fresh list

_METHODS = {m.encode(): m for m in ("GET", "POST", "HEAD", "PUT", "DELETE", "PATCH", "OPTIONS")}

#: Why the server answered 503 by itself: a cap at accept (``connections``, ``connections_per_ip``),
#: a connection that waited too long in the listen backlog (``backlog``), a stream cap
#: (``streams``, ``streams_per_ip``), or load shedding of a request (``in_flight``, ``loop_lag``).
UNAVAILABLE_REASONS = ("connections", "connections_per_ip", "backlog", "streams", "streams_per_ip", "in_flight",
                       "loop_lag")
#: Where a connection was timed out: its request head (408), its body (408), idle between
#: requests (closed silently), or a peer that stopped reading what it was sent (aborted).
TIMEOUT_PHASES = ("header", "body", "idle", "send")
#: The statuses the server refuses a request with before the app sees it (``wire.ERRORS``; 408 is
#: counted as a timeout, 500 is the server's own fault).
REFUSAL_STATUSES = (400, 413, 414, 417, 431, 501, 505)
#: Words of httptools' errors about a request's framing (two Content-Length, Content-Length with
#: Transfer-Encoding, a bad Transfer-Encoding): the request-smuggling attempts it refuses itself.
_FRAMING_WORDS = ("Content-Length", "Transfer-Encoding")


class _Reject(Exception):
    """Raised inside a parser callback to stop parsing and answer ``status`` (then close);
    ``cause`` is ``"smuggling"`` for ambiguous framing, ``"host"`` for a ``Host`` not served."""

    __slots__ = ("cause", "status")

    def __init__(self, status: int, cause: str = "") -> None:
        self.status = status
        self.cause = cause


class _Stop(Exception):
    """Raised inside a parser callback to stop reading requests, silently (queue full, closing)."""


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
        "_connections",
        "_exempt",
        "_handle",
        "_interval",
        "_max_conn_ip",
        "_max_stream_ip",
        "_measure_queue",
        "_probe",
        "_probe_due",
        "_probe_every",
        "_sample_in",
        "_waiter",
        "_was_late",
        "_window_end",
        "_window_min",
        "accepted",
        "by_ip",
        "connections",
        "hosts",
        "hosts_refused",
        "in_flight",
        "lag",
        "lagging",
        "limits",
        "lingering_refusals",
        "loop",
        "max_connections",
        "max_in_flight",
        "max_streams",
        "on_count",
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
        self._measure_queue = bool(limits.shed_after) and _TCP_INFO is not None
        self._sample_in = 1
        self._window_min = _NEVER
        self._window_end = 0.0
        self._was_late = False
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
            return False
        address = conn._client
        if not self._exempt(address):
            count = self.by_ip.get(address, 0)
            if count >= self._max_conn_ip:
                self.refused_connections += 1
                self.unavailable["connections_per_ip"] += 1
                return False
            self.by_ip[address] = count + 1
            conn._ip_key = address
        conn._admitted = True
        self.connections += 1
        self.accepted += 1
        return True

    def release(self, conn: HttpProtocol) -> None:
        """Uncount a connection that is gone (its stream too, if it had one)."""
        if conn._stream_counted:
            self.stream_ended(conn)
        if conn._admitted:
            conn._admitted = False
            self.connections -= 1
            key = conn._ip_key
            if key is not None:
                _decrement(self.by_ip, key)
        if conn._refusing:
            conn._refusing = False
            self.lingering_refusals -= 1

    def stream_started(self, conn: HttpProtocol) -> bool:
        """Count a stream about to open on ``conn``, or refuse it (False) at a stream cap."""
        if self.streams >= self.max_streams:
            self.refused_streams += 1
            self.unavailable["streams"] += 1
            return False
        key = conn._ip_key
        if key is not None:
            count = self.streams_by_ip.get(key, 0)
            if count >= self._max_stream_ip:
                self.refused_streams += 1
                self.unavailable["streams_per_ip"] += 1
                return False
            self.streams_by_ip[key] = count + 1
        conn._stream_counted = True
        self.streams += 1
        return True

    def stream_ended(self, conn: HttpProtocol) -> None:
        if conn._stream_counted:
            conn._stream_counted = False
            self.streams -= 1
            key = conn._ip_key
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

    def late_accept(self, sock: socket.socket | None) -> bool:
        """True when a connection just accepted should be answered 503 because it waited in the
        listen backlog longer than ``shed_after`` while the backlog is overloaded.

        The wait is how long ago its last bytes arrived, from ``TCP_INFO`` (Linux): a client
        sends its request right after connecting, so that is its time in the backlog (at most:
        an idle preconnect counts from the handshake). Off Linux, and for TLS (the handshake came
        after accept), nothing is measured and only the loop lag sheds.

        CoDel's rule with a fixed target: the backlog is overloaded (``queue_late``) once every
        sample of a whole window of ``shed_after`` seconds waited longer than ``shed_after`` —
        a standing queue, not the burst a single pause leaves behind (a GC pass, a slow render:
        that backlog drains by itself, and its young connections show up in the window). Until
        then one accept in ``_QUEUE_SAMPLE`` pays the ``getsockopt`` (~2 µs); while overloaded
        every accept is measured and those that waited too long are refused, so the backlog
        drains at the cost of a 503 each and what is served waited at most ``shed_after``.
        """
        if not self._measure_queue or sock is None:
            return False
        if not self.queue_late:
            self._sample_in -= 1
            if self._sample_in > 0:
                return False
            self._sample_in = _QUEUE_SAMPLE
        try:
            info = sock.getsockopt(socket.IPPROTO_TCP, _TCP_INFO, 104)  # type: ignore[arg-type]
        except (OSError, AttributeError, ValueError):  # a Unix socket, a transport without one
            return False
        if len(info) < 56:
            return False
        waited = struct.unpack_from("I", info, 52)[0] / 1000
        if waited < self._window_min:
            self._window_min = waited
        if self.queue_late and waited > self.limits.shed_after:  # type: ignore[operator]
            self.shed_requests += 1
            self.unavailable["backlog"] += 1
            return True
        return False

    def _judge_backlog(self, now: float) -> None:
        """At the end of each window: overloaded if its least wait was over ``shed_after``; back to
        normal once a window saw a wait of half that or less (or no accept at all)."""
        if now < self._window_end:
            return
        least = self._window_min
        target = self.limits.shed_after
        assert target is not None
        if self.queue_late:
            self.queue_late = least > target / 2
        else:
            self.queue_late = least != _NEVER and least > target
        self._window_min = _NEVER
        self._window_end = now + target

    def shed(self) -> None:
        """Count a request answered 503 by load shedding (the app's work in flight, or a late loop)."""
        self.shed_requests += 1
        self.unavailable["in_flight" if self.in_flight >= self.max_in_flight else "loop_lag"] += 1

    def refused(self, status: int, cause: str = "") -> None:
        """Count a request refused with ``status`` before the app saw it; ``cause`` is
        ``"smuggling"`` (ambiguous framing) or ``"host"`` (a ``Host`` this server does not serve)."""
        if status in self.refused_requests:
            self.refused_requests[status] += 1
        if cause == "smuggling":
            self.smuggling += 1
        elif cause == "host":
            self.hosts_refused += 1

    def buffered_bytes(self) -> int:
        """Bytes every transport of this server still holds for its peer (O(connections))."""
        total = 0
        for conn in self._connections:
            transport = getattr(conn, "_transport", None)
            if transport is not None and not transport.is_closing():
                total += transport.get_write_buffer_size()
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
        if self._handle is None:
            self._handle = self.loop.call_later(self._interval, self._sweep)
        if self._probe is None and self._probe_every:
            self._probe_due = self.loop.time() + self._probe_every
            self._probe = self.loop.call_later(self._probe_every, self._on_probe)

    def stop(self) -> None:
        """Stop the sweep and the probe."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        if self._probe is not None:
            self._probe.cancel()
            self._probe = None

    def probe(self, now: float) -> None:
        """Record how late the probe due at ``_probe_due`` ran at ``now``; shed while the loop stays
        past ``shed_after``.

        A loop turn that runs long (CPU overload on open connections: every ready socket's handler
        runs in one turn) makes the next probe late. One late probe is a pause (a GC pass, one slow
        handler) and sheds nothing; two in a row are a loop that cannot keep up, and the turns that
        follow answer 503 until a probe runs on time again: those are short, so shedding lasts
        about one probe period at a time.
        """
        shed_after = self.limits.shed_after
        self.lag = lag = max(0.0, now - self._probe_due)
        late = shed_after is not None and lag > shed_after
        # Two late probes in a row: a loop that stays late (sustained overload), not one pause.
        self.lagging = lagging = late and self._was_late
        self._was_late = late
        self.shedding = lagging or self.in_flight >= self.max_in_flight
        self._probe_due = now + self._probe_every
        if self._measure_queue:
            self._judge_backlog(now)

    def _on_probe(self) -> None:
        self.probe(self.loop.time())
        self._probe = self.loop.call_later(self._probe_every, self._on_probe)

    def sweep(self, now: float) -> None:
        """Time out every connection whose deadline is at or before ``now``."""
        expired = [c for c in self._connections if 0.0 < c.deadline <= now]
        for conn in expired:
            try:
                conn.timeout()
            except Exception:  # a bug in one connection must not stop the sweep for the others
                logger.exception("error while timing out a connection")

    def _sweep(self) -> None:
        self.sweep(self.loop.time())
        self._handle = self.loop.call_later(self._interval, self._sweep)

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


def _first(*values: int | None) -> int:
    return next(v for v in values if v is not None)


def _decrement(counts: dict[str, int], key: str) -> None:
    count = counts.get(key, 0) - 1
    if count > 0:
        counts[key] = count
    else:
        counts.pop(key, None)


class _Sink:
    """The :class:`pyvia.http.StreamSink` of a native connection: one write per event.

    The head of the response waits in ``_head`` until the first event (or the end of ``open``), so
    a stream that sends its first event while being opened costs one write for both.
    """

    __slots__ = ("_chunked", "_closed", "_conn", "_head", "_transport")

    def __init__(self, conn: HttpProtocol, transport: asyncio.Transport, head: bytes, chunked: bool) -> None:
        self._conn = conn
        self._transport = transport
        self._head: bytes | None = head
        self._chunked = chunked
        self._closed = False

    def write(self, data: bytes) -> None:
        """Send ``data`` as one chunk; ignored once the sink is closed or ``data`` is empty."""
        if self._closed or not data:
            return
        if self._chunked:
            data = b"%x\r\n%b\r\n" % (len(data), data)
        if self._head is not None:
            data = self._head + data
            self._head = None
        self._transport.write(data)

    def flush_head(self) -> None:
        if self._head is not None and not self._closed:
            self._transport.write(self._head)
            self._head = None

    def close(self) -> None:
        """End the body (``0\\r\\n\\r\\n``) and the connection."""
        if self._closed:
            return
        self._closed = True
        data = wire.LAST_CHUNK if self._chunked else b""
        if self._head is not None:
            data = self._head + data
            self._head = None
        if data:
            self._transport.write(data)
        self._conn._stream_finished()

    def peer_gone(self) -> None:
        self._closed = True
        self._head = None

    @property
    def buffered(self) -> int:
        """Bytes the transport holds for this peer: the core's slow-client signal."""
        if self._closed:
            return 0
        return self._transport.get_write_buffer_size()

    @property
    def is_closed(self) -> bool:
        return self._closed


class HttpProtocol(asyncio.Protocol):
    """One client connection: parse requests, hand them to the app, write the answers in order."""

    __slots__ = (  # noqa: RUF023 - grouped by lifetime (STYLE.md), not sorted
        # Server-wide, shared by every connection.
        "_app",
        "_hosts",
        "_limits",
        "_loop",
        "_registry",
        "_scheme",
        # Per connection.
        "_admitted",
        "_busy",
        "_client",
        "_closing",
        "_final",
        "_flushing",
        "_ip_key",
        "_lingering",
        "_refusing",
        "_stream_counted",
        "_parser",
        "_queue",
        "_reading_paused",
        "_sink",
        "_stream",
        "_task",
        "_transport",
        "_writing_paused",
        "deadline",
        "draining",
        # Per request being parsed.
        "_body",
        "_body_size",
        "_body_start",
        "_continue",
        "_head_raw",
        "_head_size",
        "_headers",
        "_http10",
        "_parse",
        "_raw_headers",
        "_url",
        # Per request being answered asynchronously.
        "_pending",
        # Passing to another worker (pyvia.cluster.passing): the request read by the worker that
        # passed this connection here; whether this one may be passed on.
        "_preface",
        "_movable",
    )

    def __init__(self, app: ServedApp, registry: ConnectionRegistry, limits: ServerLimits, scheme: str = "http",
                 preface: bytes = b""):
        self._app = app
        self._limits = limits
        self._loop = registry.loop
        self._registry = registry
        self._hosts = registry.hosts.cache
        self._scheme = scheme

        self._admitted = False  # counted by the registry's connection caps
        self._busy = False  # a response is owed: handler running, or a stream open
        self._client = ""
        self._closing = False  # close() or abort() was called: write nothing more
        self._final: bytes | None = None  # not None: read no more requests; write it, then close
        self._flushing = 0  # closed with this many bytes unsent: the peer must read some in time
        self._ip_key: str | None = None  # the address counted by the per-IP caps (None: exempt)
        self._lingering = False  # answered and half-closed: reading only to drop what arrives
        self._refusing = False  # refused at accept and lingering (counted by the registry)
        self._stream_counted = False  # counted by the registry's stream caps
        self._parser = HttpRequestParser(self)
        # A list, not a deque: an empty deque costs 600 bytes per connection, and this holds at
        # most max_pipelined requests.
        self._queue: list[tuple[Request, bool, bool]] = []
        self._reading_paused = False
        self._sink: _Sink | None = None
        self._stream: StreamResponse | None = None
        self._task: asyncio.Future[object] | None = None
        self._transport: asyncio.Transport  # set in connection_made
        self._writing_paused = False
        #: Loop time after which the sweep calls :meth:`timeout`; 0.0 for none (rule 3).
        self.deadline = 0.0
        #: Set by :meth:`shutdown`: answer what is in flight with ``connection: close``.
        self.draining = False

        self._body: list[bytes] | None = None
        self._body_size = 0
        self._body_start = 0.0
        self._continue = False
        self._head_raw = 0
        self._head_size = 0
        self._headers = _NO_HEADERS
        self._http10 = False
        self._parse = _IDLE
        self._raw_headers = _NO_RAW_HEADERS
        self._url = b""

        self._pending: tuple[Request, bool, bool] | None = None
        self._preface = preface
        # Moved once at most: a connection that carries the actions of tabs on different workers
        # (a browser's pool, shared by its tabs) would move back and forth, and each move costs
        # more than forwarding one action (bench/RESULTS-2.md, section 7b).
        self._movable = scheme == "http" and not preface

    # --- asyncio.Protocol -------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport = cast(asyncio.Transport, transport)  # uvloop's transports do not subclass asyncio's
        self._transport = transport
        sock = transport.get_extra_info("socket")
        peer = transport.get_extra_info("peername")
        if isinstance(peer, tuple | list) and peer:
            self._client = str(peer[0])
        registry = self._registry
        registry.add(self)
        # (a passed connection was accepted long ago by another worker: its wait means nothing)
        if not registry.admit(self) or (self._scheme == "http" and not self._preface and registry.late_accept(sock)):
            self._refuse()
            return
        if sock is not None:
            # OSError: a Unix socket; AttributeError: a transport without a real socket.
            with contextlib.suppress(OSError, AttributeError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        # A fresh connection is an idle one: browsers preconnect and send later.
        self.deadline = self._loop.time() + self._limits.keep_alive_timeout
        if self._preface:
            self.data_received(self._preface)

    def _refuse(self) -> None:
        """Over a connection cap: a 503 before any request, then close (lingering, if few are)."""
        registry = self._registry
        self._final = b""
        self._transport.write(registry.refusal)
        if registry.lingering_refusals < _MAX_LINGERING_REFUSALS:
            registry.lingering_refusals += 1
            self._refusing = True
            self._close(linger=True)
        else:
            self._close()

    def connection_lost(self, exc: Exception | None) -> None:
        self._closing = True
        self._flushing = 0
        registry = self._registry
        registry.discard(self)
        registry.release(self)
        self.deadline = 0.0
        self._queue.clear()
        self._parser = None  # type: ignore[assignment]  # break the parser <-> protocol cycle
        stream, self._stream = self._stream, None
        if stream is not None and self._sink is not None and not self._sink.is_closed:
            self._sink.peer_gone()
            try:
                stream.closed()
            except Exception:
                logger.exception("error in stream close callback")

    def data_received(self, data: bytes) -> None:
        if self._final is not None or self._closing:
            return  # streaming, refusing or closing: what the peer sends now is not read
        if self._parse == _HEAD:
            self._head_raw += len(data)
        try:
            self._parser.feed_data(data)
        except HttpParserUpgrade:
            # Upgrade or CONNECT: the request was answered as plain HTTP; what follows is another
            # protocol, which this server does not speak.
            self._stop_reading(b"")
            return
        except HttpParserError as exc:
            if self._closing or self._final is not None:
                return  # e.g. bytes after "Connection: close": already answered, already leaving
            cause = exc.__context__
            if isinstance(cause, _Reject):
                if logger.isEnabledFor(logging.DEBUG):
                    logger.debug("refused a request from %s with %d", self._client, cause.status)
                self._registry.refused(cause.status, cause.cause)
                self._stop_reading(wire.ERRORS[cause.status])
            elif isinstance(cause, _Stop):
                self._stop_reading(b"")
            elif cause is None:
                if logger.isEnabledFor(logging.DEBUG):
                    logger.debug("malformed request from %s: %s", self._client, exc)
                message = str(exc)
                self._registry.refused(400, "smuggling" if any(w in message for w in _FRAMING_WORDS) else "")
                self._stop_reading(wire.ERRORS[400])
            elif isinstance(cause, Exception):
                logger.error("internal error while parsing a request", exc_info=cause)
                self._stop_reading(wire.ERRORS[500])
            else:
                raise cause from None  # KeyboardInterrupt, SystemExit: not ours to swallow
            return
        if self._final is not None or self._closing:
            return  # a stream started, or a refusal or close is under way
        # Deadlines are set here, once per read, not in the callbacks of each request (rule 3).
        parse = self._parse
        if parse == _HEAD:
            if self._head_raw > self._limits.max_head:
                # One header line still buffered by httptools: cap memory before it completes.
                self._registry.refused(431)
                self._stop_reading(wire.ERRORS[431])
                return
            if self._head_raw == 0 and not self._busy:  # the first piece of this head
                self.deadline = self._loop.time() + self._limits.header_timeout
        elif not self._busy:
            limits = self._limits
            now = self._loop.time()
            if parse == _IDLE:  # the keep-alive timeout runs
                self.deadline = now + limits.keep_alive_timeout
            else:
                # Mid-body: no silence longer than body_timeout, and after that grace the body
                # must average min_body_rate (a body trickled byte by byte is cut off).
                if not self._body_start:
                    self._body_start = now
                self.deadline = min(
                    now + limits.body_timeout,
                    self._body_start + limits.body_timeout + self._body_size / limits.min_body_rate,
                )
        if (self._queue or self._busy) and not self._reading_paused and (
            len(self._queue) >= self._limits.max_pipelined or self._writing_paused
        ):
            self._reading_paused = True
            self._transport.pause_reading()

    def eof_received(self) -> bool | None:
        if self._lingering:
            return None
        if self._stream is not None or not (self._busy or self._queue):
            return None  # nothing owed: close (a stream's peer is gone)
        if self._scheme == "https":
            return None  # TLS cannot half-close; asyncio closes the transport anyway
        self._final = b""
        return True  # keep the write side open for the answers still owed

    def pause_writing(self) -> None:
        self._writing_paused = True
        if self._stream is None:
            # The peer is slow to read a response: read no more requests, and give it the
            # keep-alive timeout to make progress.
            if not self._reading_paused and not self._closing:
                self._reading_paused = True
                self._transport.pause_reading()
            if not self._busy:
                self.deadline = self._loop.time() + self._limits.keep_alive_timeout

    def resume_writing(self) -> None:
        self._writing_paused = False
        if self._stream is None and not self._closing:
            self._next()

    # --- httptools callbacks: collect only -----------------------------------------------------------

    def on_message_begin(self) -> None:
        if self._final is not None or self._closing:
            raise _Stop  # pipelined after a stream, a close or a refusal: not read
        self._parse = _HEAD
        self._url = b""
        self._raw_headers = []
        self._head_size = 0
        self._head_raw = 0
        self._body = None
        self._body_size = 0
        self._body_start = 0.0
        self._continue = False

    def on_url(self, url: bytes) -> None:
        self._url += url
        if len(self._url) > self._limits.max_request_line:
            raise _Reject(414)

    def on_header(self, name: bytes, value: bytes) -> None:
        # Trailers land here too, after the headers were taken: they count, then are ignored.
        raw = self._raw_headers
        raw.append((name, value))
        self._head_size += len(name) + len(value) + 4
        if self._head_size > self._limits.max_header_bytes or len(raw) > self._limits.max_header_count:
            raise _Reject(431)

    def on_headers_complete(self) -> None:
        self._parse = _BODY
        version = self._parser.get_http_version()
        if version == "1.1":
            self._http10 = False
        elif version == "1.0":
            self._http10 = True
        else:
            raise _Reject(505)
        raw = self._raw_headers
        self._headers = headers = Headers.from_raw(raw)
        coding = headers.get("transfer-encoding")
        if len(headers._map) != len(raw):  # a name repeats (rare): one dict size, not a scan
            if len(headers.get_all("host")) > 1:
                raise _Reject(400)  # RFC 9112 §3.2: more than one Host MUST be answered 400
            codings = headers.get_all("transfer-encoding")
            if len(codings) > 1:
                coding = ",".join(codings)  # gzip + chunked on two lines is "gzip, chunked"
        host = headers.get("host")
        if host is None:
            if not self._http10 or not self._registry.hosts(""):
                raise _Reject(400, "host")  # RFC 9112 §3.2: MUST answer 400; an unnamed host is not ours
        elif self._hosts.get(host) is not True and not self._registry.hosts(host):
            raise _Reject(400, "host")  # invalid, or not in allowed_hosts: refused before the app
        length = headers.get("content-length")
        if coding is not None:
            if length is not None or self._http10:
                # Request smuggling (RFC 9112 §6.1, which also makes HTTP/1.0 framing by
                # Transfer-Encoding faulty); httptools refuses the first case too.
                raise _Reject(400, "smuggling")
            if coding.strip().lower() != "chunked":
                raise _Reject(501)
        size = 0
        if length is not None:
            # httptools checked it is digits; leading zeros are allowed, and past 4300 digits
            # int() refuses the string, so count the significant ones first
            digits = length.strip().lstrip("0")
            if len(digits) > 19 or int(digits or "0") > self._limits.max_body:
                raise _Reject(413)  # refused before the body is sent, with or without Expect
            size = int(digits or "0")
        expect = headers.get("expect")
        if expect is not None:
            if expect.strip().lower() != "100-continue":
                raise _Reject(417)
            if not self._http10 and (coding is not None or size > 0):
                if self._busy or self._queue:
                    self._continue = True  # sent when this request's turn comes (_next)
                else:
                    self._transport.write(wire.CONTINUE)

    def on_body(self, body: bytes) -> None:
        self._body_size += len(body)
        if self._body_size > self._limits.max_body:
            raise _Reject(413)
        if self._body is None:
            self._body = [body]
        else:
            self._body.append(body)
        self._continue = False  # the client did not wait for it

    def on_message_complete(self) -> None:
        self._parse = _IDLE
        parser = self._parser
        raw_method = parser.get_method()
        method = _METHODS.get(raw_method) or raw_method.decode("ascii")
        try:
            path, query = wire.split_target(self._url)
        except ValueError:
            raise _Reject(400) from None
        body = self._body
        request = Request(
            method,
            path,
            query,
            self._headers,
            b"" if body is None else body[0] if len(body) == 1 else b"".join(body),
            self._client,
            self._scheme,
        )
        if self._movable and not self._http10:
            request.transfer = self._transfer
        if self._preface:  # the request another worker passed with this connection
            self._preface = b""
            request.state["_passed"] = True
        # Drop what this request held: an idle or streaming connection keeps no request bytes.
        self._body = None
        self._url = b""
        self._headers = _NO_HEADERS
        self._raw_headers = _NO_RAW_HEADERS
        keep_alive = parser.should_keep_alive() and not self.draining
        if self._busy or self._queue or self._writing_paused:
            if len(self._queue) >= self._limits.max_pipelined:
                raise _Stop  # answer what is queued, then close; the client retries the rest
            self._queue.append((request, keep_alive, self._http10))
            return
        self._dispatch(request, keep_alive, self._http10)

    # --- answering -------------------------------------------------------------------------------------

    def _dispatch(self, request: Request, keep_alive: bool, http10: bool) -> None:
        """Hand one request to the app; answer now unless it gave an awaitable (rule 2)."""
        self._busy = True
        self.deadline = 0.0
        if self._registry.shedding and request.path not in self._limits.shed_exempt:
            self._shed(request, keep_alive, http10)
            return
        try:
            result = self._app.handle(request)
        except Exception:
            logger.exception("error handling %s %s", request.method, request.path)
            self._write_500(request, keep_alive, http10)
            return
        if isinstance(result, Response):
            self._write_response(result, request, keep_alive, http10)
        elif isinstance(result, StreamResponse):
            self._start_stream(result, request, keep_alive, http10)
        else:
            try:
                task = asyncio.ensure_future(result, loop=self._loop)  # type: ignore[arg-type]
            except TypeError:
                logger.error("handle() returned %r for %s %s, not a response", result, request.method, request.path)
                self._write_500(request, keep_alive, http10)
                return
            self._task = task
            self._pending = (request, keep_alive, http10)
            self._registry.task_started()
            task.add_done_callback(self._on_task_done)

    def _shed(self, request: Request, keep_alive: bool, http10: bool) -> None:
        """Overloaded: 503 + Retry-After now, without asking the app; the connection stays usable."""
        self._registry.shed()
        keep_alive = keep_alive and not self.draining
        self._transport.write(wire.service_unavailable(
            self._registry.limits.retry_after, head_only=request.method == "HEAD",
            connection=self._connection_header(keep_alive, http10),
        ))
        self._answered(keep_alive)

    def _on_task_done(self, task: asyncio.Future[object]) -> None:
        self._registry.task_done()
        self._task = None
        pending, self._pending = self._pending, None
        assert pending is not None
        request, keep_alive, http10 = pending
        if task.cancelled():
            if not self._closing:
                logger.error("handler task for %s %s was cancelled", request.method, request.path)
                self._write_500(request, keep_alive, http10)
                self._next()
            return
        exc = task.exception()
        if exc is not None:
            logger.error("error handling %s %s", request.method, request.path, exc_info=exc)
            result: object = None
        else:
            result = task.result()
        if self._closing:
            return  # the client left while the handler ran
        if isinstance(result, Response):
            self._write_response(result, request, keep_alive, http10)
        elif isinstance(result, StreamResponse):
            self._start_stream(result, request, keep_alive, http10)
        else:
            if exc is None:
                logger.error("handle() for %s %s resolved to %r, not a response", request.method,
                             request.path, result)
            self._write_500(request, keep_alive, http10)
        self._next()

    def _connection_header(self, keep_alive: bool, http10: bool) -> str:
        if keep_alive and not self.draining:
            return wire.CONNECTION_KEEP_ALIVE if http10 else ""
        return wire.CONNECTION_CLOSE

    def _write_response(self, response: Response, request: Request, keep_alive: bool, http10: bool) -> None:
        keep_alive = keep_alive and not self.draining
        try:
            data = wire.encode_response(
                response.status,
                response.headers,
                response.body,
                head_only=request.method == "HEAD",
                connection=self._connection_header(keep_alive, http10),
            )
        except Exception:
            logger.exception("invalid response to %s %s", request.method, request.path)
            self._write_500(request, keep_alive, http10)
            return
        self._transport.write(data)
        self._answered(keep_alive)

    def _write_500(self, request: Request, keep_alive: bool, http10: bool) -> None:
        keep_alive = keep_alive and not self.draining
        self._transport.write(wire.internal_error(
            head_only=request.method == "HEAD", connection=self._connection_header(keep_alive, http10)
        ))
        self._answered(keep_alive)

    def _answered(self, keep_alive: bool) -> None:
        self._busy = False
        if not keep_alive:
            self._close()

    def _start_stream(self, stream: StreamResponse, request: Request, keep_alive: bool, http10: bool) -> None:
        try:
            head = wire.encode_stream_head(stream.status, stream.headers, chunked=not http10)
        except Exception:
            logger.exception("invalid stream response to %s %s", request.method, request.path)
            self._write_500(request, keep_alive, http10)
            self._call_closed(stream)
            return
        if request.method == "HEAD":
            self._transport.write(head)
            self._call_closed(stream)
            self._answered(keep_alive and not self.draining)
            return
        if not self._registry.stream_started(self):
            # Over a stream cap: the stream is never opened; the browser retries after a while.
            self._call_closed(stream)
            self._transport.write(wire.service_unavailable(
                self._registry.limits.retry_after, connection=wire.CONNECTION_CLOSE))
            self._answered(False)
            return
        # From here the connection belongs to the stream: no more requests are read (Datastar
        # opens each stream on its own connection), and it closes when the stream ends.
        self._final = b""
        self._queue.clear()
        self.deadline = 0.0
        sink = _Sink(self, self._transport, head, chunked=not http10)
        self._sink = sink
        self._stream = stream
        try:
            stream.open(sink)
        except Exception:
            logger.exception("error opening stream for %s %s", request.method, request.path)
            if not sink.is_closed:
                sink.peer_gone()
                self._stream = None
                self._call_closed(stream)
                self._close()
            return
        sink.flush_head()

    def _call_closed(self, stream: StreamResponse) -> None:
        try:
            stream.closed()
        except Exception:
            logger.exception("error in stream close callback")

    def _stream_finished(self) -> None:
        """The core closed the sink: the body is complete, the connection ends."""
        self._stream = None
        self._busy = False
        self._registry.stream_ended(self)
        self._close()

    def _next(self) -> None:
        """After a response or a resumed write: answer queued requests, then settle the state."""
        while self._queue and not self._busy and not self._closing and not self._writing_paused:
            request, keep_alive, http10 = self._queue.pop(0)
            self._dispatch(request, keep_alive, http10)
        if self._busy or self._closing:
            return
        if self._writing_paused:
            # The peer must read what it has before more is answered; resume_writing calls back.
            self.deadline = self._loop.time() + self._limits.keep_alive_timeout
            return
        if self._final is not None:
            if self._final:
                self._transport.write(self._final)
            self._close(linger=bool(self._final))
            return
        if self._reading_paused:
            self._reading_paused = False
            self._transport.resume_reading()
        if self._parse == _IDLE:
            self.deadline = self._loop.time() + self._limits.keep_alive_timeout
        elif self._parse == _HEAD:
            self.deadline = self._loop.time() + self._limits.header_timeout
        else:
            if self._continue:
                self._continue = False
                self._transport.write(wire.CONTINUE)
            self.deadline = self._loop.time() + self._limits.body_timeout

    async def _transfer(self, send: Callable[[int], Awaitable[bool] | None]) -> bool:
        """Offer the connection to another process (``send`` its descriptor): True once it took it.

        Only between requests: with bytes of another request read or queued, or an answer being
        written, the connection stays (the caller forwards instead). Nothing is read while the
        other process decides; when it refuses, the connection carries on here.
        """
        if (self._queue or self._parse != _IDLE or self._closing or self._final is not None or self.draining
                or self._writing_paused or self._stream is not None):
            return False
        sock = self._transport.get_extra_info("socket")
        answer = send(sock.fileno()) if sock is not None else None
        if answer is None:
            return False
        transport = self._transport
        transport.pause_reading()
        taken = await answer
        if taken:
            # Theirs now: write nothing, and close only this process's descriptor (no FIN, no
            # RST: the socket lives on in the other process).
            self._closing = True
            transport.abort()
            return True
        if not self._reading_paused and not self._closing:
            transport.resume_reading()
        return False

    def _stop_reading(self, final: bytes) -> None:
        """Read no more requests; write ``final`` (if any) once the owed answers are out, then close."""
        self._final = final
        if not self._busy and not self._queue:
            if final:
                self._transport.write(final)
            self._close(linger=bool(final))

    def _close(self, linger: bool = False) -> None:
        """Close after what was written; with ``linger``, half-close and drop input for a while first."""
        if self._closing:
            return
        self._closing = True
        transport = self._transport
        if linger and transport.can_write_eof():
            transport.write_eof()
            self._lingering = True
            self.deadline = self._loop.time() + _LINGER
            if self._reading_paused:
                self._reading_paused = False
                transport.resume_reading()
        else:
            transport.close()
            self._flush_deadline()

    def _flush_deadline(self) -> None:
        """After ``close()``: a peer that reads nothing of what is left for the keep-alive timeout
        loses it (slow-read guard, nginx's ``send_timeout``), instead of holding the connection
        for ever; one that reads slowly keeps it."""
        left = self._transport.get_write_buffer_size()
        if left:
            self._flushing = left
            self.deadline = self._loop.time() + self._limits.keep_alive_timeout
        else:
            self._flushing = 0
            self.deadline = 0.0

    # --- called by the registry -------------------------------------------------------------------------

    def timeout(self) -> None:
        """The deadline passed: the request is too slow (408) or the connection too long idle."""
        if self._lingering:
            self._lingering = False
            self._transport.close()
            self._flush_deadline()
            return
        if self._flushing:
            if 0 < self._transport.get_write_buffer_size() < self._flushing:
                self._flush_deadline()  # the peer read some: it gets another period
                return
            self._flushing = 0
            self.deadline = 0.0
            self._registry.timeouts["send"] += 1
            self._transport.abort()  # closed, and the peer read nothing of the rest
            return
        if self._closing or self._busy:
            return
        self.deadline = 0.0
        timeouts = self._registry.timeouts
        if self._writing_paused:
            self._closing = True
            timeouts["send"] += 1
            self._transport.abort()  # the peer stopped reading: do not wait to flush
            return
        late = self._final is None and self._parse != _IDLE and not self._queue
        if late:
            timeouts["header" if self._parse == _HEAD else "body"] += 1
            self._transport.write(wire.ERRORS[408])  # nothing was answered for this request yet
        else:
            timeouts["idle"] += 1
        self._final = b""
        self._close(linger=late)

    def shutdown(self) -> None:
        """Graceful stop: close if idle, else finish the request in flight with ``connection: close``."""
        self.draining = True
        if self._lingering:
            self._lingering = False
            self._transport.close()
            self._flush_deadline()
            return
        if self._closing or self._stream is not None:
            return  # streams are the app's to end (App.shutdown); abort() ends what is left
        if not self._busy and not self._queue and self._parse == _IDLE:
            self._final = b""
            self._close()

    def abort(self) -> None:
        """Close now (the shutdown budget is spent); a handler still running is cancelled."""
        if self._task is not None:
            self._task.cancel()
        self._closing = True
        self._transport.abort()
