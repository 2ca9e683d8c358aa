"""The Redis engine's connection: the client, and the one pub/sub connection that reads everything.

The pub/sub connection is how the engine knows Redis is there: it is pinged when quiet, and when
it fails the engine is disconnected, fails the requests in flight, and retries after 1 s, 2 s …
30 s, then subscribes everything again and tells every watch to resync (pub/sub keeps no
history). It is its own module because keeping the connection alive is one concern and routing
what arrives on it is another (:class:`~pyvia.cluster.redis.RedisEngine`, which passes in what
the connection must call back: what to subscribe, each message, a loss and a reconnect).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

import redis.asyncio as aioredis
import redis.exceptions
from redis.asyncio.client import PubSub
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from pyvia.cluster.base import Backoff, EngineUnavailable, redact_url

__all__ = ["RedisConnection"]

log = logging.getLogger("pyvia.cluster")

_DOWN = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError, TimeoutError)


async def _close_quietly(pubsub: PubSub) -> None:
    """Close a pub/sub connection that may already be broken: its errors say nothing new."""
    with contextlib.suppress(Exception):
        # redis-py before 8.2 leaves aclose unannotated, 8.2 annotates it: either passes
        await pubsub.aclose()  # type: ignore[no-untyped-call,unused-ignore]


class RedisConnection:
    """The client and the pub/sub connection, with its health check and its reconnects.

    ``subscriptions`` gives the channels and the patterns to subscribe on every (re)connect;
    ``on_message`` gets every pub/sub message; ``on_lost`` runs when the connection fails and
    ``on_reconnected`` when it is back.
    """

    __slots__ = (
        "_client",
        "_last_rx",
        "_on_lost",
        "_on_message",
        "_on_reconnected",
        "_reader",
        "_subscriptions",
        "backoff",
        "closed",
        "connect_timeout",
        "connected",
        "last_error",
        "op_timeout",
        "ping_interval",
        "pubsub",
        "reconnects",
        "url",
    )

    def __init__(
        self,
        url: str,
        *,
        backoff: Backoff,
        connect_timeout: float,
        op_timeout: float,
        ping_interval: float,
        subscriptions: Callable[[], tuple[list[str], list[str]]],
        on_message: Callable[[dict[str, Any]], None],
        on_lost: Callable[[BaseException], None],
        on_reconnected: Callable[[], None],
    ) -> None:
        self.url = url
        self.backoff = backoff
        self.connect_timeout = connect_timeout
        self.op_timeout = op_timeout
        self.ping_interval = ping_interval
        self._subscriptions = subscriptions
        self._on_message = on_message
        self._on_lost = on_lost
        self._on_reconnected = on_reconnected
        self._client: aioredis.Redis | None = None
        self.pubsub: PubSub | None = None
        self._reader: asyncio.Task[None] | None = None
        self.connected = False
        self.closed = False
        self.reconnects = 0
        self.last_error: str | None = None
        self._last_rx = 0.0

    async def connect(self) -> aioredis.Redis | None:
        """Connect and start reading; the new client, or None when there is one already."""
        if self._client is not None:
            return None
        self._client = aioredis.Redis.from_url(
            self.url,
            socket_connect_timeout=self.connect_timeout,
            socket_timeout=self.op_timeout,
            # one immediate retry replaces a pooled connection that went stale; reconnecting with
            # a backoff is this engine's job, not the client's
            retry=Retry(NoBackoff(), 1),
            decode_responses=False,
        )
        try:
            await self._open()
        except Exception as exc:
            client, self._client = self._client, None
            with contextlib.suppress(Exception):
                await client.aclose()
            raise EngineUnavailable(f"cannot connect to Redis at {redact_url(self.url)}: {exc!r}") from exc
        self._reader = asyncio.get_running_loop().create_task(self._read_loop())
        return self._client

    async def _open(self) -> None:
        """Ping, open the pub/sub connection and (re)subscribe everything; raises if Redis is down."""
        assert self._client is not None
        await self._client.connection_pool.disconnect()  # pooled connections may predate a restart
        await asyncio.wait_for(self._client.ping(), self.connect_timeout)
        pubsub = self._client.pubsub(ignore_subscribe_messages=False)
        try:
            channels, patterns = self._subscriptions()
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
            await _close_quietly(pubsub)
            raise
        self.pubsub = pubsub
        self._last_rx = time.monotonic()
        self.connected = True

    async def halt(self) -> None:
        """Stop reading for good: no more messages, no more reconnects."""
        self.closed = True
        self.connected = False
        reader, self._reader = self._reader, None
        if reader is not None:
            reader.cancel()
            with contextlib.suppress(BaseException):
                await reader

    async def close(self) -> None:
        """Close the pub/sub connection and the client (after :meth:`halt`)."""
        pubsub, self.pubsub = self.pubsub, None
        if pubsub is not None:
            await _close_quietly(pubsub)
        client, self._client = self._client, None
        if client is not None:
            with contextlib.suppress(Exception):
                await client.aclose()

    async def _read_loop(self) -> None:
        while not self.closed:
            pubsub = self.pubsub
            try:
                if pubsub is None:
                    raise redis.exceptions.ConnectionError("no pub/sub connection")
                msg = await pubsub.get_message(timeout=1.0)
                now = time.monotonic()
                if msg is not None:
                    self._last_rx = now
                    self._on_message(msg)
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
        self.last_error = repr(exc)
        if self.connected:
            log.warning("Redis engine lost %s (%r); reconnecting", redact_url(self.url), exc)
        self.connected = False
        self._on_lost(exc)
        pubsub, self.pubsub = self.pubsub, None
        if pubsub is not None:
            await _close_quietly(pubsub)

    async def _reconnect(self) -> None:
        while not self.closed:
            await asyncio.sleep(self.backoff.next())
            try:
                await self._open()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self.last_error = repr(exc)
                log.debug("Redis reconnect failed: %r", exc)
                continue
            self.reconnects += 1
            self.backoff.reset()
            log.info("Redis engine reconnected to %s", redact_url(self.url))
            self._on_reconnected()
            return

    def client(self) -> aioredis.Redis:
        """The client while connected; EngineUnavailable (saying why) otherwise."""
        if not self.connected or self._client is None:
            state = "closed" if self.closed else "reconnecting" if self._client is not None else "not connected"
            raise EngineUnavailable(f"Redis engine is {state} ({redact_url(self.url)})")
        return self._client

    @contextlib.contextmanager
    def unavailable(self, what: str) -> Iterator[None]:
        """Connection failures in the middle of a call become EngineUnavailable."""
        try:
            yield
        except _DOWN as exc:
            self.last_error = repr(exc)
            raise EngineUnavailable(f"Redis engine failed during {what}: {exc!r}") from exc
