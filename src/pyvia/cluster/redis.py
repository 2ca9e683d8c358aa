"""The Redis engine: hashes and Lua scripts for state, pub/sub for messages (redis-py asyncio).

How each part of the contract maps onto Redis:

* a key ``k`` of bucket ``b`` (app prefix ``p``) is the hash ``p:{b}:k`` holding ``v`` (value) and
  ``r`` (revision); a revision comes from the bucket's counter ``p:{b}`` (``INCR``), so it never
  repeats for a key, even across a delete (no ABA). The ``{b}`` hash tag keeps a bucket in one
  Redis Cluster slot, as the scripts need;
* every write is one Lua script (atomic on the server, one round trip): ``put``, ``cas`` (compare
  ``r`` with the expected revision), ``delete``, and ``increment`` (``HINCRBY`` on ``v``: no
  retry loop at all). Each script also ``PUBLISH``es the change on ``p:kv:b`` in the same atomic
  step, so watchers see changes in revision order. Redis keyspace notifications are not used:
  they are off by default and carry no value or revision. ``mutate`` is a loop of get and the
  ``cas`` script, as WATCH/MULTI would need a connection per attempt;
* subjects are channels ``p.<subject>``; wildcards become ``PSUBSCRIBE`` globs, filtered again
  by NATS rules (a glob ``*`` would cross dots). Each message carries a one-line header:
  ``m\\n`` for a publish, ``q<reply channel> <id>\\n`` for a request, ``r<id> <0|1>\\n`` for a reply;
* ``request`` publishes on the subject and waits on this engine's inbox channel ``p:inbox:<node>``;
  ``PUBLISH`` answers how many received it, so "nobody serves this" is known at once;
* one pub/sub connection reads everything; when it fails the engine is disconnected, fails the
  requests in flight, and retries after 1 s, 2 s … 30 s, then subscribes everything again and
  tells every watch to resync (pub/sub keeps no history).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import secrets
import time
from collections.abc import Callable, Iterator
from typing import Any

import redis.asyncio as aioredis
import redis.exceptions
from redis.asyncio.client import PubSub
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from pyvia.cluster.base import (
    Backoff,
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
    cas_mutate,
    check_bucket,
    check_int,
    check_key,
    check_prefix,
    check_subject,
    redact_url,
    subject_matches,
)

__all__ = ["RedisEngine"]

log = logging.getLogger("pyvia.cluster")

# KEYS[1] entry hash, KEYS[2] bucket revision counter.
# ARGV: value, expected revision ('' = any), ttl in ms ('0' = none), change channel, key.
_WRITE = """
if ARGV[2] ~= '' then
  local cur = tonumber(redis.call('HGET', KEYS[1], 'r') or '0')
  if cur ~= tonumber(ARGV[2]) then return false end
end
local rev = redis.call('INCR', KEYS[2])
redis.call('HSET', KEYS[1], 'v', ARGV[1], 'r', rev)
if ARGV[3] ~= '0' then redis.call('PEXPIRE', KEYS[1], ARGV[3]) end
redis.call('PUBLISH', ARGV[4], 'p' .. rev .. '\\n' .. ARGV[5] .. '\\n' .. ARGV[1])
return rev
"""

# ARGV: by, ttl in ms, change channel, key. HINCRBY fails on a non-integer before anything is written.
_INCREMENT = """
local n = redis.call('HINCRBY', KEYS[1], 'v', ARGV[1])
local rev = redis.call('INCR', KEYS[2])
redis.call('HSET', KEYS[1], 'r', rev)
if ARGV[2] ~= '0' then redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
redis.call('PUBLISH', ARGV[3], 'p' .. rev .. '\\n' .. ARGV[4] .. '\\n' .. n)
return n
"""

# ARGV: expected revision ('' = any), change channel, key.
_DELETE = """
if ARGV[1] ~= '' then
  local cur = tonumber(redis.call('HGET', KEYS[1], 'r') or '0')
  if cur ~= tonumber(ARGV[1]) then return 0 end
