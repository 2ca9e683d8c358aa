"""The NATS engine: JetStream key/value for state, core NATS for messages (nats-py).

How each part of the contract maps onto NATS:

* a bucket ``b`` of app prefix ``p`` is the JetStream KV bucket ``p_b`` (history 1, direct gets);
  keys are escaped to NATS's key alphabet (``room:lobby`` → ``room=3Alobby``);
* a revision is the stream sequence of the key's last message; ``cas`` is ``update(key, value,
  last=revision)``, which the server rejects when the key moved on (DESIGN.md decision 4 checked
  that); a deleted key's revision is that of its deletion marker;
* ``increment`` and ``mutate`` are compare-and-set loops (JetStream KV has no atomic add);
* a watch is an ordered push consumer that delivers new messages only, recreated after every
  reconnect (then ``on_resync`` runs, since changes may have been missed);
* subjects are ``p.<subject>``; ``request`` is core request/reply (no responders answers at
  once), and a handler's failure goes back with a ``Pyvia-Error`` header;
* nats-py reconnects by itself; its server picker waits 1 s, 2 s … 30 s between attempts.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import secrets
from collections.abc import Callable, Iterator
from typing import Any

import nats
import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext, api
from nats.js.kv import KeyValue

from pyvia.cluster.base import (
    Backoff,
    ChangeHandler,
    Dispatcher,
    EngineError,
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
    cas_increment,
    cas_mutate,
    check_bucket,
    check_int,
    check_key,
    check_prefix,
    check_subject,
    redact_url,
)

__all__ = ["NatsEngine", "decode_key", "encode_key"]

log = logging.getLogger("pyvia.cluster")

_ERROR_HEADER = "Pyvia-Error"
_KV_OP = "KV-Operation"
_PLAIN_KEY = re.compile(r"[-/_A-Za-z0-9]*\Z")
_UNSAFE = re.compile(r"[^-/_A-Za-z0-9]")
_ESCAPE = re.compile(r"=([0-9A-F]{2})")


def encode_key(key: str) -> str:
    """A key in NATS's alphabet: every byte outside ``[-/_A-Za-z0-9]`` becomes ``=XX`` (reversible)."""
    if _PLAIN_KEY.match(key):  # the usual case (context ids, hashes): one regex, not one per character
        return key
    return _UNSAFE.sub(lambda m: "".join(f"={b:02X}" for b in m.group().encode()), key)


def decode_key(wire: str) -> str:
    if "=" not in wire:
        return wire
    return bytes(_unescape(wire)).decode()


def _unescape(wire: str) -> Iterator[int]:
    i = 0
    while i < len(wire):
        if wire[i] == "=" and _ESCAPE.match(wire, i):
            yield int(wire[i + 1 : i + 3], 16)
            i += 3
        else:
            yield from wire[i].encode()
            i += 1


class _NatsSubscription:
    __slots__ = ("_engine", "_sub", "subject")

    def __init__(self, engine: NatsEngine, subject: str, sub: Any) -> None:
        self._engine = engine
        self.subject = subject
        self._sub = sub

    async def unsubscribe(self) -> None:
        sub, self._sub = self._sub, None
        if sub is not None:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()


