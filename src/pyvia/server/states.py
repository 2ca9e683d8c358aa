"""The states of one native-server connection and the moves between them (h11's ``_state.py``).

Rules this module keeps:

1. Everything a connection's state decides lives here: the states, which moves are allowed, and
   which deadline each state runs. :class:`~pyvia.server.connection.HttpProtocol` changes its
   state only through :func:`check_move`, so a move this table does not list is a bug that
   raises, never a silent mix of flags.
2. Nothing here does I/O: the table is data, so docs and tests can draw or walk it.

Orthogonal to the state, and kept apart on purpose: where the parser is inside the request being
read (a request may arrive while an earlier one is answered), the flow control of the transport
(reading and writing paused), and ``final``, the last bytes to write before the connection ends.
"""

from __future__ import annotations

import enum

__all__ = ["DEADLINES", "TRANSITIONS", "ConnState", "check_move"]


class ConnState(enum.IntEnum):
    """What a connection is doing (an ``IntEnum``: compared and looked up on every request)."""

    #: Nothing owed and no byte of a next request read: the keep-alive deadline runs.
    IDLE = 0
    #: A request is arriving and nothing is owed: the header (or body) deadline runs.
    RECEIVING = 1
    #: A response is owed: the app is answering (no deadline: the app's time is its own).
    ANSWERING = 2
    #: A stream response is open; it ends when the core closes its sink (no deadline).
    STREAMING = 3
    #: Nothing is answered until the peer reads what it was sent: the send deadline runs.
    STALLED = 4
    #: Refused and half-closed: reading only to drop what the peer still sends, for a moment.
    LINGERING = 5
    #: Closed with bytes the peer has still to read: the send deadline runs.
    FLUSHING = 6
    #: Nothing more will be written (closed and flushed, aborted, or lost).
    CLOSED = 7


_S = ConnState

#: state -> the states it may move to. Any state may move to CLOSED (abort, a lost connection).
TRANSITIONS: dict[ConnState, frozenset[ConnState]] = {
    _S.IDLE: frozenset({_S.RECEIVING, _S.ANSWERING, _S.STALLED, _S.LINGERING, _S.FLUSHING, _S.CLOSED}),
    _S.RECEIVING: frozenset({_S.ANSWERING, _S.STALLED, _S.LINGERING, _S.FLUSHING, _S.CLOSED}),
    _S.ANSWERING: frozenset(
        {_S.IDLE, _S.RECEIVING, _S.ANSWERING, _S.STREAMING, _S.STALLED, _S.LINGERING, _S.FLUSHING, _S.CLOSED}
    ),
    _S.STREAMING: frozenset({_S.IDLE, _S.RECEIVING, _S.ANSWERING, _S.STALLED, _S.LINGERING, _S.FLUSHING, _S.CLOSED}),
    _S.STALLED: frozenset({_S.IDLE, _S.RECEIVING, _S.ANSWERING, _S.LINGERING, _S.FLUSHING, _S.CLOSED}),
    _S.LINGERING: frozenset({_S.FLUSHING, _S.CLOSED}),
    _S.FLUSHING: frozenset({_S.CLOSED}),
    _S.CLOSED: frozenset({_S.CLOSED}),
}

#: state -> the :class:`~pyvia.server.http.ServerLimits` field giving its deadline, ``"linger"``
#: for the fixed lingering close, or None for no deadline. RECEIVING's is ``header_timeout``
#: while the head arrives and the body rule (``body_timeout``, ``min_body_rate``) after it.
DEADLINES: dict[ConnState, str | None] = {
    _S.IDLE: "keep_alive_timeout",
    _S.RECEIVING: "header_timeout",
    _S.ANSWERING: None,
    _S.STREAMING: None,
    _S.STALLED: "keep_alive_timeout",
    _S.LINGERING: "linger",
    _S.FLUSHING: "keep_alive_timeout",
    _S.CLOSED: None,
}

#: Indexed by state: the allowed next states as a bit mask (one shift and one AND per move).
_MASKS: tuple[int, ...] = tuple(sum(1 << int(t) for t in TRANSITIONS[s]) for s in ConnState)


def check_move(current: ConnState, new: ConnState) -> ConnState:
    """``new`` if the table allows ``current -> new``; raises RuntimeError otherwise (a bug)."""
    if not _MASKS[current] >> new & 1:
        raise RuntimeError(f"connection state {current.name} -> {new.name} is not a move of the table")
    return new
