"""Writes to the engine's shared buckets, in order per key, and what an action waits for.

A write changes the local value at once (the writing tab sees it) and goes to the engine after
this worker's earlier writes (and reads) of the same key; ``increment()`` and ``mutate()`` run
atomically there. While a worker's own writes to a key are in flight, changes from others wait
(:meth:`Writes.busy`); then the key settles on the engine's newest value, so every worker ends on
the same value. An action's answer waits for the writes it made (:meth:`Writes.written`)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol

from pyvia.cluster.base import EngineError, EngineUnavailable
from pyvia.cluster.parts import Part, encode

if TYPE_CHECKING:
    from pyvia.cluster.link import ClusterLink
    from pyvia.cluster.replica import Replica

__all__ = ["Store", "Writes"]

log = logging.getLogger("pyvia.cluster")

_WRITE_TIMEOUT = 10.0  # an engine that does not answer must not hold an action (or the writes after it)


class Store(Protocol):
    """A part whose values live in a bucket (:meth:`Writes.register`)."""

    def settle(self, bucket: str, key: str) -> None:
        """No write of ours to the key is in flight any more: take the newest value the engine reported."""

    def reread(self, bucket: str, key: str) -> None:
        """A write of the key failed while the engine stayed connected: read it again."""


class Writes(Part):
    """This worker's writes to the engine, in order per key (see the module docstring)."""

    __slots__ = ("_busy", "_failed_upto", "_pending", "_queued", "_replicas", "_seq", "_stores", "_tails", "warned")

    def __init__(self, link: ClusterLink) -> None:
        super().__init__(link)
        self.warned = False
        self._seq = 0
        self._pending: dict[int, asyncio.Task[bool]] = {}
        # every write started up to this sequence number may be lost: one of them failed (a write
        # can fail before the action that made it asks, so the failure is kept, not only the task)
        self._failed_upto = 0
        self._tails: dict[tuple[str, str], asyncio.Task[bool]] = {}
        self._busy: dict[tuple[str, str], int] = {}
        self._queued: dict[tuple[str, str], list[Any]] = {}  # an increment waiting its turn: [by, task]
        self._stores: dict[str, Store] = {}
        self._replicas: dict[str, Replica] = {}

    def register(self, bucket: str, replica: Replica, store: Store) -> None:
        """``store`` holds the values of ``bucket``, read through ``replica``."""
        self._stores[bucket] = store
        self._replicas[bucket] = replica

    def replica(self, bucket: str) -> Replica:
        """The read copy of a bucket this worker writes shared values to."""
        return self._replicas[bucket]

    async def stop(self) -> None:
        """Let writes in flight finish (1 s at most)."""
        if self._pending:
            await asyncio.wait(list(self._pending.values()), timeout=1.0)
        await super().stop()

    def busy(self, bucket: str, key: str) -> bool:
        """A write of this worker to the key is in flight: changes from others wait."""
        return (bucket, key) in self._busy

    def write(self, bucket: str, key: str, op: Callable[[], Awaitable[Any]]) -> asyncio.Task[bool]:
        """Run ``op`` after the earlier writes (and reads) of this worker to the same key; actions
        wait for it. Changes from others to the key wait until it is done."""
        self._seq += 1
        seq = self._seq
        slot = (bucket, key)
        self._busy[slot] = self._busy.get(slot, 0) + 1
        task = asyncio.ensure_future(self._run_write(seq, slot, self._tails.get(slot), op))
        self._tails[slot] = task
        self._pending[seq] = task
        return task

    def increment(self, bucket: str, key: str, by: int) -> None:
        """An increment in line with the key's other writes; increments made while one of this key
        waits its turn join it, so a hot counter costs one engine operation per round trip, not
        one per click (each action still waits until its part is in the engine)."""
        slot = (bucket, key)
        queued = self._queued.get(slot)
        if queued is not None:
            queued[0] += by
            task = queued[1]
            self._seq += 1
            seq = self._seq
            self._pending[seq] = task
            task.add_done_callback(lambda _: self._pending.pop(seq, None))
            return
        box: list[Any] = [by, None]

        async def add() -> int:
            if self._queued.get(slot) is box:
                del self._queued[slot]  # started: later increments wait for the next one
            replica = self.replica(bucket)
            since = replica.revision_of(key)
            total = await self.engine.increment(bucket, key, box[0])
            if not replica.assume(key, encode(total), since):  # what the key settles on
                await self._reread(bucket, key, replica)
            return total

        box[1] = self.write(bucket, key, add)
        self._queued[slot] = box

    async def put(self, bucket: str, key: str, data: bytes, replica: Replica) -> None:
        """Write ``data`` and hold it as the key's value here: when this worker's writes to the key
        settle, it keeps what it wrote (or newer), not an older value its copy had not replaced yet."""
        revision = await self.engine.put(bucket, key, data)
        replica.remember(key, data, revision, notify=False)

    async def mutate(self, bucket: str, key: str, fn: Callable[[bytes], bytes], default: bytes) -> None:
        replica = self.replica(bucket)
        since = replica.revision_of(key)
        if not replica.assume(key, await self.engine.mutate(bucket, key, fn, default), since):
            await self._reread(bucket, key, replica)

    async def _reread(self, bucket: str, key: str, replica: Replica) -> None:
        """A change came while a write of ours ran, perhaps older than it: read the key, whose value
        is now this write's or newer, so the worker settles on what it wrote (read your writes)."""
        value, revision = await self.engine.get(bucket, key)
        replica.remember(key, value, revision, notify=False)

    async def _run_write(
        self, seq: int, slot: tuple[str, str], before: asyncio.Task[bool] | None, op: Callable[[], Awaitable[Any]]
    ) -> bool:
        """Whether the write reached the engine (an action that made one that did not is not
        answered 200: :meth:`written`)."""
        written = False
        try:
            if before is not None and not before.done():
                await asyncio.wait([before])
            started = time.perf_counter()
            await asyncio.wait_for(op(), _WRITE_TIMEOUT)
            self.app.metrics.observe_engine(time.perf_counter() - started)
            written = True
            self.warned = False
        except TimeoutError:
            log.warning("a write of %s/%s got no answer from the engine in %s s", *slot, _WRITE_TIMEOUT)
        except EngineError as exc:
            if not self.warned:  # one line per outage, not one per write
                self.warned = True
                log.warning("shared state stays local until the engine is back: %s", exc)
        except Exception as exc:  # a mutate() callback that raised on another worker's value
            self.app.report(exc, None, "shared state", reraise=False)
        finally:
            if not written:
                self._failed_upto = self._seq
            self._pending.pop(seq, None)
            left = self._busy[slot] - 1
            if left:
                self._busy[slot] = left
            else:
                del self._busy[slot]
                if self._tails.get(slot) is asyncio.current_task():
                    del self._tails[slot]
                bucket, key = slot
                if written:
                    self._stores[bucket].settle(bucket, key)
                elif self.engine.is_connected:  # the engine's value again, not the one that failed
                    self._stores[bucket].reread(bucket, key)
        return written

    @property
    def writing(self) -> int:
        """The sequence number of the newest write started (see :meth:`written`)."""
        return self._seq

    async def settled_key(self, bucket: str, key: str) -> bool:
        """Wait until no write of this worker to the key is in flight (the key has then settled on
        the engine's newest value); whether the last of them reached the engine."""
        slot = (bucket, key)
        reached = True
        while (tail := self._tails.get(slot)) is not None:
            reached = await asyncio.shield(tail)
        return reached

    async def written(self, after: int) -> None:
        """Wait for the writes started after sequence number ``after`` (an action waits for its own).

        Raises :class:`EngineUnavailable` (503) when one of them did not reach the engine: an
        action is answered 200 only once what it wrote is there."""
        if not await self.settled(after):
            raise EngineUnavailable("the shared state this action changed could not be saved; try again")

    async def settled(self, after: int) -> bool:
        """Wait for the writes started after ``after``; whether all of them reached the engine.

        A failed write fails every write started before it failed (increments that joined it have
        sequence numbers of their own), so an action that wrote concurrently is refused too: it
        may be counted, never acknowledged and lost."""
        waiting = [task for seq, task in self._pending.items() if seq > after]
        if waiting:
            await asyncio.wait(waiting)
        return self._failed_upto <= after
