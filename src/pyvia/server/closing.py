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

from pyvia.server.states import ConnState

if TYPE_CHECKING:
    from pyvia.server.connection import HttpProtocol

__all__ = ["LINGER", "close", "end_linger", "flush_deadline", "refuse_connection", "reset"]

#: Seconds a refused connection keeps reading (and dropping) after its answer (rule 1).
LINGER = 2.0
#: Refused connections allowed to linger at once; past it a refusal closes at once, so a flood of
#: refused connections cannot hold the descriptors the caps are there to keep.
_MAX_LINGERING_REFUSALS = 256

#: ``SO_LINGER`` on with a time of 0: ``close()`` sends RST and discards the send queue.
_LINGER_OFF = struct.pack("ii", 1, 0)

_LINGERING = ConnState.LINGERING


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
