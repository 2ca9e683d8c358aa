"""The Redis engine: hashes and Lua scripts for state, pub/sub for messages (redis-py asyncio).

How each part of the contract maps onto Redis:

* buckets, revisions and writes are hashes, a counter per bucket and one Lua script per write,
  each publishing its change on the bucket's channel (:mod:`pyvia.cluster.redis_store`);
* subjects are channels ``p.<subject>``; wildcards become ``PSUBSCRIBE`` globs, filtered again
  by NATS rules (a glob ``*`` would cross dots). Each message carries a one-line header:
  ``m\\n`` for a publish, ``q<reply channel> <id>\\n`` for a request, ``r<id> <0|1>\\n`` for a reply;
* ``request`` publishes on the subject and waits on this engine's inbox channel ``p:inbox:<node>``;
  ``PUBLISH`` answers how many received it, so "nobody serves this" is known at once;
* one pub/sub connection reads everything; when it fails the engine is disconnected, fails the
  requests in flight, and retries after 1 s, 2 s … 30 s, then subscribes everything again and
  tells every watch to resync (:mod:`pyvia.cluster.redis_connection`).

This module is the engine itself: it routes what the pub/sub connection reads to subscribers,
watches, servers and waiting requests, and composes the store and the connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import secrets
from collections.abc import Callable
from typing import Any

from pyvia.cluster.base import (
    Backoff,
    ChangeHandler,
    Dispatcher,
    EngineStatus,
    EngineUnavailable,
    MessageHandler,
    NoResponders,
    RemoteError,
    RequestHandler,
    RequestTimeout,
    ResyncHandler,
    call_handler,
    check_bucket,
    check_prefix,
    check_subject,
    redact_url,
    subject_matches,
)
from pyvia.cluster.redis_connection import RedisConnection
from pyvia.cluster.redis_store import RedisStore, parse_change

__all__ = ["RedisEngine"]

log = logging.getLogger("pyvia.cluster")

_RESYNC = object()


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
        self._node_id = secrets.token_hex(8)
        self._inbox = f"{self.prefix}:inbox:{self._node_id}"
        self._conn = RedisConnection(
            url,
            backoff=backoff if backoff is not None else Backoff(),
            connect_timeout=connect_timeout,
            op_timeout=op_timeout,
            ping_interval=ping_interval,
            subscriptions=self._subscriptions,
            on_message=self._handle,
            on_lost=self._lost,
            on_reconnected=self._resync,
        )
        self._store = RedisStore(self.prefix, self._conn)
        # wire channel or pattern -> local entries; "p" for patterns, "c" for channels
        self._entries: dict[tuple[str, str], list[_RedisSub]] = {}
        self._confirm: dict[tuple[str, str], list[asyncio.Future[None]]] = {}
        self._pending: dict[bytes, asyncio.Future[bytes]] = {}
        self._ids = itertools.count(1)
        self._tasks: set[asyncio.Task[Any]] = set()

    # --- connection --------------------------------------------------------------------------------

    @property
    def node_id(self) -> str:
        return self._node_id

    @property
    def is_connected(self) -> bool:
        return self._conn.connected

    @property
    def backoff(self) -> Backoff:
        return self._conn.backoff

    @property
    def connect_timeout(self) -> float:
        return self._conn.connect_timeout

    @property
    def op_timeout(self) -> float:
        return self._conn.op_timeout

    @property
    def ping_interval(self) -> float:
        return self._conn.ping_interval

    def status(self) -> EngineStatus:
        conn = self._conn
        return EngineStatus(
            "redis", redact_url(self.url), conn.connected, self._node_id, conn.reconnects, conn.last_error
        )

    async def connect(self) -> None:
        client = await self._conn.connect()
        if client is not None:
            self._store.load(client)

    async def close(self) -> None:
        await self._conn.halt()
        for entries in list(self._entries.values()):
            for entry in entries:
                if entry.dispatcher is not None:
                    await entry.dispatcher.stop()
        self._entries.clear()
        for task in list(self._tasks):
            task.cancel()
        self._fail_pending(EngineUnavailable("the Redis engine was closed"))
        await self._conn.close()

    def _subscriptions(self) -> tuple[list[str], list[str]]:
        """The channels and patterns to subscribe on every (re)connect."""
        channels = [self._inbox] + [w for (k, w) in self._entries if k == "c"]
        patterns = [w for (k, w) in self._entries if k == "p"]
        return channels, patterns

    def _lost(self, exc: BaseException) -> None:
        self._fail_pending(EngineUnavailable(f"Redis connection lost: {exc!r}"))
        for waiters in self._confirm.values():
            for fut in waiters:
                if not fut.done():
                    fut.set_exception(EngineUnavailable("Redis connection lost"))
        self._confirm.clear()

    def _resync(self) -> None:
        """Back after a loss: every watch may have missed changes (pub/sub keeps no history)."""
        for entries in self._entries.values():
            for entry in entries:
                if entry.kind == "watch" and entry.dispatcher is not None and entry.on_resync is not None:
                    entry.dispatcher.put(_RESYNC)

    def _fail_pending(self, exc: Exception) -> None:
        pending, self._pending = self._pending, {}
        for fut in pending.values():
            if not fut.done():
                fut.set_exception(exc)

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
                change = parse_change(entry.subject, data)
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
            await self._conn.client().publish(reply_to, message)
        except Exception as exc:  # the requester times out
            log.warning("cannot answer a request on %s: %r", entry.subject, exc)

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # --- subscriptions -------------------------------------------------------------------------------

    async def _add(self, entry: _RedisSub, pattern: bool) -> _RedisSub:
        self._conn.client()
        slot = ("p" if pattern else "c", entry.wire)
        entries = self._entries.setdefault(slot, [])
        entries.append(entry)
        if len(entries) > 1 or self._conn.pubsub is None:
            return entry
        kind = "psubscribe" if pattern else "subscribe"
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._confirm.setdefault((kind, entry.wire), []).append(fut)
        try:
            with self._conn.unavailable(kind):
                await getattr(self._conn.pubsub, kind)(entry.wire)
                await asyncio.wait_for(fut, self._conn.op_timeout)
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
        pubsub = self._conn.pubsub
        if pubsub is not None and self._conn.connected:
            with contextlib.suppress(Exception):
                await (pubsub.punsubscribe(entry.wire) if slot[0] == "p" else pubsub.unsubscribe(entry.wire))

    # --- key/value (the store's) -----------------------------------------------------------------

    async def configure_bucket(self, bucket: str, *, ttl: float | None = None) -> None:
        self._store.configure_bucket(bucket, ttl)

    async def get(self, bucket: str, key: str) -> tuple[bytes | None, int]:
        return await self._store.get(bucket, key)

    async def put(self, bucket: str, key: str, value: bytes) -> int:
        return await self._store.put(bucket, key, value)

    async def cas(self, bucket: str, key: str, value: bytes, expected_revision: int) -> int | None:
        return await self._store.cas(bucket, key, value, expected_revision)

    async def delete(self, bucket: str, key: str, expected_revision: int | None = None) -> bool:
        return await self._store.delete(bucket, key, expected_revision)

    async def keys(self, bucket: str) -> list[str]:
        return await self._store.keys(bucket)

    async def increment(self, bucket: str, key: str, by: int = 1) -> int:
        return await self._store.increment(bucket, key, by)

    async def mutate(self, bucket: str, key: str, fn: Callable[[bytes], bytes], default: bytes) -> bytes:
        return await self._store.mutate(bucket, key, fn, default)

    async def watch(self, bucket: str, callback: ChangeHandler, *, on_resync: ResyncHandler | None = None) -> _RedisSub:
        check_bucket(bucket)

        async def deliver(item: object) -> None:
            if item is _RESYNC:
                if on_resync is not None:
                    await call_handler(on_resync)
            else:
                await call_handler(callback, item)

        entry = _RedisSub(
            self,
            "watch",
            bucket,
            self._store.channel(bucket),
            Dispatcher(deliver, f"watch {bucket}"),
            on_resync=on_resync,
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
        client = self._conn.client()
        with self._conn.unavailable(f"publish {subject}"):
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
        client = self._conn.client()
        rid = str(next(self._ids)).encode()
        fut: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self._pending[rid] = fut
        message = b"q" + self._inbox.encode() + b" " + rid + b"\n" + bytes(payload)
        try:
            with self._conn.unavailable(f"request {subject}"):
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
