"""A worker's read copy of a bucket: read once, then kept fresh by change messages."""

from __future__ import annotations

from pyvia.cluster import Replica
from tests.cluster.conftest import Backend, eventually, run


def test_a_replica_reads_once_then_follows_changes_from_other_workers(backend: Backend) -> None:
    async def scenario() -> None:
        async with backend.open(2) as (mine, other):
            changed: list[tuple[str, bytes | None]] = []
            replica = Replica(mine, "scopes", on_change=lambda key, value: changed.append((key, value)))
            await replica.start()
            await other.put("scopes", "room:lobby", b"1")
            assert await replica.get("room:lobby") == b"1"
            assert await replica.get("room:absent") is None
            await other.increment("scopes", "room:lobby", 1)
            await other.put("scopes", "not-read-here", b"x")
            await other.delete("scopes", "room:absent")
            await other.put("scopes", "room:absent", b"now here")
            await eventually(
                lambda: changed == [("room:lobby", b"2"), ("room:absent", b"now here")],
                what="the changes of the keys read here",
            )
            assert replica.peek("not-read-here") is None
            held = replica.peek("room:lobby")
            assert held is not None and held[0] == b"2"
            assert not replica.remember("room:lobby", b"stale", held[1] - 1)  # never backwards
            assert await replica.get("room:lobby") == b"2"
            await replica.stop()

    run(scenario())


def test_a_resync_drops_the_copy(backend: Backend) -> None:
    async def scenario() -> None:
        async with backend.open() as (engine,):
            resynced: list[bool] = []
            replica = Replica(engine, "scopes", on_resync=lambda: resynced.append(True))
            await replica.start()
            await engine.put("scopes", "k", b"v")
            assert await replica.get("k") == b"v"
            replica._resync()  # what the engine calls after a reconnect
            assert replica.peek("k") is None and resynced == [True]
            await replica.stop()

    run(scenario())


def test_what_an_increment_left_is_held_unless_a_change_came_meanwhile(backend: Backend) -> None:
    """An increment tells its value, not its revision: held at the revision read before it, it
    stands in for the older value until a change comes; it never replaces a change that came
    while it ran (which may be newer)."""

    async def scenario() -> None:
        async with backend.open(2) as (mine, other):
            replica = Replica(mine, "scopes")
            await replica.start()
            await other.put("scopes", "room:lobby", b"1")
            assert await replica.get("room:lobby") == b"1"
            since = replica.revision_of("room:lobby")
            assert since is not None
            assert replica.assume("room:lobby", b"2", since)  # as if the increment's answer came first
            assert replica.peek("room:lobby") == (b"2", since)
            await other.put("scopes", "room:lobby", b"7")
            await eventually(
                lambda: (
                    replica.peek("room:lobby") == (b"7", replica.revision_of("room:lobby"))
                    and replica.revision_of("room:lobby") != since
                ),
                what="a newer change",
            )
            assert not replica.assume("room:lobby", b"3", since)  # too late: a change came since
            assert (replica.peek("room:lobby") or (b"", 0))[0] == b"7"
            replica.assume("room:absent", b"9", None)  # a key not read here stays unread
            assert replica.peek("room:absent") is None
            await replica.stop()

    run(scenario())
