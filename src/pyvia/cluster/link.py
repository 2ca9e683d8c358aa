"""An app's link to the engine: shared state, broadcasts and forwarding across workers and nodes.

With one worker none of this exists: the app's ownership and shared store are the local ones
(:mod:`pyvia.runtime.ownership`, :mod:`pyvia.sharing`) and shared state is plain Python.
With ``PYVIA_ENGINE_URL`` set (``pyvia run --workers N`` sets it) the app makes one
:class:`ClusterLink` at start (DESIGN.md, "Multi-worker and multi-node"). It composes one part
per subsystem, each in its module with its own start and stop:

* :mod:`~pyvia.cluster.writes`: writes to the shared buckets, in order per key; an action's
  answer waits for the writes it made.
* :mod:`~pyvia.cluster.shared`: scoped signals (buckets ``scopes``, ``session-scopes``) and
  global state (``global``), each worker reading a local copy.
* :mod:`~pyvia.cluster.sessions`: session data (``sessions``) and session rotations.
* :mod:`~pyvia.cluster.broadcasts`: broadcasts, marked once the receiver caught up.
* :mod:`~pyvia.cluster.presence`: open tabs per scope on the other workers.
* :mod:`~pyvia.cluster.rate`: the action rate limit for the whole app.
* :mod:`~pyvia.cluster.directory`: where each tab is (``directory``), claimed, released, swept.
* :mod:`~pyvia.cluster.forwarding`: requests for a tab held elsewhere: passed, relayed,
  forwarded, taken over; and those of the others, served.
* :mod:`~pyvia.cluster.leases`: the timer lease (app timers run on one worker).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pyvia.cluster.base import Engine
from pyvia.cluster.broadcasts import BroadcastRelay
from pyvia.cluster.directory import Directory
from pyvia.cluster.forwarding import Forwarding
from pyvia.cluster.leases import TimerLease
from pyvia.cluster.parts import (
    DIRECTORY,
    GLOBAL_BUCKET,
    LEASES,
    SCOPES,
    SESSION_SCOPES,
    SESSIONS,
    Part,
    signal_key,
)
from pyvia.cluster.presence import Presence
from pyvia.cluster.rate import SharedRate
from pyvia.cluster.sessions import SharedSessions
from pyvia.cluster.shared import SharedGlobals, SharedSignals
from pyvia.cluster.writes import Writes
from pyvia.http import Request, Response
from pyvia.session import SESSION_MAX_AGE

if TYPE_CHECKING:
    from pyvia.app import App
    from pyvia.scopes import SharedSignal
    from pyvia.state import SessionData

__all__ = ["DIRECTORY", "GLOBAL_BUCKET", "SCOPES", "ClusterLink", "signal_key"]


class ClusterLink:
    """The engine side of one app (see the module docstring); made and started by ``App.startup``."""

    __slots__ = (
        "address",
        "app",
        "broadcasts",
        "directory",
        "engine",
        "forwarding",
        "globals",
        "lease",
        "node",
        "presence",
        "rate",
        "sessions",
        "signals",
        "writes",
    )

    def __init__(self, app: App, engine: Engine) -> None:
        self.app = app
        self.engine = engine
        self.node = engine.node_id
        #: What the directory says for a tab held here: the node id and its channels (:mod:`~pyvia.cluster.directory`).
        self.address = self.node
        self.writes = Writes(self)
        self.signals = SharedSignals(self)
        self.globals = SharedGlobals(self)
        self.sessions = SharedSessions(self)
        self.broadcasts = BroadcastRelay(self)
        self.presence = Presence(self)
        self.rate = SharedRate(self)
        self.lease = TimerLease(self)
        self.directory = Directory(self)
        self.forwarding = Forwarding(self)

    @property
    def _parts(self) -> tuple[Part, ...]:
        return (
            self.writes,
            self.signals,
            self.globals,
            self.sessions,
            self.broadcasts,
            self.presence,
            self.rate,
            self.lease,
            self.directory,
            self.forwarding,
        )

    @property
    def shared(self) -> bool:
        """Tabs and values are shared with the other workers (the ownership and store seams)."""
        return True

    # --- start and stop --------------------------------------------------------------------------

    async def start(self) -> None:
        """Connect, make the buckets, then start the parts: the shared state is read before this
        node serves, and the signals declared before the link existed are followed last."""
        engine = self.engine
        await engine.connect()
        await engine.configure_bucket(LEASES, ttl=TimerLease.TTL)
        for bucket in (SCOPES, GLOBAL_BUCKET, DIRECTORY):
            await engine.configure_bucket(bucket)  # made now: creating one on first use takes a while on NATS
        for bucket in (SESSIONS, SESSION_SCOPES):  # what a session leaves behind goes when its cookie would
            await engine.configure_bucket(bucket, ttl=SESSION_MAX_AGE)
        await self.signals.start()
        await self.globals.start()
        await self.sessions.start()
        await self.broadcasts.start()
        await self.rate.start()
        await self.presence.start()
        await self.lease.start()
        await self.forwarding.start()  # sets self.address
        self.lease.hold()
        await self.directory.start()
        self.signals.track_declared()

    @property
    def is_stopped(self) -> bool:
        """:meth:`stop` began: the app makes a new link if it starts again."""
        return self.forwarding.stopping

    def stop_taking_connections(self) -> None:
        """Refuse the connections other workers pass from now on (the app is draining): their
        senders keep them."""
        self.forwarding.stop_taking_connections()

    async def stop(self) -> None:
        """Finish what the other workers sent (2 s at most), then take no more of it, let writes in
        flight finish (1 s at most), give up the lease and close the engine.

        The tabs' streams have ended (``App.shutdown``), so the tabs move to other workers; an
        action for one of them relayed here meanwhile still runs here, with the engine. Once that
        ends, a forwarded action is answered "moved" and its sender handles it: run here after
        the engine closed, it could not be saved."""
        await self.forwarding.drain()
        await self.writes.stop()
        for part in self._parts:
            part.cancel_tasks()
        for part in (
            self.rate,
            self.presence,
            self.lease,  # given up: the next holder takes it at once
            self.broadcasts,
            self.directory,
            self.forwarding,
            self.sessions,
            self.signals,
            self.globals,
        ):
            await part.stop()
        await self.engine.close()

    # --- shared state: scoped signals, global state, session data --------------------------------

    @property
    def writing(self) -> int:
        """The sequence number of the newest write started (see :meth:`written`)."""
        return self.writes.writing

    async def written(self, after: int) -> None:
        """Wait for the writes started after ``after``; EngineUnavailable when one failed."""
        await self.writes.written(after)

    @property
    def loading(self) -> bool:
        """Scoped signals (or a page's claim) are being read or written (a page waits before it renders)."""
        return self.signals.loading

    async def loaded(self) -> None:
        await self.signals.loaded()

    def track(self, sig: SharedSignal[Any], *, new: bool = False) -> None:
        self.signals.track(sig, new=new)

    def refresh(self, sig: SharedSignal[Any]) -> None:
        self.signals.refresh(sig)

    def untrack(self, sig: SharedSignal[Any]) -> None:
        self.signals.untrack(sig)

    def put_signal(self, sig: SharedSignal[Any]) -> None:
        self.signals.put_signal(sig)

    def increment_signal(self, sig: SharedSignal[Any], by: int) -> None:
        self.signals.increment_signal(sig, by)

    def mutate_signal(self, sig: SharedSignal[Any], fn: Callable[[Any], Any], before: Any) -> None:
        self.signals.mutate_signal(sig, fn, before)

    async def committed(self, sig: SharedSignal[Any]) -> Any:
        return await self.signals.committed(sig)

    def put_global(self, key: str, value: Any) -> None:
        self.globals.put_global(key, value)

    def delete_global(self, key: str) -> None:
        self.globals.delete_global(key)

    def increment_global(self, key: str, by: int) -> None:
        self.globals.increment_global(key, by)

    def mutate_global(self, key: str, fn: Callable[[Any], Any], default: Any) -> None:
        self.globals.mutate_global(key, fn, default)

    @staticmethod
    def session_key(session_id: str) -> str:
        """A session's key in the engine: its hash, never the cookie itself."""
        return SharedSessions.session_key(session_id)

    def has_session(self, session_id: str) -> bool:
        return self.sessions.has_session(session_id)

    def new_session(self, session_id: str) -> bool:
        self.sessions.new_session(session_id)
        return True  # followed: its session-scoped signals are new too

    async def load_session(self, session_id: str) -> None:
        await self.sessions.load_session(session_id)

    def follow_session(self, data: SessionData) -> None:
        self.sessions.follow_session(data)

    def forget_session(self, data: SessionData, *, delete: bool = False) -> None:
        self.sessions.forget_session(data, delete=delete)

    def set_session_item(self, data: SessionData, name: str, value: Any) -> None:
        self.sessions.set_session_item(data, name, value)

    def delete_session_item(self, data: SessionData, name: str) -> None:
        self.sessions.delete_session_item(data, name)

    def session_rotated(self, old: str, new: str, first: str) -> None:
        self.sessions.session_rotated(old, new, first)

    # --- broadcasts, presence, timers ------------------------------------------------------------

    def broadcast(self, scope: str) -> None:
        self.broadcasts.broadcast(scope)

    def patch_scope(self, scope: str, frame: bytes) -> None:
        self.broadcasts.patch(scope, frame)

    def remote_count(self, scope: str) -> int:
        return self.presence.remote_count(scope)

    @property
    def is_timer_leader(self) -> bool:
        """Whether app timers run here: this worker holds the ``timers`` lease."""
        return self.lease.is_timer_leader

    # --- where tabs are: the directory and forwarding --------------------------------------------

    def claim(self, ctx_id: str, *, wait: bool = False) -> None:
        self.directory.claim(ctx_id, wait=wait)

    def release(self, ctx_id: str) -> None:
        self.directory.release(ctx_id)

    async def owner(self, ctx_id: str, *, cached: bool = True) -> str | None:
        return await self.forwarding.owner(ctx_id, cached=cached)

    async def pass_connection(self, owner: str, request: Request, *, balanced: bool = False) -> bool:
        return await self.forwarding.pass_connection(owner, request, balanced=balanced)

    def relay(
        self, ctx_id: str, request: Request, timeout: float, answer: Callable[[Response | Exception | None], None]
    ) -> bool:
        return self.forwarding.relay(ctx_id, request, timeout, answer)

    async def forward(self, ctx_id: str, request: Request, timeout: float) -> Response | None:
        return await self.forwarding.forward(ctx_id, request, timeout)

    async def take_over(self, owner: str, ctx_id: str, session_hash: str) -> dict[str, Any] | None:
        return await self.forwarding.take_over(owner, ctx_id, session_hash)
