"""The in-process engine: the default with one worker, no I/O at all.

Every operation runs to completion without awaiting anything that can interleave, so
compare-and-set, ``increment`` and ``mutate`` are atomic by construction. Several engines may
share one :class:`MemoryHub` to stand for several workers in one process (tests do): they see one
key/value store and one set of subscribers, exactly as workers on one NATS server would.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from pyvia.cluster.base import (
    ChangeHandler,
    Dispatcher,
    EngineStatus,
    EngineUnavailable,
    KvChange,
    MessageHandler,
    NoResponders,
    RemoteError,
    RequestHandler,
    RequestTimeout,
    ResyncHandler,
    call_handler,
    check_bucket,
    check_int,
    check_key,
    check_subject,
    parse_int,
    subject_matches,
)

__all__ = ["MemoryEngine", "MemoryHub"]

log = logging.getLogger("pyvia.cluster")


@dataclass(slots=True)
class _Bucket:
    entries: dict[str, tuple[bytes, int, float]] = field(default_factory=dict)  # key -> (value, rev, expires)
    revision: int = 0
    ttl: float | None = None


class MemoryHub:
    """What engines sharing one process share: buckets, subscribers and served subjects."""

    __slots__ = ("_buckets", "clock", "servers", "subscriptions", "watches")

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._buckets: dict[str, _Bucket] = {}
        self.subscriptions: list[_MemorySubscription] = []
        self.watches: dict[str, list[_MemorySubscription]] = {}
        self.servers: dict[str, list[_MemoryServer]] = {}

    def bucket(self, name: str) -> _Bucket:
        found = self._buckets.get(name)
        if found is None:
            found = self._buckets[name] = _Bucket()
        return found

    def live(self, bucket: _Bucket, key: str) -> tuple[bytes, int] | None:
        entry = bucket.entries.get(key)
        if entry is None:
            return None
        if entry[2] and entry[2] <= self.clock():
            del bucket.entries[key]
            return None
        return entry[0], entry[1]

    def write(self, name: str, bucket: _Bucket, key: str, value: bytes | None) -> int:
        bucket.revision += 1
        rev = bucket.revision
        if value is None:
            bucket.entries.pop(key, None)
        else:
            expires = self.clock() + bucket.ttl if bucket.ttl else 0.0
            bucket.entries[key] = (value, rev, expires)
        change = KvChange(name, key, value, rev)
        for sub in self.watches.get(name, ()):
            sub.dispatcher.put(change)
        return rev


class _MemorySubscription:
    __slots__ = ("_hub", "dispatcher", "on_resync", "subject")

    def __init__(
        self, hub: MemoryHub, subject: str, dispatcher: Dispatcher, on_resync: ResyncHandler | None = None
    ) -> None:
        self._hub = hub
        self.subject = subject
        self.dispatcher = dispatcher
        self.on_resync = on_resync

    async def unsubscribe(self) -> None:
        hub = self._hub
        with contextlib.suppress(ValueError):
            hub.subscriptions.remove(self)
        for subs in hub.watches.values():
            with contextlib.suppress(ValueError):
                subs.remove(self)
        await self.dispatcher.stop()


class _MemoryServer:
    __slots__ = ("_hub", "handler", "subject", "tasks")

    def __init__(self, hub: MemoryHub, subject: str, handler: RequestHandler) -> None:
        self._hub = hub
        self.subject = subject
        self.handler = handler
        self.tasks: set[asyncio.Task[object]] = set()

    async def unsubscribe(self) -> None:
        servers = self._hub.servers.get(self.subject, [])
        with contextlib.suppress(ValueError):
            servers.remove(self)


class MemoryEngine:
    """The :class:`~pyvia.cluster.base.Engine` of one process (or of one :class:`MemoryHub`)."""

    name = "memory"

    def __init__(self, hub: MemoryHub | None = None) -> None:
        self.hub = hub if hub is not None else MemoryHub()
        self._node_id = secrets.token_hex(8)
        self._connected = False
        self._closed = False
        self._own: list[_MemorySubscription | _MemoryServer] = []

    @property
    def node_id(self) -> str:
        return self._node_id

    @property
    def is_connected(self) -> bool:
        return self._connected

    def status(self) -> EngineStatus:
        return EngineStatus("memory", "memory://", self._connected, self._node_id, 0, None)

    async def connect(self) -> None:
        if self._closed:
            raise EngineUnavailable("this memory engine was closed")
        self._connected = True

    async def close(self) -> None:
        self._connected = False
        self._closed = True
        for sub in self._own:
            await sub.unsubscribe()
        self._own.clear()

    def _check(self) -> None:
        if not self._connected:
            raise EngineUnavailable("the memory engine is not connected (call connect() first)")

    # --- key/value ---------------------------------------------------------------------------------

    async def configure_bucket(self, bucket: str, *, ttl: float | None = None) -> None:
        self.hub.bucket(check_bucket(bucket)).ttl = ttl

    async def get(self, bucket: str, key: str) -> tuple[bytes | None, int]:
        self._check()
        found = self.hub.live(self.hub.bucket(check_bucket(bucket)), check_key(key))
        return (None, 0) if found is None else found

    async def put(self, bucket: str, key: str, value: bytes) -> int:
        self._check()
        return self.hub.write(bucket, self.hub.bucket(check_bucket(bucket)), check_key(key), bytes(value))

    async def cas(self, bucket: str, key: str, value: bytes, expected_revision: int) -> int | None:
        self._check()
        b = self.hub.bucket(check_bucket(bucket))
        found = self.hub.live(b, check_key(key))
        if (0 if found is None else found[1]) != expected_revision:
            return None
        return self.hub.write(bucket, b, key, bytes(value))

    async def delete(self, bucket: str, key: str, expected_revision: int | None = None) -> bool:
        self._check()
        b = self.hub.bucket(check_bucket(bucket))
        found = self.hub.live(b, check_key(key))
        if expected_revision is not None and (0 if found is None else found[1]) != expected_revision:
            return False
        if found is not None:
            self.hub.write(bucket, b, key, None)
        return True

    async def keys(self, bucket: str) -> list[str]:
        self._check()
        b = self.hub.bucket(check_bucket(bucket))
        return [k for k in list(b.entries) if self.hub.live(b, k) is not None]

    async def increment(self, bucket: str, key: str, by: int = 1) -> int:
        self._check()
        b = self.hub.bucket(check_bucket(bucket))
        found = self.hub.live(b, check_key(key))
        total = (0 if found is None else parse_int(found[0], bucket, key)) + check_int(by)
        self.hub.write(bucket, b, key, str(total).encode())
        return total

    async def mutate(self, bucket: str, key: str, fn: Callable[[bytes], bytes], default: bytes) -> bytes:
        self._check()
        b = self.hub.bucket(check_bucket(bucket))
        found = self.hub.live(b, check_key(key))
        new = fn(default if found is None else found[0])
        if not isinstance(new, bytes):
            raise TypeError(f"mutate() callback must return bytes, got {type(new).__name__}")
        self.hub.write(bucket, b, key, new)
        return new

    async def watch(
        self, bucket: str, callback: ChangeHandler, *, on_resync: ResyncHandler | None = None
    ) -> _MemorySubscription:
        self._check()
        check_bucket(bucket)
        sub = _MemorySubscription(self.hub, bucket, Dispatcher(callback, f"watch {bucket}"), on_resync)
        self.hub.watches.setdefault(bucket, []).append(sub)
        self._own.append(sub)
        return sub

    # --- messages ------------------------------------------------------------------------------------

    async def publish(self, subject: str, payload: bytes) -> None:
        self._check()
        check_subject(subject)
        self._deliver(subject, bytes(payload))

    def _deliver(self, subject: str, payload: bytes) -> int:
        receivers = 0
        for sub in self.hub.subscriptions:
            if subject_matches(sub.subject, subject):
                sub.dispatcher.put(subject, payload)
                receivers += 1
        return receivers

    async def subscribe(self, subject: str, callback: MessageHandler) -> _MemorySubscription:
        self._check()
        check_subject(subject, pattern=True)
        sub = _MemorySubscription(self.hub, subject, Dispatcher(callback, subject))
        self.hub.subscriptions.append(sub)
        self._own.append(sub)
        return sub

    async def request(self, subject: str, payload: bytes, timeout: float) -> bytes:
        self._check()
        check_subject(subject)
        servers = self.hub.servers.get(subject)
        if not servers:
            self._deliver(subject, bytes(payload))
            raise NoResponders(f"nobody serves {subject!r}")
        self._deliver(subject, bytes(payload))  # plain subscribers see requests too, as in NATS
        server = servers[0]
        task = asyncio.get_running_loop().create_task(call_handler(server.handler, bytes(payload)))
        server.tasks.add(task)
        task.add_done_callback(server.tasks.discard)
        try:
            reply = await asyncio.wait_for(asyncio.shield(task), timeout)
        except TimeoutError:
            raise RequestTimeout(f"no reply on {subject!r} within {timeout} s") from None
        except Exception as exc:
            raise RemoteError(f"the handler of {subject!r} failed: {exc!r}") from exc
        if not isinstance(reply, bytes):
            raise RemoteError(f"the handler of {subject!r} returned {type(reply).__name__}, not bytes")
        return reply

    async def serve(self, subject: str, handler: RequestHandler) -> _MemoryServer:
        self._check()
        check_subject(subject)
        server = _MemoryServer(self.hub, subject, handler)
        self.hub.servers.setdefault(subject, []).append(server)
        self._own.append(server)
        return server
