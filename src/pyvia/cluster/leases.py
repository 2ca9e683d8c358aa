"""The timer lease: timers set with ``app.set_interval`` run on the worker holding the ``timers``
lease (rewritten five times a second, taken over within a second when its holder dies), unless
``every_worker``. The directory's sweep runs on the holder too."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import TYPE_CHECKING

from pyvia.cluster.base import EngineError, KvChange
from pyvia.cluster.parts import LEASES, Part

if TYPE_CHECKING:
    from pyvia.cluster.link import ClusterLink

__all__ = ["TimerLease"]

log = logging.getLogger("pyvia.cluster")

_LEASE_TTL = 5.0  # the bucket's: an abandoned lease the engine drops by itself
_LEASE_RENEW = 0.2  # the holder rewrites the timer lease this often
_LEASE_LAPSE = 0.7  # a lease nobody rewrote for this long, as a watcher saw it, is taken over
_LEASE_KEY = "timers"


class TimerLease(Part):
    """Holds, or waits for, the ``timers`` lease (see :meth:`_hold_timer_lease`)."""

    __slots__ = ("_holder", "_rev", "_seen", "_until", "_wake")

    TTL = _LEASE_TTL  # the bucket's, configured by the link

    def __init__(self, link: ClusterLink) -> None:
        super().__init__(link)
        self._holder: bytes | None = None  # who holds the timer lease, as last seen
        self._rev = 0  # the lease's revision, as last seen or written
        self._seen = time.monotonic()  # when it last changed, as seen here
        self._until = 0.0  # holding it: timers run here until then (monotonic)
        self._wake = asyncio.Event()  # the lease was given up: take it now

    async def start(self) -> None:
        """Watch the lease (its loop is spawned by :meth:`hold`, once this worker can serve)."""
        self._subs.append(await self.engine.watch(LEASES, self._lease_changed, on_resync=self._lease_resync))

    def hold(self) -> None:
        self.spawn(self._hold_timer_lease())

    async def stop(self) -> None:
        """Give the lease up, so the next holder takes it at once."""
        self.cancel_tasks()
        if self.is_timer_leader:
            self._until = 0.0
            log.info("worker %s stops and gives the app timers up", self.node)
            with contextlib.suppress(EngineError):  # the next holder takes it at once
                await self.engine.delete(LEASES, _LEASE_KEY, self._rev)
        await self.unsubscribe()

    @property
    def is_timer_leader(self) -> bool:
        """Whether app timers run here: this worker holds the ``timers`` lease."""
        return self._until > time.monotonic()

    async def _hold_timer_lease(self) -> None:
        """Hold (or wait for) the ``timers`` lease, so app timers run on exactly one worker.

        The holder rewrites it every ``_LEASE_RENEW`` s (a compare-and-set on the revision it
        wrote) and runs timers until ``_LEASE_LAPSE - _LEASE_RENEW`` after it sent the last
        rewrite that succeeded. The others watch it: one unchanged for ``_LEASE_LAPSE`` since they
        last saw it change is taken over by a compare-and-set on that revision, so exactly one
        of them wins, and only once the old holder has stopped running timers (it sent its last
        rewrite before they saw it). A holder that stops gives it up and the next takes it at once.
        """
        me = self.node.encode()
        while True:
            started = time.monotonic()
            try:
                if self._holder == me:
                    await self._renew_lease(me, started)
                elif self._holder is None:
                    await self._take_lease(me, started, lapsed=False)
                elif started - self._seen >= _LEASE_LAPSE:
                    await self._take_lease(me, started, lapsed=True)
            except EngineError:
                if self._holder == me:  # an outage: nobody can take it meanwhile
                    self._until = max(self._until, time.monotonic() + _LEASE_LAPSE - _LEASE_RENEW)
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), _LEASE_RENEW)

    async def _renew_lease(self, me: bytes, sent: float) -> None:
        revision = await self.engine.cas(LEASES, _LEASE_KEY, me, self._rev)
        if revision is not None:
            self._rev, self._seen = max(self._rev, revision), time.monotonic()
            self._until = sent + _LEASE_LAPSE - _LEASE_RENEW
            return
        self._until = 0.0  # lost (it expired, or was taken while this worker was stuck)
        self._holder = None
        log.info("worker %s no longer runs the app timers: its lease lapsed while it was held up", self.node)
        await self._take_lease(me, time.monotonic(), lapsed=False)

    async def _take_lease(self, me: bytes, sent: float, *, lapsed: bool) -> None:
        """Take the lease if nobody holds it, or (``lapsed``) if the holder this worker watched left
        it unchanged for a whole lapse."""
        value, revision = await self.engine.get(LEASES, _LEASE_KEY)
        if value is not None and value != me and (not lapsed or revision != self._rev or self._holder != value):
            # held by a worker not seen lapsing (one that took it as this worker started, which
            # the watch may have told it of already), or it moved since this worker last looked
            self._holder, self._rev, self._seen = value, revision, time.monotonic()
            return
        taken = await self.engine.cas(LEASES, _LEASE_KEY, me, revision)
        if taken is None:
            return  # another worker was quicker: its write arrives through the watch
        self._holder, self._rev, self._seen = me, taken, time.monotonic()
        self._until = sent + _LEASE_LAPSE - _LEASE_RENEW
        log.info("worker %s runs the app timers now", self.node)

    def _lease_changed(self, change: KvChange) -> None:
        if change.key != _LEASE_KEY or (change.value is not None and change.revision < self._rev):
            return
        self._seen = time.monotonic()
        self._rev = change.revision
        if change.value is None:  # given up by its holder: take it
            self._holder = None
            self._wake.set()
        elif change.value != self.node.encode():
            if self._holder == self.node.encode():
                self._until = 0.0  # taken from this worker (it was stuck past the lapse)
                log.info("worker %s no longer runs the app timers: another took the lease", self.node)
            self._holder = change.value

    def _lease_resync(self) -> None:
        """Reconnected: changes may have been missed, so whoever holds it gets a full lapse to
        show it lives before the lease is taken over (an engine that restarted empty may number
        revisions from 1 again)."""
        self._seen = time.monotonic()
        if self._holder != self.node.encode():
            self._rev = 0
