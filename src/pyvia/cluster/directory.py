"""The directory: the bucket ``directory`` maps a context id to where its node's direct channels
are (:mod:`pyvia.cluster.direct`): ``"<node> <host:port or -> <unix socket path or ->"``, the TCP
address served with ``cluster_address`` and the socket of this machine's workers (last: a path
may hold spaces). A worker claims the tabs it holds and releases them when they are destroyed;
the timer leader sweeps the entries of workers that are gone."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import TYPE_CHECKING

from pyvia.cluster.base import EngineError
from pyvia.cluster.parts import DIRECTORY, Part

if TYPE_CHECKING:
    from pyvia.cluster.link import ClusterLink

__all__ = ["Directory"]

log = logging.getLogger("pyvia.cluster")

_SWEEP_LOOK = 60.0  # how often, at most, the timer leader looks for workers gone from presence


class Directory(Part):
    """This worker's entries in the directory, and the sweep of those of workers gone."""

    __slots__ = ("_claims",)

    def __init__(self, link: ClusterLink) -> None:
        super().__init__(link)
        self._claims: dict[str, int] = {}  # ctx id of a tab held here -> revision of its directory entry

    async def start(self) -> None:
        self.spawn(self._sweep_directory())

    def claim(self, ctx_id: str, *, wait: bool = False) -> None:
        """This worker holds the tab now (a page view, a revival or a takeover). With ``wait``
        the page waits for the entry (see :attr:`ClusterLink.loading`), so an action sent
        anywhere right after the page arrives finds the tab."""
        task = self.spawn(self._claim(ctx_id))
        if wait:
            loads = self.link.signals.loads
            loads.add(task)
            task.add_done_callback(loads.discard)

    async def _claim(self, ctx_id: str) -> None:
        try:
            self._claims[ctx_id] = await self.engine.put(DIRECTORY, ctx_id, self.link.address.encode())
        except EngineError as exc:
            log.debug("directory write failed: %s", exc)

    def release(self, ctx_id: str) -> None:
        """The tab is destroyed here: drop its directory entry unless another worker took it."""
        self.spawn(self._release(ctx_id, self._claims.pop(ctx_id, None)))

    async def _release(self, ctx_id: str, revision: int | None) -> None:
        """Delete the entry at the revision this worker wrote (no read needed): a worker that
        took the tab since wrote a newer one, which stays."""
        try:
            if revision is None:  # released before its claim was written: read what is there
                value, revision = await self.engine.get(DIRECTORY, ctx_id)
                self._claims.pop(ctx_id, None)  # the claim's answer came first (one connection, in order)
                if value != self.link.address.encode():
                    return
            await self.engine.delete(DIRECTORY, ctx_id, revision)
        except EngineError:
            pass

    def reclaim(self) -> None:
        """After a reconnect: put back the entries of this worker's tabs if they were swept meanwhile."""
        self.spawn(self._reclaim())

    async def _reclaim(self) -> None:
        """Write the entries of this worker's tabs that are missing from the directory (never one
        another worker wrote): a worker cut off from the engine longer than the revival window
        looks gone to the others, which sweep its entries (:meth:`_sweep_directory`)."""
        me = self.link.address.encode()
        for ctx_id in list(self.app.contexts):
            with contextlib.suppress(EngineError):
                value, revision = await self.engine.get(DIRECTORY, ctx_id)
                if value is None and ctx_id in self.app.contexts:
                    created = await self.engine.cas(DIRECTORY, ctx_id, me, revision)
                    if created is not None:
                        self._claims[ctx_id] = created

    async def _sweep_directory(self) -> None:
        """On the timer leader: delete the directory entries of workers that are gone (silent in
        presence, and nobody answers on their subject) for longer than the revival window, within
        which an entry still vouches for reviving its tab elsewhere. Killed workers leave theirs
        behind otherwise. A sweep reads every entry, so it runs only once a worker left, and once
        after this worker took the lease (for workers gone before)."""
        window = self.app.config.revival_window
        look = min(max(window / 4, 0.5), _SWEEP_LOOK)
        gone: dict[str, float] = {}  # node -> when it was first found gone
        alive: set[str] = set()
        due: float | None = None  # the next sweep; None while another worker holds the lease
        while True:
            await asyncio.sleep(look)
            if not self.link.lease.is_timer_leader:
                gone.clear()
                due = None
                continue
            now = time.monotonic()
            before, alive = alive, self.link.presence.alive_nodes(now)
            for node in before - alive:
                gone.setdefault(node, now)
            for node in alive:
                gone.pop(node, None)
            due = now if due is None else min([due, *(since + window for since in gone.values())])
            if now >= due:
                try:
                    due = await self._sweep(alive, gone, window)
                except EngineError:
                    pass  # the next look tries again
                except Exception:  # a bug or an engine's surprise must not end the sweep for good
                    log.exception("the directory sweep failed; the next look tries again")

    async def _sweep(self, alive: set[str], gone: dict[str, float], window: float) -> float:
        """One pass over the directory; returns when the next one is due (infinity: no entry of a
        gone worker waits for the end of its revival window)."""
        now = time.monotonic()
        due = float("inf")
        answers: dict[str, bool] = {}
        found: set[str] = set()
        for ctx_id in await self.engine.keys(DIRECTORY):
            value, revision = await self.engine.get(DIRECTORY, ctx_id)
            if value is None:
                continue
            node = value.decode(errors="replace").partition(" ")[0]
            if node in alive:
                continue
            found.add(node)
            since = gone.setdefault(node, now)
            if now - since < window:
                due = min(due, since + window)
                continue
            if node not in answers:
                answers[node] = await self.link.forwarding.answers(node)  # late in presence, but there
            if not answers[node]:
                await self.engine.delete(DIRECTORY, ctx_id, revision)  # a revival's newer entry stays
        for node in set(gone) - found:
            del gone[node]  # nothing of it left
        if any(answers.values()):
            due = min(due, now + window)  # look again at those that answered
        return due
