"""A worker's local read copy of one bucket, kept fresh by the engine's change messages.

Reads of shared state are hot (every render reads scoped signals); writes are rare. So a worker
reads a key from the engine once, keeps it, and applies every later change the bucket's watch
delivers (DESIGN.md, "Multi-worker and multi-node"). A change is applied only when its revision
is newer than the one held, so a late read or a replayed change never moves a key backwards; a
deletion is kept as ``(None, revision)`` for the same reason. After a reconnect changes may have
been missed: the copy is dropped and refilled on demand.
"""

from __future__ import annotations

from collections.abc import Callable

from pyvia.cluster.base import Engine, KvChange, Subscription

__all__ = ["Replica"]


class Replica:
    """Values of ``bucket`` this worker has read, by key, as ``(value or None, revision)``.

    Only keys read through :meth:`get` (or :meth:`remember`) are kept and reported to
    ``on_change(key, value)``, unless ``track_all``: a worker keeps the scopes it has members in,
    not those of the whole cluster. ``on_resync()`` runs after the copy was dropped.
    """

    __slots__ = ("_entries", "_sub", "bucket", "engine", "on_change", "on_resync", "revision", "track_all")

    def __init__(
        self,
        engine: Engine,
        bucket: str,
        *,
        on_change: Callable[[str, bytes | None], None] | None = None,
        on_resync: Callable[[], None] | None = None,
        track_all: bool = False,
    ) -> None:
        self.engine = engine
        self.bucket = bucket
        self.on_change = on_change
        self.on_resync = on_resync
        self.track_all = track_all
        self._entries: dict[str, tuple[bytes | None, int]] = {}
        self._sub: Subscription | None = None
        #: The newest revision of the bucket seen, of any key: how far this copy has caught up.
        self.revision = 0

    async def start(self) -> None:
        """Watch the bucket; call before the first :meth:`get` so no change falls in between."""
        if self._sub is None:
            self._sub = await self.engine.watch(self.bucket, self._apply, on_resync=self._resync)

    async def stop(self) -> None:
        sub, self._sub = self._sub, None
        if sub is not None:
            await sub.unsubscribe()

    def peek(self, key: str) -> tuple[bytes | None, int] | None:
        """The held ``(value, revision)``, or None when this worker has not read the key."""
        return self._entries.get(key)

    async def get(self, key: str) -> bytes | None:
        """The value, from memory when held, else read once from the engine and held."""
        held = self._entries.get(key)
        if held is not None:
            return held[0]
        value, revision = await self.engine.get(self.bucket, key)
        self.remember(key, value, revision, notify=False)
        held = self._entries[key]
        return held[0]

    def remember(self, key: str, value: bytes | None, revision: int, *, notify: bool = True) -> bool:
        """Hold ``value`` at ``revision`` unless a newer one is held; True when it was taken."""
        held = self._entries.get(key)
        if held is not None and held[1] >= revision:
            return False
        self._entries[key] = (value, revision)
        if notify and self.on_change is not None and held is not None and held[0] != value:
            self.on_change(key, value)  # a deletion of nothing (NATS writes a marker) is no change
        return True

    def revision_of(self, key: str) -> int | None:
        """The held revision of ``key`` (None when not held): taken before a write, for :meth:`assume`."""
        held = self._entries.get(key)
        return None if held is None else held[1]

    def assume(self, key: str, value: bytes, since: int | None) -> bool:
        """Hold ``value``, what a write of this worker left in the engine (an increment or a mutate,
        which tell no revision), if no change came since revision ``since`` (held when the write
        started): the write is newer. A later change still applies; the write's own comes after.

        False when a change came in between: it may be older than the write (this worker's own
        previous write, reported late) or newer, so the caller reads the key again."""
        held = self._entries.get(key)
        if held is not None and held[1] == since:
            self._entries[key] = (value, since)
            return True
        return held is None

    def expect(self, key: str) -> None:
        """Start holding ``key`` before reading it, so a change arriving during the read is kept."""
        self._entries.setdefault(key, (None, 0))

    def forget(self, key: str) -> None:
        """Stop holding ``key`` (its scope has no members here any more)."""
        self._entries.pop(key, None)

    def _apply(self, change: KvChange) -> None:
        if change.revision > self.revision:
            self.revision = change.revision
        if change.key in self._entries or self.track_all:
            if change.key not in self._entries:
                self._entries[change.key] = (None, 0)
            self.remember(change.key, change.value, change.revision)

    def _resync(self) -> None:
        self._entries.clear()
        if self.on_resync is not None:
            self.on_resync()

    def __len__(self) -> int:
        return len(self._entries)
