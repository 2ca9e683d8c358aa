"""Shared state in the engine: scoped signals and global state.

**Scoped signals** live in the bucket ``scopes`` under ``scope#name`` (session-scoped ones in
``session-scopes``, which expires with the session cookie); **global state** in ``global``. Each
worker keeps a read copy (:class:`~pyvia.cluster.replica.Replica`) fed by the bucket's change
messages, so renders read local memory; writes go through :mod:`pyvia.cluster.writes`."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import orjson

from pyvia.cluster.base import EngineError, EngineUnavailable
from pyvia.cluster.parts import GLOBAL_BUCKET, SCOPES, SESSION_SCOPES, Part, encode, signal_key
from pyvia.cluster.replica import Replica

if TYPE_CHECKING:
    from pyvia.cluster.link import ClusterLink
    from pyvia.scopes import SharedSignal

__all__ = ["SharedGlobals", "SharedSignals"]

log = logging.getLogger("pyvia.cluster")


class SharedSignals(Part):
    """Scoped signals declared on this worker, read from and written to the engine."""

    __slots__ = ("loads", "replica", "session_scope_replica", "signals")

    def __init__(self, link: ClusterLink) -> None:
        super().__init__(link)
        #: Scoped signals declared on this worker, by engine key.
        self.signals: dict[str, SharedSignal[Any]] = {}
        self.replica = Replica(self.engine, SCOPES, on_change=self._signal_changed, on_resync=self._resync)
        self.session_scope_replica = Replica(
            self.engine, SESSION_SCOPES, on_change=self._signal_changed, on_resync=self._resync
        )
        #: Reads (and claims) a page waits for before it renders (:attr:`loading`).
        self.loads: set[asyncio.Task[bool]] = set()
        link.writes.register(SCOPES, self.replica, self)
        link.writes.register(SESSION_SCOPES, self.session_scope_replica, self)

    async def start(self) -> None:
        await self.replica.start()
        await self.session_scope_replica.start()

    async def stop(self) -> None:
        await super().stop()
        await self.replica.stop()
        await self.session_scope_replica.stop()

    def track_declared(self) -> None:
        """Follow the signals declared before the link existed (``app.signal`` at import)."""
        for state in self.app.scopes:
            for sig in list(state.signals.values()):
                self.track(sig)

    def _where(self, key: str) -> tuple[str, Replica]:
        """The bucket and read copy of a scoped signal's key."""
        if key.startswith("session:"):
            return SESSION_SCOPES, self.session_scope_replica
        return SCOPES, self.replica

    def track(self, sig: SharedSignal[Any], *, new: bool = False) -> None:
        """A scoped signal was declared here: read its shared value (creating it with ours if new).
        ``new``: its scope was just made here (a new session), so it is created without a read
        and without the page waiting for it."""
        key = signal_key(sig.scope.name, sig.name)
        self.signals[key] = sig
        if not new:
            self._read(key, sig)
            return
        bucket, replica = self._where(key)
        replica.expect(key)
        self.link.writes.write(bucket, key, lambda: self._create(key, sig))

    async def _create(self, key: str, sig: SharedSignal[Any]) -> None:
        bucket, replica = self._where(key)
        data = encode(sig.value)
        try:
            revision = await self.engine.cas(bucket, key, data, 0)
        except EngineError as exc:
            log.warning("cannot create shared signal %s in the engine (the local value is used): %s", key, exc)
            return
        if revision is None:  # it exists after all: read it as any declaration does
            await self._load(key, sig)
        else:
            replica.remember(key, data, revision, notify=False)

    def _read(self, key: str, sig: SharedSignal[Any]) -> None:
        """Read (or create) the key in line with this worker's writes to it, so a write made
        meanwhile lands after the read; changes from others are applied once both are done."""
        bucket, replica = self._where(key)
        replica.expect(key)  # a change that arrives during the read is kept
        task = self.link.writes.write(bucket, key, lambda: self._load(key, sig))
        self.loads.add(task)
        task.add_done_callback(self.loads.discard)

    def refresh(self, sig: SharedSignal[Any]) -> None:
        """Read a signal followed here again, in line with this worker's writes to it, and let the
        page wait for it (read your writes: the change message may be on its way still)."""
        key = signal_key(sig.scope.name, sig.name)
        if self.signals.get(key) is sig:
            self._read(key, sig)

    def untrack(self, sig: SharedSignal[Any]) -> None:
        """The signal's scope has no members here any more: stop following it."""
        key = signal_key(sig.scope.name, sig.name)
        if self.signals.get(key) is sig:
            del self.signals[key]
            self._where(key)[1].forget(key)

    async def _load(self, key: str, sig: SharedSignal[Any]) -> None:
        bucket, replica = self._where(key)
        try:
            value, revision = await self.engine.get(bucket, key)
            if value is None:
                created = await self.engine.cas(bucket, key, encode(sig.value), revision)
                if created is not None:
                    replica.remember(key, encode(sig.value), created, notify=False)
                    return
                value, revision = await self.engine.get(bucket, key)  # another worker created it first
                if value is None:
                    return
            replica.remember(key, value, revision, notify=False)  # applied when the key settles
        except EngineError as exc:
            log.warning("cannot read shared signal %s from the engine (the local value is used): %s", key, exc)

    @property
    def loading(self) -> bool:
        """Scoped signals are being read from the engine (a page waits before it renders)."""
        return bool(self.loads)

    async def loaded(self) -> None:
        while self.loads:
            await asyncio.wait(list(self.loads), timeout=5.0)

    def put_signal(self, sig: SharedSignal[Any]) -> None:
        key = signal_key(sig.scope.name, sig.name)
        bucket, replica = self._where(key)
        data = encode(sig.value)
        writes = self.link.writes
        writes.write(bucket, key, lambda: writes.put(bucket, key, data, replica))

    def increment_signal(self, sig: SharedSignal[Any], by: int) -> None:
        key = signal_key(sig.scope.name, sig.name)
        self.link.writes.increment(self._where(key)[0], key, by)

    def mutate_signal(self, sig: SharedSignal[Any], fn: Callable[[Any], Any], before: Any) -> None:
        key = signal_key(sig.scope.name, sig.name)
        bucket, default = self._where(key)[0], encode(before)
        writes = self.link.writes
        writes.write(
            bucket, key, lambda: writes.mutate(bucket, key, lambda raw: encode(fn(orjson.loads(raw))), default)
        )

    async def committed(self, sig: SharedSignal[Any]) -> Any:
        key = signal_key(sig.scope.name, sig.name)
        if not await self.link.writes.settled_key(self._where(key)[0], key):
            raise EngineUnavailable(f"the shared value {sig.name!r} could not be saved; try again")
        return sig.value

    def _signal_changed(self, key: str, raw: bytes | None) -> None:
        sig = self.signals.get(key)
        if sig is None or raw is None or self.link.writes.busy(self._where(key)[0], key):
            return
        try:
            value = orjson.loads(raw)
        except orjson.JSONDecodeError:
            log.warning("dropped a change of %s that is not JSON", key)
            return
        current = sig.value
        if value != current or type(value) is not type(current):
            sig.restore(value)
            sig.scope.touch(sig)

    def settle(self, bucket: str, key: str) -> None:
        held = self._where(key)[1].peek(key)
        if held is not None and held[0] is not None:
            self._signal_changed(key, held[0])

    def reread(self, bucket: str, key: str) -> None:
        sig = self.signals.get(key)
        if sig is not None:
            self._read(key, sig)

    def _resync(self) -> None:
        """Changes may have been missed while disconnected: read every followed signal again, and
        put back the directory entries of this worker's tabs if they were swept meanwhile."""
        for key, sig in list(self.signals.items()):
            self._read(key, sig)
        self.link.directory.reclaim()


