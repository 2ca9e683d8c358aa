"""What the parts of a :class:`~pyvia.cluster.link.ClusterLink` share: the engine's bucket names
and :class:`Part`, the base of each subsystem (its tasks, its subscriptions, its start and stop)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any

import orjson

from pyvia.cluster.base import EngineError, Subscription

if TYPE_CHECKING:
    from pyvia.app import App
    from pyvia.cluster.base import Engine
    from pyvia.cluster.link import ClusterLink

__all__ = ["DIRECTORY", "GLOBAL_BUCKET", "LEASES", "SCOPES", "SESSIONS", "SESSION_SCOPES", "Part", "signal_key"]

SCOPES = "scopes"
SESSION_SCOPES = "session-scopes"  # session-scoped signals: they expire with the session
GLOBAL_BUCKET = "global"
SESSIONS = "sessions"
DIRECTORY = "directory"
LEASES = "leases"


def signal_key(scope: str, name: str) -> str:
    """The engine key of a scoped signal: ``room:lobby#count``."""
    return f"{scope}#{name}"


def encode(value: Any) -> bytes:
    return orjson.dumps(value)


class Part:
    """One subsystem of the link. The link starts its parts in order and stops them in its own
    order (:meth:`ClusterLink.stop`); a part's :meth:`stop` cancels the tasks it spawned and ends
    its subscriptions, after whatever it must do first."""

    __slots__ = ("_subs", "_tasks", "app", "engine", "link", "node")

    def __init__(self, link: ClusterLink) -> None:
        self.link = link
        self.app: App = link.app
        self.engine: Engine = link.engine
        self.node: str = link.node
        self._tasks: set[asyncio.Task[Any]] = set()
        self._subs: list[Subscription] = []

    async def start(self) -> None:
        """Subscribe, read what the part needs, spawn its loops."""

    async def stop(self) -> None:
        self.cancel_tasks()
        await self.unsubscribe()

    def spawn(self, awaitable: Awaitable[Any]) -> asyncio.Task[Any]:
        task = asyncio.ensure_future(awaitable)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def cancel_tasks(self) -> None:
        for task in list(self._tasks):
            task.cancel()

    async def unsubscribe(self) -> None:
        for sub in self._subs:
            with contextlib.suppress(EngineError):
                await sub.unsubscribe()
        self._subs.clear()
