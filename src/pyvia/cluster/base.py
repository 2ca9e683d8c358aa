"""The engine contract: one interface for shared state and messages, three implementations.

Several workers or nodes share scoped signals, global state, session data, a context directory
and broadcasts through an *engine* (DESIGN.md decision 4): :class:`~pyvia.cluster.memory.MemoryEngine`
in one process, :class:`~pyvia.cluster.nats.NatsEngine` or :class:`~pyvia.cluster.redis.RedisEngine`
across processes and machines. This module holds what they share: the :class:`Engine` Protocol,
the values they exchange, their errors, name rules and the retry loops built on compare-and-set.

Rules every implementation keeps (``tests/cluster/test_contract.py`` checks them on all three):

1. Values are bytes; the caller encodes (orjson). Integers written by :meth:`Engine.increment`
   are ASCII decimals (``b"42"``), so ``orjson.loads`` reads them back.
2. A revision is an opaque positive int that changes on every write of a key and never repeats
   for that key (no ABA). ``get`` of a missing key answers ``(None, rev)`` where ``rev`` is what
   :meth:`Engine.cas` expects to create it (0, or the revision of a deletion marker).
3. ``increment`` and ``mutate`` never lose an update, whatever the number of processes writing.
4. Subscribers get messages in publish order, one callback at a time per subscription, on the
   event loop; a failing callback is logged and the next message still arrives. Own messages
   are delivered too (the caller filters by :attr:`Engine.node_id` where it must).
5. A watch delivers every change made while connected, including the caller's own writes. After
   a reconnect changes may have been missed: the engine calls ``on_resync`` and the caller
   drops what it cached (see :class:`~pyvia.cluster.replica.Replica`).
6. While disconnected every operation raises :class:`EngineUnavailable` at once (never a hang),
   ``is_connected`` is False (``/_health`` answers 503), and the engine reconnects by itself,
   waiting 1 s, 2 s, 4 s … up to 30 s between attempts (php-via §6.5).

Errors::

    ServiceError (pyvia.errors, 503)
    └─ EngineError           the engine could not do it; the caller may retry later
       ├─ EngineUnavailable  not connected (reconnecting)
       ├─ NoResponders       a request to a subject nobody serves
       ├─ RemoteError        the serving handler raised
       └─ RequestTimeout     (also TimeoutError, 504) no answer in time
    UsageError (pyvia.errors)
    └─ InvalidName           (also ValueError) a bucket, key or subject breaks the rules below
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import random
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable
from urllib.parse import urlsplit, urlunsplit

from pyvia.errors import ServiceError, UsageError

__all__ = [
    "Backoff",
    "ChangeHandler",
    "Engine",
    "EngineError",
    "EngineStatus",
    "EngineUnavailable",
    "InvalidName",
    "KvChange",
    "MessageHandler",
    "NoResponders",
    "RemoteError",
    "RequestHandler",
    "RequestTimeout",
    "ResyncHandler",
    "Subscription",
    "cas_increment",
    "cas_mutate",
    "check_bucket",
    "check_key",
    "check_prefix",
    "check_subject",
    "redact_url",
    "subject_matches",
    "valid_wire_scope",
]

log = logging.getLogger("pyvia.cluster")

# --- values ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class KvChange:
    """One write seen by a watch: ``value`` is None when the key was deleted."""

    bucket: str
    key: str
    value: bytes | None
    revision: int


@dataclass(frozen=True, slots=True)
class EngineStatus:
    """What ``/_health`` and the start-up log line say about the engine."""

    engine: str
    url: str
    connected: bool
    node_id: str
    reconnects: int
    last_error: str | None


#: ``callback(subject, payload)``; the subject is relative to the engine's prefix.
MessageHandler = Callable[[str, bytes], Awaitable[None] | None]
#: ``callback(change)`` for a watched bucket.
ChangeHandler = Callable[[KvChange], Awaitable[None] | None]
#: ``on_resync()``: changes may have been missed while disconnected; drop cached values.
ResyncHandler = Callable[[], Awaitable[None] | None]
#: ``handler(payload) -> reply`` for :meth:`Engine.serve`.
RequestHandler = Callable[[bytes], Awaitable[bytes] | bytes]


# --- errors ---------------------------------------------------------------------------------------


class EngineError(ServiceError):
    """The engine could not carry out an operation; the request may be retried later."""

    public_message = "Service Unavailable"


class EngineUnavailable(EngineError):
    """The engine is not connected; it reconnects by itself (1 s → 30 s backoff)."""


class NoResponders(EngineError):
    """A request named a subject that nobody serves (the owning worker is gone)."""


class RemoteError(EngineError):
    """The handler serving a request raised; the message carries its text."""


class RequestTimeout(EngineError, TimeoutError):
    """A request got no answer within its timeout."""

    status = 504
    public_message = "Gateway Timeout"


class InvalidName(UsageError, ValueError):
    """A bucket, key, subject or prefix breaks the engine's name rules."""