class _NatsWatch:
    """A watch that survives reconnects: its consumer is recreated, then ``on_resync`` is queued."""

    __slots__ = ("_engine", "_sub", "bucket", "dispatcher", "on_resync", "subject")

    def __init__(self, engine: NatsEngine, bucket: str, dispatcher: Dispatcher, on_resync: ResyncHandler | None):
        self._engine = engine
        self.bucket = bucket
        self.subject = bucket
        self.dispatcher = dispatcher
        self.on_resync = on_resync
        self._sub: Any = None

    async def start(self) -> None:
        engine = self._engine
        await engine._kv(self.bucket)  # the stream must exist before a consumer on it
        prefix = f"$KV.{engine._bucket_name(self.bucket)}."

        async def on_msg(msg: Msg) -> None:
            op = msg.headers.get(_KV_OP) if msg.headers else None
            value = None if op in ("DEL", "PURGE") else msg.data
            key = decode_key(msg.subject[len(prefix) :])
            self.dispatcher.put(KvChange(self.bucket, key, value, msg.metadata.sequence.stream))

        self._sub = await engine._jetstream().subscribe(
            prefix + ">",
            stream=f"KV_{engine._bucket_name(self.bucket)}",
            cb=on_msg,
            ordered_consumer=True,
            deliver_policy=api.DeliverPolicy.NEW,
            inactive_threshold=300.0,
        )
        # nats-py creates the consumer before it sends the SUB for its deliver subject: until the
        # server has that SUB, a change written from another connection can go undelivered, and the
        # ordered consumer only finds the gap at its next idle heartbeat, 5 s on
        await engine._settle(engine._client())

    async def restart(self) -> None:
        old, self._sub = self._sub, None
        if old is not None:
            with contextlib.suppress(Exception):
                await old.unsubscribe()
        await self.start()  # before the resync: a change between its reads and a later start would be missed
        if self.on_resync is not None:
            self.dispatcher.put(_RESYNC)

    async def unsubscribe(self) -> None:
        self._engine._watches.discard(self)
        old, self._sub = self._sub, None
        if old is not None:
            with contextlib.suppress(Exception):
                await old.unsubscribe()
        await self.dispatcher.stop()


_RESYNC = object()


