"""An app's link to the engine: shared state, broadcasts and forwarding across workers and nodes.

With one worker none of this exists (``app.link`` is None) and shared state is plain Python.
With ``PYVIA_ENGINE_URL`` set (``pyvia run --workers N`` sets it) the app makes one
:class:`ClusterLink` at start, and (DESIGN.md, "Multi-worker and multi-node"):

* **Scoped signals** live in the bucket ``scopes`` under ``scope#name`` (session-scoped ones in
  ``session-scopes``); **global state** in ``global``; **session data** in ``sessions`` under the
  session's hash (the two session buckets expire with the session cookie). Each worker keeps a
  read copy (:class:`~pyvia.cluster.replica.Replica`) fed by the bucket's change messages, so
  renders read local memory. A write changes the local value at once (the writing tab sees it)
  and goes to the engine in order per key; ``increment()`` and ``mutate()`` run atomically there.
  While a worker's own writes to a key are in flight, changes from others wait; then the engine's
  newest value wins, so every worker ends on the same value. An action's answer waits for the
  writes it made, so a client that sees its POST answered sees its write in the engine.
* **Broadcasts** named explicitly (``app.broadcast``, ``c.broadcast``) are published once per
  scope per loop turn with the bucket revisions the sender had seen; a receiver that has not yet
  seen those revisions waits for them (at most a second) before it marks the scope, so it never
  renders older state than the sender. Signal writes need no message: their change marks the
  scope on every worker that holds it.
* **Directory**: the bucket ``directory`` maps a context id to where its node's direct channels
  are (:mod:`pyvia.cluster.direct`): ``"<node> <host:port or -> <unix socket path or ->"``, the
  TCP address served with ``cluster_address`` and the socket of this machine's workers (last: a
  path may hold spaces). A request for a tab held by another worker of this machine hands the
  browser's connection to it (:mod:`pyvia.cluster.passing`); otherwise an action is forwarded to
  its owner, over that socket when the owner is a worker of this machine, else over its TCP
  channel when it serves one, else (or when that channel fails) by request/reply on
  ``fwd.<node>``, and answered as if local, and a stream takes the tab over (the owner hands its
  tab state over and lets it go). When the owner is gone (no responders) the tab is revived
  where the request landed. Once a worker knows a tab's owner, it relays the tab's later actions
  on an open channel straight from ``App.handle`` (:meth:`ClusterLink.relay`: no task, no
  dispatch); the owner checks them (Origin, rate limit) as it does every action it runs.
* **Presence**: each worker tells the others its open tabs per scope when they change (checked
  every 250 ms, sent at least every 2 s); ``app.count_clients`` adds them, and a change re-renders
  the scope where it is shown (once anything asked for a count: an app that never does re-renders
  nothing, so tabs opening do not rewrite every tab's view four times a second).
* **Rate limit**: each worker tells the others every 250 ms how many action tokens each client
  address took there, and takes them out of its own buckets, so the per-address rate holds for
  the whole app.
* **Timers** set with ``app.set_interval`` run on the worker holding the ``timers`` lease (rewritten
  five times a second, taken over within a second when its holder dies), unless ``every_worker``.
"""

from __future__ import annotations

import asyncio
import contextlib
import fnmatch
import logging
import os
import re
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import orjson

from pyvia.cluster import CLUSTER_ADDRESS_ENV, WORKER_ID_ENV, WORKERS_ENV
from pyvia.cluster.base import (
    Engine,
    EngineError,
    EngineUnavailable,
    KvChange,
    NoResponders,
    RemoteError,
    RequestTimeout,
    Subscription,
    valid_wire_scope,
)
from pyvia.cluster.direct import DirectClient, DirectServer, Unreachable, channel_key, socket_path
from pyvia.cluster.passing import ConnectionPost, inbox_path, request_bytes
from pyvia.cluster.replica import Replica
from pyvia.config import cluster_host_port
from pyvia.http import Headers, Request, Response, StreamResponse
from pyvia.lifecycle import State
from pyvia.scopes import Scope
from pyvia.session import SESSION_MAX_AGE

if TYPE_CHECKING:
    from pyvia.app import App
    from pyvia.scopes import SharedSignal
    from pyvia.state import SessionData

__all__ = ["DIRECTORY", "GLOBAL_BUCKET", "SCOPES", "ClusterLink", "signal_key"]

log = logging.getLogger("pyvia.cluster")

SCOPES = "scopes"
SESSION_SCOPES = "session-scopes"  # session-scoped signals: they expire with the session
GLOBAL_BUCKET = "global"
SESSIONS = "sessions"
DIRECTORY = "directory"
LEASES = "leases"
_BROADCAST_SUBJECT = "bcast"
_RATE_SUBJECT = "rate"
_PRESENCE_SUBJECT = "presence"
_ROTATED_SUBJECT = "rotated"
_SESSION_KEY = re.compile(r"[0-9a-f]{32}\Z")  # a session's hash (session_key)
_PRESENCE_PERIOD = 0.25  # counts are sent when they changed, checked this often
_PRESENCE_HEARTBEAT = 2.0  # and at least this often, so a silent worker's counts expire
_PRESENCE_EXPIRY = 6.0
_RATE_PERIOD = 0.25
_LEASE_TTL = 5.0  # the bucket's: an abandoned lease the engine drops by itself
_LEASE_RENEW = 0.2  # the holder rewrites the timer lease this often
_LEASE_LAPSE = 0.7  # a lease nobody rewrote for this long, as a watcher saw it, is taken over
_LEASE_KEY = "timers"
_SWEEP_LOOK = 60.0  # how often, at most, the timer leader looks for workers gone from presence
_WRITE_TIMEOUT = 10.0  # an engine that does not answer must not hold an action (or the writes after it)
_CATCH_UP_LIMIT = 1.0  # seconds a broadcast waits for the state it follows before it goes anyway
_OWNER_CACHE = 65_536  # directory entries remembered by a worker that forwards
_OWNER_CHECK = 1.0  # a forwarded request unanswered this long checks that its owner is alive


def _forwarded(ctx_id: str, request: Request) -> bytes:
    """A request for the owner of tab ``ctx_id`` (see :meth:`ClusterLink._serve_direct`)."""
    message: dict[str, object] = {
        "op": "request",
        "x": ctx_id,
        "m": request.method,
        "p": request.path,
        "q": request.query_string,
        "h": list(request.headers),
        "b": request.body.decode("latin-1"),
        "c": request.client,
        "s": request.scheme,
    }
    if "_signals" in request.state and "_form" not in request.state:
        message["g"] = request.state["_signals"]  # parsed here already: not again there
    return orjson.dumps(message)


