"""A worker's writes to a shared key: once one is done, the worker holds what it wrote (or newer),
even when the engine reports its previous write late, while the next one runs."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import orjson

from pyvia import App
from pyvia.cluster import MemoryEngine, MemoryHub
from pyvia.cluster.base import KvChange
from pyvia.cluster.link import ClusterLink
from pyvia.cluster.parts import SCOPES, SESSIONS


class _LateWatch(MemoryEngine):
    """Reports the change of each write only during the next write, as a busy engine may."""

    def __init__(self, hub: MemoryHub) -> None:
        super().__init__(hub)
        self.report: Callable[[KvChange], None] = lambda change: None
        self.late: list[KvChange] = []

    async def _reported(self, bucket: str, key: str) -> None:
        for change in self.late:
            self.report(change)  # the previous write's change, while this one is in flight
        value, revision = await self.get(bucket, key)
        self.late = [KvChange(bucket, key, value, revision)]

    async def mutate(self, bucket: str, key: str, fn: Callable[[bytes], bytes], default: bytes) -> bytes:
        new = await super().mutate(bucket, key, fn, default)
        await self._reported(bucket, key)
        return new

    async def increment(self, bucket: str, key: str, by: int = 1) -> int:
        total = await super().increment(bucket, key, by)
        await self._reported(bucket, key)
        return total


def test_a_worker_holds_its_own_newest_write_when_the_previous_ones_change_comes_late() -> None:
    async def scenario() -> None:
        engine = _LateWatch(MemoryHub())
        await engine.connect()
        link = ClusterLink(App(), engine)
        sessions = link.sessions.replica
        engine.report = lambda change: sessions.remember(change.key, change.value, change.revision, notify=False)
        sessions.remember("k", None, 0, notify=False)
        for n in range(5):
            await link.writes.write(
                SESSIONS, "k", lambda n=n: link.writes.mutate(SESSIONS, "k", lambda _: orjson.dumps(n), b"{}")
            )
            assert sessions.peek("k") == (orjson.dumps(n), sessions.revision_of("k"))

        counts = link.writes.replica(SCOPES)
        engine.report = lambda change: counts.remember(change.key, change.value, change.revision, notify=False)
        engine.late = []
        counts.remember("count", None, 0, notify=False)
        for n in range(1, 6):
            link.writes.increment(SCOPES, "count", 1)
            await link.writes.written(link.writes.writing - 1)
            assert counts.peek("count") == (str(n).encode(), counts.revision_of("count"))
        await engine.close()

    asyncio.run(asyncio.wait_for(scenario(), 10))
