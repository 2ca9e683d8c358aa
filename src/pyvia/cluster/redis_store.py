"""The Redis engine's key/value store: where a bucket's keys live and the Lua scripts that write them.

* a key ``k`` of bucket ``b`` (app prefix ``p``) is the hash ``p:{b}:k`` holding ``v`` (value) and
  ``r`` (revision); a revision comes from the bucket's counter ``p:{b}`` (``INCR``), so it never
  repeats for a key, even across a delete (no ABA). The ``{b}`` hash tag keeps a bucket in one
  Redis Cluster slot, as the scripts need;
* every write is one Lua script (atomic on the server, one round trip): ``put``, ``cas`` (compare
  ``r`` with the expected revision), ``delete``, and ``increment`` (``HINCRBY`` on ``v``: no
  retry loop at all). Each script also ``PUBLISH``es the change on ``p:kv:b`` in the same atomic
  step, so watchers see changes in revision order. Redis keyspace notifications are not used:
  they are off by default and carry no value or revision. ``mutate`` is a loop of get and the
  ``cas`` script, as WATCH/MULTI would need a connection per attempt.

It is its own module because this layout is one concept, shared by nothing else of the engine
but the change channel and its message format (:func:`parse_change`), which a watch reads.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import redis.asyncio as aioredis
import redis.exceptions

from pyvia.cluster.base import KvChange, cas_mutate, check_bucket, check_int, check_key
from pyvia.cluster.redis_connection import RedisConnection

__all__ = ["RedisStore", "parse_change"]

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


def parse_change(bucket: str, data: bytes) -> KvChange | None:
    """A change message as the scripts publish it: ``p<rev>\\n<key>\\n<value>`` or ``d<rev>\\n<key>\\n``."""
    head, _, rest = data.partition(b"\n")
    key, _, value = rest.partition(b"\n")
    try:
        revision = int(head[1:])
    except ValueError:
        log.warning("dropped a malformed change message of bucket %s", bucket)
        return None
    return KvChange(bucket, key.decode(), value if head[:1] == b"p" else None, revision)


class RedisStore:
    """The key/value half of :class:`~pyvia.cluster.redis.RedisEngine`, on its connection."""

    __slots__ = ("_conn", "_scripts", "_ttl_ms", "prefix")

    def __init__(self, prefix: str, conn: RedisConnection) -> None:
        self.prefix = prefix
        self._conn = conn
        self._ttl_ms: dict[str, str] = {}
        self._scripts: dict[str, Any] = {}

    def load(self, client: aioredis.Redis) -> None:
        """Register the scripts with a new client (no round trip: they load on first use)."""
        self._scripts = {
            name: client.register_script(src)
            for name, src in (("write", _WRITE), ("increment", _INCREMENT), ("delete", _DELETE))
        }

    def _keys(self, bucket: str, key: str) -> list[str]:
        return [f"{self.prefix}:{{{bucket}}}:{key}", f"{self.prefix}:{{{bucket}}}"]

    def channel(self, bucket: str) -> str:
        """The channel the scripts publish the bucket's changes on."""
        return f"{self.prefix}:kv:{bucket}"

    def configure_bucket(self, bucket: str, ttl: float | None) -> None:
        self._ttl_ms[check_bucket(bucket)] = str(max(1, round(ttl * 1000))) if ttl else "0"

    async def get(self, bucket: str, key: str) -> tuple[bytes | None, int]:
        check_bucket(bucket)
        check_key(key)
        client = self._conn.client()
        with self._conn.unavailable(f"get {bucket}/{key}"):
            value, revision = await client.hmget(self._keys(bucket, key)[0], ["v", "r"])
        if value is None:
            return None, 0
        return (value if isinstance(value, bytes) else value.encode()), int(revision or 0)

    async def _write(self, bucket: str, key: str, value: bytes, expected: str) -> int | None:
        check_bucket(bucket)
        check_key(key)
        client = self._conn.client()
        args = [bytes(value), expected, self._ttl_ms.get(bucket, "0"), self.channel(bucket), key]
        with self._conn.unavailable(f"write {bucket}/{key}"):
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
        client = self._conn.client()
        expected = "" if expected_revision is None else str(int(expected_revision))
        with self._conn.unavailable(f"delete {bucket}/{key}"):
            result = await self._scripts["delete"](
                keys=self._keys(bucket, key), args=[expected, self.channel(bucket), key], client=client
            )
        return bool(result)

    async def keys(self, bucket: str) -> list[str]:
        check_bucket(bucket)
        client = self._conn.client()
        head = f"{self.prefix}:{{{bucket}}}:"
        found: list[str] = []
        with self._conn.unavailable(f"keys of {bucket}"):
            async for name in client.scan_iter(match=head + "*", count=1000):
                text = name.decode() if isinstance(name, bytes) else name
                found.append(text[len(head) :])
        return found

    async def increment(self, bucket: str, key: str, by: int = 1) -> int:
        check_bucket(bucket)
        check_key(key)
        client = self._conn.client()
        args = [check_int(by), self._ttl_ms.get(bucket, "0"), self.channel(bucket), key]
        try:
            with self._conn.unavailable(f"increment {bucket}/{key}"):
                return int(await self._scripts["increment"](keys=self._keys(bucket, key), args=args, client=client))
        except redis.exceptions.ResponseError as exc:
            if "not an integer" in str(exc) or "overflow" in str(exc):
                raise TypeError(f"increment() needs an integer; {bucket}/{key} holds something else") from None
            raise

    async def mutate(self, bucket: str, key: str, fn: Callable[[bytes], bytes], default: bytes) -> bytes:
        return await cas_mutate(self, bucket, key, fn, default)