end
if redis.call('DEL', KEYS[1]) == 1 then
  local rev = redis.call('INCR', KEYS[2])
  redis.call('PUBLISH', ARGV[2], 'd' .. rev .. '\\n' .. ARGV[3] .. '\\n')
end
return 1
"""

_RESYNC = object()
_DOWN = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError, TimeoutError)


class _RedisSub:
    """One local subscriber, watch or server on one channel or pattern of the shared connection."""

    __slots__ = ("_engine", "dispatcher", "handler", "kind", "on_resync", "subject", "wire")

    def __init__(
        self,
        engine: RedisEngine,
        kind: str,
        subject: str,
        wire: str,
        dispatcher: Dispatcher | None,
        handler: RequestHandler | None = None,
        on_resync: ResyncHandler | None = None,
    ) -> None:
        self._engine = engine
        self.kind = kind  # "sub", "psub", "watch" or "serve"
        self.subject = subject
        self.wire = wire
        self.dispatcher = dispatcher
        self.handler = handler
        self.on_resync = on_resync

    async def unsubscribe(self) -> None:
        await self._engine._remove(self)
        if self.dispatcher is not None:
            await self.dispatcher.stop()


class RedisEngine:
    """The :class:`~pyvia.cluster.base.Engine` on a Redis server (``redis://``, ``rediss://``, ``unix://``)."""

    name = "redis"

    def __init__(
        self,
        url: str = "redis://127.0.0.1:6379/0",
        *,
        prefix: str = "pyvia",
        backoff: Backoff | None = None,
        connect_timeout: float = 2.0,
        op_timeout: float = 2.0,
        ping_interval: float = 5.0,
    ) -> None:
        self.url = url
        self.prefix = check_prefix(prefix)
        self.backoff = backoff if backoff is not None else Backoff()
        self.connect_timeout = connect_timeout
        self.op_timeout = op_timeout
        self.ping_interval = ping_interval
        self._node_id = secrets.token_hex(8)
        self._inbox = f"{self.prefix}:inbox:{self._node_id}"
        self._client: aioredis.Redis | None = None
        self._pubsub: PubSub | None = None
        self._reader: asyncio.Task[None] | None = None
        self._connected = False
        self._closed = False
        self._reconnects = 0
        self._last_error: str | None = None
        self._ttl_ms: dict[str, str] = {}
        # wire channel or pattern -> local entries; "p" for patterns, "c" for channels
        self._entries: dict[tuple[str, str], list[_RedisSub]] = {}
        self._confirm: dict[tuple[str, str], list[asyncio.Future[None]]] = {}
        self._pending: dict[bytes, asyncio.Future[bytes]] = {}
        self._ids = itertools.count(1)
        self._tasks: set[asyncio.Task[Any]] = set()
        self._last_rx = 0.0
        self._scripts: dict[str, Any] = {}

    # --- connection --------------------------------------------------------------------------------

    @property
    def node_id(self) -> str:
        return self._node_id

    @property
    def is_connected(self) -> bool:
        return self._connected

    def status(self) -> EngineStatus:
        return EngineStatus(
            "redis", redact_url(self.url), self._connected, self._node_id, self._reconnects, self._last_error
        )

    async def connect(self) -> None:
        if self._client is not None:
            return
        self._client = aioredis.Redis.from_url(
            self.url,
            socket_connect_timeout=self.connect_timeout,
            socket_timeout=self.op_timeout,
            # one immediate retry replaces a pooled connection that went stale; reconnecting with
            # a backoff is this engine's job, not the client's
            retry=Retry(NoBackoff(), 1),
            decode_responses=False,
        )
        self._scripts = {
            name: self._client.register_script(src)
            for name, src in (("write", _WRITE), ("increment", _INCREMENT), ("delete", _DELETE))
        }
        try:
            await self._open()
        except Exception as exc:
            client, self._client = self._client, None
            with contextlib.suppress(Exception):
                await client.aclose()
            raise EngineUnavailable(f"cannot connect to Redis at {redact_url(self.url)}: {exc!r}") from exc
        self._reader = asyncio.get_running_loop().create_task(self._read_loop())

    async def _open(self) -> None:
        """Ping, open the pub/sub connection and (re)subscribe everything; raises if Redis is down."""
        assert self._client is not None
        await self._client.connection_pool.disconnect()  # pooled connections may predate a restart
        await asyncio.wait_for(self._client.ping(), self.connect_timeout)
        pubsub = self._client.pubsub(ignore_subscribe_messages=False)
        try:
            channels = [self._inbox] + [w for (k, w) in self._entries if k == "c"]
            patterns = [w for (k, w) in self._entries if k == "p"]
            await pubsub.subscribe(*channels)
            if patterns:
                await pubsub.psubscribe(*patterns)
            expected = len(channels) + len(patterns)
            deadline = time.monotonic() + self.connect_timeout
            while expected:  # active on return: wait for every confirmation
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError("Redis did not confirm the subscriptions")
                msg = await pubsub.get_message(timeout=left)
                if msg is not None and msg["type"] in (b"subscribe", b"psubscribe", "subscribe", "psubscribe"):
                    expected -= 1
        except BaseException:
            with contextlib.suppress(Exception):
                await pubsub.aclose()  # type: ignore[no-untyped-call]  # redis-py leaves it unannotated
            raise
        self._pubsub = pubsub
        self._last_rx = time.monotonic()
        self._connected = True

    async def close(self) -> None:
        self._closed = True
        self._connected = False
        reader, self._reader = self._reader, None
        if reader is not None:
            reader.cancel()
            with contextlib.suppress(BaseException):
                await reader
        for entries in list(self._entries.values()):
            for entry in entries:
                if entry.dispatcher is not None:
                    await entry.dispatcher.stop()
        self._entries.clear()
        for task in list(self._tasks):
            task.cancel()
        self._fail_pending(EngineUnavailable("the Redis engine was closed"))
        pubsub, self._pubsub = self._pubsub, None
        if pubsub is not None:
            with contextlib.suppress(Exception):
                await pubsub.aclose()  # type: ignore[no-untyped-call]  # redis-py leaves it unannotated
        client, self._client = self._client, None
        if client is not None:
            with contextlib.suppress(Exception):
                await client.aclose()

    async def _read_loop(self) -> None:
        while not self._closed:
            pubsub = self._pubsub
            try:
                if pubsub is None:
                    raise redis.exceptions.ConnectionError("no pub/sub connection")
                msg = await pubsub.get_message(timeout=1.0)
                now = time.monotonic()
                if msg is not None:
                    self._last_rx = now
                    self._handle(msg)
                elif now - self._last_rx > 3 * self.ping_interval:
                    raise redis.exceptions.TimeoutError("no answer to PING on the pub/sub connection")
                elif now - self._last_rx > self.ping_interval:
                    await pubsub.ping()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                await self._lost(exc)
                await self._reconnect()

    async def _lost(self, exc: BaseException) -> None:
        self._last_error = repr(exc)
        if self._connected:
            log.warning("Redis engine lost %s (%r); reconnecting", redact_url(self.url), exc)
        self._connected = False
        self._fail_pending(EngineUnavailable(f"Redis connection lost: {exc!r}"))
        for waiters in self._confirm.values():
            for fut in waiters:
                if not fut.done():
                    fut.set_exception(EngineUnavailable("Redis connection lost"))
        self._confirm.clear()
        pubsub, self._pubsub = self._pubsub, None
        if pubsub is not None:
            with contextlib.suppress(Exception):
                await pubsub.aclose()  # type: ignore[no-untyped-call]  # redis-py leaves it unannotated

    async def _reconnect(self) -> None:
        while not self._closed:
            await asyncio.sleep(self.backoff.next())
            try:
                await self._open()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self._last_error = repr(exc)
                log.debug("Redis reconnect failed: %r", exc)
                continue
            self._reconnects += 1
            self.backoff.reset()
            log.info("Redis engine reconnected to %s", redact_url(self.url))
            for entries in self._entries.values():
                for entry in entries:
                    if entry.kind == "watch" and entry.dispatcher is not None and entry.on_resync is not None:
                        entry.dispatcher.put(_RESYNC)
            return

    def _fail_pending(self, exc: Exception) -> None:
        pending, self._pending = self._pending, {}
        for fut in pending.values():
            if not fut.done():
                fut.set_exception(exc)

    def _redis(self) -> aioredis.Redis:
        if not self._connected or self._client is None:
            state = "closed" if self._closed else "reconnecting" if self._client is not None else "not connected"
            raise EngineUnavailable(f"Redis engine is {state} ({redact_url(self.url)})")
        return self._client

    @contextlib.contextmanager
    def _unavailable(self, what: str) -> Iterator[None]:
        try:
            yield
        except _DOWN as exc:
            self._last_error = repr(exc)
            raise EngineUnavailable(f"Redis engine failed during {what}: {exc!r}") from exc

    # --- incoming messages ---------------------------------------------------------------------------

    def _handle(self, msg: dict[str, Any]) -> None:
        kind = msg["type"]
        kind = kind.decode() if isinstance(kind, bytes) else kind
        channel = msg["channel"]
        channel = channel.decode() if isinstance(channel, bytes) else channel
        if kind in ("subscribe", "psubscribe"):
            for fut in self._confirm.pop((kind, channel), ()):
                if not fut.done():
                    fut.set_result(None)
            return
        data: bytes = msg["data"]
        if kind == "message":
            if channel == self._inbox:
                self._on_reply(data)
                return
            entries = self._entries.get(("c", channel), ())
        elif kind == "pmessage":
            pattern = msg["pattern"]
            pattern = pattern.decode() if isinstance(pattern, bytes) else pattern
            entries = self._entries.get(("p", pattern), ())
        else:
            return  # pong, unsubscribe confirmations
        for entry in entries:
            if entry.kind == "watch":
                change = self._parse_change(entry.subject, data)
                if change is not None and entry.dispatcher is not None:
                    entry.dispatcher.put(change)
                continue
            subject = channel[len(self.prefix) + 1 :]
            if entry.kind == "psub" and not subject_matches(entry.subject, subject):
                continue
            head, sep, payload = data.partition(b"\n")
            if not sep or head[:1] not in (b"m", b"q"):
                log.warning("dropped a malformed message on %s", channel)
                continue
            if entry.kind == "serve":
                if head[:1] == b"q" and entry.handler is not None:
                    reply_to, _, rid = head[1:].partition(b" ")
                    self._spawn(self._answer(entry, reply_to.decode(), rid, payload))
            elif entry.dispatcher is not None:
                entry.dispatcher.put(subject, payload)

    @staticmethod
    def _parse_change(bucket: str, data: bytes) -> KvChange | None:
        head, _, rest = data.partition(b"\n")
        key, _, value = rest.partition(b"\n")
        try:
            revision = int(head[1:])
        except ValueError:
            log.warning("dropped a malformed change message of bucket %s", bucket)
            return None
        return KvChange(bucket, key.decode(), value if head[:1] == b"p" else None, revision)

    def _on_reply(self, data: bytes) -> None:
        head, _, payload = data.partition(b"\n")
        rid, _, status = head[1:].partition(b" ")
        fut = self._pending.pop(rid, None)
        if fut is None or fut.done():
            return  # timed out already
        if status == b"0":
            fut.set_result(payload)
        else:
            fut.set_exception(RemoteError(payload.decode(errors="replace")))

    async def _answer(self, entry: _RedisSub, reply_to: str, rid: bytes, payload: bytes) -> None:
        assert entry.handler is not None
        try:
            reply = await call_handler(entry.handler, payload)
            if not isinstance(reply, bytes):
                raise TypeError(f"returned {type(reply).__name__}, not bytes")
            message = b"r" + rid + b" 0\n" + reply
        except Exception as exc:
            log.exception("handler of %s failed", entry.subject)
            message = b"r" + rid + b" 1\n" + f"the handler of {entry.subject!r} failed: {exc!r}".encode()
        try:
            await self._redis().publish(reply_to, message)
        except Exception as exc:  # the requester times out
            log.warning("cannot answer a request on %s: %r", entry.subject, exc)

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # --- subscriptions -------------------------------------------------------------------------------

    async def _add(self, entry: _RedisSub, pattern: bool) -> _RedisSub:
        self._redis()
        slot = ("p" if pattern else "c", entry.wire)
        entries = self._entries.setdefault(slot, [])
        entries.append(entry)
        if len(entries) > 1 or self._pubsub is None:
            return entry
        kind = "psubscribe" if pattern else "subscribe"
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._confirm.setdefault((kind, entry.wire), []).append(fut)
        try:
            with self._unavailable(kind):
                await getattr(self._pubsub, kind)(entry.wire)
                await asyncio.wait_for(fut, self.op_timeout)
        except BaseException:
            await self._remove(entry)
            raise
        return entry

    async def _remove(self, entry: _RedisSub) -> None:
        slot = ("p" if entry.kind == "psub" else "c", entry.wire)
        entries = self._entries.get(slot)
        if entries is None or entry not in entries:
            return
        entries.remove(entry)
        if entries:
            return
        del self._entries[slot]
        pubsub = self._pubsub
        if pubsub is not None and self._connected:
            with contextlib.suppress(Exception):
                await (pubsub.punsubscribe(entry.wire) if slot[0] == "p" else pubsub.unsubscribe(entry.wire))

    # --- key/value ---------------------------------------------------------------------------------

    def _keys(self, bucket: str, key: str) -> list[str]:
        return [f"{self.prefix}:{{{bucket}}}:{key}", f"{self.prefix}:{{{bucket}}}"]

    def _channel(self, bucket: str) -> str:
        return f"{self.prefix}:kv:{bucket}"

    async def configure_bucket(self, bucket: str, *, ttl: float | None = None) -> None:
        self._ttl_ms[check_bucket(bucket)] = str(max(1, round(ttl * 1000))) if ttl else "0"

    async def get(self, bucket: str, key: str) -> tuple[bytes | None, int]:
        check_bucket(bucket)
        check_key(key)
        client = self._redis()
        with self._unavailable(f"get {bucket}/{key}"):
            value, revision = await client.hmget(self._keys(bucket, key)[0], ["v", "r"])
        if value is None:
            return None, 0
        return (value if isinstance(value, bytes) else value.encode()), int(revision or 0)

    async def _write(self, bucket: str, key: str, value: bytes, expected: str) -> int | None:
        check_bucket(bucket)
        check_key(key)
        client = self._redis()
        args = [bytes(value), expected, self._ttl_ms.get(bucket, "0"), self._channel(bucket), key]
        with self._unavailable(f"write {bucket}/{key}"):
            result = await self._scripts["write"](keys=self._keys(bucket, key), args=args, client=client)
        return None if result is None else int(result)

    async def put(self, bucket: str, key: str, value: bytes) -> int:
        revision = await self._write(bucket, key, value, "")
        assert revision is not None
        return revision

    async def cas(self, bucket: str, key: str, value: bytes, expected_revision: int) -> int | None:
        return await self._write(bucket, key, value, str(int(expected_revision)))

    async def delete(self, bucket: str, key: str, expected_revision: int | None = None) -> bool:
        check_bucket(bucket)
        check_key(key)
        client = self._redis()
        expected = "" if expected_revision is None else str(int(expected_revision))
        with self._unavailable(f"delete {bucket}/{key}"):
            result = await self._scripts["delete"](
                keys=self._keys(bucket, key), args=[expected, self._channel(bucket), key], client=client
            )
        return bool(result)

    async def keys(self, bucket: str) -> list[str]:
        check_bucket(bucket)
        client = self._redis()
        head = f"{self.prefix}:{{{bucket}}}:"
        found: list[str] = []
        with self._unavailable(f"keys of {bucket}"):
            async for name in client.scan_iter(match=head + "*", count=1000):
                text = name.decode() if isinstance(name, bytes) else name
                found.append(text[len(head) :])
        return found

    async def increment(self, bucket: str, key: str, by: int = 1) -> int:
        check_bucket(bucket)
        check_key(key)
        client = self._redis()
        args = [check_int(by), self._ttl_ms.get(bucket, "0"), self._channel(bucket), key]
        try:
            with self._unavailable(f"increment {bucket}/{key}"):
                return int(await self._scripts["increment"](keys=self._keys(bucket, key), args=args, client=client))
        except redis.exceptions.ResponseError as exc:
            if "not an integer" in str(exc) or "overflow" in str(exc):
                raise TypeError(f"increment() needs an integer; {bucket}/{key} holds something else") from None
            raise

    async def mutate(self, bucket: str, key: str, fn: Callable[[bytes], bytes], default: bytes) -> bytes:
        return await cas_mutate(self, bucket, key, fn, default)

    async def watch(self, bucket: str, callback: ChangeHandler, *, on_resync: ResyncHandler | None = None) -> _RedisSub:
        check_bucket(bucket)

        async def deliver(item: object) -> None:
            if item is _RESYNC:
                if on_resync is not None:
                    await call_handler(on_resync)
            else:
                await call_handler(callback, item)

        entry = _RedisSub(
            self, "watch", bucket, self._channel(bucket), Dispatcher(deliver, f"watch {bucket}"), on_resync=on_resync
        )
        try:
            return await self._add(entry, pattern=False)
        except BaseException:
            assert entry.dispatcher is not None
            await entry.dispatcher.stop()
            raise

    # --- messages ------------------------------------------------------------------------------------

    def _subject(self, subject: str) -> str:
        return f"{self.prefix}.{subject}"

    async def publish(self, subject: str, payload: bytes) -> None:
        check_subject(subject)
        client = self._redis()
        with self._unavailable(f"publish {subject}"):
            await client.publish(self._subject(subject), b"m\n" + bytes(payload))

    async def subscribe(self, subject: str, callback: MessageHandler) -> _RedisSub:
        check_subject(subject, pattern=True)
        pattern = any(t in ("*", ">") for t in subject.split("."))
        wire = self._subject(".".join("*" if t in ("*", ">") else t for t in subject.split(".")))
        entry = _RedisSub(self, "psub" if pattern else "sub", subject, wire, Dispatcher(callback, subject))
        try:
            return await self._add(entry, pattern=pattern)
        except BaseException:
            assert entry.dispatcher is not None
            await entry.dispatcher.stop()
            raise

    async def request(self, subject: str, payload: bytes, timeout: float) -> bytes:
        check_subject(subject)
        client = self._redis()
        rid = str(next(self._ids)).encode()
        fut: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self._pending[rid] = fut
        message = b"q" + self._inbox.encode() + b" " + rid + b"\n" + bytes(payload)
        try:
            with self._unavailable(f"request {subject}"):
                receivers = await client.publish(self._subject(subject), message)
            if not receivers:
                raise NoResponders(f"nobody serves {subject!r}")
            try:
                return await asyncio.wait_for(fut, timeout)
            except TimeoutError:
                raise RequestTimeout(f"no reply on {subject!r} within {timeout} s") from None
        finally:
            self._pending.pop(rid, None)

    async def serve(self, subject: str, handler: RequestHandler) -> _RedisSub:
        check_subject(subject)
        entry = _RedisSub(self, "serve", subject, self._subject(subject), None, handler)
        return await self._add(entry, pattern=False)
