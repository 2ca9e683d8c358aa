"""Server-side stores outside any tab: global state and per-session data.

Both are bounded: global state by key count, session data by session count with least-recently
used eviction (php-via evicts the 1% least recently used past 10,000 sessions). Evictions are
counted for stats. In one process, every read-modify-write that does not ``await`` in between is
atomic; ``increment`` and ``mutate`` keep that promise when state moves to a cluster engine.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, MutableMapping
from typing import TYPE_CHECKING, Any

from pyvia.errors import UsageError
from pyvia.sharing import LOCAL_STORE
from pyvia.signals import copied

if TYPE_CHECKING:
    from pyvia.sharing import SharedStore

__all__ = ["GlobalState", "SessionData", "SessionStore"]


class GlobalState(MutableMapping[str, Any]):
    """Process-wide key/value state: ``app.global_state["visits"]``.

    With several workers it is shared through the engine (values must be JSON); each worker reads
    its local copy, writes go to the engine, ``increment`` and ``mutate`` run atomically there.
    """

    __slots__ = ("_data", "max_keys", "store")

    def __init__(self, max_keys: int = 100_000) -> None:
        self._data: dict[str, Any] = {}
        self.max_keys = max_keys
        #: Where the values are shared (:mod:`pyvia.sharing`): nowhere else in one process.
        self.store: SharedStore = LOCAL_STORE

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __setitem__(self, key: str, value: Any) -> None:
        self._set_local(key, value)
        self.store.put_global(key, value)

    def _set_local(self, key: str, value: Any) -> None:
        if key not in self._data and len(self._data) >= self.max_keys:
            raise UsageError(f"global state is full ({self.max_keys} keys); delete keys or raise max_keys")
        self._data[key] = value

    def __delitem__(self, key: str) -> None:
        del self._data[key]
        self.store.delete_global(key)

    def checkpoint(self) -> dict[str, Any]:
        """A copy of every value, for :meth:`rollback` (a test client's next run)."""
        return {key: copied(value) for key, value in self._data.items()}

    def rollback(self, checkpoint: Mapping[str, Any]) -> None:
        """Hold exactly ``checkpoint`` again, here only."""
        self._data = {key: copied(value) for key, value in checkpoint.items()}

    def receive(self, key: str, value: Any) -> None:
        """Hold a value another worker wrote, or the last stop kept: here only, not written back."""
        self._data[key] = value

    def receive_deletion(self, key: str) -> None:
        """Drop a key another worker deleted (here only)."""
        self._data.pop(key, None)

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def increment(self, key: str, by: int = 1) -> int:
        """Add ``by`` to an integer (missing counts as 0) and return the result, atomically."""
        current = self._data.get(key, 0)
        if not isinstance(current, int) or isinstance(current, bool):
            raise TypeError(f"increment() needs an int; global state {key!r} holds {type(current).__name__}")
        self._set_local(key, current + by)
        self.store.increment_global(key, by)
        return current + by

    def mutate(self, key: str, fn: Callable[[Any], Any], default: Any = None) -> Any:
        """Replace the value with ``fn(value)`` atomically (``fn`` gets ``default`` if missing).

        ``fn`` must be pure: with several workers the engine may run it again on a newer value.
        """
        value = fn(self._data.get(key, default))
        self._set_local(key, value)
        self.store.mutate_global(key, fn, default)
        return value


class SessionData(MutableMapping[str, Any]):
    """One session's data: ``c.session_data["user"]``. Shared by every tab of the session.

    With several workers it is kept in the engine (values must be JSON): assign values rather than
    changing them in place, so the change is seen and sent. Each assignment or deletion changes
    that one key in the engine, so two workers writing different keys of a session lose neither.
    """

    __slots__ = ("_data", "key", "store")

    def __init__(self, store: SharedStore = LOCAL_STORE, key: str = "") -> None:
        self._data: dict[str, Any] = {}
        self.store = store
        self.key = key  # the session's hash: its key in the engine (empty when nothing is shared)

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __setitem__(self, key: str, value: Any) -> None:
        self.store.set_session_item(self, key, value)  # shared: raises TypeError for a value JSON cannot hold
        self._data[key] = value

    def __delitem__(self, key: str) -> None:
        del self._data[key]
        self.store.delete_session_item(self, key)

    def receive(self, values: Mapping[str, Any], *, replace: bool = False) -> None:
        """Hold what another worker wrote (all of it, ``replace``) or the last stop kept: here
        only, not written back."""
        if replace:
            self._data = dict(values)
        else:
            self._data.update(values)

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __repr__(self) -> str:
        return f"SessionData({self._data!r})"


class SessionStore:
    """Session data by session id, least recently used evicted past ``max_sessions``."""

    __slots__ = ("_sessions", "evictions", "max_sessions", "store")

    def __init__(self, max_sessions: int = 10_000) -> None:
        self._sessions: OrderedDict[str, SessionData] = OrderedDict()
        self.max_sessions = max_sessions
        self.evictions = 0
        #: Where session data is shared (:mod:`pyvia.sharing`): nowhere else in one process.
        self.store: SharedStore = LOCAL_STORE

    def get(self, session_id: str) -> SessionData:
        data = self._sessions.get(session_id)
        if data is None:
            store = self.store
            data = self._sessions[session_id] = SessionData(store, store.session_key(session_id))
            store.follow_session(data)
            if len(self._sessions) > self.max_sessions:
                _, evicted = self._sessions.popitem(last=False)
                self.evictions += 1
                store.forget_session(evicted)
        else:
            self._sessions.move_to_end(session_id)
        return data

    def items(self) -> list[tuple[str, SessionData]]:
        return list(self._sessions.items())

    def forget_all_but(self, kept: frozenset[str]) -> None:
        """Forget every session but ``kept`` (the ids a test client's run found): its next run
        starts as a new process would."""
        for session_id, data in list(self._sessions.items()):
            if session_id not in kept:
                del self._sessions[session_id]
                self.store.forget_session(data)

    def peek(self, session_id: str) -> SessionData | None:
        return self._sessions.get(session_id)

    def clear(self, session_id: str) -> None:
        data = self._sessions.pop(session_id, None)
        if data is not None:
            self.store.forget_session(data, delete=True)  # the engine's copy goes too (a rotation)

    def forget(self, session_id: str) -> None:
        """Stop following a session here (the engine keeps what it holds)."""
        data = self._sessions.pop(session_id, None)
        if data is not None:
            self.store.forget_session(data)

    def drop_all(self) -> None:
        """Forget every session here (the engine holds them; they are read again when used)."""
        self._sessions.clear()

    def __len__(self) -> int:
        return len(self._sessions)