class NatsEngine:
    """The :class:`~pyvia.cluster.base.Engine` on a NATS server with JetStream.

    ``storage`` is where JetStream keeps buckets: ``"file"`` (survives a server restart) or
    ``"memory"`` (faster writes, lost with the server). ``op_timeout`` bounds every key/value call.
    """

    name = "nats"

    def __init__(
        self,
        url: str = "nats://127.0.0.1:4222",
        *,
        prefix: str = "pyvia",
        storage: str = "file",
        backoff: Backoff | None = None,
        connect_timeout: float = 2.0,
        op_timeout: float = 2.0,
        ping_interval: float = 5.0,
    ) -> None:
        if storage not in ("file", "memory"):
            raise ValueError(f"storage must be 'file' or 'memory', got {storage!r}")
        self.url = url
        self.prefix = check_prefix(prefix)
        self.storage = api.StorageType.FILE if storage == "file" else api.StorageType.MEMORY
        self.backoff = backoff if backoff is not None else Backoff()
        self.connect_timeout = connect_timeout
        self.op_timeout = op_timeout
        self.ping_interval = ping_interval
        self._node_id = secrets.token_hex(8)
        self._nc: Client | None = None
        self._js: JetStreamContext | None = None
        self._buckets: dict[str, asyncio.Future[KeyValue]] = {}
        self._ttl: dict[str, float | None] = {}
        self._watches: set[_NatsWatch] = set()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._reconnects = 0
        self._last_error: str | None = None
        self._closed = False

    # --- connection --------------------------------------------------------------------------------

    @property
    def node_id(self) -> str:
        return self._node_id

    @property
    def is_connected(self) -> bool:
        return self._nc is not None and self._nc.is_connected

    def status(self) -> EngineStatus:
        return EngineStatus(
            "nats", redact_url(self.url), self.is_connected, self._node_id, self._reconnects, self._last_error
        )

    async def connect(self) -> None:
        if self._nc is not None:
            return
        try:
            nc = await nats.connect(
                servers=[self.url],
                name=f"pyvia-{self.prefix}-{self._node_id}",
                allow_reconnect=True,
                # two quick tries at start (nats-py would retry forever with -1), unlimited after
                max_reconnect_attempts=1,
                reconnect_time_wait=0.1,
                connect_timeout=self.connect_timeout,
                ping_interval=self.ping_interval,
                max_outstanding_pings=2,
                reconnect_to_server_handler=self._pick_server,
                disconnected_cb=self._on_disconnected,
                reconnected_cb=self._on_reconnected,
                error_cb=self._on_error,
                closed_cb=self._on_closed,
            )
        except Exception as exc:
            self._last_error = repr(exc)
            raise EngineUnavailable(f"cannot connect to NATS at {redact_url(self.url)}: {exc!r}") from exc
        nc.options["max_reconnect_attempts"] = -1
        self._nc = nc
        self._js = nc.jetstream(timeout=self.op_timeout)

    async def close(self) -> None:
        self._closed = True
        for watch in list(self._watches):
            await watch.unsubscribe()
        for task in list(self._tasks):
            task.cancel()
        nc, self._nc = self._nc, None
        if nc is not None:
            with contextlib.suppress(Exception):
                await nc.close()

    def _pick_server(self, servers: list[Any], info: dict[str, Any]) -> tuple[Any, float]:
        """nats-py asks which server to try next and how long to wait first: 1 s → 30 s."""
        return servers[0], self.backoff.next()

    async def _on_disconnected(self) -> None:
        if not self._closed:
            log.warning("NATS engine disconnected from %s; reconnecting", redact_url(self.url))

    async def _on_reconnected(self) -> None:
        self._reconnects += 1
        self.backoff.reset()
        log.info("NATS engine reconnected to %s", redact_url(self.url))
        # the server may have lost memory-storage buckets and every consumer: start them anew,
        # in a task (this callback runs inside nats-py's reconnect sequence)
        self._buckets.clear()
        self._spawn(self._restart_watches())

    async def _restart_watches(self) -> None:
        for watch in list(self._watches):
            try:
                await watch.restart()
            except Exception as exc:
                log.error("cannot restart the watch of bucket %r after a reconnect: %r", watch.bucket, exc)

    async def _on_error(self, exc: Exception) -> None:
        self._last_error = repr(exc)
        log.debug("NATS engine error: %r", exc)

    async def _on_closed(self) -> None:
        if not self._closed:
            log.error("NATS engine connection closed for good")

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _client(self) -> Client:
        nc = self._nc
        if nc is None or not nc.is_connected:
            state = "not connected" if nc is None else "reconnecting"
            raise EngineUnavailable(f"NATS engine is {state} ({redact_url(self.url)})")
        return nc

    def _jetstream(self) -> JetStreamContext:
        self._client()
        assert self._js is not None
        return self._js

    @contextlib.contextmanager
    def _unavailable(self, what: str) -> Iterator[None]:
        """Connection failures in the middle of a call become EngineUnavailable; a message over the
        server's ``max_payload`` an EngineError that says so."""
        try:
            yield
        except nats.errors.MaxPayloadError as exc:
            raise EngineError(f"NATS engine refused {what}: over the server's max_payload ({exc})") from exc
        except (
            nats.errors.ConnectionClosedError,
            nats.errors.ConnectionReconnectingError,
            nats.errors.TimeoutError,
            nats.errors.NoRespondersError,
            nats.errors.StaleConnectionError,
            nats.errors.ConnectionDrainingError,
            OSError,
            TimeoutError,
        ) as exc:
            self._last_error = repr(exc)
            raise EngineUnavailable(f"NATS engine failed during {what}: {exc!r}") from exc

    # --- key/value ---------------------------------------------------------------------------------

    def _bucket_name(self, bucket: str) -> str:
        return f"{self.prefix}_{bucket}"

    async def configure_bucket(self, bucket: str, *, ttl: float | None = None) -> None:
        self._ttl[check_bucket(bucket)] = ttl
        self._buckets.pop(bucket, None)
        await self._kv(bucket)

    async def _kv(self, bucket: str) -> KeyValue:
        found = self._buckets.get(bucket)
        if found is None or (found.done() and found.exception() is not None):
            check_bucket(bucket)
            found = self._buckets[bucket] = asyncio.get_running_loop().create_future()
            try:
                found.set_result(await self._open_bucket(bucket))
            except BaseException as exc:
                found.set_exception(exc)
                found.exception()  # retrieved: later callers retry instead of re-raising it
                del self._buckets[bucket]
                raise
        return await asyncio.shield(found)

    async def _open_bucket(self, bucket: str) -> KeyValue:
        js = self._jetstream()
        name = self._bucket_name(bucket)
        with self._unavailable(f"opening bucket {bucket!r}"):
            try:
                return await js.create_key_value(
                    bucket=name,
                    history=1,
                    storage=self.storage,
                    ttl=self._ttl.get(bucket),
                    direct=True,
                )
            except nats.js.errors.BadRequestError:  # exists with another configuration: use it as it is
                return await js.key_value(name)

    async def get(self, bucket: str, key: str) -> tuple[bytes | None, int]:
        self._client()  # disconnected: refuse at once instead of waiting for a timeout
        wire = encode_key(check_key(key))
        kv = await self._kv(bucket)
        with self._unavailable(f"get {bucket}/{key}"):
            try:
                entry = await kv.get(wire, validate_keys=False)
            except nats.js.errors.KeyNotFoundError as exc:
                # a deleted key: the marker's revision is what cas() must be given to create it again
                return None, (exc.entry.revision or 0) if exc.entry is not None else 0
        return entry.value or b"", entry.revision or 0

    async def put(self, bucket: str, key: str, value: bytes) -> int:
        self._client()  # disconnected: refuse at once instead of waiting for a timeout
        wire = encode_key(check_key(key))
        kv = await self._kv(bucket)
        with self._unavailable(f"put {bucket}/{key}"):
            return await kv.put(wire, bytes(value), validate_keys=False)

    async def cas(self, bucket: str, key: str, value: bytes, expected_revision: int) -> int | None:
        self._client()  # disconnected: refuse at once instead of waiting for a timeout
        wire = encode_key(check_key(key))
        kv = await self._kv(bucket)
        with self._unavailable(f"cas {bucket}/{key}"):
            try:
                return await kv.update(wire, bytes(value), last=expected_revision, validate_keys=False)
            except nats.js.errors.KeyWrongLastSequenceError:
                return None

    async def delete(self, bucket: str, key: str, expected_revision: int | None = None) -> bool:
        self._client()  # disconnected: refuse at once instead of waiting for a timeout
        wire = encode_key(check_key(key))
        kv = await self._kv(bucket)
        with self._unavailable(f"delete {bucket}/{key}"):
            if expected_revision is not None and expected_revision <= 0:
                value, revision = await self.get(bucket, key)  # nats-py sends no header for last=0
                return value is None and revision == expected_revision
            try:
                await kv.delete(wire, last=expected_revision, validate_keys=False)
            except nats.js.errors.APIError as exc:
                if exc.err_code in (10071, 10164):  # wrong last sequence
                    return False
                raise
        return True

    async def keys(self, bucket: str) -> list[str]:
        self._client()  # disconnected: refuse at once instead of waiting for a timeout
        kv = await self._kv(bucket)
        with self._unavailable(f"keys of {bucket}"):
            # Not ``kv.keys()``: it waits for its watcher's end-of-listing marker without a bound,
            # and a marker that never comes (a watch callback that timed out waiting for its
            # setup, on a loaded machine) hangs the caller for good. Here each key must come
            # within ``op_timeout``, or the call fails as any other timed-out call does.
            watcher = await kv.watchall(ignore_deletes=True, meta_only=True)
            try:
                keys: list[str] = []
                while (entry := await watcher.updates(timeout=self.op_timeout)) is not None:  # type: ignore[no-untyped-call]
                    keys.append(decode_key(entry.key))
                return keys
            finally:
                with contextlib.suppress(Exception):
                    await watcher.stop()  # type: ignore[no-untyped-call]

    async def increment(self, bucket: str, key: str, by: int = 1) -> int:
        return await cas_increment(self, bucket, key, check_int(by))

    async def mutate(self, bucket: str, key: str, fn: Callable[[bytes], bytes], default: bytes) -> bytes:
        return await cas_mutate(self, bucket, key, fn, default)

    async def watch(
        self, bucket: str, callback: ChangeHandler, *, on_resync: ResyncHandler | None = None
    ) -> _NatsWatch:
        check_bucket(bucket)

        async def deliver(item: object) -> None:
            if item is _RESYNC:
                if on_resync is not None:
                    await call_handler(on_resync)
            else:
                await call_handler(callback, item)

        watch = _NatsWatch(self, bucket, Dispatcher(deliver, f"watch {bucket}"), on_resync)
        try:
            with self._unavailable(f"watch {bucket}"):
                await watch.start()
        except BaseException:
            await watch.dispatcher.stop()
            raise
        self._watches.add(watch)
        return watch

    # --- messages ------------------------------------------------------------------------------------

    async def _settle(self, nc: Client) -> None:
        """Return once the server has the subscription just made: two PING/PONG round trips.

        nats-py 2.16's ``flush()`` writes its PING straight to the socket while the SUB still
        waits in the client's pending buffer, so one PONG can come back before the server saw
        the SUB: measured here, some of the messages published from another connection right
        after were lost (and requests got "no responders"). The first flush lets the flusher task
        write the SUB; the second PING goes out after it.
        """
        await nc.flush(timeout=self.op_timeout)  # type: ignore[arg-type]  # float seconds work
        await nc.flush(timeout=self.op_timeout)  # type: ignore[arg-type]

    def _subject(self, subject: str) -> str:
        return f"{self.prefix}.{subject}"

    async def publish(self, subject: str, payload: bytes) -> None:
        check_subject(subject)
        nc = self._client()
        with self._unavailable(f"publish {subject}"):
            await nc.publish(self._subject(subject), bytes(payload))

    async def subscribe(self, subject: str, callback: MessageHandler) -> _NatsSubscription:
        check_subject(subject, pattern=True)
        nc = self._client()
        cut = len(self.prefix) + 1

        async def on_msg(msg: Msg) -> None:
            try:
                await call_handler(callback, msg.subject[cut:], msg.data)
            except Exception:
                log.exception("callback for %s failed", subject)

        with self._unavailable(f"subscribe {subject}"):
            sub = await nc.subscribe(self._subject(subject), cb=on_msg)
            await self._settle(nc)
        return _NatsSubscription(self, subject, sub)

    async def request(self, subject: str, payload: bytes, timeout: float) -> bytes:
        check_subject(subject)
        nc = self._client()
        try:
            msg = await nc.request(self._subject(subject), bytes(payload), timeout=timeout)
        except nats.errors.NoRespondersError:
            raise NoResponders(f"nobody serves {subject!r}") from None
        except nats.errors.TimeoutError:
            raise RequestTimeout(f"no reply on {subject!r} within {timeout} s") from None
        except (nats.errors.ConnectionClosedError, nats.errors.ConnectionReconnectingError, OSError) as exc:
            raise EngineUnavailable(f"NATS engine failed during request {subject}: {exc!r}") from exc
        if msg.headers and _ERROR_HEADER in msg.headers:
            raise RemoteError(f"the handler of {subject!r} failed: {msg.data.decode(errors='replace')}")
        return msg.data

    async def serve(self, subject: str, handler: RequestHandler) -> _NatsSubscription:
        check_subject(subject)
        nc = self._client()

        async def answer(msg: Msg) -> None:
            try:
                reply = await call_handler(handler, msg.data)
                if not isinstance(reply, bytes):
                    raise TypeError(f"returned {type(reply).__name__}, not bytes")
            except Exception as exc:
                log.exception("handler of %s failed", subject)
                with contextlib.suppress(Exception):
                    await nc.publish(msg.reply, repr(exc).encode(), headers={_ERROR_HEADER: "1"})
                return
            try:
                await nc.publish(msg.reply, reply)
            except Exception as exc:  # the connection dropped: the requester times out
                log.warning("cannot answer a request on %s: %r", subject, exc)

        async def on_msg(msg: Msg) -> None:
            if msg.reply:
                self._spawn(answer(msg))  # handlers run side by side: one slow action blocks no other

        with self._unavailable(f"serve {subject}"):
            sub = await nc.subscribe(self._subject(subject), cb=on_msg)
            await self._settle(nc)
        return _NatsSubscription(self, subject, sub)
