"""What the native server refused by itself: the exact counts for ``/metrics`` and the WARNING
line of each refusal, rate-limited.

The counts are exact and cheap, the lines are for a person and must not flood the log (an attack
makes thousands of refusals a second). :class:`RefusalCounts` is the base of the connection
registry, so the refusals are counted where the connections are, in one place.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from pyvia.ops import metrics
from pyvia.server import http as wire
from pyvia.server.http import ServerLimits
from pyvia.server.overload import SERVE_WITHIN

__all__ = ["REFUSAL_STATUSES", "TIMEOUT_PHASES", "UNAVAILABLE_REASONS", "RefusalCounts", "RefusalLog"]

logger = logging.getLogger("pyvia.server")

#: Why the server answered 503 by itself: a cap at accept (``connections``, ``connections_per_ip``),
#: a connection that waited too long in the listen backlog (``backlog``), a stream cap
#: (``streams``, ``streams_per_ip``), or load shedding of a request (``in_flight``, ``loop_lag``,
#: ``queued``: one that waited too long to be read).
UNAVAILABLE_REASONS = metrics.UNAVAILABLE_REASONS
#: Where a connection was timed out: its request head (408), its body (408), idle between
#: requests (closed silently), or a peer that stopped reading what it was sent (aborted).
TIMEOUT_PHASES = metrics.TIMEOUT_PHASES
#: The statuses the server refuses a request with before the app sees it (``wire.ERRORS``; 408 is
#: counted as a timeout, 500 is the server's own fault).
REFUSAL_STATUSES = tuple(int(status) for status in metrics.REFUSAL_STATUSES)


class RefusalLog:
    """One WARNING line per refusal the server makes by itself, rate-limited per status.

    A token bucket per status: ``burst`` lines at once, then ``rate`` a second; the lines held
    back are counted and named in the next line that goes out, so a flood of refusals costs the
    log a few lines a second and no traceback, and nothing is silently lost from the count.
    """

    __slots__ = ("_buckets", "_burst", "_clock", "_rate")

    def __init__(self, clock: Callable[[], float], *, rate: float = 1.0, burst: int = 10) -> None:
        self._clock = clock
        self._rate = rate
        self._burst = float(burst)
        #: status -> [allowance, last time, lines held back]
        self._buckets: dict[int, list[float]] = {}

    def __call__(self, status: int, message: str, *args: object) -> bool:
        """Log ``message % args`` (a sentence naming the peer and the reason) unless the status's
        bucket is empty; True when a line was written."""
        now = self._clock()
        bucket = self._buckets.get(status)
        if bucket is None:
            bucket = self._buckets[status] = [self._burst, now, 0.0]
        allowance = min(self._burst, bucket[0] + (now - bucket[1]) * self._rate)
        bucket[1] = now
        if allowance < 1.0:
            bucket[0] = allowance
            bucket[2] += 1
            return False
        bucket[0] = allowance - 1.0
        held, bucket[2] = int(bucket[2]), 0.0
        if held:
            logger.warning(message + " (and %d more %d refusals not logged since the last line)", *args, held, status)
        else:
            logger.warning(message, *args)
        return True


class RefusalCounts:
    """The refusals of one server, by kind, and the rate-limited line of each."""

    __slots__ = (
        "hosts_refused",
        "limits",
        "lingering_refusals",
        "log_refusal",
        "refusal",
        "refused_connections",
        "refused_requests",
        "refused_streams",
        "shed_requests",
        "smuggling",
        "timeouts",
        "unavailable",
    )

    def __init__(self, loop: asyncio.AbstractEventLoop, limits: ServerLimits) -> None:
        self.limits = limits
        #: The answer of a refused connection, built once.
        self.refusal = wire.service_unavailable(limits.retry_after, connection=wire.CONNECTION_CLOSE)
        self.lingering_refusals = 0
        #: Writes the one WARNING line of each refusal, rate-limited (:class:`RefusalLog`).
        self.log_refusal = RefusalLog(loop.time)
        self.refused_connections = 0
        self.refused_streams = 0
        #: Requests and new connections answered 503 by load shedding (lag, in-flight, backlog).
        self.shed_requests = 0
        #: 503s the server answered by itself, by reason (:data:`UNAVAILABLE_REASONS`).
        self.unavailable = dict.fromkeys(UNAVAILABLE_REASONS, 0)
        #: Connections timed out, by phase (:data:`TIMEOUT_PHASES`).
        self.timeouts = dict.fromkeys(TIMEOUT_PHASES, 0)
        #: Requests refused before the app, by status (:data:`REFUSAL_STATUSES`).
        self.refused_requests = dict.fromkeys(REFUSAL_STATUSES, 0)
        #: Of those, the ones refused for ambiguous framing (request smuggling), and for their ``Host``.
        self.smuggling = 0
        self.hosts_refused = 0

    def shed_late(self, client: str, path: str, waited: float, *, accepted: bool = False) -> None:
        """Count (and log) a request answered 503 because it waited ``waited`` seconds, in the
        listen queue (``accepted``: its connection's first) or in its socket."""
        self.shed_requests += 1
        if accepted:
            self.unavailable["backlog"] += 1
            self.log_refusal(
                503,
                "shed a request from %s for %s with 503: the server is overloaded and it waited %.3f s in the "
                "listen backlog, past the %.3f s it serves (a quarter of shed_after %s s)",
                client or "?",
                path,
                waited,
                (self.limits.shed_after or 0.0) * SERVE_WITHIN,
                self.limits.shed_after,
            )
        else:
            self.unavailable["queued"] += 1
            self.log_refusal(
                503,
                "shed a request from %s for %s with 503: the server is overloaded and it waited %.3f s to be read, "
                "past the %.3f s it serves (a quarter of shed_after %s s)",
                client or "?",
                path,
                waited,
                (self.limits.shed_after or 0.0) * SERVE_WITHIN,
                self.limits.shed_after,
            )

    def refused(self, status: int, cause: str = "", client: str = "", reason: str = "") -> None:
        """Count (and log, with ``reason``) a request refused with ``status`` before the app saw it;
        ``cause`` is ``"smuggling"`` (ambiguous framing) or ``"host"`` (a ``Host`` this server
        does not serve)."""
        if status in self.refused_requests:
            self.refused_requests[status] += 1
        if cause == "smuggling":
            self.smuggling += 1
        elif cause == "host":
            self.hosts_refused += 1
        self.log_refusal(
            status,
            "refused a request from %s with %d: %s",
            client or "?",
            status,
            reason or wire.phrase(status).lower(),
        )

    def refusal_stats(self) -> dict[str, float]:
        """The refusal totals for metrics, one key per reason, phase and status too."""
        return {
            "refused_connections": self.refused_connections,
            "refused_streams": self.refused_streams,
            "shed_requests": self.shed_requests,
            "smuggling": self.smuggling,
            "hosts_refused": self.hosts_refused,
            **{f"unavailable.{k}": v for k, v in self.unavailable.items()},
            **{f"timeouts.{k}": v for k, v in self.timeouts.items()},
            **{f"refused.{k}": v for k, v in self.refused_requests.items()},
        }