# --- names ------------------------------------------------------------------------------------------

_BUCKET = re.compile(r"[A-Za-z0-9_-]{1,64}\Z")
_PREFIX = re.compile(r"[A-Za-z0-9_-]{1,32}\Z")
_TOKEN = re.compile(r"[A-Za-z0-9_-]+\Z")
_MAX_KEY = 1024
_MAX_SUBJECT = 256


def check_prefix(prefix: str) -> str:
    """An app namespace on the engine (subjects, buckets, keys): ``[A-Za-z0-9_-]{1,32}``."""
    if not isinstance(prefix, str) or not _PREFIX.match(prefix):
        raise InvalidName(f"engine prefix {prefix!r} must match [A-Za-z0-9_-]{{1,32}}, like 'pyvia' or 'shop-1'")
    return prefix


def check_bucket(bucket: str) -> str:
    """A bucket name: ``[A-Za-z0-9_-]{1,64}`` (JetStream's bucket rule, minus nothing)."""
    if not isinstance(bucket, str) or not _BUCKET.match(bucket):
        raise InvalidName(f"bucket {bucket!r} must match [A-Za-z0-9_-]{{1,64}}, like 'scopes' or 'directory'")
    return bucket


def check_key(key: str) -> str:
    """A key: 1 to 1024 printable characters without whitespace (scope names, context ids, session hashes).

    Engines encode keys for their own rules (NATS escapes to ``[-/_=A-Za-z0-9]``).
    """
    if (
        not isinstance(key, str)
        or not 0 < len(key) <= _MAX_KEY
        or not key.isprintable()
        or any(ch.isspace() for ch in key)
    ):
        raise InvalidName(f"key {key!r:.80} must be 1-{_MAX_KEY} printable characters without whitespace")
    return key


def check_subject(subject: str, *, pattern: bool = False) -> str:
    """A subject: tokens of ``[A-Za-z0-9_-]`` joined by ``.``, at most 256 characters.

    With ``pattern``, a token may be ``*`` (exactly one token) and the last may be ``>`` (one or
    more tokens), as in NATS. Scope names never go into subjects: they travel in payloads and
    are checked with :func:`valid_wire_scope` on arrival.
    """
    if isinstance(subject, str) and 0 < len(subject) <= _MAX_SUBJECT:
        tokens = subject.split(".")
        last = len(tokens) - 1
        if all(_TOKEN.match(t) or (pattern and (t == "*" or (t == ">" and i == last))) for i, t in enumerate(tokens)):
            return subject
    kind = "subject pattern" if pattern else "subject"
    extra = " ('*' for one token, a final '>' for the rest)" if pattern else ""
    raise InvalidName(f"{kind} {subject!r:.80} must be tokens of [A-Za-z0-9_-] joined by '.'{extra}")


def subject_matches(pattern: str, subject: str) -> bool:
    """NATS matching: ``*`` is one token, a final ``>`` is one or more tokens."""
    p = pattern.split(".")
    s = subject.split(".")
    for i, token in enumerate(p):
        if token == ">":
            return len(s) > i
        if i >= len(s) or (token != "*" and token != s[i]):
            return False
    return len(p) == len(s)


