"""What a passed deadline means for a native-server connection, by state: :data:`TIMEOUTS`.

No timer per connection: a connection records a ``deadline`` (loop time; 0.0 for none) and the one
sweep of its :class:`~pyvia.server.registry.ConnectionRegistry` calls
:meth:`~pyvia.server.connection.HttpProtocol.timeout` once it passed, which looks its state up
here. Which limit each state's deadline comes from is :data:`pyvia.server.states.DEADLINES`; a
state without a deadline (answering, streaming, closed) has no entry.
"""

from __future__ import annotations

import fcntl
import struct
import termios
from collections.abc import Callable
from typing import TYPE_CHECKING

from pyvia.server import closing
from pyvia.server import http as wire
from pyvia.server.reader import HEAD
from pyvia.server.states import ConnState

if TYPE_CHECKING:
    import asyncio

    from pyvia.server.connection import HttpProtocol

__all__ = ["TIMEOUTS", "after_read", "kernel_unsent"]


def after_read(conn: HttpProtocol, state: ConnState) -> None:
    """Arm the deadline of what was just read (once per read, not in each parser callback); the
    connection arms the commonest itself (idle, nothing of a next request read)."""
    reader = conn.reader
    if reader.phase == HEAD:
        if reader.head_raw == 0 and state is ConnState.RECEIVING:  # the first piece of this head
            conn.deadline = conn.loop.time() + conn.limits.header_timeout
    elif state is ConnState.IDLE:  # the keep-alive timeout runs
        conn.deadline = conn.loop.time() + conn.limits.keep_alive_timeout
    elif state is ConnState.RECEIVING:
        # Mid-body: no silence longer than body_timeout, and after that grace the body must
        # average min_body_rate (a body trickled byte by byte is cut off).
        limits = conn.limits
        now = conn.loop.time()
        if not reader.body_start:
            reader.body_start = now
        conn.deadline = min(
            now + limits.body_timeout,
            reader.body_start + limits.body_timeout + reader.body_size / limits.min_body_rate,
        )


def _idle(conn: HttpProtocol) -> None:
    """Idle past the keep-alive timeout: close silently (nothing is owed), or abort when the
    kernel still holds bytes the peer has not read all that time (a stream's last frames to a
    reader that stopped): closed, the socket would keep them, orphaned, for minutes more."""
    conn.deadline = 0.0
    timeouts = conn.registry.timeouts
    timeouts["idle"] += 1
    conn.final = b""
    if kernel_unsent(conn.transport) > 0:
        timeouts["send"] += 1
        closing.reset(conn)
        return
    closing.close(conn)


def kernel_unsent(transport: asyncio.Transport) -> int:
    """Bytes in the socket's kernel send queue, not yet acknowledged by the peer (0 if unknown)."""
    sock = transport.get_extra_info("socket")
    try:
        packed = fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, b"\0\0\0\0")
    except (OSError, AttributeError, ValueError):  # no socket, a Unix socket, not Linux
        return 0
    return int(struct.unpack("i", packed)[0])


def _request(conn: HttpProtocol) -> None:
    """A request head or body too slow to arrive: 408, then a lingering close."""
    conn.deadline = 0.0
    phase = "header" if conn.reader.phase == HEAD else "body"
    registry = conn.registry
    registry.timeouts[phase] += 1
    limits = conn.limits
    registry.log_refusal(
        408,
        "timed out a request from %s with 408: its %s did not arrive in time (%s %s s)",
        conn.client,
        "head" if phase == "header" else "body",
        f"{phase}_timeout",
        limits.header_timeout if phase == "header" else limits.body_timeout,
    )
    conn.transport.write(wire.ERRORS[408])  # nothing was answered for this request yet
    conn.final = b""
    closing.close(conn, linger=True)


def _stalled(conn: HttpProtocol) -> None:
    """The peer stopped reading what it was sent: do not wait to flush."""
    conn.deadline = 0.0
    conn.registry.timeouts["send"] += 1
    closing.reset(conn)


def _lingered(conn: HttpProtocol) -> None:
    """The lingering moment is over: close (and flush what is left)."""
    closing.end_linger(conn)


def _flush(conn: HttpProtocol) -> None:
    """Closed with bytes unsent: another period if the peer read some, else abort."""
    if 0 < conn.transport.get_write_buffer_size() < conn.flush_mark:
        closing.flush_deadline(conn)  # the peer read some: it gets another period
        return
    conn.flush_mark = 0
    conn.deadline = 0.0
    conn.registry.timeouts["send"] += 1
    closing.reset(conn)  # closed, and the peer read nothing of the rest


#: state -> what its deadline passing means; states without a deadline have no entry.
TIMEOUTS: dict[ConnState, Callable[[HttpProtocol], None]] = {
    ConnState.IDLE: _idle,
    ConnState.RECEIVING: _request,
    ConnState.STALLED: _stalled,
    ConnState.LINGERING: _lingered,
    ConnState.FLUSHING: _flush,
}
