"""Broadcasts across workers. One named explicitly (``app.broadcast``, ``c.broadcast``) is
published once per scope per loop turn with the bucket revisions the sender had seen; a receiver
that has not yet seen those revisions waits for them (at most a second) before it marks the
scope, so it never renders older state than the sender. Scope patches (``app.patch_elements``)
travel in the same messages, in order, and are sent to the receiver's tabs of the scope. Signal
writes need no message: their change marks the scope on every worker that holds it."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

import orjson

from pyvia.cluster.base import EngineError, valid_wire_scope
from pyvia.cluster.parts import Part

if TYPE_CHECKING:
    from pyvia.cluster.link import ClusterLink

__all__ = ["BroadcastRelay"]

log = logging.getLogger("pyvia.cluster")

_BROADCAST_SUBJECT = "bcast"
_CATCH_UP_LIMIT = 1.0  # seconds a broadcast waits for the state it follows before it goes anyway
#: Bytes of patches in one message: NATS takes 1 MiB at its default, and JSON may escape a patch's
#: quotes to twice its size. A larger patch reaches the others as a broadcast of its scope.
_MAX_MESSAGE = 256 * 1024


class BroadcastRelay(Part):
    """Sends this worker's broadcasts to the others and marks the scopes theirs name."""

    __slots__ = ("_outgoing", "_patches", "_publish_scheduled")

    def __init__(self, link: ClusterLink) -> None:
        super().__init__(link)
        self._outgoing: set[str] = set()
        self._patches: list[tuple[str, str]] = []  # (scope, frame) in the order they were made
        self._publish_scheduled = False

    async def start(self) -> None:
        self._subs.append(await self.engine.subscribe(_BROADCAST_SUBJECT, self._on_broadcast))

    def _revisions(self) -> list[int]:
        link = self.link
        return [
            link.signals.replica.revision,
            link.globals.replica.revision,
            link.signals.session_scope_replica.revision,
        ]

    def broadcast(self, scope: str) -> None:
        """Tell the other workers to re-render ``scope`` (a name or pattern), once per loop turn."""
        self._outgoing.add(scope)
        self._schedule()

    def patch(self, scope: str, frame: bytes) -> None:
        """Have the other workers send ``frame`` to their tabs of ``scope``, after this turn's writes
        (one too large for the engine's messages has them render the scope's views instead)."""
        if len(frame) > _MAX_MESSAGE:
            self.broadcast(scope)
            return
        self._patches.append((scope, frame.decode()))
        self._schedule()

    def _schedule(self) -> None:
        if not self._publish_scheduled:
            self._publish_scheduled = True
            asyncio.get_running_loop().call_soon(self._publish)

    def _publish(self) -> None:
        self._publish_scheduled = False
        scopes, self._outgoing = sorted(self._outgoing), set()
        patches, self._patches = self._patches, []
        after = self.link.writes.writing
        self.spawn(self._send_broadcast(scopes, after, patches))

    async def _send_broadcast(self, scopes: list[str], after: int, patches: list[tuple[str, str]]) -> None:
        await self.link.writes.settled(after - 1 if after else 0)  # the writes made before the broadcast go first
        revisions = self._revisions()
        chunks: list[list[tuple[str, str]]] = [[]]  # in order, each message under the engine's limit
        size = 0
        for patch in patches:
            if size + len(patch[1]) > _MAX_MESSAGE and chunks[-1]:
                chunks.append([])
                size = 0
            chunks[-1].append(patch)
            size += len(patch[1])
        for i, chunk in enumerate(chunks):
            message: dict[str, object] = {"n": self.node, "s": scopes if i == 0 else [], "v": revisions}
            if chunk:
                message["p"] = chunk
            try:
                await self.engine.publish(_BROADCAST_SUBJECT, orjson.dumps(message))
            except EngineError as exc:
                what = ", ".join(scopes or sorted({scope for scope, _ in chunk}))
                log.warning("a broadcast of %s did not reach the other workers: %s", what, exc)

    def _on_broadcast(self, subject: str, payload: bytes) -> None:
        try:
            message = orjson.loads(payload)
            node, scopes, revisions = message["n"], message["s"], [int(r) for r in message["v"]]
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
            log.warning("dropped a malformed broadcast message")
            return
        if node == self.node or not isinstance(scopes, list):
            return
        valid = [s for s in scopes if valid_wire_scope(s)]
        patches = [
            (p[0], p[1].encode())
            for p in message.get("p") or ()
            if isinstance(p, list) and len(p) == 2 and valid_wire_scope(p[0]) and isinstance(p[1], str)
        ]
        if len(valid) != len(scopes) or len(patches) != len(message.get("p") or ()):
            log.warning("dropped invalid scope names from a broadcast message")
        if valid or patches:
            self._mark_when_caught_up(valid, revisions, time.monotonic() + _CATCH_UP_LIMIT, patches)

    def _mark_when_caught_up(
        self, scopes: list[str], revisions: list[int], deadline: float, patches: list[tuple[str, bytes]]
    ) -> None:
        held = self._revisions()
        behind = any(mine < theirs for mine, theirs in zip(held, revisions, strict=False))
        if behind and time.monotonic() < deadline:
            asyncio.get_running_loop().call_later(
                0.002, self._mark_when_caught_up, scopes, revisions, deadline, patches
            )
            return
        app = self.app
        for scope, frame in patches:
            app.deliver_to_scope(scope, frame)
        for name in scopes:
            for state in app.scopes.matching(name):
                app.broadcaster.mark(state)