class SharedGlobals(Part):
    """The app's global state (``app.state``), every key followed on every worker."""

    __slots__ = ("replica",)

    def __init__(self, link: ClusterLink) -> None:
        super().__init__(link)
        self.replica = Replica(
            self.engine, GLOBAL_BUCKET, on_change=self._global_changed, on_resync=self._resync_global, track_all=True
        )
        link.writes.register(GLOBAL_BUCKET, self.replica, self)

    async def start(self) -> None:
        await self.replica.start()
        await self._load_global()

    async def stop(self) -> None:
        await super().stop()
        await self.replica.stop()

    async def _load_global(self) -> None:
        state = self.app.global_state
        for key in await self.engine.keys(GLOBAL_BUCKET):
            value, revision = await self.engine.get(GLOBAL_BUCKET, key)
            self.replica.remember(key, value, revision, notify=False)
            if value is not None:
                state.receive(key, orjson.loads(value))

    def put_global(self, key: str, value: Any) -> None:
        data = encode(value)
        writes = self.link.writes
        writes.write(GLOBAL_BUCKET, key, lambda: writes.put(GLOBAL_BUCKET, key, data, self.replica))

    def delete_global(self, key: str) -> None:
        self.link.writes.write(GLOBAL_BUCKET, key, lambda: self.engine.delete(GLOBAL_BUCKET, key))

    def increment_global(self, key: str, by: int) -> None:
        self.link.writes.increment(GLOBAL_BUCKET, key, by)

    def mutate_global(self, key: str, fn: Callable[[Any], Any], default: Any) -> None:
        fallback = encode(default)
        writes = self.link.writes
        writes.write(
            GLOBAL_BUCKET,
            key,
            lambda: writes.mutate(GLOBAL_BUCKET, key, lambda raw: encode(fn(orjson.loads(raw))), fallback),
        )

    async def _read_global(self, key: str) -> None:
        value, revision = await self.engine.get(GLOBAL_BUCKET, key)
        self.replica.remember(key, value, revision, notify=False)  # applied when the key settles

    def _global_changed(self, key: str, raw: bytes | None) -> None:
        if self.link.writes.busy(GLOBAL_BUCKET, key):
            return
        state = self.app.global_state
        if raw is None:
            state.receive_deletion(key)
            return
        try:
            state.receive(key, orjson.loads(raw))
        except orjson.JSONDecodeError:
            log.warning("dropped a change of global state %s that is not JSON", key)

    def settle(self, bucket: str, key: str) -> None:
        held = self.replica.peek(key)
        if held is not None:
            self._global_changed(key, held[0])

    def reread(self, bucket: str, key: str) -> None:
        self.link.writes.write(GLOBAL_BUCKET, key, lambda: self._read_global(key))

    def _resync_global(self) -> None:
        self.spawn(self._load_global())