# php-via §8.5, adapted to pyvia's scope names (pyvia.scopes): a broker could be compromised,
# so a scope name arriving from it is checked before it reaches the registry.
_WIRE_MAX = 256
_WIRE_CUSTOM = re.compile(r"[^\x00-\x1f\x7f:*]+(?::[^\x00-\x1f\x7f:*]+)*\Z")
_WIRE_CUSTOM_PATTERN = re.compile(r"[^\x00-\x1f\x7f:]+(?::[^\x00-\x1f\x7f:]+)*\Z")
_WIRE_SESSION = re.compile(r"session:[0-9a-f]{32}\Z")
_WIRE_ROUTE = re.compile(r"route:/[A-Za-z0-9_\-.~/{}%:@!$&'()+,;=]*\Z")
_WIRE_ROUTE_PATTERN = re.compile(r"route:/[A-Za-z0-9_\-.~/{}%:@!$&'()+,;=*]*\Z")


def valid_wire_scope(name: object, *, allow_pattern: bool = True) -> bool:
    """Whether a scope name that arrived from the engine may be used.

    Accepted: ``global``; ``session:`` + 32 hex digits (``Scope.session``); ``route:`` + a path
    pattern (``route:/items/{id}``); a custom scope (``room:lobby``: non-empty parts without
    control characters joined by ``:``, not starting with a reserved prefix). With ``allow_pattern`` (broadcast
    targets), ``*`` wildcards as ``app.broadcast`` accepts them, in at most one run per part.
    Rejected: anything else, the bare kinds ``tab``/``route``/``session`` (they name no tabs),
    over 256 characters. Log and drop a rejected name; never raise on engine input.
    """
    if not isinstance(name, str) or not 0 < len(name) <= _WIRE_MAX:
        return False
    if name == "global":
        return True
    if name.startswith("session:"):
        return _WIRE_SESSION.match(name) is not None
    if name.startswith("route:"):
        pattern = _WIRE_ROUTE_PATTERN if allow_pattern else _WIRE_ROUTE
        return pattern.match(name) is not None and "**" not in name
    if "*" in name:
        return allow_pattern and _WIRE_CUSTOM_PATTERN.match(name) is not None and "**" not in name
    if _WIRE_CUSTOM.match(name) is None:
        return False
    return name not in ("tab", "route", "session") and not name.startswith("tab:")


