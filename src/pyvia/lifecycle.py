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

One periodic sweep of the App compares deadlines with the clock: no timer per tab. Every change
of state goes through :func:`move`, which obeys :data:`TRANSITIONS`.
"""

from __future__ import annotations

import enum
from typing import Protocol


class State(enum.Enum):
    CREATED = "created"
    CONNECTED = "connected"
    DISCONNECTED = "disconnected"
    DESTROYED = "destroyed"


class Event(enum.Enum):
    """What happens to a tab: the only ways its state changes (:func:`move`)."""

    #: Its page was served and it joined the registry (or it was revived).
    REGISTER = "register"
    #: A stream opened (or replaced the open one).
    CONNECT = "connect"
    #: Its stream closed (the peer left, or the server ended it).
    DISCONNECT = "disconnect"
    #: It is destroyed: its deadline passed, it was evicted, or the server stops.
    DESTROY = "destroy"


# The members as module names, which the request path reads: on CPython 3.11 a member read
# through its class costs ~150 ns (EnumType defines __getattr__), a global ~20 ns.
CREATED, CONNECTED, DISCONNECTED, DESTROYED = State.CREATED, State.CONNECTED, State.DISCONNECTED, State.DESTROYED
REGISTER, CONNECT, DISCONNECT, DESTROY = Event.REGISTER, Event.CONNECT, Event.DISCONNECT, Event.DESTROY

#: (state, event) -> next state; a pair not in the table is a bug (:func:`move` raises).
TRANSITIONS: dict[tuple[State, Event], State] = {
    (State.CREATED, Event.REGISTER): State.CREATED,
    (State.CREATED, Event.CONNECT): State.CONNECTED,
    (State.CREATED, Event.DESTROY): State.DESTROYED,
    (State.CONNECTED, Event.CONNECT): State.CONNECTED,
    (State.CONNECTED, Event.DISCONNECT): State.DISCONNECTED,
    (State.CONNECTED, Event.DESTROY): State.DESTROYED,
    (State.DISCONNECTED, Event.CONNECT): State.CONNECTED,
    (State.DISCONNECTED, Event.DISCONNECT): State.DISCONNECTED,  # the server ended it, then its close came
    (State.DISCONNECTED, Event.DESTROY): State.DESTROYED,
}

#: The states whose deadline (connect timeout, cleanup grace) destroys the tab when it passes.
EXPIRES: frozenset[State] = frozenset({State.CREATED, State.DISCONNECTED})


def next_state(state: State, event: Event) -> State:
    """The state after ``event``; raises ``LookupError`` for a move the table does not allow."""
    try:
        return TRANSITIONS[(state, event)]
    except KeyError:
        raise LookupError(f"a {state.name} context cannot {event.value}") from None


class HasState(Protocol):
    state: State


def move(tab: HasState, event: Event) -> State:
    """Move ``tab`` (a context) by ``event`` as the table says: the one writer of its state."""
    tab.state = state = next_state(tab.state, event)
    return state
