"""The nats-server ``pyvia run --workers N`` starts when it is given no ``--engine``.

Several workers share their state through an engine; without one named, the supervisor runs a
``nats-server`` of its own for them, with a password derived from the app secret (the workers
have the secret, so they log in; nothing else on the machine can), and starts it again on the
same port, with its data, when it dies. Separate from the supervisor because it is one more child
process with its own life, not a worker.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from pyvia.cluster.base import redact_url
from pyvia.server.workers import describe_exit

if TYPE_CHECKING:
    from pyvia.cluster.nats_server import LocalNats

__all__ = ["EmbeddedEngine"]

log = logging.getLogger("pyvia.supervisor")


class EmbeddedEngine:
    """The supervisor's nats-server, and when to start it again after it died."""

    __slots__ = ("_delay", "nats", "restart_at")

    def __init__(self, secret: bytes) -> None:
        from pyvia.cluster.nats_server import LocalNats, nats_password  # imported only when needed

        self.nats: LocalNats = LocalNats(die_with_parent=True, password=nats_password(secret))
        self.restart_at: float | None = None  # the server died: start it then
        self._delay = 0.25

    def start(self) -> str:
        """Start the server; its URL, with the credentials (log it redacted)."""
        url = self.nats.start()
        log.info("started nats-server (pid %s) for the workers at %s", self.nats.pid, redact_url(url))
        return url

    def check(self, now: float) -> None:
        """The server died: start it again on its port, with its JetStream data (what the workers
        wrote is there again), and its password; the workers reconnect by themselves. A server
        that will not start is tried again, waiting 0.5 s, 1 s … 5 s."""
        nats = self.nats
        if self.restart_at is None:
            status = nats.exit_status
            if status is None:
                return
            log.warning(
                "nats-server (pid %s) %s: starting it again on the same port, with its data",
                nats.pid,
                describe_exit(status),
            )
            self.restart_at = now
        if now < self.restart_at:
            return
        try:
            nats.start()
        except (OSError, RuntimeError, TimeoutError) as exc:
            self._delay = min(5.0, max(0.5, self._delay * 2))
            self.restart_at = time.monotonic() + self._delay
            log.error("nats-server did not start again (%s); next try in %.1f s", exc, self._delay)
            return
        self.restart_at = None
        self._delay = 0.25
        log.info("nats-server started again (pid %s)", nats.pid)

    def close(self) -> None:
        self.nats.close()
