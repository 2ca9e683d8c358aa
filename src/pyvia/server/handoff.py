"""Passing a native-server connection to another process: :func:`transfer`.

The cluster (``pyvia.cluster.passing``) gets it as ``request.transfer`` on a plain HTTP/1.1
request and calls it while answering that request; the server knows nothing of the cluster.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from pyvia.server.reader import NO_REQUEST
from pyvia.server.states import ConnState

if TYPE_CHECKING:
    from pyvia.server.connection import HttpProtocol

__all__ = ["transfer"]


async def transfer(conn: HttpProtocol, send: Callable[[int], Awaitable[bool] | None]) -> bool:
    """Offer ``conn`` to another process (``send`` its descriptor): True once it took it.

    Only between requests: with bytes of another request read or queued, or an answer being
    written, the connection stays (the caller forwards instead). Nothing is read while the other
    process decides; when it refuses, the connection carries on here.
    """
    if not _between_requests(conn):
        return False
    transport = conn.transport
    sock = transport.get_extra_info("socket")
    answer = send(sock.fileno()) if sock is not None else None
    if answer is None:
        return False
    transport.pause_reading()
    taken = await answer
    if taken:
        # Theirs now: write nothing, and close only this process's descriptor (no FIN, no RST:
        # the socket lives on in the other process).
        conn.move(ConnState.CLOSED)
        transport.abort()
        return True
    if not conn.reading_paused and not conn.leaving:
        transport.resume_reading()
    return False


def _between_requests(conn: HttpProtocol) -> bool:
    """Answering, with nothing read, queued or closing behind: the moment of a hand-off."""
    exchange = conn.exchange
    return (
        conn.state is ConnState.ANSWERING
        and exchange is not None
        and exchange.stream_ended is None
        and not conn.queue
        and conn.reader.phase == NO_REQUEST
        and conn.final is None
        and not conn.draining
        and not conn.writing_paused
    )
