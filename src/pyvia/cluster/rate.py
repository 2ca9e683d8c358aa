"""The action rate limit across workers: each worker tells the others every 250 ms how many
action tokens each client address took there, and takes them out of its own buckets, so the
per-address rate holds for the whole app."""

from __future__ import annotations

import asyncio
import contextlib

import orjson

from pyvia.cluster.base import EngineError
from pyvia.cluster.parts import Part

__all__ = ["SharedRate"]

_RATE_SUBJECT = "rate"
_RATE_PERIOD = 0.25


class SharedRate(Part):
    """The tokens spent here, told to the others; theirs, taken here."""

    __slots__ = ()

    async def start(self) -> None:
        self._subs.append(await self.engine.subscribe(_RATE_SUBJECT, self._on_rate))
        self.app.limiter.spent = {}
        self.spawn(self._tell_rate())

    async def stop(self) -> None:
        self.cancel_tasks()
        self.app.limiter.spent = None
        await self.unsubscribe()

    async def _tell_rate(self) -> None:
        """Every 250 ms, tell the other workers which addresses took how many action tokens here."""
        limiter = self.app.limiter
        while True:
            await asyncio.sleep(_RATE_PERIOD)
            spent, limiter.spent = limiter.spent, {}
            if spent:
                with contextlib.suppress(EngineError):  # each worker still limits what it sees
                    await self.engine.publish(_RATE_SUBJECT, orjson.dumps({"n": self.node, "s": spent}))

    def _on_rate(self, subject: str, payload: bytes) -> None:
        try:
            message = orjson.loads(payload)
            node, spent = message["n"], message["s"]
        except (orjson.JSONDecodeError, KeyError, TypeError):
            return
        if node == self.node or not isinstance(spent, dict) or self.app.clock is None:
            return
        now = self.app.clock.now()
        limiter = self.app.limiter
        for address, count in spent.items():
            if isinstance(address, str) and len(address) <= 64 and isinstance(count, int):
                limiter.take_spent_elsewhere(address, count, now)
