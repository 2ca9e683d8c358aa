"""A tab context's states and what moves it between them, in one table.

::

    page view ──► CREATED ──stream opens──► CONNECTED ──last stream closes──► DISCONNECTED
                     │                         ▲                                 │
                     │                         └──────── stream reopens ─────────┤
                     └─ connect timeout ──► DESTROYED ◄── deadline passes ───────┘

* CREATED: the page was served; the deadline is the connect timeout (30 s), after which a page
  whose stream never opened (a crawler, a prefetch, a tab closed at once) is destroyed.
* CONNECTED: a stream is open; no deadline.
* DISCONNECTED: the deadline is the later of the cleanup grace (5 s after the stream closed)
  and the reconnect timeout (60 s after the last action), so events produced meanwhile wait
  for the tab to come back.
* DESTROYED: hooks ran, timers stopped; the id may still be revived within the revival window.

One periodic sweep of the App compares deadlines with the clock: no timer per tab.
"""

from __future__ import annotations

import enum


class State(enum.Enum):
    CREATED = "created"
    CONNECTED = "connected"
    DISCONNECTED = "disconnected"
    DESTROYED = "destroyed"


#: (state, event) -> next state. Events: "connect", "disconnect", "expire".
TRANSITIONS: dict[tuple[State, str], State] = {
    (State.CREATED, "connect"): State.CONNECTED,
    (State.CREATED, "expire"): State.DESTROYED,
    (State.CONNECTED, "connect"): State.CONNECTED,
    (State.CONNECTED, "disconnect"): State.DISCONNECTED,
    (State.DISCONNECTED, "connect"): State.CONNECTED,
    (State.DISCONNECTED, "expire"): State.DESTROYED,
}


def next_state(state: State, event: str) -> State:
    """The state after ``event``; raises ``LookupError`` for a move the table does not allow."""
    try:
        return TRANSITIONS[(state, event)]
    except KeyError:
        raise LookupError(f"a {state.name} context cannot {event}") from None
