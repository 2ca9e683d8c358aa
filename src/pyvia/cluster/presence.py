"""Presence across workers: each worker tells the others its open tabs per scope when they
change (checked every 250 ms, sent at least every 2 s); ``app.count_clients`` adds them, and a
change re-renders the scope where it is shown (once anything asked for a count: an app that never
does re-renders nothing, so tabs opening do not rewrite every tab's view four times a second). A
worker silent for longer than the expiry is gone (the directory's sweep asks
:meth:`Presence.alive_nodes`)."""

from __future__ import annotations

import asyncio
import contextlib
import fnmatch
import time
from typing import TYPE_CHECKING

import orjson

from pyvia.cluster.base import EngineError, valid_wire_scope
from pyvia.cluster.parts import Part
from pyvia.lifecycle import State
from pyvia.scopes import TAB

if TYPE_CHECKING:
    from pyvia.cluster.link import ClusterLink

__all__ = ["Presence"]

_PRESENCE_SUBJECT = "presence"
_PRESENCE_PERIOD = 0.25  # counts are sent when they changed, checked this often
_PRESENCE_HEARTBEAT = 2.0  # and at least this often, so a silent worker's counts expire
_PRESENCE_EXPIRY = 6.0


class Presence(Part):
    """This worker's open tabs by scope, told to the others, and theirs as last told."""

    __slots__ = ("_counted", "_dirty", "_readers", "_remote")

    def __init__(self, link: ClusterLink) -> None:
        super().__init__(link)
        self._remote: dict[str, tuple[float, dict[str, int]]] = {}  # node -> (when, open tabs by scope)
        self._dirty = True
        #: Whether anything asked for a count (:meth:`remote_count`): until then no view shows one,
        #: and a count that changed re-renders nothing.
        self._counted = False
        #: The tabs whose view showed a count, by the scope (or pattern) it counted: a new count
        #: re-renders them, whatever scope they are in themselves (an admin page counting a wizard).
        self._readers: dict[str, set[str]] = {}

    async def start(self) -> None:
        self._subs.append(await self.engine.subscribe(_PRESENCE_SUBJECT, self._on_presence))
        self.app.connect_hooks.append(self._presence_changed)
        self.app.disconnect_hooks.append(self._presence_changed)
        self.spawn(self._tell_presence())

    async def stop(self) -> None:
        self.cancel_tasks()
        with contextlib.suppress(EngineError):  # the others drop this worker's tabs now, not at expiry
            await self.engine.publish(_PRESENCE_SUBJECT, orjson.dumps({"n": self.node, "c": {}}))
        for hooks in (self.app.connect_hooks, self.app.disconnect_hooks):
            if self._presence_changed in hooks:
                hooks.remove(self._presence_changed)
        await self.unsubscribe()

    def _local_counts(self) -> dict[str, int]:
        """Open tabs of this worker by scope (session scopes are private to their browser: left out)."""
        counts: dict[str, int] = {}
        for state in self.app.scopes:
            if not state.name.startswith("session:"):
                n = sum(1 for ctx in state.members.values() if ctx.state is State.CONNECTED)
                if n:
                    counts[state.name] = n
        return counts

    def _presence_changed(self, ctx: object) -> None:
        self._dirty = True

    async def _tell_presence(self) -> None:
        """Counted again only after a stream opened or closed (and at each heartbeat, which also
        catches scope changes without one), never by walking every tab each period."""
        last: dict[str, int] | None = None
        last_sent = 0.0
        while True:
            await asyncio.sleep(_PRESENCE_PERIOD)
            now = time.monotonic()
            self._expire(now)
            heartbeat = now - last_sent > _PRESENCE_HEARTBEAT
            if not (self._dirty or heartbeat):
                continue
            self._dirty = False
            counts = self._local_counts()
            if counts != last or heartbeat:
                with contextlib.suppress(EngineError):
                    await self.engine.publish(_PRESENCE_SUBJECT, orjson.dumps({"n": self.node, "c": counts}))
                    last, last_sent = counts, now

    def _on_presence(self, subject: str, payload: bytes) -> None:
        try:
            message = orjson.loads(payload)
            node, counts = message["n"], message["c"]
        except (orjson.JSONDecodeError, KeyError, TypeError):
            return
        if node == self.node or not isinstance(counts, dict):
            return
        counts = {k: v for k, v in counts.items() if isinstance(v, int) and valid_wire_scope(k, allow_pattern=False)}
        before = self._remote.get(node, (0.0, {}))[1]
        self._remote[node] = (time.monotonic(), counts)
        self._changed(before, counts)

    def _expire(self, now: float) -> None:
        """Forget the workers silent past the expiry (killed, cut off): their tabs no longer count."""
        for node, (seen, counts) in list(self._remote.items()):
            if now - seen > _PRESENCE_EXPIRY:
                del self._remote[node]
                self._changed(counts, {})

    def _changed(self, before: dict[str, int], counts: dict[str, int]) -> None:
        if not self._counted:
            # No view asked how many watch: re-rendering would write every tab of the scope the
            # same view again each time the counts change, four times a second while tabs open
            # (opening N tabs then costs N² writes).
            return
        app = self.app
        changed = [name for name in {*before, *counts} if before.get(name) != counts.get(name)]
        for name in changed:  # "N watching" changed: re-render who shows it
            for state in app.scopes.matching(name):
                app.broadcaster.mark(state)
        for asked, readers in list(self._readers.items()):
            if any(name == asked or ("*" in asked and fnmatch.fnmatchcase(name, asked)) for name in changed):
                self._rerender(asked, readers)

    def _rerender(self, asked: str, readers: set[str]) -> None:
        """Re-render the tabs that showed a count of ``asked``: their shared scope once, or each on its own."""
        app = self.app
        for ctx_id in list(readers):
            ctx = app.contexts.get(ctx_id)
            if ctx is None or ctx.state is State.DESTROYED:
                readers.discard(ctx_id)
            elif ctx.primary_scope != TAB:
                for state in app.scopes.matching(ctx.primary_scope):
                    app.broadcaster.mark(state)
            elif ctx.state is State.CONNECTED:
                ctx.sync()
        if not readers:
            del self._readers[asked]

    def remote_count(self, scope: str) -> int:
        """Open tabs in ``scope`` (a name or pattern) on the other workers and nodes, as last told."""
        self._counted = True
        reader = self.app.rendering
        if reader is not None:
            self._readers.setdefault(scope, set()).add(reader.id)
        now = time.monotonic()
        total = 0
        for seen, counts in self._remote.values():
            if now - seen > _PRESENCE_EXPIRY:
                continue  # gone: the next period forgets it and re-renders who showed its tabs
            if "*" in scope:
                total += sum(n for name, n in counts.items() if fnmatch.fnmatchcase(name, scope))
            else:
                total += counts.get(scope, 0)
        return total

    def alive_nodes(self, now: float) -> set[str]:
        """This node and those heard from in presence within its expiry."""
        return {self.node, *(node for node, (seen, _) in self._remote.items() if now - seen <= _PRESENCE_EXPIRY)}