def _response(reply: dict[str, Any]) -> Response | None:
    """The response in an owner's reply (:func:`_reply`); None when it no longer holds the tab."""
    if "moved" in reply:
        return None
    return Response(reply["status"], [tuple(h) for h in reply["headers"]], reply["body"].encode("latin-1"))


def _reply(result: object) -> bytes:
    if not isinstance(result, Response):  # a stream: never for an action
        return orjson.dumps({"status": 500, "headers": [], "body": ""})
    return orjson.dumps(
        {"status": result.status, "headers": list(result.headers), "body": bytes(result.body).decode("latin-1")}
    )


def signal_key(scope: str, name: str) -> str:
    """The engine key of a scoped signal: ``room:lobby#count``."""
    return f"{scope}#{name}"


def _encode(value: Any) -> bytes:
    return orjson.dumps(value)


def _through_proxy(request: Request) -> bool:
    """A proxy's connection carries the requests of many browsers, whose tabs live on any
    worker: passed, it would move at nearly every request (each move costs more than forwarding)."""
    headers = request.headers
    return "x-forwarded-for" in headers or "forwarded" in headers or "via" in headers


class ClusterLink:
    """The engine side of one app (see the module docstring); made and started by ``App.startup``."""

    __slots__ = (
        "_busy",
        "_claims",
        "_counted",
        "_direct",
        "_failed_upto",
        "_key",
        "_lease_holder",
        "_lease_rev",
        "_lease_seen",
        "_lease_until",
        "_lease_wake",
        "_loads",
        "_outgoing",
        "_owners",
        "_peers",
        "_pending",
        "_post",
        "_presence_dirty",
        "_publish_scheduled",
        "_queued",
        "_remote",
        "_seq",
        "_stopping",
        "_subs",
        "_tails",
        "_tasks",
        "_tcp",
        "address",
        "app",
        "engine",
        "global_replica",
        "node",
        "replica",
        "session_replica",
        "session_scope_replica",
        "sessions",
        "signals",
        "warned",
    )

    def __init__(self, app: App, engine: Engine) -> None:
        self.app = app
        self.engine = engine
        self.node = engine.node_id
        #: Scoped signals declared on this worker, by engine key.
        self.signals: dict[str, SharedSignal[Any]] = {}
        self.replica = Replica(engine, SCOPES, on_change=self._signal_changed, on_resync=self._resync)
        self.session_scope_replica = Replica(
            engine, SESSION_SCOPES, on_change=self._signal_changed, on_resync=self._resync
        )
        self.global_replica = Replica(
            engine, GLOBAL_BUCKET, on_change=self._global_changed, on_resync=self._resync_global, track_all=True
        )
        #: Session data followed on this worker, by session hash.
        self.sessions: dict[str, SessionData] = {}
        self.session_replica = Replica(
            engine, SESSIONS, on_change=self._session_changed, on_resync=self._resync_sessions
        )
        self._lease_holder: bytes | None = None  # who holds the timer lease, as last seen
        self._lease_rev = 0  # the lease's revision, as last seen or written
        self._lease_seen = time.monotonic()  # when it last changed, as seen here
        self._lease_until = 0.0  # holding it: timers run here until then (monotonic)
        self._lease_wake = asyncio.Event()  # the lease was given up: take it now
        self.warned = False
        self._seq = 0
        self._pending: dict[int, asyncio.Task[bool]] = {}
        # every write started up to this sequence number may be lost: one of them failed (a write
        # can fail before the action that made it asks, so the failure is kept, not only the task)
        self._failed_upto = 0
        self._tails: dict[tuple[str, str], asyncio.Task[bool]] = {}
        self._busy: dict[tuple[str, str], int] = {}
        self._queued: dict[tuple[str, str], list[Any]] = {}  # an increment waiting its turn: [by, task]
        self._loads: set[asyncio.Task[bool]] = set()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._outgoing: set[str] = set()
        self._owners: OrderedDict[str, str] = OrderedDict()  # ctx id -> node, as last read
        self._claims: dict[str, int] = {}  # ctx id of a tab held here -> revision of its directory entry
        self._remote: dict[str, tuple[float, dict[str, int]]] = {}  # node -> (when, open tabs by scope)
        self._presence_dirty = True
        #: Whether anything asked for a count (:meth:`remote_count`): until then no view shows one,
        #: and a count that changed re-renders nothing.
        self._counted = False
        self._direct: DirectServer | None = None  # on a unix socket, for the workers of this machine
        self._tcp: DirectServer | None = None  # on TCP, for the other machines (``cluster_address``)
        self._key = b""  # what a TCP channel's handshake proves (channel_key)
        self._peers: dict[str, DirectClient | None] = {}  # node -> its direct channel (None: the engine)
        self._post: ConnectionPost | None = None  # passes connections to the other workers, takes theirs
        #: What the directory says for a tab held here: the node id and its channels (module docstring).
        self.address = self.node
        self._publish_scheduled = False
        self._subs: list[Subscription] = []
        self._stopping = False

    # --- start and stop --------------------------------------------------------------------------

    async def start(self) -> None:
        """Connect, watch the shared buckets, load global state, serve this node's forwarding subject."""
        engine = self.engine
        await engine.connect()
        await engine.configure_bucket(LEASES, ttl=_LEASE_TTL)
        for bucket in (SCOPES, GLOBAL_BUCKET, DIRECTORY):
            await engine.configure_bucket(bucket)  # made now: creating one on first use takes a while on NATS
        for bucket in (SESSIONS, SESSION_SCOPES):  # what a session leaves behind goes when its cookie would
            await engine.configure_bucket(bucket, ttl=SESSION_MAX_AGE)
        await self.replica.start()
        await self.session_scope_replica.start()
        await self.global_replica.start()
        await self.session_replica.start()
        await self._load_global()
        self._subs.append(await engine.subscribe(_BROADCAST_SUBJECT, self._on_broadcast))
        self._subs.append(await engine.subscribe(_RATE_SUBJECT, self._on_rate))
        self._subs.append(await engine.subscribe(_PRESENCE_SUBJECT, self._on_presence))
        self._subs.append(await engine.subscribe(_ROTATED_SUBJECT, self._on_rotated))
        self._subs.append(await engine.watch(LEASES, self._lease_changed, on_resync=self._lease_resync))
        self.app._on_connect.append(self._presence_changed)
        self.app._on_disconnect.append(self._presence_changed)
        self._spawn(self._tell_presence())
        self.app._limiter.spent = {}
        self._spawn(self._tell_rate())
        self._subs.append(await engine.serve(f"fwd.{self.node}", self._serve))
        self._key = channel_key(self.app._secret, self.app.config.engine_prefix)
        path = await self._serve_unix() if self.app.config.cluster_direct else None
        tcp = await self._serve_tcp()
        self.address = f"{self.node} {tcp or '-'} {path or '-'}"
        self._spawn(self._hold_timer_lease())
        self._spawn(self._sweep_directory())
        for state in self.app.scopes:  # declared before the link existed (``app.signal`` at import)
            for sig in list(state.signals.values()):
                self.track(sig)

    async def _serve_unix(self) -> str | None:
        """Serve the direct channel to this machine's workers, and take the connections they pass."""
        try:
            path = socket_path(self.app.config.engine_prefix, self.node)
            server = DirectServer(path, self._serve_direct)
            await server.start()
        except OSError as exc:
            log.warning("no direct channel between this machine's workers (actions go through the engine): %s", exc)
            return None
        self._direct = server
        # adopt_connection: set when served by the native server over plain HTTP
        adopt = self.app.adopt_connection
        post = ConnectionPost(inbox_path(path), adopt, getattr(adopt, "load", None))
        try:
            post.start()
        except OSError as exc:
            log.warning("this worker cannot pass connections to the others (it forwards): %s", exc)
        else:
            self._post = post
        return path

    async def _serve_tcp(self) -> str | None:
        """Serve the direct channel to other machines at ``cluster_address``: ``host:port`` to
        advertise, or None. With a port, worker ``i`` of ``n`` takes ``port + i``, else (its
        predecessor still drains in a reload) ``port + n + i``; without, any free port."""
        setting = self.app.config.cluster_address or os.environ.get(CLUSTER_ADDRESS_ENV)
        if not setting:
            return None
        host, port = cluster_host_port(setting)
        index, count = int(os.environ.get(WORKER_ID_ENV, 0)), int(os.environ.get(WORKERS_ENV, 1))
        error: Exception | None = None
        for candidate in (port + index, port + count + index) if port else (0,):
            server = DirectServer((host, candidate), self._serve_direct, self._key)
            try:
                await server.start()
            except (OSError, OverflowError) as exc:
                error = exc
                continue
            self._tcp = server
            bound = server.address[1]
            return f"[{host}]:{bound}" if ":" in host else f"{host}:{bound}"
        log.warning(
            "no direct channel to other machines on %s (actions from them go through the engine): %s", setting, error
        )
        return None

    @property
    def is_stopped(self) -> bool:
        """:meth:`stop` began: the app makes a new link if it starts again."""
        return self._stopping

    def stop_taking_connections(self) -> None:
        """Refuse the connections other workers pass from now on (the app is draining): their
        senders keep them."""
        if self._post is not None:
            self._post.adopt = None

    async def stop(self) -> None:
        """Finish what the other workers sent (2 s at most), then take no more of it, let writes in
        flight finish (1 s at most), give up the lease and close the engine.

        The tabs' streams have ended (``App.shutdown``), so the tabs move to other workers; an
        action for one of them relayed here meanwhile still runs here, with the engine. Once that
        ends, a forwarded action is answered "moved" and its sender handles it: run here after
        the engine closed, it could not be saved."""
        if self._post is not None:
            self._post.stop()
            self._post = None
        for server in (self._direct, self._tcp):
            if server is not None:
                await server.drain(2.0)
        self._stopping = True
        for server in (self._direct, self._tcp):
            if server is not None:
                await server.drain(1.0)  # those that came during the first wait
        if self._pending:
            await asyncio.wait(list(self._pending.values()), timeout=1.0)
        for task in list(self._tasks):
            task.cancel()
        self.app._limiter.spent = None
        for hooks in (self.app._on_connect, self.app._on_disconnect):
            if self._presence_changed in hooks:
                hooks.remove(self._presence_changed)
        if self.is_timer_leader:
            self._lease_until = 0.0
            with contextlib.suppress(EngineError):  # the next holder takes it at once
                await self.engine.delete(LEASES, _LEASE_KEY, self._lease_rev)
        for sub in self._subs:
            with contextlib.suppress(EngineError):
                await sub.unsubscribe()
        self._subs.clear()
        for server in (self._direct, self._tcp):
            if server is not None:
                await server.stop()
        self._direct = self._tcp = None
        for client in self._peers.values():
            if client is not None:
                client.close()
        await self.replica.stop()
        await self.session_scope_replica.stop()
        await self.global_replica.stop()
        await self.session_replica.stop()
        await self.engine.close()

    def _spawn(self, awaitable: Awaitable[Any]) -> asyncio.Task[Any]:
        task = asyncio.ensure_future(awaitable)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # --- writes, in order per key ----------------------------------------------------------------

    def _write(self, bucket: str, key: str, op: Callable[[], Awaitable[Any]]) -> asyncio.Task[bool]:
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

    def _increment(self, bucket: str, key: str, by: int) -> None:
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
            replica = self._replica(bucket)
            since = replica.revision_of(key)
            total = await self.engine.increment(bucket, key, box[0])
            replica.assume(key, _encode(total), since)  # what the key settles on
            return total

        box[1] = self._write(bucket, key, add)
        self._queued[slot] = box

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
            self.app._report(exc, None, "shared state", reraise=False)
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
                if written:
                    self._settle(slot)
                elif self.engine.is_connected:  # the engine's value again, not the one that failed
                    self._reread(slot)
        return written

    def _reread(self, slot: tuple[str, str]) -> None:
        """Read a key again after a write of it failed while the engine stayed connected (a
        timeout, a ``mutate`` that raised): the local value goes back to the engine's. While
        disconnected the reconnect's resync reads everything again."""
        bucket, key = slot
        if bucket in (SCOPES, SESSION_SCOPES):
            sig = self.signals.get(key)
            if sig is not None:
                self._read(key, sig)
        elif bucket == SESSIONS:
            if key in self.sessions:
                self._write(SESSIONS, key, lambda: self._read_session(key))
        elif bucket == GLOBAL_BUCKET:
            self._write(GLOBAL_BUCKET, key, lambda: self._read_global(key))

    def _settle(self, slot: tuple[str, str]) -> None:
        """No write of ours is in flight any more: take the newest value the engine reported."""
        bucket, key = slot
        if bucket in (SCOPES, SESSION_SCOPES):
            held = self._where(key)[1].peek(key)
            if held is not None and held[0] is not None:
                self._signal_changed(key, held[0])
        elif bucket == SESSIONS:
            held = self.session_replica.peek(key)
            if held is not None:
                self._session_changed(key, held[0])
        else:
            held = self.global_replica.peek(key)
            if held is not None:
                self._global_changed(key, held[0])

    @property
    def writing(self) -> int:
        """The sequence number of the newest write started (see :meth:`written`)."""
        return self._seq

    async def written(self, after: int) -> None:
        """Wait for the writes started after sequence number ``after`` (an action waits for its own).

        Raises :class:`EngineUnavailable` (503) when one of them did not reach the engine: an
        action is answered 200 only once what it wrote is there."""
        if not await self._settled(after):
            raise EngineUnavailable("the shared state this action changed could not be saved; try again")

    async def _settled(self, after: int) -> bool:
        """Wait for the writes started after ``after``; whether all of them reached the engine.

        A failed write fails every write started before it failed (increments that joined it have
        sequence numbers of their own), so an action that wrote concurrently is refused too: it
        may be counted, never acknowledged and lost."""
        waiting = [task for seq, task in self._pending.items() if seq > after]
        if waiting:
            await asyncio.wait(waiting)
        return self._failed_upto <= after

    # --- scoped signals --------------------------------------------------------------------------

    def _replica(self, bucket: str) -> Replica:
        """The read copy of a bucket this worker writes shared values to."""
        if bucket == GLOBAL_BUCKET:
            return self.global_replica
        if bucket == SESSIONS:
            return self.session_replica
        return self.session_scope_replica if bucket == SESSION_SCOPES else self.replica

    def _where(self, key: str) -> tuple[str, Replica]:
        """The bucket and read copy of a scoped signal's key."""
        if key.startswith("session:"):
            return SESSION_SCOPES, self.session_scope_replica
        return SCOPES, self.replica

    def track(self, sig: SharedSignal[Any], *, new: bool = False) -> None:
        """A scoped signal was declared here: read its shared value (creating it with ours if new).
        ``new``: its scope was just made here (a new session), so it is created without a read
        and without the page waiting for it."""
        key = signal_key(sig.scope.name, sig.name)
        self.signals[key] = sig
        if not new:
            self._read(key, sig)
            return
        bucket, replica = self._where(key)
        replica.expect(key)
        self._write(bucket, key, lambda: self._create(key, sig))

    async def _create(self, key: str, sig: SharedSignal[Any]) -> None:
        bucket, replica = self._where(key)
        data = _encode(sig._value)
        try:
            revision = await self.engine.cas(bucket, key, data, 0)
        except EngineError as exc:
            log.warning("cannot create shared signal %s in the engine (the local value is used): %s", key, exc)
            return
        if revision is None:  # it exists after all: read it as any declaration does
            await self._load(key, sig)
        else:
            replica.remember(key, data, revision, notify=False)

    def _read(self, key: str, sig: SharedSignal[Any]) -> None:
        """Read (or create) the key in line with this worker's writes to it, so a write made
        meanwhile lands after the read; changes from others are applied once both are done."""
        bucket, replica = self._where(key)
        replica.expect(key)  # a change that arrives during the read is kept
        task = self._write(bucket, key, lambda: self._load(key, sig))
        self._loads.add(task)
        task.add_done_callback(self._loads.discard)

    def untrack(self, sig: SharedSignal[Any]) -> None:
        """The signal's scope has no members here any more: stop following it."""
        key = signal_key(sig.scope.name, sig.name)
        if self.signals.get(key) is sig:
            del self.signals[key]
            self._where(key)[1].forget(key)

    async def _load(self, key: str, sig: SharedSignal[Any]) -> None:
        bucket, replica = self._where(key)
        try:
            value, revision = await self.engine.get(bucket, key)
            if value is None:
                created = await self.engine.cas(bucket, key, _encode(sig._value), revision)
                if created is not None:
                    replica.remember(key, _encode(sig._value), created, notify=False)
                    return
                value, revision = await self.engine.get(bucket, key)  # another worker created it first
                if value is None:
                    return
            replica.remember(key, value, revision, notify=False)  # applied when the key settles
        except EngineError as exc:
            log.warning("cannot read shared signal %s from the engine (the local value is used): %s", key, exc)

    @property
    def loading(self) -> bool:
        """Scoped signals are being read from the engine (a page waits before it renders)."""
        return bool(self._loads)

    async def loaded(self) -> None:
        while self._loads:
            await asyncio.wait(list(self._loads), timeout=5.0)

    def put_signal(self, sig: SharedSignal[Any]) -> None:
        key = signal_key(sig.scope.name, sig.name)
        bucket, replica = self._where(key)
        data = _encode(sig._value)
        self._write(bucket, key, lambda: self._put(bucket, key, data, replica))

    async def _put(self, bucket: str, key: str, data: bytes, replica: Replica) -> None:
        """Write ``data`` and hold it as the key's value here: when this worker's writes to the key
        settle, it keeps what it wrote (or newer), not an older value its copy had not replaced yet."""
        revision = await self.engine.put(bucket, key, data)
        replica.remember(key, data, revision, notify=False)

    def increment_signal(self, sig: SharedSignal[Any], by: int) -> None:
        key = signal_key(sig.scope.name, sig.name)
        self._increment(self._where(key)[0], key, by)

    def mutate_signal(self, sig: SharedSignal[Any], fn: Callable[[Any], Any], before: Any) -> None:
        key = signal_key(sig.scope.name, sig.name)
        bucket, default = self._where(key)[0], _encode(before)
        self._write(bucket, key, lambda: self._mutate(bucket, key, lambda raw: _encode(fn(orjson.loads(raw))), default))

    async def _mutate(self, bucket: str, key: str, fn: Callable[[bytes], bytes], default: bytes) -> None:
        replica = self._replica(bucket)
        since = replica.revision_of(key)
        replica.assume(key, await self.engine.mutate(bucket, key, fn, default), since)

    def _signal_changed(self, key: str, raw: bytes | None) -> None:
        sig = self.signals.get(key)
        if sig is None or raw is None or (self._where(key)[0], key) in self._busy:
            return
        try:
            value = orjson.loads(raw)
        except orjson.JSONDecodeError:
            log.warning("dropped a change of %s that is not JSON", key)
            return
        if value != sig._value or type(value) is not type(sig._value):
            sig._value = value
            sig._changed = True
            sig.scope.touch(sig)

    def _resync(self) -> None:
        """Changes may have been missed while disconnected: read every followed signal again, and
        put back the directory entries of this worker's tabs if they were swept meanwhile."""
        for key, sig in list(self.signals.items()):
            self._read(key, sig)
        self._spawn(self._reclaim())

    # --- global state ----------------------------------------------------------------------------

    async def _load_global(self) -> None:
        state = self.app.global_state
        for key in await self.engine.keys(GLOBAL_BUCKET):
            value, revision = await self.engine.get(GLOBAL_BUCKET, key)
            self.global_replica.remember(key, value, revision, notify=False)
            if value is not None:
                state._data[key] = orjson.loads(value)

    def put_global(self, key: str, value: Any) -> None:
        data = _encode(value)
        self._write(GLOBAL_BUCKET, key, lambda: self._put(GLOBAL_BUCKET, key, data, self.global_replica))

    def delete_global(self, key: str) -> None:
        self._write(GLOBAL_BUCKET, key, lambda: self.engine.delete(GLOBAL_BUCKET, key))

    def increment_global(self, key: str, by: int) -> None:
        self._increment(GLOBAL_BUCKET, key, by)

    def mutate_global(self, key: str, fn: Callable[[Any], Any], default: Any) -> None:
        fallback = _encode(default)
        self._write(
            GLOBAL_BUCKET,
            key,
            lambda: self._mutate(GLOBAL_BUCKET, key, lambda raw: _encode(fn(orjson.loads(raw))), fallback),
        )

    async def _read_global(self, key: str) -> None:
        value, revision = await self.engine.get(GLOBAL_BUCKET, key)
        self.global_replica.remember(key, value, revision, notify=False)  # applied when the key settles

    def _global_changed(self, key: str, raw: bytes | None) -> None:
        if (GLOBAL_BUCKET, key) in self._busy:
            return
        data = self.app.global_state._data
        if raw is None:
            data.pop(key, None)
            return
        try:
            data[key] = orjson.loads(raw)
        except orjson.JSONDecodeError:
            log.warning("dropped a change of global state %s that is not JSON", key)

    def _resync_global(self) -> None:
        self._spawn(self._load_global())

    # --- session data ----------------------------------------------------------------------------

    @staticmethod
    def session_key(session_id: str) -> str:
        """A session's key in the engine: its hash, never the cookie itself."""
        return Scope.session(session_id).split(":", 1)[1]

    def has_session(self, session_id: str) -> bool:
        """Whether this worker follows the session's data already (no engine read needed).

        Asked on every request: a followed session is found without hashing its id again."""
        data = self.app.sessions.peek(session_id)
        key = data.key if data is not None else self.session_key(session_id)
        return self.session_replica.peek(key) is not None

    def new_session(self, session_id: str) -> None:
        """A session id just made here: the engine holds nothing for it, so nothing is read."""
        self.session_replica.remember(self.session_key(session_id), None, 0, notify=False)
        self.app.sessions.get(session_id)  # followed here, forgotten with the other sessions

    async def load_session(self, session_id: str) -> None:
        """Read a session's data before a request of that session is handled here."""
        key = self.session_key(session_id)
        self.session_replica.expect(key)
        started = time.perf_counter()
        try:
            value, revision = await self.engine.get(SESSIONS, key)
            self.app.metrics.observe_engine(time.perf_counter() - started)
        except EngineError as exc:
            log.warning("cannot read session data from the engine (it starts empty here): %s", exc)
            return
        self.session_replica.remember(key, value, revision, notify=False)
        self.app.sessions.get(session_id)  # follows it, filled from what was just read

    def follow_session(self, data: SessionData) -> None:
        key = data.key
        self.sessions[key] = data
        held = self.session_replica.peek(key)
        if held is None:  # asked for outside a request of the session (a timer): read it, in line with writes
            self.session_replica.expect(key)
            self._write(SESSIONS, key, lambda: self._read_session(key))
        elif held[0] is not None:
            self._session_changed(key, held[0])

    async def _read_session(self, key: str) -> None:
        value, revision = await self.engine.get(SESSIONS, key)
        self.session_replica.remember(key, value, revision, notify=False)  # applied when the key settles

    def forget_session(self, data: SessionData, *, delete: bool = False) -> None:
        if self.sessions.get(data.key) is data:
            del self.sessions[data.key]
        if delete:
            key = data.key
            self._write(SESSIONS, key, lambda: self.engine.delete(SESSIONS, key))
        else:
            self.session_replica.forget(data.key)

    def set_session_item(self, data: SessionData, name: str, value: Any) -> None:
        """Set one key of a session's data in the engine, atomically, so the other keys stay as
        other workers wrote them. Raises TypeError for a value that is not JSON, before anything
        changes."""
        held = orjson.loads(_encode(value))  # a copy: changes made in place later stay out
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
            return _encode(items)

        self._write(SESSIONS, key, lambda: self._mutate(SESSIONS, key, merged, b"{}"))

    def _session_changed(self, key: str, raw: bytes | None) -> None:
        data = self.sessions.get(key)
        if data is None or (SESSIONS, key) in self._busy:
            return
        try:
            value = {} if raw is None else orjson.loads(raw)
        except orjson.JSONDecodeError:
            log.warning("dropped a change of session data that is not JSON")
            return
        if isinstance(value, dict):
            data._data = value

    def session_rotated(self, old: str, new: str, first: str) -> None:
        """``regenerate_session`` made ``new`` of ``old`` here: the other workers move their tabs
        of it. The message names the two sessions by their hashes (their keys in the engine),
        never by their ids: whoever reads the engine must learn no cookie."""
        payload = orjson.dumps({"n": self.node, "o": self.session_key(old), "w": self.session_key(new)})
        self._spawn(self._tell_rotation(payload))

    async def _tell_rotation(self, payload: bytes) -> None:
        # Once the session's signals are written under the new name (ScopeRegistry.rename): a
        # worker told earlier could increment a key that does not hold their values yet.
        await self.loaded()
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
            self.app._rotated_elsewhere(old, new)

    def _resync_sessions(self) -> None:
        """The copy was dropped: sessions are read again on their next request."""
        self.sessions.clear()
        self.app.sessions.drop_all()

    # --- broadcasts ------------------------------------------------------------------------------

    def broadcast(self, scope: str) -> None:
        """Tell the other workers to re-render ``scope`` (a name or pattern), once per loop turn."""
        self._outgoing.add(scope)
        if not self._publish_scheduled:
            self._publish_scheduled = True
            asyncio.get_running_loop().call_soon(self._publish)

    def _publish(self) -> None:
        self._publish_scheduled = False
        scopes, self._outgoing = sorted(self._outgoing), set()
        after = self._seq
        self._spawn(self._send_broadcast(scopes, after))

    async def _send_broadcast(self, scopes: list[str], after: int) -> None:
        await self._settled(after - 1 if after else 0)  # the writes made before the broadcast go first
        payload = orjson.dumps(
            {
                "n": self.node,
                "s": scopes,
                "v": [self.replica.revision, self.global_replica.revision, self.session_scope_replica.revision],
            }
        )
        try:
            await self.engine.publish(_BROADCAST_SUBJECT, payload)
        except EngineError as exc:
            log.warning("a broadcast of %s did not reach the other workers: %s", ", ".join(scopes), exc)

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
        if len(valid) != len(scopes):
            log.warning("dropped invalid scope names from a broadcast message")
        if valid:
            self._mark_when_caught_up(valid, revisions, time.monotonic() + _CATCH_UP_LIMIT)

    def _mark_when_caught_up(self, scopes: list[str], revisions: list[int], deadline: float) -> None:
        held = (self.replica.revision, self.global_replica.revision, self.session_scope_replica.revision)
        behind = any(mine < theirs for mine, theirs in zip(held, revisions, strict=False))
        if behind and time.monotonic() < deadline:
            asyncio.get_running_loop().call_later(0.002, self._mark_when_caught_up, scopes, revisions, deadline)
            return
        app = self.app
        for name in scopes:
            for state in app.scopes.matching(name):
                app.broadcaster.mark(state)

    # --- presence ----------------------------------------------------------------------------------

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
        self._presence_dirty = True

    async def _tell_presence(self) -> None:
        """Counted again only after a stream opened or closed (and at each heartbeat, which also
        catches scope changes without one), never by walking every tab each period."""
        last: dict[str, int] | None = None
        last_sent = 0.0
        while True:
            await asyncio.sleep(_PRESENCE_PERIOD)
            now = time.monotonic()
            heartbeat = now - last_sent > _PRESENCE_HEARTBEAT
            if not (self._presence_dirty or heartbeat):
                continue
            self._presence_dirty = False
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
        if not self._counted:
            # No view asked how many watch: re-rendering would write every tab of the scope the
            # same view again each time the counts change, four times a second while tabs open
            # (opening N tabs then costs N² writes).
            return
        app = self.app
        for name in {*before, *counts}:
            if before.get(name) != counts.get(name):  # "N watching" changed: re-render who shows it
                for state in app.scopes.matching(name):
                    app.broadcaster.mark(state)

    def remote_count(self, scope: str) -> int:
        """Open tabs in ``scope`` (a name or pattern) on the other workers and nodes, as last told."""
        self._counted = True
        now = time.monotonic()
        total = 0
        for node, (seen, counts) in list(self._remote.items()):
            if now - seen > _PRESENCE_EXPIRY:
                del self._remote[node]
            elif "*" in scope:
                total += sum(n for name, n in counts.items() if fnmatch.fnmatchcase(name, scope))
            else:
                total += counts.get(scope, 0)
        return total

    # --- the action rate limit -------------------------------------------------------------------

    async def _tell_rate(self) -> None:
        """Every 250 ms, tell the other workers which addresses took how many action tokens here."""
        limiter = self.app._limiter
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
        limiter = self.app._limiter
        for address, count in spent.items():
            if isinstance(address, str) and len(address) <= 64 and isinstance(count, int):
                limiter.take_spent_elsewhere(address, count, now)

    # --- directory and forwarding ----------------------------------------------------------------

    def claim(self, ctx_id: str, *, wait: bool = False) -> None:
        """This worker holds the tab now (a page view, a revival or a takeover). With ``wait``
        the page waits for the entry (see :attr:`loading`), so an action sent anywhere right
        after the page arrives finds the tab."""
        task = self._spawn(self._claim(ctx_id))
        if wait:
            self._loads.add(task)
            task.add_done_callback(self._loads.discard)

    async def _claim(self, ctx_id: str) -> None:
        try:
            self._claims[ctx_id] = await self.engine.put(DIRECTORY, ctx_id, self.address.encode())
        except EngineError as exc:
            log.debug("directory write failed: %s", exc)

    def release(self, ctx_id: str) -> None:
        """The tab is destroyed here: drop its directory entry unless another worker took it."""
        self._spawn(self._release(ctx_id, self._claims.pop(ctx_id, None)))

    async def _release(self, ctx_id: str, revision: int | None) -> None:
        """Delete the entry at the revision this worker wrote (no read needed): a worker that
        took the tab since wrote a newer one, which stays."""
        try:
            if revision is None:  # released before its claim was written: read what is there
                value, revision = await self.engine.get(DIRECTORY, ctx_id)
                self._claims.pop(ctx_id, None)  # the claim's answer came first (one connection, in order)
                if value != self.address.encode():
                    return
            await self.engine.delete(DIRECTORY, ctx_id, revision)
        except EngineError:
            pass

    async def _reclaim(self) -> None:
        """Write the entries of this worker's tabs that are missing from the directory (never one
        another worker wrote): a worker cut off from the engine longer than the revival window
        looks gone to the others, which sweep its entries (:meth:`_sweep_directory`)."""
        me = self.address.encode()
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
            if not self.is_timer_leader:
                gone.clear()
                due = None
                continue
            now = time.monotonic()
            before, alive = alive, self._alive_nodes(now)
            for node in before - alive:
                gone.setdefault(node, now)
            for node in alive:
                gone.pop(node, None)
            due = now if due is None else min([due, *(since + window for since in gone.values())])
            if now >= due:
                with contextlib.suppress(EngineError):  # else the next look tries again
                    due = await self._sweep(alive, gone, window)

    def _alive_nodes(self, now: float) -> set[str]:
        return {self.node, *(node for node, (seen, _) in self._remote.items() if now - seen <= _PRESENCE_EXPIRY)}

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
                answers[node] = await self._answers(node)  # late in presence, but there
            if not answers[node]:
                await self.engine.delete(DIRECTORY, ctx_id, revision)  # a revival's newer entry stays
        for node in set(gone) - found:
            del gone[node]  # nothing of it left
        if any(answers.values()):
            due = min(due, now + window)  # look again at those that answered
        return due

    async def owner(self, ctx_id: str, *, cached: bool = True) -> str | None:
        """The node holding ``ctx_id`` when it is another one, else None.

        Owners are remembered (a tab's later actions skip the directory read); an owner that no
        longer holds the tab says so and the entry is read again (see :meth:`forward`).
        """
        if cached:
            node = self._owners.get(ctx_id)
            if node is not None:
                return node
        started = time.perf_counter()
        try:
            value, _ = await self.engine.get(DIRECTORY, ctx_id)
        except EngineError:
            return None
        self.app.metrics.observe_engine(time.perf_counter() - started)
        if value is None:
            return None
        node, _, channels = value.decode(errors="replace").partition(" ")
        if node not in self._peers:
            self._peers[node] = self._peer(channels)
        if node == self.node:
            return None
        self._owners[ctx_id] = node
        if len(self._owners) > _OWNER_CACHE:
            self._owners.popitem(last=False)
        return node

    def _peer(self, channels: str) -> DirectClient | None:
        """The direct channel to a node, from its directory entry (module docstring): its unix
        socket when it is a worker of this machine, else its TCP address, else None (the engine)."""
        tcp, _, path = channels.partition(" ")
        if path not in ("", "-") and os.path.exists(path):
            return DirectClient(path)
        host, _, port = tcp.rpartition(":")
        return DirectClient((host.strip("[]"), int(port)), self._key) if host and port.isdigit() else None

    async def pass_connection(self, owner: str, request: Request, *, balanced: bool = False) -> bool:
        """Pass the request's connection to ``owner`` when it is a worker of this machine
        (:mod:`pyvia.cluster.passing`): True once it has it and answers; False to forward.
        ``balanced``: only if that worker is not busier than this one (a stream, which may as
        well take the tab over). A connection passed here once has no ``transfer``: it moves once."""
        post, direct = self._post, self._peers.get(owner)
        transfer = request.transfer
        if post is None or direct is None or transfer is None or not self._movable(direct, request):
            return False
        assert isinstance(direct.address, str)  # _movable: a worker of this machine
        preface = request_bytes(request)
        if preface is None:
            return False
        path = inbox_path(direct.address)
        return await transfer(lambda fd: post.send(path, fd, preface, balanced=balanced))

    def _movable(self, direct: DirectClient, request: Request) -> bool:
        """Whether the request's connection can move to that worker: not if it is another
        machine's, if the connection cannot move, or if it is a proxy's."""
        return (
            self._post is not None
            and isinstance(direct.address, str)
            and request.transfer is not None
            and not _through_proxy(request)
        )

    def relay(
        self, ctx_id: str, request: Request, timeout: float, answer: Callable[[Response | Exception | None], None]
    ) -> bool:
        """Send an action for a tab another node holds straight to it, when this worker knows
        which node, has its channel open, and the connection should not move there instead.
        ``answer`` gets the response, None when that node no longer holds the tab or is gone
        (the caller takes the long way: :meth:`forward`, or a revival), or the failure.
        False when nothing was sent. No task nor coroutine: the hot path behind a proxy."""
        owner = self._owners.get(ctx_id)
        direct = self._peers.get(owner) if owner is not None else None
        if direct is None or self._movable(direct, request):
            return False

        def replied(result: bytes | Exception) -> None:
            if isinstance(result, bytes):
                response = _response(orjson.loads(result))
            elif isinstance(result, TimeoutError):
                answer(RequestTimeout(f"no answer from worker {owner} within {timeout} s"))
                return
            elif isinstance(result, ConnectionError):
                response = None  # it is gone
            else:
                answer(RemoteError(str(result)))
                return
            if response is None:
                self._owners.pop(ctx_id, None)
            answer(response)

        if not direct.send(_forwarded(ctx_id, request), timeout, replied):
            return False
        self._count_sent(direct)
        return True

    def _count_sent(self, direct: DirectClient) -> None:
        self.app.metrics.forwarded("unix" if isinstance(direct.address, str) else "tcp")

    async def forward(self, ctx_id: str, request: Request, timeout: float) -> Response | None:
        """Answer ``request`` on the node holding ``ctx_id``; None when no live node holds it
        (the caller revives the tab here)."""
        payload = _forwarded(ctx_id, request)
        for cached in (True, False):
            owner = await self.owner(ctx_id, cached=cached)
            if owner is None:
                return None
            reply = await self._ask(owner, payload, timeout)
            if reply is not None:
                return reply
            self._owners.pop(ctx_id, None)  # gone, or the tab moved on: read the directory again
        return None

    async def _ask(self, owner: str, payload: bytes, timeout: float) -> Response | None:
        """The owner's answer to a forwarded request; None when the owner is gone or no longer
        holds the tab."""
        direct = self._peers.get(owner)
        if direct is not None:  # a worker of this machine, or a node serving TCP: straight to it
            try:
                raw = await direct.request(payload, timeout)
            except Unreachable:
                pass  # its TCP channel fails (nothing was sent): through the engine
            except ConnectionError:
                return None  # it is gone (a killed worker leaves its socket file behind)
            except TimeoutError:
                self._count_sent(direct)
                raise RequestTimeout(f"no answer from worker {owner} within {timeout} s") from None
            except RuntimeError as exc:
                self._count_sent(direct)
                raise RemoteError(str(exc)) from None
            else:
                self._count_sent(direct)
                return _response(orjson.loads(raw))
        self.app.metrics.forwarded("engine")
        task = asyncio.ensure_future(self.engine.request(f"fwd.{owner}", payload, timeout))
        try:
            # A request sent in the instant its owner died is lost without a "no responders"
            # (Redis delivered it to the dead connection): check that the owner still answers.
            while not (await asyncio.wait([task], timeout=_OWNER_CHECK))[0]:
                if not await self._answers(owner):
                    task.cancel()
                    return None
            return _response(orjson.loads(task.result()))
        except NoResponders:
            return None

    async def _answers(self, owner: str) -> bool:
        try:
            await self.engine.request(f"fwd.{owner}", b'{"op":"ping"}', _OWNER_CHECK)
        except NoResponders:
            return False
        except EngineError:
            return True  # busy or unsure: keep waiting for the answer
        return True

    async def take_over(self, owner: str, ctx_id: str, session_hash: str) -> dict[str, Any] | None:
        """Ask ``owner`` to let the tab go; its tab state, or None when the owner is gone or refused."""
        payload = orjson.dumps({"op": "handover", "id": ctx_id, "session": session_hash, "to": self.address})
        direct = self._peers.get(owner)
        try:
            raw = None
            if direct is not None:  # a worker of this machine or a node serving TCP: not the broker
                with contextlib.suppress(Unreachable):
                    raw = await direct.request(payload, 5.0)
            if raw is None:
                raw = await self.engine.request(f"fwd.{owner}", payload, 5.0)
        except (EngineError, ConnectionError, TimeoutError, RuntimeError) as exc:
            log.info("takeover of a tab from node %s failed (%s): reviving it here", owner, type(exc).__name__)
            return None
        reply = orjson.loads(raw)
        state = reply.get("tab_state")
        return state if isinstance(state, dict) else None

    async def _serve(self, payload: bytes) -> bytes:
        """Requests through the broker: forwarded actions, handovers, pings."""
        reply = self._serve_direct(payload)
        return reply if isinstance(reply, bytes) else await reply

    def _serve_direct(self, payload: bytes) -> bytes | Awaitable[bytes]:
        """A forwarded request, answered at once when the action is synchronous (no task)."""
        message = orjson.loads(payload)
        op = message.get("op")
        if op == "ping":
            return b"{}"
        if op == "handover":
            return self._hand_over(message)
        if message["x"] not in self.app.contexts or self._stopping:
            return b'{"moved":1}'  # the sender's directory entry was old, or this worker is going
        request = Request(
            method=message["m"],
            path=message["p"],
            query_string=message["q"],
            headers=Headers.from_lowered(message["h"]),
            body=message["b"].encode("latin-1"),
            client=message["c"],
            scheme=message["s"],
        )
        if "g" in message:
            request.state["_signals"] = message["g"]
        result = self.app.handle_forwarded(request, message["x"])
        if isinstance(result, Response | StreamResponse):  # a stream: never for an action
            return _reply(result)
        return self._reply_later(result)

    @staticmethod
    async def _reply_later(pending: Awaitable[Any]) -> bytes:
        return _reply(await pending)

    async def _hand_over(self, message: dict[str, Any]) -> bytes:
        ctx_id = message["id"]
        state = self.app._hand_over(ctx_id, message["session"])
        if state is not None:  # before answering, so no request finds the tab nowhere meanwhile
            await self.engine.put(DIRECTORY, ctx_id, str(message["to"]).encode())
        return orjson.dumps({"tab_state": state})

    # --- timers ----------------------------------------------------------------------------------

    @property
    def is_timer_leader(self) -> bool:
        """Whether app timers run here: this worker holds the ``timers`` lease."""
        return self._lease_until > time.monotonic()

    async def _hold_timer_lease(self) -> None:
        """Hold (or wait for) the ``timers`` lease, so app timers run on exactly one worker.

        The holder rewrites it every ``_LEASE_RENEW`` s (a compare-and-set on the revision it
        wrote) and runs timers until ``_LEASE_LAPSE - _LEASE_RENEW`` after it sent the last
        rewrite that succeeded. The others watch it: one unchanged for ``_LEASE_LAPSE`` since they
        last saw it change is taken over by a compare-and-set on that revision, so exactly one
        of them wins, and only once the old holder has stopped running timers (it sent its last
        rewrite before they saw it). A holder that stops gives it up and the next takes it at once.
        """
        me = self.node.encode()
        while True:
            started = time.monotonic()
            try:
                if self._lease_holder == me:
                    await self._renew_lease(me, started)
                elif self._lease_holder is None or started - self._lease_seen >= _LEASE_LAPSE:
                    await self._take_lease(me, started)
            except EngineError:
                if self._lease_holder == me:  # an outage: nobody can take it meanwhile
                    self._lease_until = max(self._lease_until, time.monotonic() + _LEASE_LAPSE - _LEASE_RENEW)
            self._lease_wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._lease_wake.wait(), _LEASE_RENEW)

    async def _renew_lease(self, me: bytes, sent: float) -> None:
        revision = await self.engine.cas(LEASES, _LEASE_KEY, me, self._lease_rev)
        if revision is not None:
            self._lease_rev, self._lease_seen = max(self._lease_rev, revision), time.monotonic()
            self._lease_until = sent + _LEASE_LAPSE - _LEASE_RENEW
            return
        self._lease_until = 0.0  # lost (it expired, or was taken while this worker was stuck)
        self._lease_holder = None
        await self._take_lease(me, time.monotonic())

    async def _take_lease(self, me: bytes, sent: float) -> None:
        value, revision = await self.engine.get(LEASES, _LEASE_KEY)
        if value is not None and value != me and (revision != self._lease_rev or self._lease_holder != value):
            self._lease_holder, self._lease_rev, self._lease_seen = value, revision, time.monotonic()
            return  # held, and it moved since this worker last looked: its holder lives
        taken = await self.engine.cas(LEASES, _LEASE_KEY, me, revision)
        if taken is None:
            return  # another worker was quicker: its write arrives through the watch
        self._lease_holder, self._lease_rev, self._lease_seen = me, taken, time.monotonic()
        self._lease_until = sent + _LEASE_LAPSE - _LEASE_RENEW
        log.info("this worker runs the app timers now")

    def _lease_changed(self, change: KvChange) -> None:
        if change.key != _LEASE_KEY or (change.value is not None and change.revision < self._lease_rev):
            return
        self._lease_seen = time.monotonic()
        self._lease_rev = change.revision
        if change.value is None:  # given up by its holder: take it
            self._lease_holder = None
            self._lease_wake.set()
        elif change.value != self.node.encode():
            if self._lease_holder == self.node.encode():
                self._lease_until = 0.0  # taken from this worker (it was stuck past the lapse)
            self._lease_holder = change.value

    def _lease_resync(self) -> None:
        """Reconnected: changes may have been missed, so whoever holds it gets a full lapse to
        show it lives before the lease is taken over (an engine that restarted empty may number
        revisions from 1 again)."""
        self._lease_seen = time.monotonic()
        if self._lease_holder != self.node.encode():
            self._lease_rev = 0
