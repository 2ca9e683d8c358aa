"""A rolling reload (SIGHUP, ``pyvia reload``, a change in ``--dev``): each worker replaced in turn.

For each slot in turn a new worker starts (a fresh interpreter: the code on disk now), and once
it is ready the old one gets SIGUSR1, its cue to retire: a graceful stop that ends its streams
over ``reload_spread`` seconds in random order, so its tabs reconnect staggered, to the workers
that accept, and revive there from their signed ids. The next slot waits until the old one exited.

With an engine (several workers), state lives in the engine and the new worker accepts while the
old one drains. Without one (one worker, no ``--engine``) the worker process owns the state, and
two owners at once would split it: the new worker is *held* (``handoff``). It imports the app
(the slow part) while the old one serves; then the old one retires, stops taking requests and
saves its state and says ``S``; only then the new one gets its go, restores that state and
accepts. Connections arriving in between wait in the listen backlog, since the supervisor holds
the socket throughout.

Separate from the supervisor because it is a state machine of its own, which the supervisor's
loop advances once per turn.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyvia.server.supervisor import SupervisorConfig
    from pyvia.server.workers import Worker, Workers

__all__ = ["RollingReload"]

log = logging.getLogger("pyvia.supervisor")


class RollingReload:
    """Which slots are still to replace, and the new and old worker of the one being replaced."""

    __slots__ = ("_again", "_config", "_deadline", "_workers", "handoff", "new", "old", "pending")

    def __init__(self, config: SupervisorConfig, workers: Workers) -> None:
        self._config = config
        self._workers = workers
        self.pending: list[int] | None = None  # slots still to replace; None: no reload
        self.new: Worker | None = None
        self.old: Worker | None = None
        self._deadline = 0.0
        self._again = False
        self.handoff = False  # no engine: a new worker waits for the old one's state (module doc)

    def begin(self) -> None:
        if self.pending is not None:
            if self._config.dev:  # a change during a reload: reload again once this one is done
                self._again = True
                return
            log.warning("SIGHUP during a reload: ignored")
            return
        slots = sorted({w.slot for w in self._workers if not w.retiring} | set(self._workers.restart_at))
        log.info("SIGHUP: reloading %d worker(s) one by one", len(slots))
        self.pending = slots

    def cancel(self) -> None:
        """Stopping: no slot is replaced any more."""
        self.pending = None

    def step(self, now: float) -> None:
        """Advance the reload as far as it can go now (several steps at once: the loop may not
        wake again for a second)."""
        for _ in range(8):
            if not self._step(now):
                return

    def _step(self, now: float) -> bool:
        """One transition of the reload; True when something changed."""
        if self.pending is None:
            return False
        workers = self._workers
        new, old = self.new, self.old
        if new is None and old is None:
            if not self.pending:
                self.pending = None
                log.info("reload done")
                if self._again:
                    self._again = False
                    self.begin()
                return True
            slot = self.pending.pop(0)
            workers.restart_at.pop(slot, None)
            self.old = old = next((w for w in workers if w.slot == slot and not w.retiring), None)
            self.new = workers.spawn(slot, held=self.handoff and old is not None)
            self._deadline = now + self._config.ready_timeout
            return True
        if new is not None:
            if new.ready:
                self.new = None
                if old is not None and not old.retiring:
                    workers.retire(old, now)
                return True
            if new not in workers or now >= self._deadline:
                self._failed(new, old, now)
                return True
            if new.go_fd is not None and new.loaded:  # held: the old one saves, then the new one goes
                if old is None or old not in workers or old.saved:
                    new.release()
                    self._deadline = now + self._config.ready_timeout
                    return True
                if not old.retiring:
                    workers.retire(old, now)
                    return True
            return False
        if old is not None and old not in workers:
            self.old = None  # retired; next slot
            return True
        return False

    def _failed(self, new: Worker, old: Worker | None, now: float) -> None:
        log.error(
            "reload stopped: the new worker %d (pid %d) did not become ready; the others keep their old code",
            new.slot,
            new.pid,
        )
        workers = self._workers
        if new in workers:
            new.retiring = True
            workers.kill(new)
        new.close_pipe()
        if old is None or old not in workers or old.retiring:
            workers.restart_soon(new.slot, now)
        self.pending = None
        self.new = None
        self.old = None
