"""Whether the native server is overloaded: the long-turn rule and the listen-queue rule.

The registry's probe measures how late the loop runs; this judges what that and the waits of new
connections mean (a standing queue, long turns that carry many requests, or a pause that drains by
itself), and says which request waited too long to be served. Separate from the registry because
it is the one piece with a policy to tune: the registry counts, this decides.
"""

from __future__ import annotations

import asyncio
import socket
import struct

from pyvia.server.http import ServerLimits

__all__ = ["QUEUE_SAMPLE", "SERVE_WITHIN", "TCP_INFO", "Overload"]

#: One accepted connection in this many has its wait in the listen backlog measured (a
#: ``getsockopt`` call); the verdict holds for the accepts in between.
QUEUE_SAMPLE = 8
#: Linux's ``TCP_INFO``: ``tcpi_last_data_recv`` (ms since the last bytes arrived) is at offset 52.
TCP_INFO = getattr(socket, "TCP_INFO", None)
#: While overloaded, a request (or a new connection) that waited more than this share of
#: ``shed_after`` is answered 503 when it is read: loop turns then stay about that long, so what
#: is served waited at most that, and its answer, or a 503, comes within ``shed_after``.
SERVE_WITHIN = 0.25
#: Overload holds while loop turns stay longer than this share of ``shed_after``.
_STILL_BUSY = SERVE_WITHIN / 2
#: Requests a long turn must carry to count as the queue of an overload (not a slow handler).
_LOADED_TURN = 8
#: Samples a window must hold for its least wait to stand for a queue (CoDel's standing queue).
_QUEUE_SAMPLES = 4
_NEVER = float("inf")