def redact_url(url: str) -> str:
    """The URL without its password, for logs and ``/_health``."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{parts.username or ''}:***@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


# --- the interface --------------------------------------------------------------------------------


@runtime_checkable
class Subscription(Protocol):
    """A live subscription, watch or served subject; ``unsubscribe`` ends it (idempotent)."""

    @property
    def subject(self) -> str: ...

    async def unsubscribe(self) -> None: ...


@runtime_checkable
class Engine(Protocol):
    """Shared key/value state with revisions, pub/sub and request/reply (see the module rules).

    Buckets are created on first use; :meth:`configure_bucket` sets a time-to-live first where
    entries must expire (the context directory). Names follow :func:`check_bucket`,
    :func:`check_key` and :func:`check_subject`; a bad name raises :class:`InvalidName`.
    """

    @property
    def name(self) -> str:
        """``"memory"``, ``"nats"`` or ``"redis"``."""
        ...

    @property
    def node_id(self) -> str:
        """A random id of this engine instance (one per worker): a directory home, a reply address."""
        ...

    @property
    def is_connected(self) -> bool:
        """The health flag: False while reconnecting (``/_health`` answers 503)."""
        ...

    def status(self) -> EngineStatus: ...

    async def connect(self) -> None:
        """Connect once; raises :class:`EngineUnavailable` when the engine cannot be reached."""
        ...

    async def close(self) -> None:
        """End subscriptions and connections; the engine cannot be used after."""
        ...

    # key/value
    async def configure_bucket(self, bucket: str, *, ttl: float | None = None) -> None:
        """Entries of ``bucket`` expire ``ttl`` s after their last write (no change message on expiry)."""
        ...

    async def get(self, bucket: str, key: str) -> tuple[bytes | None, int]:
        """The value and its revision; ``(None, rev)`` when missing (pass ``rev`` to :meth:`cas` to create)."""
        ...

    async def put(self, bucket: str, key: str, value: bytes) -> int:
        """Write unconditionally (last writer wins); return the new revision."""
        ...

    async def cas(self, bucket: str, key: str, value: bytes, expected_revision: int) -> int | None:
        """Write only if the key is still at ``expected_revision``; the new revision, or None on conflict."""
        ...

    async def delete(self, bucket: str, key: str, expected_revision: int | None = None) -> bool:
        """Delete (only at ``expected_revision`` when given); False on a revision conflict.

        Deleting a missing key succeeds; NATS writes a deletion marker for it (a change with a
        new revision and no value), memory and Redis write nothing.
        """
        ...

    async def keys(self, bucket: str) -> list[str]:
        """Every live key of the bucket (a scan: for sweeps, not for the hot path)."""
        ...

    async def increment(self, bucket: str, key: str, by: int = 1) -> int:
        """Add ``by`` to an integer value (missing counts as 0) and return the result, atomically.

        Raises TypeError when the key holds something other than an ASCII integer.
        """
        ...

    async def mutate(self, bucket: str, key: str, fn: Callable[[bytes], bytes], default: bytes) -> bytes:
        """Replace the value with ``fn(value)`` (``fn(default)`` when missing) atomically; return it.

        ``fn`` may run several times under contention: it must be pure and must not await.
        """
        ...

    async def watch(
        self, bucket: str, callback: ChangeHandler, *, on_resync: ResyncHandler | None = None
    ) -> Subscription:
        """Call ``callback`` for every later change of the bucket (rule 5)."""
        ...

    # messages
    async def publish(self, subject: str, payload: bytes) -> None:
        """Send to every subscriber of ``subject`` (at most once, no history)."""
        ...

    async def subscribe(self, subject: str, callback: MessageHandler) -> Subscription:
        """Receive messages on ``subject``, which may hold ``*`` and a final ``>``; active on return."""
        ...

    async def request(self, subject: str, payload: bytes, timeout: float) -> bytes:
        """Send to the server of ``subject`` and wait for its reply.

        Raises :class:`NoResponders` at once when nobody serves the subject, :class:`RequestTimeout`
        after ``timeout`` s, :class:`RemoteError` when the handler raised.
        """
        ...

    async def serve(self, subject: str, handler: RequestHandler) -> Subscription:
        """Answer requests on ``subject`` with ``handler(payload)``; each request runs in its own task."""
        ...


# --- pieces the implementations share --------------------------------------------------------------


class Backoff:
    """Delays between reconnect attempts: ``first``, doubled each time, capped (1 s → 30 s, php-via §6.5).

    Up to 10% jitter is added so that many workers do not reconnect in the same instant.
    """

    __slots__ = ("attempt", "cap", "first", "jitter")

    def __init__(self, first: float = 1.0, cap: float = 30.0, *, jitter: float = 0.1) -> None:
        self.first = first
        self.cap = cap
        self.jitter = jitter
        self.attempt = 0

    def next(self) -> float:
        base = min(self.cap, self.first * float(2 ** min(self.attempt, 30)))
        self.attempt += 1
        return base * (1.0 + random.random() * self.jitter) if self.jitter else base

    def reset(self) -> None:
        self.attempt = 0


async def call_handler(fn: Callable[..., Awaitable[object] | object], *args: object) -> object:
    """Call a sync or async callback and return its result."""
    result = fn(*args)
    if inspect.isawaitable(result):
        return await result
    return result


class Dispatcher:
    """One subscription's queue and task: callbacks run one at a time, in arrival order.

    The reader that receives messages only enqueues, so a slow callback delays its own
    subscription and nothing else (as nats-py does per subscription). Past ``limit`` queued
    messages new ones are dropped and counted: a stuck subscriber must not grow memory without end.
    """

    __slots__ = ("_queue", "_task", "callback", "dropped", "label", "limit")

    def __init__(self, callback: Callable[..., Awaitable[None] | None], label: str, limit: int = 65_536) -> None:
        self.callback = callback
        self.label = label
        self.limit = limit
        self.dropped = 0
        self._queue: asyncio.Queue[tuple[object, ...] | None] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = asyncio.get_running_loop().create_task(self._run())

    def put(self, *args: object) -> None:
        if self._task is None:
            return
        if self._queue.qsize() >= self.limit:
            self.dropped += 1
            if self.dropped == 1 or self.dropped % 1000 == 0:
                log.warning("subscriber of %s is too slow: %d message(s) dropped", self.label, self.dropped)
            return
        self._queue.put_nowait(args)

    async def _run(self) -> None:
        while True:
            item = await self._queue.get()
            if item is None:
                return
            try:
                await call_handler(self.callback, *item)
            except Exception:
                log.exception("callback for %s failed", self.label)

    async def stop(self) -> None:
        """Let queued messages finish, then end the task."""
        task, self._task = self._task, None
        if task is None:
            return
        self._queue.put_nowait(None)
        if task is asyncio.current_task():
            return
        try:
            await asyncio.wait_for(asyncio.shield(task), 1.0)
        except TimeoutError:
            task.cancel()


class RevisionLike(Protocol):
    """The two operations the generic retry loops need."""

    async def get(self, bucket: str, key: str) -> tuple[bytes | None, int]: ...

    async def cas(self, bucket: str, key: str, value: bytes, expected_revision: int) -> int | None: ...


_MAX_ATTEMPTS = 10_000


async def _contention_pause(attempt: int) -> None:
    """No wait after the first conflict, then a short random one growing to 20 ms: spreads the writers."""
    if attempt > 1:
        await asyncio.sleep(random.uniform(0, min(0.02, 0.0005 * (2 ** min(attempt, 10)))))


async def cas_mutate(
    engine: RevisionLike, bucket: str, key: str, fn: Callable[[bytes], bytes], default: bytes
) -> bytes:
    """``mutate`` as get → fn → compare-and-set, retried on conflict (no update is ever lost)."""
    for attempt in range(_MAX_ATTEMPTS):
        current, revision = await engine.get(bucket, key)
        new = fn(default if current is None else current)
        if not isinstance(new, bytes):
            raise TypeError(f"mutate() callback must return bytes, got {type(new).__name__}")
        if await engine.cas(bucket, key, new, revision) is not None:
            return new
        await _contention_pause(attempt)
    raise EngineError(f"mutate({bucket!r}, {key!r}) lost {_MAX_ATTEMPTS} compare-and-set races in a row")


def parse_int(value: bytes, bucket: str, key: str) -> int:
    """An ASCII decimal integer, as ``increment`` stores it; TypeError for anything else."""
    text = value.strip()
    if not re.fullmatch(rb"-?[0-9]{1,19}", text):
        raise TypeError(f"increment() needs an integer; {bucket}/{key} holds {value[:40]!r}")
    return int(text)


async def cas_increment(engine: RevisionLike, bucket: str, key: str, by: int) -> int:
    """``increment`` as a compare-and-set loop, for engines without an atomic add."""
    for attempt in range(_MAX_ATTEMPTS):
        current, revision = await engine.get(bucket, key)
        total = (0 if current is None else parse_int(current, bucket, key)) + by
        if await engine.cas(bucket, key, str(total).encode(), revision) is not None:
            return total
        await _contention_pause(attempt)
    raise EngineError(f"increment({bucket!r}, {key!r}) lost {_MAX_ATTEMPTS} compare-and-set races in a row")


def check_int(by: object) -> int:
    if not isinstance(by, int) or isinstance(by, bool):
        raise TypeError(f"increment() takes an int, got {type(by).__name__}")
    return by
