"""The shared-store seam: where scoped signals, global state and session data are shared.

The core writes shared values through a :class:`SharedStore` and never asks whether there is a
cluster. In one process the store is :data:`LOCAL_STORE`: values are plain Python, held where
they are written, so every call is a no-op (the callers change their own copy first). With
several workers the cluster's link (``pyvia.cluster.link.ClusterLink``) is the store: it follows
the values in the engine, writes there in order per key, and makes an action's answer wait for
what it wrote (:meth:`SharedStore.written`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from pyvia.scopes import SharedSignal
    from pyvia.state import SessionData

__all__ = ["LOCAL_STORE", "LocalStore", "SharedStore"]


class SharedStore(Protocol):
    """What the core asks of the place its shared values live (see the module docstring)."""

    @property
    def shared(self) -> bool:
        """Whether values are shared with other processes (else they are this process's alone)."""

    @property
    def engine(self) -> Any:
        """The engine the values live in (``/_health`` reports it), or None."""

    @property
    def is_stopped(self) -> bool:
        """:meth:`stop` began: an app that starts again makes a new store."""

    async def stop(self) -> None:
        """Let writes in flight finish, then let the shared values go."""

    # Settling: what an action and a page wait for.

    @property
    def writing(self) -> int:
        """The sequence number of the newest write started (see :meth:`written`)."""

    async def written(self, after: int) -> None:
        """Wait for the writes started after ``after``; raises ``EngineUnavailable`` (a 503) when
        one of them could not be saved."""

    @property
    def loading(self) -> bool:
        """Shared values just declared are being read (a page waits before it renders)."""

    async def loaded(self) -> None:
        """Wait until :attr:`loading` is over."""

    # Scoped signals.

    def track(self, sig: SharedSignal[Any], *, new: bool = False) -> None:
        """A scoped signal was declared here: follow its shared value (``new``: its scope was just made)."""

    def refresh(self, sig: SharedSignal[Any]) -> None:
        """Read a followed signal from the store again before the page renders: the session's own
        action just wrote shared state, which this copy may not have received yet."""

    def untrack(self, sig: SharedSignal[Any]) -> None:
        """The signal's scope has no members here any more: stop following it."""

    def put_signal(self, sig: SharedSignal[Any]) -> None:
        """The signal was set here: share its value."""

    def increment_signal(self, sig: SharedSignal[Any], by: int) -> None:
        """The signal was incremented here by ``by``: add it to the shared value, atomically."""

    def mutate_signal(self, sig: SharedSignal[Any], fn: Callable[[Any], Any], before: Any) -> None:
        """The signal was changed here by ``fn`` (from ``before``): apply it to the shared value."""

    async def committed(self, sig: SharedSignal[Any]) -> Any:
        """The signal's value once this worker's writes of it reached the store."""

    # Global state.

    def put_global(self, key: str, value: Any) -> None: ...

    def delete_global(self, key: str) -> None: ...

    def increment_global(self, key: str, by: int) -> None: ...

    def mutate_global(self, key: str, fn: Callable[[Any], Any], default: Any) -> None: ...

    # Session data.

    def session_key(self, session_id: str) -> str:
        """A session's key in the store (never the id itself); empty when nothing is shared."""

    def has_session(self, session_id: str) -> bool:
        """Whether the session's data is here already (nothing to :meth:`load_session` first)."""

    def new_session(self, session_id: str) -> bool:
        """A session id just made here; whether the store follows it (its session-scoped
        signals are then new too)."""

    async def load_session(self, session_id: str) -> None:
        """Read a session's data before a request of that session is handled here."""

    def follow_session(self, data: SessionData) -> None: ...

    def forget_session(self, data: SessionData, *, delete: bool = False) -> None: ...

    def set_session_item(self, data: SessionData, name: str, value: Any) -> None:
        """Share one key of a session's data (TypeError for a value the store cannot hold)."""

    def delete_session_item(self, data: SessionData, name: str) -> None: ...

    def session_rotated(self, old: str, new: str, first: str) -> None:
        """``regenerate_session`` made ``new`` of ``old`` here: whoever else holds tabs of it moves them."""

    # Broadcasts.

    def broadcast(self, scope: str) -> None:
        """``scope`` (a name or pattern) was broadcast here: whoever else shows it re-renders."""

    def patch_scope(self, scope: str, frame: bytes) -> None:
        """``frame`` went to this worker's tabs of ``scope``: the other workers send it to theirs."""


class LocalStore:
    """One process: the values are where they were written, so there is nothing to share."""

    __slots__ = ()

    shared = False
    engine = None
    is_stopped = False
    writing = 0
    loading = False

    async def stop(self) -> None:
        pass

    async def written(self, after: int) -> None:
        pass

    async def loaded(self) -> None:
        pass

    def track(self, sig: SharedSignal[Any], *, new: bool = False) -> None:
        pass

    def refresh(self, sig: SharedSignal[Any]) -> None:
        pass

    def untrack(self, sig: SharedSignal[Any]) -> None:
        pass

    def put_signal(self, sig: SharedSignal[Any]) -> None:
        pass

    def increment_signal(self, sig: SharedSignal[Any], by: int) -> None:
        pass

    def mutate_signal(self, sig: SharedSignal[Any], fn: Callable[[Any], Any], before: Any) -> None:
        pass

    async def committed(self, sig: SharedSignal[Any]) -> Any:
        return sig.value

    def put_global(self, key: str, value: Any) -> None:
        pass

    def delete_global(self, key: str) -> None:
        pass

    def increment_global(self, key: str, by: int) -> None:
        pass

    def mutate_global(self, key: str, fn: Callable[[Any], Any], default: Any) -> None:
        pass

    def session_key(self, session_id: str) -> str:
        return ""

    def has_session(self, session_id: str) -> bool:
        return True

    def new_session(self, session_id: str) -> bool:
        return False

    async def load_session(self, session_id: str) -> None:
        pass

    def follow_session(self, data: SessionData) -> None:
        pass

    def forget_session(self, data: SessionData, *, delete: bool = False) -> None:
        pass

    def set_session_item(self, data: SessionData, name: str, value: Any) -> None:
        pass

    def delete_session_item(self, data: SessionData, name: str) -> None:
        pass

    def session_rotated(self, old: str, new: str, first: str) -> None:
        pass

    def broadcast(self, scope: str) -> None:
        pass

    def patch_scope(self, scope: str, frame: bytes) -> None:
        pass


#: The store of every app until a cluster's link replaces it (``App.share_through``).
LOCAL_STORE: SharedStore = LocalStore()
