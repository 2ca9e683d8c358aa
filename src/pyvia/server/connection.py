"""One HTTP/1.1 connection of the native server: :class:`HttpProtocol`.

:class:`HttpProtocol` is an ``asyncio.Protocol``; its parts each have a module:

* :mod:`pyvia.server.states`: what the connection is doing, one :class:`ConnState`, changed only
  through the table there (:func:`~pyvia.server.states.check_move`);
* :mod:`pyvia.server.reader`: the request being read (httptools and its callbacks), one
  :class:`~pyvia.server.reader.RequestReader` per connection;
* :mod:`pyvia.server.exchange`: a complete request and the state of its answer
  (:class:`~pyvia.server.exchange.Exchange`), and a stream's sink;
* :mod:`pyvia.server.writer`: the app's answer to bytes on the wire;
* :mod:`pyvia.server.timeouts`: what a passed deadline means in each state;
* :mod:`pyvia.server.handoff`: passing the connection to another worker.

A complete request is answered at once when nothing is ahead of it, otherwise it waits in a
short pipeline queue so responses leave in request order. Refusals, head building, chunk framing
and the chunked-body check are the pure functions of :mod:`pyvia.server.http`.

Rules this module keeps:

1. No timer per connection: a connection records a ``deadline`` and the one sweep of its
   :class:`~pyvia.server.registry.ConnectionRegistry` enforces it. A deadline of 0 means
   "none": while the application owes a response, and for the whole life of a stream.
2. A stream that ends cleanly leaves the connection open for the next request, as any response
   does (a pooled client never meets an unannounced close).
3. What the connection's collaborators use is public here (its queue of requests behind the one
   being answered too); its state is not: it changes only through :meth:`HttpProtocol.move`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, cast

from pyvia.http import Request, Response, StreamResponse
from pyvia.server import closing, handoff, writer
from pyvia.server import http as wire
from pyvia.server.exchange import Exchange
from pyvia.server.http import ServerLimits
from pyvia.server.reader import HEAD, NO_REQUEST, Reject, RequestReader, Stop
from pyvia.server.registry import (
    QUEUE_SAMPLE,
    REFUSAL_STATUSES,
    TIMEOUT_PHASES,
    UNAVAILABLE_REASONS,
    ConnectionRegistry,
)
from pyvia.server.states import ConnState, check_move
from pyvia.server.timeouts import TIMEOUTS, after_read

if TYPE_CHECKING:
    from pyvia.server import ServedApp

__all__ = [
    "QUEUE_SAMPLE",
    "REFUSAL_STATUSES",
    "TIMEOUT_PHASES",
    "UNAVAILABLE_REASONS",
    "ConnectionRegistry",
    "Exchange",
    "HttpProtocol",
]

#: Older name of :data:`~pyvia.server.registry.QUEUE_SAMPLE`, kept for the tests that step it.
_QUEUE_SAMPLE = QUEUE_SAMPLE

logger = logging.getLogger("pyvia.server")

IDLE = ConnState.IDLE
RECEIVING = ConnState.RECEIVING
ANSWERING = ConnState.ANSWERING
STREAMING = ConnState.STREAMING
STALLED = ConnState.STALLED
LINGERING = ConnState.LINGERING
FLUSHING = ConnState.FLUSHING
CLOSED = ConnState.CLOSED

#: The accept wait of a connection the registry took from the listen queue and judged young.
_JUDGED = -2.0


class HttpProtocol(asyncio.Protocol):
    """One client connection: read requests, hand them to the app, write the answers in order."""

    __slots__ = (  # noqa: RUF023 - grouped by lifetime (STYLE.md), not sorted
        # Server-wide, shared by every connection.
        "app",
        "limits",
        "loop",
        "registry",
        "scheme",
        # Per connection.
        "_accept_wait",
        "_exchange",
        "_sock",
        "_state",
        "admitted",
        "client",
        "deadline",
        "draining",
        "final",
        "flush_mark",
        "ip_key",
        "queue",
        "reader",
        "reading_paused",
        "refusing",
        "served",
        "stream_counted",
        "transport",
        "writing_paused",
        # Passing to another worker (pyvia.cluster.passing): the request read by the worker that
        # passed this connection here; whether this one may be passed on.
        "_preface",
        "_movable",
    )

    def __init__(
        self,
        app: ServedApp,
        registry: ConnectionRegistry,
        limits: ServerLimits,
        scheme: str = "http",
        preface: bytes = b"",
        *,
        judged: bool = False,
    ):
        self.app = app
        self.limits = limits
        self.loop = registry.loop
        self.registry = registry
        self.scheme = scheme

        self._state = IDLE
        self._sock: socket.socket | None = None  # for TCP_INFO: how long a request waited unread
        # >= 0: waited this long in the listen queue of an overloaded server (its first request gets
        # a 503); _JUDGED: taken from the queue by the registry, which judged it young.
        self._accept_wait = _JUDGED if judged else -1.0
        #: The exchange being answered (None: nothing owed); the queue holds the ones behind it.
        self._exchange: Exchange | None = None
        # None while empty (most of a connection's life: an empty list costs 72 bytes, an empty
        # deque 600); a list, as it holds at most max_pipelined requests.
        self.queue: list[Exchange] | None = None
        #: Not None: read no more requests; write it once what is owed is out, then close.
        self.final: bytes | None = None
        #: Bytes unsent when the send deadline was last armed (the flushing close's progress).
        self.flush_mark = 0
        self.reader = RequestReader(self, limits)
        self.reading_paused = False
        self.writing_paused = False
        self.transport: asyncio.Transport  # set in connection_made
        #: The peer's address ("" when unknown).
        self.client = ""
        #: Counted by the registry's connection caps; the address its per-IP caps count (None: exempt).
        self.admitted = False
        self.ip_key: str | None = None
        #: Refused at accept and lingering (counted by the registry); counted by its stream caps.
        self.refusing = False
        self.stream_counted = False
        #: Exchanges begun on this connection (a stream's sink knows whether it is still the latest).
        self.served = 0
        #: Loop time after which the sweep calls :meth:`timeout`; 0.0 for none (rule 1).
        self.deadline = 0.0
        #: Set by :meth:`shutdown`: answer what is in flight with ``connection: close``.
        self.draining = False

        self._preface = preface
        # Moved once at most: a connection that carries the actions of tabs on different workers
        # (a browser's pool, shared by its tabs) would move back and forth, and each move costs
        # more than forwarding one action (bench/RESULTS-2.md, section 7b).
        self._movable = scheme == "http" and not preface

    @property
    def state(self) -> ConnState:
        return self._state

    @property
    def reading(self) -> bool:
        """Requests are still read (not refusing, not closing)."""
        return self.final is None and self._state < LINGERING

    @property
    def leaving(self) -> bool:
        """Closing or closed: nothing more is answered."""
        return self._state >= LINGERING

    @property
    def owes(self) -> bool:
        """An answer is owed (being answered, or queued)."""
        return self._exchange is not None or bool(self.queue)

    @property
    def exchange(self) -> Exchange | None:
        """The exchange being answered (None: nothing owed)."""
        return self._exchange

    @property
    def unsent(self) -> int:
        """Bytes the transport holds for the peer (closing or not); 0 once the connection is gone."""
        if self._state is CLOSED:
            return 0
        try:
            return self.transport.get_write_buffer_size()
        except (AttributeError, RuntimeError):  # not connected yet, or a transport torn down under us
            return 0

    def move(self, new: ConnState) -> None:
        """Change the state: only moves the table of :mod:`pyvia.server.states` lists."""
        self._state = check_move(self._state, new)

    # --- asyncio.Protocol -------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport = cast(asyncio.Transport, transport)  # uvloop's transports do not subclass asyncio's
        self.transport = transport
        self._sock = sock = transport.get_extra_info("socket")
        peer = transport.get_extra_info("peername")
        if isinstance(peer, tuple | list) and peer:
            self.client = str(peer[0])
        registry = self.registry
        registry.add(self)
        if not registry.admit(self):
            closing.refuse_connection(self)
            return
        # (a passed connection was accepted long ago by another worker: its wait means nothing;
        # TLS read its handshake after accept). Its first request is refused once read, unless
        # it is for a path never shed.
        if self.scheme == "http" and not self._preface and self._accept_wait != _JUDGED:
            self._accept_wait = registry.late_accept(sock)
        if sock is not None:
            # OSError: a Unix socket; AttributeError: a transport without a real socket.
            with contextlib.suppress(OSError, AttributeError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        # A fresh connection is an idle one: browsers preconnect and send later.
        self.deadline = self.loop.time() + self.limits.keep_alive_timeout
        if self._preface:
            self.data_received(self._preface)

    def connection_lost(self, exc: Exception | None) -> None:
        self.move(CLOSED)
        registry = self.registry
        registry.discard(self)
        registry.release(self)
        self.deadline = 0.0
        self.queue = None
        self.reader.close()
        if self._exchange is not None:
            self._exchange.peer_left()

    def data_received(self, data: bytes) -> None:
        if self.final is not None or self._state >= LINGERING:
            return  # refusing or closing: what the peer sends now is not read
        reader = self.reader
        try:
            reader.feed(data)
        except Reject as reject:
            closing.refuse_request(self, reject)
            return
        except Stop as stop:
            closing.stop_reading(self, stop.final)
            return
        state = self._state
        if self.final is not None or state >= LINGERING:
            return  # a refusal or close is under way
        if reader.phase == HEAD and reader.head_raw > self.limits.max_head:
            # One header line still buffered by httptools: cap memory before it completes.
            closing.refuse_request(self, Reject(431, f"request head over {self.limits.max_head} bytes"))
            return
        # Deadlines are set once per read, not per callback (rule 1).
        if state is IDLE and reader.phase == NO_REQUEST:  # the keep-alive timeout runs
            self.deadline = self.loop.time() + self.limits.keep_alive_timeout
        else:
            after_read(self, state)
        queue = self.queue
        if (
            (queue or self._exchange is not None)
            and not self.reading_paused
            and ((len(queue) if queue else 0) >= self.limits.max_pipelined or self.writing_paused)
        ):
            self.reading_paused = True
            self.transport.pause_reading()

    def eof_received(self) -> bool | None:
        state = self._state
        if state is LINGERING or state is STREAMING:
            return None  # nothing more owed: close (a stream's peer is gone)
        if self._exchange is None and not self.queue:
            return None
        if self.scheme == "https":
            return None  # TLS cannot half-close; asyncio closes the transport anyway
        closing.stop_reading(self, b"")
        return True  # keep the write side open for the answers still owed

    def pause_writing(self) -> None:
        self.writing_paused = True
        state = self._state
        if state is STREAMING or state >= LINGERING:
            return  # the core watches a stream's buffer; a closing connection has its deadline
        # The peer is slow to read a response: read no more requests, and give it the keep-alive
        # timeout to make progress.
        if not self.reading_paused:
            self.reading_paused = True
            self.transport.pause_reading()
        if state is IDLE or state is RECEIVING:
            self.move(STALLED)
            self.deadline = self.loop.time() + self.limits.keep_alive_timeout

    def resume_writing(self) -> None:
        self.writing_paused = False
        if self._state is STALLED:
            self._next()

    # --- called by the reader ----------------------------------------------------------------------

    def request_begins(self) -> bool:
        """A request's first byte was read: False when no more requests are read."""
        if self.final is not None or self._state >= LINGERING:
            return False
        if self._state is IDLE:
            self.move(RECEIVING)
        return True

    def received(self, request: Request, keep_alive: bool, http10: bool) -> None:
        """A complete request: answer it now, or queue it behind those owed."""
        if self._movable and not http10:
            request.transfer = self._transfer
        if self._preface:  # the request another worker passed with this connection
            self._preface = b""
        exchange = Exchange(request, keep_alive and not self.draining, http10)
        if self._exchange is not None or self.queue or self.writing_paused:
            queue = self.queue
            if (len(queue) if queue else 0) >= self.limits.max_pipelined:
                raise Stop  # answer what is queued, then close; the client retries the rest
            if queue is None:
                self.queue = [exchange]
            else:
                queue.append(exchange)
            return
        self._dispatch(exchange)

    # --- answering ---------------------------------------------------------------------------------

    def _dispatch(self, exchange: Exchange) -> None:
        """Hand one request to the app (:mod:`pyvia.server.writer`), or shed it when overloaded."""
        self.move(ANSWERING)
        self._exchange = exchange
        self.served += 1
        self.deadline = 0.0
        registry = self.registry
        registry.dispatched += 1
        if registry.idle:
            registry.wake()
        shedding = registry.shedding
        # A connection's first request was judged when it was accepted (how long it waited in the
        # listen queue); what it waits after that is the server's own turns, not a queue to shed.
        first = self.served == 1
        waited = -1.0 if shedding else self._accept_wait if first else registry.late_request(self._sock)
        if (shedding or waited >= 0) and exchange.path not in self.limits.shed_exempt:
            writer.shed(self, exchange, waited, accepted=first)
            return
        request = exchange.request
        assert request is not None  # let go only once a stream is open
        try:
            result = self.app.handle(request)
        except Exception:
            logger.exception("error handling %s %s", request.method, request.path)
            writer.write_500(self, exchange)
            return
        if isinstance(result, Response):
            # Its tab may keep the request (``c.request``) for as long as it is open: the bound
            # ``transfer`` would keep this connection with it, long after it closed.
            request.transfer = None
            writer.write_response(self, result, exchange)
        elif isinstance(result, StreamResponse):
            request.transfer = None
            writer.start_stream(self, result, exchange)
        else:  # an awaitable: its task answers (a request costs no task unless the app needs one)
            try:
                task: asyncio.Future[object] = asyncio.ensure_future(result, loop=self.loop)
            except TypeError:
                logger.error("handle() returned %r for %s %s, not a response", result, request.method, request.path)
                writer.write_500(self, exchange)
                return
            exchange.task = task
            registry.task_started()
            task.add_done_callback(self.task_done)

    def task_done(self, task: asyncio.Future[object]) -> None:
        """The app's task for the exchange being answered is done."""
        self.registry.task_done()
        exchange = self._exchange
        if exchange is None or exchange.task is not task:
            return  # the connection was aborted and moved on (a bug elsewhere, or a transfer)
        exchange.task = None
        if exchange.request is not None:
            exchange.request.transfer = None  # as in _dispatch
        writer.finish(self, exchange, task)

    def answered(self, keep_alive: bool, linger: bool = False) -> None:
        """The exchange's last byte is written: close (as its head said), or go on to the next."""
        self._exchange = None
        if not keep_alive:
            closing.close(self, linger)
        else:
            self._next()

    def _next(self) -> None:
        """Nothing is owed now: answer the next queued request, or settle in the state that waits."""
        if self._state >= LINGERING:
            return
        queue = self.queue
        if queue and not self.writing_paused:
            exchange = queue.pop(0)
            if not queue:
                self.queue = None
            self._dispatch(exchange)
            return
        if self.writing_paused:
            # The peer must read what it has before more is answered; resume_writing calls back.
            self.move(STALLED)
            self.deadline = self.loop.time() + self.limits.keep_alive_timeout
            return
        if self.final is not None:
            if self.final:
                self.transport.write(self.final)
            closing.close(self, linger=bool(self.final))
            return
        if self.reading_paused:
            self.reading_paused = False
            self.transport.resume_reading()
        reader = self.reader
        phase = reader.phase
        if phase == NO_REQUEST:
            self.move(IDLE)
            self.deadline = self.loop.time() + self.limits.keep_alive_timeout
        elif phase == HEAD:
            self.move(RECEIVING)
            self.deadline = self.loop.time() + self.limits.header_timeout
        else:
            self.move(RECEIVING)
            if reader.pending_continue:
                reader.pending_continue = False
                self.transport.write(wire.CONTINUE)
            self.deadline = self.loop.time() + self.limits.body_timeout

    def _transfer(self, send: Callable[[int], Awaitable[bool] | None]) -> Awaitable[bool]:
        return handoff.transfer(self, send)

    # --- called by the registry --------------------------------------------------------------------

    def timeout(self) -> None:
        """The deadline passed; what that means depends on the state (:data:`TIMEOUTS`)."""
        handler = TIMEOUTS.get(self._state)
        if handler is None:
            self.deadline = 0.0  # no deadline runs in this state: a stale one
        else:
            handler(self)

    def abort(self) -> None:
        """Close now (the shutdown budget is spent); a handler still running is cancelled."""
        exchange = self._exchange
        if exchange is not None and exchange.task is not None:
            exchange.task.cancel()
        self.move(CLOSED)
        self.transport.abort()