class Overload:
    """The overload verdicts of one server (``busy``, ``queue_late``) and the state behind them.

    The registry holds one and feeds it each probe (:meth:`judge_turns`, :meth:`judge_backlog`);
    a request asks it whether it waited too long (:meth:`late`). The backlog drain
    (:mod:`pyvia.server.backlog`) samples the queue into its window and may declare the onset of
    an overload, so the window and the long-turn state are public.
    """

    __slots__ = (
        "_sample_accept_in",
        "_sample_in",
        "_slow_since",
        "_was_late",
        "_window_end",
        "busy",
        "busy_until",
        "limits",
        "loop",
        "measure_queue",
        "queue_late",
        "slow_turns",
        "window_min",
        "window_samples",
    )

    def __init__(self, loop: asyncio.AbstractEventLoop, limits: ServerLimits) -> None:
        self.loop = loop
        self.limits = limits
        #: Whether waits are measured at all: ``shed_after`` set, and ``TCP_INFO`` there (Linux).
        self.measure_queue = bool(limits.shed_after) and TCP_INFO is not None
        self._sample_in = 1  # requests on open connections and new connections are sampled apart
        self._sample_accept_in = 1
        #: The least wait the current window saw, and how many samples it holds.
        self.window_min = _NEVER
        self.window_samples = 0
        self._window_end = 0.0
        self._was_late = False
        #: Long loop turns in a row, each carrying many requests.
        self.slow_turns = 0
        self._slow_since = 0.0  # when the first of them began
        #: Loop time until which ``busy`` holds.
        self.busy_until = 0.0
        #: True while loop turns keep running long: probes later than ``SERVE_WITHIN`` of
        #: ``shed_after`` for a whole ``shed_after`` (two at least), then while they stay half that
        #: late, then for twice ``shed_after`` more (so shedding does not flap).
        self.busy = False
        #: True while the listen backlog is overloaded (see :meth:`late`).
        self.queue_late = False

    def late(self, sock: socket.socket | None, *, accept: bool) -> float:
        """The wait of a request (or of a new connection's request) if it must be shed, else -1.

        The wait is how long ago its last bytes arrived, from ``TCP_INFO`` (Linux): a client
        sends a request in one piece and waits for the answer, so that is the time it spent
        unread, in the listen backlog or in its socket behind long loop turns (for an idle
        preconnect, the time since the handshake: at most). Off Linux, and for TLS (bytes arrive
        before they can be read), nothing is measured and only the loop lag sheds.

        CoDel's rule with a fixed target: the server is overloaded (``queue_late``) once every
        sample of a whole window of ``shed_after`` seconds waited longer than ``shed_after`` —
        a standing queue, not the burst a single pause leaves behind (a GC pass, a slow render:
        that queue drains by itself, and its young requests show up in the window). The window
        holds new connections only (their first request, and what the probe takes from the
        queue): requests on open connections are read within a turn or two even while the listen
        queue stands for seconds, so mixed in they would hide it; long turns judge those
        (``busy``). Until then
        one accept or request in ``QUEUE_SAMPLE`` pays the ``getsockopt``; while
        overloaded every one is measured and those that waited too long are answered 503 (a small
        fraction of a real request), so the queue drains and what is served waited at most
        ``shed_after``.
        """
        if not self.measure_queue or sock is None:
            return -1.0
        overloaded = self.queue_late or self.busy
        if not overloaded:
            if accept:
                self._sample_accept_in -= 1
                if self._sample_accept_in > 0:
                    return -1.0
                self._sample_accept_in = QUEUE_SAMPLE
            else:
                self._sample_in -= 1
                if self._sample_in > 0:
                    return -1.0
                self._sample_in = QUEUE_SAMPLE
        try:
            info = sock.getsockopt(socket.IPPROTO_TCP, TCP_INFO, 104)  # type: ignore[arg-type]
        except (OSError, AttributeError, ValueError):  # a Unix socket, a transport without one
            return -1.0
        if len(info) < 56:
            return -1.0
        waited = float(struct.unpack_from("I", info, 52)[0]) / 1000
        if accept:  # the window judges the listen queue: requests on open connections wait elsewhere
            self.window_samples += 1
            if waited < self.window_min:
                self.window_min = waited
        shed_after = self.limits.shed_after
        if not overloaded and self.slow_turns >= 2 and shed_after is not None and waited > shed_after:
            # A long turn right after others: overloaded now, not at the next probe (which this
            # very turn delays), or the rest of it is served however late.
            self.busy = overloaded = True
            self.busy_until = self.loop.time() + 2 * shed_after
        if overloaded and shed_after is not None and waited > shed_after * SERVE_WITHIN:
            return waited
        return -1.0

    def judge_turns(self, now: float, lag: float, carried: int) -> bool:
        """Judge the probe that ran ``lag`` seconds late at ``now``, after ``carried`` requests since
        the one before; whether the loop is lagging (late by twice ``shed_after``, twice in a row)."""
        shed_after = self.limits.shed_after
        late = shed_after is not None and lag > 2 * shed_after
        # Two probes in a row late by twice shed_after: a loop that stays late whatever it runs,
        # not one pause. (Turns late by less are the other rules', which look at what they carry.)
        lagging = late and self._was_late
        self._was_late = late
        # Long turns (each over SERVE_WITHIN of the target) for a whole shed_after, two at least:
        # requests read late in such turns waited up to a turn each, while the first ones read in
        # it did not, so the window's least wait stays low: CoDel's rule alone would never see this
        # queue. Such a turn must carry many requests: one pause (a collection), a slow handler or
        # the slow turns of a cold start (templates compiled, first imports) are not a queue.
        slow = shed_after is not None and lag > shed_after * SERVE_WITHIN and carried >= _LOADED_TURN
        if slow:
            if not self.slow_turns:
                self._slow_since = now - lag
            self.slow_turns += 1
        else:
            self.slow_turns = 0
        if shed_after is not None and (
            (self.slow_turns >= 2 and now - self._slow_since >= shed_after)
            or (self.busy and lag > shed_after * _STILL_BUSY)
        ):
            # Kept while turns stay even half that long (shedding holds them near SERVE_WITHIN),
            # and for twice shed_after after that, so shedding does not flap.
            self.busy_until = now + 2 * shed_after
        self.busy = now < self.busy_until
        return lagging

    def judge_backlog(self, now: float) -> None:
        """At the end of each window: overloaded if its least wait was over half of ``shed_after``
        and it held a queue's worth of samples (a few connections that waited through a cold
        start are not a standing queue); back to normal once a window saw a wait of a quarter of
        it or less (or no sample at all)."""
        if now < self._window_end:
            return
        least = self.window_min
        target = self.limits.shed_after
        assert target is not None
        if self.queue_late:
            self.queue_late = least > target / 4
        else:
            self.queue_late = self.window_samples >= _QUEUE_SAMPLES and least > target / 2
        self.window_min = _NEVER
        self.window_samples = 0
        self._window_end = now + target
