"""Session data in the engine: the bucket ``sessions`` holds each session's data under the
session's hash (never the cookie itself) and expires with the session cookie. A session is read
before a request of it is handled on a worker that does not follow it yet; a rotation made on
one worker (``regenerate_session``) moves the session's tabs on the others."""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import orjson

from pyvia.cluster.base import EngineError
from pyvia.cluster.parts import SESSIONS, Part, encode
from pyvia.cluster.replica import Replica
from pyvia.scopes import Scope

if TYPE_CHECKING:
    from pyvia.cluster.link import ClusterLink
    from pyvia.state import SessionData

__all__ = ["SharedSessions"]

log = logging.getLogger("pyvia.cluster")

_ROTATED_SUBJECT = "rotated"
_SESSION_KEY = re.compile(r"[0-9a-f]{32}\Z")  # a session's hash (session_key)


class SharedSessions(Part):
    """The session data this worker follows, kept in step with the engine."""

    __slots__ = ("replica", "sessions")

    def __init__(self, link: ClusterLink) -> None:
        super().__init__(link)
        #: Session data followed on this worker, by session hash.
        self.sessions: dict[str, SessionData] = {}
        self.replica = Replica(self.engine, SESSIONS, on_change=self._session_changed, on_resync=self._resync_sessions)
        link.writes.register(SESSIONS, self.replica, self)

    async def start(self) -> None:
        await self.replica.start()
        self._subs.append(await self.engine.subscribe(_ROTATED_SUBJECT, self._on_rotated))

    async def stop(self) -> None:
        await super().stop()
        await self.replica.stop()

    @staticmethod
    def session_key(session_id: str) -> str:
        """A session's key in the engine: its hash, never the cookie itself."""
        return Scope.session(session_id).split(":", 1)[1]

    def has_session(self, session_id: str) -> bool:
        """Whether this worker follows the session's data already (no engine read needed).

        Asked on every request: a followed session is found without hashing its id again."""
        data = self.app.sessions.peek(session_id)
        key = data.key if data is not None else self.session_key(session_id)
        return self.replica.peek(key) is not None

    def new_session(self, session_id: str) -> None:
        """A session id just made here: the engine holds nothing for it, so nothing is read."""
        self.replica.remember(self.session_key(session_id), None, 0, notify=False)
        self.app.sessions.get(session_id)  # followed here, forgotten with the other sessions

    async def load_session(self, session_id: str) -> None:
        """Read a session's data before a request of that session is handled here."""
        key = self.session_key(session_id)
        self.replica.expect(key)
        started = time.perf_counter()
        try:
            value, revision = await self.engine.get(SESSIONS, key)
            self.app.metrics.observe_engine(time.perf_counter() - started)
        except EngineError as exc:
            log.warning("cannot read session data from the engine (it starts empty here): %s", exc)
            return
        self.replica.remember(key, value, revision, notify=False)
        self.app.sessions.get(session_id)  # follows it, filled from what was just read

    def follow_session(self, data: SessionData) -> None:
        key = data.key
        self.sessions[key] = data
        held = self.replica.peek(key)
        if held is None:  # asked for outside a request of the session (a timer): read it, in line with writes
            self.replica.expect(key)
            self.link.writes.write(SESSIONS, key, lambda: self._read_session(key))
        elif held[0] is not None:
            self._session_changed(key, held[0])

    async def _read_session(self, key: str) -> None:
        value, revision = await self.engine.get(SESSIONS, key)
        self.replica.remember(key, value, revision, notify=False)  # applied when the key settles

    def forget_session(self, data: SessionData, *, delete: bool = False) -> None:
        if self.sessions.get(data.key) is data:
            del self.sessions[data.key]
        if delete:
            key = data.key
            self.link.writes.write(SESSIONS, key, lambda: self.engine.delete(SESSIONS, key))
        else:
            self.replica.forget(data.key)

    def set_session_item(self, data: SessionData, name: str, value: Any) -> None:
        """Set one key of a session's data in the engine, atomically, so the other keys stay as
        other workers wrote them. Raises TypeError for a value that is not JSON, before anything
        changes."""
        held = orjson.loads(encode(value))  # a copy: changes made in place later stay out
        self._change_session(data.key, lambda items: items.__setitem__(name, held))

    def delete_session_item(self, data: SessionData, name: str) -> None:
        self._change_session(data.key, lambda items: items.pop(name, None))

    def _change_session(self, key: str, change: Callable[[dict[str, Any]], object]) -> None:
        def merged(raw: bytes) -> bytes:
            try:
                current = orjson.loads(raw)
            except orjson.JSONDecodeError:
                current = None
            items = dict(current) if isinstance(current, dict) else {}
            change(items)
            return encode(items)

        writes = self.link.writes
        writes.write(SESSIONS, key, lambda: writes.mutate(SESSIONS, key, merged, b"{}"))

    def _session_changed(self, key: str, raw: bytes | None) -> None:
        data = self.sessions.get(key)
        if data is None or self.link.writes.busy(SESSIONS, key):
            return
        try:
            value = {} if raw is None else orjson.loads(raw)
        except orjson.JSONDecodeError:
            log.warning("dropped a change of session data that is not JSON")
            return
        if isinstance(value, dict):
            data.receive(value, replace=True)

    def settle(self, bucket: str, key: str) -> None:
        held = self.replica.peek(key)
        if held is not None:
            self._session_changed(key, held[0])

    def reread(self, bucket: str, key: str) -> None:
        if key in self.sessions:
            self.link.writes.write(SESSIONS, key, lambda: self._read_session(key))

    def session_rotated(self, old: str, new: str, first: str) -> None:
        """``regenerate_session`` made ``new`` of ``old`` here: the other workers move their tabs
        of it. The message names the two sessions by their hashes (their keys in the engine),
        never by their ids: whoever reads the engine must learn no cookie."""
        payload = orjson.dumps({"n": self.node, "o": self.session_key(old), "w": self.session_key(new)})
        self.spawn(self._tell_rotation(payload))

    async def _tell_rotation(self, payload: bytes) -> None:
        # Once the session's signals are written under the new name (ScopeRegistry.rename): a
        # worker told earlier could increment a key that does not hold their values yet.
        await self.link.loaded()
        try:
            await self.engine.publish(_ROTATED_SUBJECT, payload)
        except EngineError as exc:
            log.warning("could not tell the other workers of a new session id: %s", exc)

    def _on_rotated(self, subject: str, payload: bytes) -> None:
        try:
            message = orjson.loads(payload)
            node, old, new = message["n"], message["o"], message["w"]
        except (orjson.JSONDecodeError, KeyError, TypeError):
            return
        if node == self.node or not all(isinstance(key, str) and _SESSION_KEY.match(key) for key in (old, new)):
            return
        if self.app.clock is not None:
            self.app.runtime.sessions.rotated_elsewhere(old, new)

    def _resync_sessions(self) -> None:
        """The copy was dropped: sessions are read again on their next request."""
        self.sessions.clear()
        self.app.sessions.drop_all()
