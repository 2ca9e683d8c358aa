"""How a native-server connection ends: a lingering close, a flushing close, a reset.

Rules this module keeps:

1. A refused connection closes *lingering*: half-closed, it reads and drops what the peer still
   sends for a moment, so those bytes do not make the kernel answer RST, which can destroy the
   unread refusal on the client side (the "lingering close" of Apache and nginx).
2. A closed connection with bytes the peer has not read keeps them while the peer reads; one
   that reads nothing for the keep-alive timeout is reset (nginx's ``send_timeout``).
3. A reset drops what the kernel holds for the peer (``SO_LINGER`` 0): a plain close would leave
   the socket orphaned in FIN-WAIT-1 with its whole send queue, for minutes.
"""

from __future__ import annotations

import contextlib
import socket
import struct
from typing import TYPE_CHECKING

from pyvia.server import http as wire
from pyvia.server.reader import NO_REQUEST
from pyvia.server.states import ConnState

if TYPE_CHECKING:
    from pyvia.server.connection import HttpProtocol
    from pyvia.server.reader import Reject

__all__ = [
    "LINGER",
    "close",
    "end_linger",
    "flush_deadline",
    "refuse_connection",
    "refuse_request",
    "reset",
    "shutdown",
    "stop_reading",
]

#: Seconds a refused connection keeps reading (and dropping) after its answer (rule 1).
LINGER = 2.0
#: Refused connections allowed to linger at once; past it a refusal closes at once, so a flood of
#: refused connections cannot hold the descriptors the caps are there to keep.
_MAX_LINGERING_REFUSALS = 256

#: ``SO_LINGER`` on with a time of 0: ``close()`` sends RST and discards the send queue.
_LINGER_OFF = struct.pack("ii", 1, 0)

_LINGERING = ConnState.LINGERING
_STREAMING = ConnState.STREAMING
_IDLE = ConnState.IDLE
_STALLED = ConnState.STALLED


def refuse_connection(conn: HttpProtocol) -> None:
    """Over a connection cap: a 503 before any request, then close (lingering, if few are)."""
    registry = conn.registry
    conn.final = b""
    conn.transport.write(registry.refusal)
    if registry.lingering_refusals < _MAX_LINGERING_REFUSALS:
        registry.lingering_refusals += 1
        conn.refusing = True
        close(conn, linger=True)
    else:
        close(conn)


def refuse_request(conn: HttpProtocol, reject: Reject) -> None:
    """Count and log a refused request, then answer it (after what is owed) and close."""
    conn.registry.refused(reject.status, reject.cause, conn.client, reject.reason)
    stop_reading(conn, wire.ERRORS[reject.status])


def stop_reading(conn: HttpProtocol, final: bytes) -> None:
    """Read no more requests; write ``final`` (if any) once the owed answers are out, then close.

    With nothing to add, the last owed answer says ``connection: close`` itself.
    """
    conn.final = final
    queue = conn.queue
    exchange = conn.exchange
    if queue:
        queue[-1].keep_alive = False
    elif exchange is not None and exchange.stream_ended is None:
        exchange.keep_alive = False
    if exchange is None and not queue and conn.state < _LINGERING:
        if final:
            conn.transport.write(final)
        close(conn, linger=bool(final))


def shutdown(conn: HttpProtocol) -> None:
    """Graceful stop: close if idle, else finish the request in flight with ``connection: close``."""
    conn.draining = True
    state = conn.state
    if state is _LINGERING:
        end_linger(conn)
        return
    if state is _STREAMING or state >= _LINGERING:
        return  # streams are the app's to end (App.shutdown); abort() ends what is left
    if (state is _IDLE or state is _STALLED) and not conn.queue and conn.reader.phase == NO_REQUEST:
        conn.final = b""
        close(conn)


def close(conn: HttpProtocol, linger: bool = False) -> None:
    """Close after what was written; with ``linger``, half-close and drop input for a while first."""
    if conn.state >= _LINGERING:
        return
    transport = conn.transport
    if linger and transport.can_write_eof():
        conn.move(_LINGERING)
        transport.write_eof()
        conn.deadline = conn.loop.time() + LINGER
        if conn.reading_paused:
            conn.reading_paused = False
            transport.resume_reading()
    else:
        conn.move(ConnState.FLUSHING)
        transport.close()
        flush_deadline(conn)


def end_linger(conn: HttpProtocol) -> None:
    """The lingering moment is over: close (and flush what is left)."""
    conn.move(ConnState.FLUSHING)
    conn.transport.close()
    flush_deadline(conn)


def flush_deadline(conn: HttpProtocol) -> None:
    """After ``close()``: a peer that reads nothing of what is left for the keep-alive timeout
    loses it, instead of holding the connection for ever; one that reads slowly keeps it (rule 2)."""
    left = conn.transport.get_write_buffer_size()
    if left:
        conn.flush_mark = left
        conn.deadline = conn.loop.time() + conn.limits.keep_alive_timeout
    else:
        conn.move(ConnState.CLOSED)
        conn.flush_mark = 0
        conn.deadline = 0.0


def reset(conn: HttpProtocol) -> None:
    """Abort and drop what the kernel still holds for the peer (rule 3): for a peer that stopped
    reading."""
    sock = conn.transport.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError, AttributeError):  # a Unix socket, a transport without one
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_OFF)
    conn.abort()
