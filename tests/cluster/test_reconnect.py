"""A broker outage is visible and temporary: the engine reports it, refuses work at once, and
comes back by itself when the server does (DESIGN.md, "Multi-worker and multi-node")."""

from __future__ import annotations

import asyncio
import secrets

import pytest

from pyvia.cluster import EngineUnavailable, KvChange, create_engine
from pyvia.cluster.nats import NatsEngine
from pyvia.cluster.nats_server import LocalNats
from tests.cluster.conftest import eventually, run
from tests.cluster.servers import RedisServer


@pytest.mark.parametrize("kind", ["nats", "redis"])
def test_the_engine_reconnects_after_the_server_restarts_on_the_same_port(kind: str) -> None:
    server: LocalNats | RedisServer = LocalNats() if kind == "nats" else RedisServer()
    url = server.start()

    async def scenario() -> None:
        engine = create_engine(url, prefix="restart")
        await engine.connect()
        owner = create_engine(url, prefix="restart")
        await owner.connect()
        try:
            messages: list[bytes] = []
            changes: list[KvChange] = []
            resyncs: list[str] = []
            await engine.subscribe("bcast.*", lambda subject, payload: messages.append(payload))
            await engine.watch("scopes", changes.append, on_resync=lambda: resyncs.append("resync"))
            await owner.serve("fwd.owner", lambda payload: b"ok " + payload)
            await engine.put("scopes", "room:lobby", b"1")
            await eventually(lambda: len(changes) == 1, what="the first change")

            server.stop()
            await eventually(lambda: not engine.is_connected, timeout=10, what="is_connected going false")
            assert not engine.status().connected
            loop = asyncio.get_running_loop()
            started = loop.time()
            with pytest.raises(EngineUnavailable):
                await engine.get("scopes", "room:lobby")
            with pytest.raises(EngineUnavailable):
                await engine.publish("bcast.x", b"lost")
            assert loop.time() - started < 0.5  # refused at once, not after a timeout

            server.start()  # same port
            await eventually(
                lambda: engine.is_connected and owner.is_connected, timeout=15, what="is_connected going true again"
            )
            # nats-py reports connected before it runs the reconnected callback that counts it
            await eventually(lambda: engine.status().reconnects >= 1, timeout=5, what="the reconnect counted")
            assert engine.status().reconnects == 1
            await eventually(lambda: resyncs == ["resync"], what="the watch's resync")

            await owner.publish("bcast.room", b"after")  # subscriptions were renewed
            await eventually(lambda: messages == [b"after"], what="a message after the restart")
            await owner.put("scopes", "room:lobby", b"2")  # and so was the watch
            await eventually(lambda: [c.value for c in changes] == [b"1", b"2"], what="a change after the restart")
            assert await engine.request("fwd.owner", b"action", 2.0) == b"ok action"
            assert await engine.increment("scopes", "count") == 1
        finally:
            await engine.close()
            await owner.close()

    try:
        run(scenario(), timeout=40)
    finally:
        server.close()


class _Deaf(asyncio.Queue[object]):
    """A queue that drops what is put in it."""

    async def put(self, item: object) -> None:
        return None

    def put_nowait(self, item: object) -> None:
        return None


def test_a_key_listing_whose_end_never_comes_fails_within_the_op_timeout(
    nats_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """nats-py's ``kv.keys()`` waits for its watcher's end-of-listing marker without a bound; one
    that never came hung the directory's sweep for good, and a killed worker's entries stayed."""
    from nats.js.kv import KeyValue

    listen = KeyValue.watchall

    async def silent_watchall(self: KeyValue, **kwargs: object) -> KeyValue.KeyWatcher:
        watcher = await listen(self, **kwargs)  # type: ignore[arg-type]
        watcher._updates = _Deaf()  # nothing arrives: neither a key nor the end marker
        return watcher

    async def scenario() -> None:
        engine = NatsEngine(nats_url, prefix="listing" + secrets.token_hex(4), op_timeout=0.5)
        await engine.connect()
        try:
            await engine.put("directory", "a", b"x")
            assert await engine.keys("directory") == ["a"]
            monkeypatch.setattr(KeyValue, "watchall", silent_watchall)
            started = asyncio.get_running_loop().time()
            with pytest.raises(EngineUnavailable):  # (a hang would end in TimeoutError here)
                await asyncio.wait_for(engine.keys("directory"), 5)
            assert asyncio.get_running_loop().time() - started < 2.0
            monkeypatch.undo()
            assert await engine.keys("directory") == ["a"]  # the engine still works
        finally:
            await engine.close()

    run(scenario())
