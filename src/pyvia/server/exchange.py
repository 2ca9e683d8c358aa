"""One request on a native-server connection (:class:`Exchange`) and a stream's sink (:class:`Sink`).

The connection (:class:`~pyvia.server.connection.HttpProtocol`) keeps its own state; what belongs
to one request and its answer lives here, from the parsed request to the last byte written
(uvicorn's RequestResponseCycle).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from pyvia.http import Request
from pyvia.server import closing
from pyvia.server import http as wire
from pyvia.server.states import ConnState

if TYPE_CHECKING:
    from pyvia.server.connection import HttpProtocol

__all__ = ["Exchange", "Sink", "call_closed"]

logger = logging.getLogger("pyvia.server")


class Exchange:
    """One request on a connection and the state of its answer (uvicorn's RequestResponseCycle).

    Created when the request is complete; it lives until the last byte of its response is
    written: the handler's task while the app answers, the stream and its sink while streaming.
    """

    __slots__ = ("http10", "keep_alive", "method", "path", "request", "sink", "stream_ended", "task")

    def __init__(self, request: Request, keep_alive: bool, http10: bool) -> None:
        #: The request until its answer starts: an open stream lets it go (a tab's stream is
        #: long-lived, and the app keeps what it needs of it), keeping its method and path for the logs.
        self.request: Request | None = request
        self.method = request.method
        self.path = request.path
        #: The client allows another request after this one (and the server has not refused it).
        self.keep_alive = keep_alive
        #: An HTTP/1.0 request: its keep-alive is announced, its stream cannot be chunked.
        self.http10 = http10
        self.task: asyncio.Future[object] | None = None
        #: While a stream is open: what tells the core it ended (the response's ``on_close``; the
        #: response itself, its head and its ``on_open`` are let go once it opened).
        self.stream_ended: Callable[[], None] | None = None
        self.sink: Sink | None = None

    @property
    def head_only(self) -> bool:
        return self.method == "HEAD"

    def peer_left(self) -> None:
        """The connection was lost: an open stream learns it (its sink keeps nothing more)."""
        ended = self.stream_ended
        if ended is None:
            return
        self.stream_ended = None
        sink = self.sink
        if sink is not None and not sink.is_closed:
            sink.peer_gone()
            call_closed(ended)


def call_closed(ended: Callable[[], None]) -> None:
    """Tell the core its stream ended (``ended``: a stream response's ``on_close``); an error of
    its callback is logged, not raised."""
    try:
        ended()
    except Exception:
        logger.exception("error in stream close callback")


class Sink:
    """The :class:`pyvia.http.StreamSink` of a native connection: one write per event.

    The head of the response waits in ``_head`` until the first event (or the end of ``open``), so
    a stream that sends its first event while being opened costs one write for both. ``_turn`` is
    the connection's exchange count when the stream began: once the connection serves another
    request, what its transport holds is no longer this stream's.
    """

    __slots__ = ("_chunked", "_closed", "_conn", "_gone", "_head", "_transport", "_turn")

    def __init__(self, conn: HttpProtocol, transport: asyncio.Transport, head: bytes, chunked: bool) -> None:
        self._conn = conn
        self._transport = transport
        self._head: bytes | None = head
        self._chunked = chunked
        self._closed = False
        self._gone = False  # the peer left or the stream was aborted: nothing is held for it
        self._turn = conn.served

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
        """End the body (``0\\r\\n\\r\\n``); the connection goes on to the next request (or closes,
        as the head announced)."""
        if self._closed:
            return
        self._closed = True
        data = wire.LAST_CHUNK if self._chunked else b""
        if self._head is not None:
            data = self._head + data
            self._head = None
        if data:
            self._transport.write(data)
        # The body is complete: the next request may follow (a stream that ends cleanly leaves
        # the connection open, as any response does).
        conn = self._conn
        exchange = conn.exchange
        if exchange is None or conn.state is not ConnState.STREAMING:
            return
        exchange.stream_ended = None
        conn.registry.stream_ended(conn)
        conn.answered(exchange.keep_alive and not conn.draining)

    def abort(self) -> None:
        """End the stream and its connection now, dropping what the peer has not read.

        For a peer that stopped reading: its unsent bytes are memory held for nobody, and the tab
        reconnects to a full render anyway. Once the connection serves another request it is no
        longer this stream's to end, and nothing happens.
        """
        if self._gone:
            return
        self._gone = self._closed = True
        self._head = None
        conn = self._conn
        if conn.served != self._turn or conn.state is ConnState.CLOSED:
            return
        exchange = conn.exchange
        if exchange is not None and exchange.stream_ended is not None:
            exchange.stream_ended = None
            conn.registry.stream_ended(conn)
        conn.registry.timeouts["send"] += 1
        closing.reset(conn)

    def peer_gone(self) -> None:
        self._closed = self._gone = True
        self._head = None

    @property
    def buffered(self) -> int:
        """Bytes the transport still holds for this stream's peer: the core's slow-client signal.

        After :meth:`close` too, until the peer reads them (or the connection serves another
        request): the process still holds them, so the core counts them against its cap.
        """
        if not self._closed:
            return self._transport.get_write_buffer_size()
        if self._gone or self._conn.served != self._turn:
            return 0
        return self._conn.unsent

    @property
    def is_closed(self) -> bool:
        return self._closed
