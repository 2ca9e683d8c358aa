"""Answering one exchange on a native-server connection: the app's result to bytes on the wire.

Functions, not a class: they keep no state of their own (the exchange and the connection hold it),
so they cost a connection no memory. Each ends in one of the connection's moves:
:meth:`~pyvia.server.connection.HttpProtocol.answered` once the last byte is written, the move
to STREAMING once a stream is open.

Rules this module keeps:

1. One ``transport.write`` per complete response (head and body joined); a stream's head waits in
   its sink for the first event.
2. An application error becomes a plain 500 and is logged; the connection keeps serving.
3. A response after which the server closes the connection says ``connection: close``; one that
   does not, does not close it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from typing import TYPE_CHECKING

from pyvia.http import Response, StreamResponse
from pyvia.server import http as wire
from pyvia.server.exchange import Exchange, Sink, call_closed
from pyvia.server.states import ConnState

if TYPE_CHECKING:
    from pyvia.server.connection import HttpProtocol

__all__ = ["finish", "shed", "start_stream", "write_500", "write_response"]

logger = logging.getLogger("pyvia.server")


def finish(conn: HttpProtocol, exchange: Exchange, task: asyncio.Future[object]) -> None:
    """The app's task for ``exchange`` is done: write what it resolved to (a 500 for an error)."""
    if task.cancelled():
        if not conn.leaving:
            logger.error("handler task for %s %s was cancelled", exchange.method, exchange.path)
            write_500(conn, exchange)
        return
    exc = task.exception()
    if exc is not None:
        logger.error("error handling %s %s", exchange.method, exchange.path, exc_info=exc)
        result: object = None
    else:
        result = task.result()
    if conn.leaving:
        return  # the client left while the handler ran
    if isinstance(result, Response):
        write_response(conn, result, exchange)
    elif isinstance(result, StreamResponse):
        start_stream(conn, result, exchange)
    else:
        if exc is None:
            logger.error("handle() for %s %s resolved to %r, not a response", exchange.method, exchange.path, result)
        write_500(conn, exchange)


def shed(conn: HttpProtocol, exchange: Exchange, waited: float, *, accepted: bool = False) -> None:
    """Overloaded: 503 + Retry-After now, without asking the app; the connection stays usable,
    unless it is new and waited in the listen queue (``accepted``): it is closed, as at accept.
    ``waited``: how long the request waited unread, when that is why (else -1)."""
    registry = conn.registry
    closing = waited >= 0 and accepted
    if waited >= 0:
        registry.shed_late(conn.client, exchange.path, waited, accepted=accepted)
    else:
        registry.shed(conn.client, exchange.path)
    keep_alive = exchange.keep_alive and not conn.draining and not closing
    conn.transport.write(
        wire.service_unavailable(
            registry.limits.retry_after,
            head_only=exchange.head_only,
            connection=_connection_header(keep_alive, exchange.http10),
        )
    )
    if closing:  # a lingering close, as any refusal: what the client still sends must not reset it
        conn.final = b""
        conn.answered(False, linger=True)
        return
    conn.answered(keep_alive)


def _connection_header(keep_alive: bool, http10: bool) -> str:
    if keep_alive:
        return wire.CONNECTION_KEEP_ALIVE if http10 else ""
    return wire.CONNECTION_CLOSE


def write_response(conn: HttpProtocol, response: Response, exchange: Exchange) -> None:
    keep_alive = exchange.keep_alive and not conn.draining
    try:
        data = wire.encode_response(
            response.status,
            response.headers,
            response.body,
            head_only=exchange.head_only,
            connection=_connection_header(keep_alive, exchange.http10),
        )
    except Exception:
        logger.exception("invalid response to %s %s", exchange.method, exchange.path)
        write_500(conn, exchange)
        return
    conn.transport.write(data)
    conn.answered(keep_alive)


def write_500(conn: HttpProtocol, exchange: Exchange) -> None:
    keep_alive = exchange.keep_alive and not conn.draining
    conn.transport.write(
        wire.internal_error(head_only=exchange.head_only, connection=_connection_header(keep_alive, exchange.http10))
    )
    conn.answered(keep_alive)


def start_stream(conn: HttpProtocol, stream: StreamResponse, exchange: Exchange) -> None:
    # A stream chunked on HTTP/1.1 ends with its last chunk and leaves the connection open,
    # as the Datastar SDK spec's `connection: keep-alive` says; an HTTP/1.0 one is unframed and
    # ends with the connection, and a stream to a client that asked to close says so too.
    keep_alive = exchange.keep_alive and not conn.draining and not exchange.http10
    exchange.keep_alive = keep_alive
    try:
        head = wire.encode_stream_head(
            stream.status,
            stream.headers,
            chunked=not exchange.http10,
            connection=wire.CONNECTION_KEEP_ALIVE if keep_alive else wire.CONNECTION_CLOSE,
        )
    except Exception:
        logger.exception("invalid stream response to %s %s", exchange.method, exchange.path)
        write_500(conn, exchange)
        call_closed(stream.on_close)
        return
    transport = conn.transport
    if exchange.head_only:
        transport.write(head)
        call_closed(stream.on_close)
        conn.answered(keep_alive)
        return
    registry = conn.registry
    if not registry.stream_started(conn):
        # Over a stream cap: the stream is never opened; the browser retries after a while.
        call_closed(stream.on_close)
        transport.write(wire.service_unavailable(registry.limits.retry_after, connection=wire.CONNECTION_CLOSE))
        conn.answered(False)
        return
    conn.move(ConnState.STREAMING)
    conn.deadline = 0.0  # none until the core closes the sink
    send_buffer = conn.limits.stream_send_buffer
    if send_buffer is not None:
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError, AttributeError):  # a Unix socket, a transport without one
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, send_buffer)
    sink = Sink(conn, transport, head, chunked=not exchange.http10)
    exchange.sink = sink
    exchange.stream_ended = stream.on_close  # not the response: its head and open go
    try:
        stream.open(sink)
    except Exception:
        logger.exception("error opening stream for %s %s", exchange.method, exchange.path)
        if not sink.is_closed:
            sink.peer_gone()
            exchange.stream_ended = None
            call_closed(stream.on_close)
            registry.stream_ended(conn)
            conn.answered(False)  # nothing more is written on this connection
        return
    exchange.request = None  # the stream is open: its request is the app's now, if it wants it
    conn.reader.rest()
    sink.flush_head()
