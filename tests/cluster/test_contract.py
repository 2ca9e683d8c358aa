"""The engine contract (pyvia.cluster.base), checked on memory, NATS and Redis alike."""

from __future__ import annotations

import asyncio

import orjson
import pytest

from pyvia.cluster import (
    Engine,
    EngineUnavailable,
    InvalidName,
    KvChange,
    NoResponders,
    RemoteError,
    RequestTimeout,
)
from tests.cluster.conftest import Backend, eventually, run

# --- key/value ------------------------------------------------------------------------------------


def test_a_missing_key_reads_as_none_with_a_revision_that_creates_it(backend: Backend) -> None:
    async def scenario() -> None:
        async with backend.open() as (engine,):
            value, revision = await engine.get("state", "room:lobby")
            assert value is None
            created = await engine.cas("state", "room:lobby", b"1", revision)
            assert created is not None and created > revision
            assert await engine.get("state", "room:lobby") == (b"1", created)

    run(scenario())


def test_put_returns_a_new_revision_each_time_and_get_reads_the_last(backend: Backend) -> None:
    async def scenario() -> None:
        async with backend.open(2) as (a, b):
            first = await a.put("state", "k", b"one")
            second = await b.put("state", "k", b"two")
            assert second > first
            assert await a.get("state", "k") == (b"two", second)
            assert await b.get("state", "k") == (b"two", second)
            assert await a.put("state", "empty", b"") > 0
            assert (await b.get("state", "empty"))[0] == b""

    run(scenario())


def test_cas_with_a_stale_revision_is_refused_and_changes_nothing(backend: Backend) -> None:
    async def scenario() -> None:
        async with backend.open(2) as (a, b):
            start = await a.put("state", "k", b"start")
            moved = await b.cas("state", "k", b"b wins", start)
            assert moved is not None
            assert await a.cas("state", "k", b"a is late", start) is None
            assert await a.get("state", "k") == (b"b wins", moved)
            assert await a.cas("state", "k", b"not absent", 0) is None  # 0 only creates

    run(scenario())


def test_delete_honours_the_expected_revision_and_a_key_can_be_created_again(backend: Backend) -> None:
    async def scenario() -> None:
        async with backend.open() as (engine,):
            revision = await engine.put("state", "k", b"v")
            assert await engine.delete("state", "k", revision + 1000) is False
            assert (await engine.get("state", "k"))[0] == b"v"
            assert await engine.delete("state", "k", revision) is True
            assert await engine.delete("state", "k") is True  # deleting nothing is fine
            value, gone = await engine.get("state", "k")
            assert value is None
            again = await engine.cas("state", "k", b"again", gone)
            assert again is not None and again > revision
            assert await engine.get("state", "k") == (b"again", again)

    run(scenario())


def test_a_revision_from_before_a_delete_never_matches_again(backend: Backend) -> None:
    async def scenario() -> None:
        async with backend.open() as (engine,):
            old = await engine.put("state", "k", b"first life")
            await engine.delete("state", "k")
            _, revision = await engine.get("state", "k")
            await engine.cas("state", "k", b"second life", revision)
            assert await engine.cas("state", "k", b"stale writer", old) is None  # no ABA

    run(scenario())


def test_keys_lists_the_live_keys_of_one_bucket(backend: Backend) -> None:
    async def scenario() -> None:
        async with backend.open() as (engine,):
            assert await engine.keys("directory") == []
            for key in ("route:/items/{id}", "session:ab", "c.d=e"):
                await engine.put("directory", key, b"x")
            await engine.put("other", "elsewhere", b"x")
            await engine.delete("directory", "session:ab")
            assert sorted(await engine.keys("directory")) == ["c.d=e", "route:/items/{id}"]

    run(scenario())


def test_unusual_keys_round_trip(backend: Backend) -> None:
    keys = ["route:/items/{id}", "a=3Ab", "x.y..z", "café:☕", "*", ">", "%41", "a/b/c", "-_-"]

    async def scenario() -> None:
        async with backend.open() as (engine,):
            for i, key in enumerate(keys):
                await engine.put("odd", key, str(i).encode())
            for i, key in enumerate(keys):
                assert (await engine.get("odd", key))[0] == str(i).encode(), key
            assert sorted(await engine.keys("odd")) == sorted(keys)

    run(scenario())


def test_increment_from_8_concurrent_tasks_on_two_engines_loses_nothing(backend: Backend) -> None:
    async def scenario() -> None:
        async with backend.open(2) as engines:

            async def bump(engine: Engine) -> list[int]:
                return [await engine.increment("race", "count") for _ in range(25)]

            results = await asyncio.gather(*(bump(engines[i % 2]) for i in range(8)))
            seen = sorted(n for r in results for n in r)
            assert seen == list(range(1, 201))  # every increment saw its own total
            value, _ = await engines[0].get("race", "count")
            assert value is not None and orjson.loads(value) == 200
            assert await engines[1].increment("race", "count", -50) == 150

    run(scenario())


def test_increment_of_a_value_that_is_no_integer_raises_type_error(backend: Backend) -> None:
    async def scenario() -> None:
        async with backend.open() as (engine,):
            await engine.put("state", "name", b'"ada"')
            with pytest.raises(TypeError):
                await engine.increment("state", "name")
            assert (await engine.get("state", "name"))[0] == b'"ada"'
            with pytest.raises(TypeError):
                await engine.increment("state", "n", 1.5)  # type: ignore[arg-type]  # the misuse under test

    run(scenario())


def test_mutate_from_concurrent_tasks_keeps_every_append(backend: Backend) -> None:
    def append(item: str):  # type: ignore[no-untyped-def]
        return lambda raw: orjson.dumps([*orjson.loads(raw), item])

    async def scenario() -> None:
        async with backend.open(2) as engines:

            async def writer(n: int) -> None:
                for i in range(10):
                    await engines[n % 2].mutate("race", "list", append(f"{n}-{i}"), b"[]")

            await asyncio.gather(*(writer(n) for n in range(6)))
            value, _ = await engines[0].get("race", "list")
            assert value is not None
            items = orjson.loads(value)
            assert sorted(items) == sorted(f"{n}-{i}" for n in range(6) for i in range(10))
            for n in range(6):  # each writer's appends stay in its own order
                assert [x for x in items if x.startswith(f"{n}-")] == [f"{n}-{i}" for i in range(10)]

    run(scenario())


def test_mutate_gets_the_default_for_a_missing_key_and_must_return_bytes(backend: Backend) -> None:
    async def scenario() -> None:
        async with backend.open() as (engine,):
            assert await engine.mutate("state", "fresh", lambda raw: raw + b"!", b"default") == b"default!"
            with pytest.raises(TypeError):
                await engine.mutate("state", "fresh", lambda raw: "text", b"")  # type: ignore[arg-type, return-value]

    run(scenario())


def test_a_bucket_with_a_ttl_forgets_entries(backend: Backend) -> None:
    async def scenario() -> None:
        async with backend.open() as (engine,):
            await engine.configure_bucket("directory", ttl=1.0)
            await engine.put("directory", "ctx", b"home")
            assert (await engine.get("directory", "ctx"))[0] == b"home"
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 5.0
            while (await engine.get("directory", "ctx"))[0] is not None:
                assert loop.time() < deadline, "the entry did not expire"
                await asyncio.sleep(0.1)

    run(scenario(), timeout=15)


# --- watches ------------------------------------------------------------------------------------


def test_a_watch_sees_every_later_change_in_order_including_deletes(backend: Backend) -> None:
    async def scenario() -> None:
        async with backend.open(2) as (watcher, writer):
            await writer.put("scopes", "before", b"not seen")
            seen: list[KvChange] = []
            sub = await watcher.watch("scopes", seen.append)
            await writer.put("scopes", "room:lobby", b"1")
            await writer.increment("scopes", "count", 5)
            revision = await writer.put("scopes", "room:lobby", b"2")
            await writer.delete("scopes", "room:lobby")
            await watcher.put("scopes", "own", b"mine")  # the watcher's own writes come too
            await writer.put("other-bucket", "x", b"not seen")
            await eventually(lambda: len(seen) >= 5, what="five changes")
            assert [(c.key, c.value) for c in seen] == [
                ("room:lobby", b"1"),
                ("count", b"5"),
                ("room:lobby", b"2"),
                ("room:lobby", None),
                ("own", b"mine"),
            ]
            assert all(c.bucket == "scopes" for c in seen)
            assert seen[2].revision == revision
            assert [c.revision for c in seen] == sorted(c.revision for c in seen)
            await sub.unsubscribe()
            await writer.put("scopes", "after", b"not seen")
            await asyncio.sleep(0.1)
            assert len(seen) == 5

    run(scenario())


# --- pub/sub ------------------------------------------------------------------------------------


def test_subscribers_get_messages_in_order_with_wildcards(backend: Backend) -> None:
    async def scenario() -> None:
        async with backend.open(2) as (sub, pub):
            exact: list[tuple[str, bytes]] = []
            star: list[tuple[str, bytes]] = []
            rest: list[tuple[str, bytes]] = []
            await sub.subscribe("bcast.room", lambda s, p: exact.append((s, p)))
            await sub.subscribe("bcast.*", lambda s, p: star.append((s, p)))
            await sub.subscribe("bcast.>", lambda s, p: rest.append((s, p)))
            for i in range(20):
                await pub.publish("bcast.room", str(i).encode())
            await pub.publish("bcast.room.deep", b"deep")
            await pub.publish("bcastx.room", b"other subject")
            await pub.publish("bcast", b"too short for a wildcard")
            await eventually(lambda: len(exact) == 20 and len(star) == 20 and len(rest) == 21, what="all messages")
            assert exact == [("bcast.room", str(i).encode()) for i in range(20)]
            assert star == exact
            assert rest == [*exact, ("bcast.room.deep", b"deep")]

    run(scenario())


def test_a_failing_callback_does_not_end_its_subscription(backend: Backend) -> None:
    async def scenario() -> None:
        async with backend.open() as (engine,):
            got: list[bytes] = []

            async def flaky(subject: str, payload: bytes) -> None:
                if payload == b"boom":
                    raise RuntimeError("subscriber bug")
                got.append(payload)

            await engine.subscribe("events", flaky)
            for payload in (b"a", b"boom", b"b"):
                await engine.publish("events", payload)
            await eventually(lambda: got == [b"a", b"b"], what="the messages after the failure")

    run(scenario())


def test_unsubscribe_stops_delivery_and_publishing_to_nobody_is_fine(backend: Backend) -> None:
    async def scenario() -> None:
        async with backend.open() as (engine,):
            got: list[bytes] = []
            sub = await engine.subscribe("events", lambda s, p: got.append(p))
            await engine.publish("events", b"1")
            await eventually(lambda: got == [b"1"])
            await sub.unsubscribe()
            await sub.unsubscribe()
            await engine.publish("events", b"2")
            await engine.publish("nobody.listens", b"x")
            await asyncio.sleep(0.1)
            assert got == [b"1"]

    run(scenario())


# --- request/reply ------------------------------------------------------------------------------


def test_request_reaches_the_server_of_a_subject_and_returns_its_reply(backend: Backend) -> None:
    async def scenario() -> None:
        async with backend.open(2) as (caller, owner):

            async def handle(payload: bytes) -> bytes:
                return b"handled " + payload

            await owner.serve(f"fwd.{owner.node_id}", handle)
            assert await caller.request(f"fwd.{owner.node_id}", b"action", 2.0) == b"handled action"
            # side by side: a slow request does not hold up a quick one
            gate = asyncio.Event()

            async def slow_or_quick(payload: bytes) -> bytes:
                if payload == b"slow":
                    await gate.wait()
                return payload

            await owner.serve("svc", slow_or_quick)
            slow = asyncio.ensure_future(caller.request("svc", b"slow", 5.0))
            assert await caller.request("svc", b"quick", 2.0) == b"quick"
            gate.set()
            assert await slow == b"slow"

    run(scenario())


def test_request_to_a_subject_nobody_serves_fails_at_once(backend: Backend) -> None:
    async def scenario() -> None:
        async with backend.open() as (engine,):
            loop = asyncio.get_running_loop()
            started = loop.time()
            with pytest.raises(NoResponders):
                await engine.request("fwd.gone", b"x", 5.0)
            assert loop.time() - started < 1.0

    run(scenario())


def test_request_times_out_when_the_handler_does_not_answer_in_time(backend: Backend) -> None:
    async def scenario() -> None:
        async with backend.open(2) as (caller, owner):

            async def stuck(payload: bytes) -> bytes:
                await asyncio.sleep(5)
                return payload

            await owner.serve("stuck", stuck)
            loop = asyncio.get_running_loop()
            started = loop.time()
            with pytest.raises(RequestTimeout):
                await caller.request("stuck", b"x", 0.3)
            assert 0.25 < loop.time() - started < 2.0

    run(scenario())


def test_a_failing_handler_answers_with_remote_error(backend: Backend) -> None:
    async def scenario() -> None:
        async with backend.open(2) as (caller, owner):

            def broken(payload: bytes) -> bytes:
                raise ValueError("no such context")

            await owner.serve("broken", broken)
            with pytest.raises(RemoteError, match="no such context"):
                await caller.request("broken", b"x", 2.0)

    run(scenario())


# --- names and state ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "args"),
    [
        ("get", ("bad bucket", "k")),
        ("get", ("b.c", "k")),
        ("get", ("b", "")),
        ("get", ("b", "has space")),
        ("get", ("b", "new\nline")),
        ("get", ("b", "x" * 1025)),
        ("publish", ("a..b", b"")),
        ("publish", ("a.*", b"")),
        ("publish", ("room:lobby", b"")),
        ("subscribe", ("a.>.b", print)),
        ("subscribe", ("", print)),
    ],
)
def test_bad_names_are_refused_before_anything_is_sent(backend: Backend, call: str, args: tuple[object, ...]) -> None:
    async def scenario() -> None:
        async with backend.open() as (engine,):
            with pytest.raises(InvalidName):
                await getattr(engine, call)(*args)

    run(scenario())


def test_an_engine_is_unusable_before_connect_and_after_close(backend: Backend) -> None:
    async def scenario() -> None:
        engine = backend.engine()
        assert not engine.is_connected
        with pytest.raises(EngineUnavailable):
            await engine.get("state", "k")
        await engine.connect()
        assert engine.is_connected
        status = engine.status()
        assert (status.engine, status.connected, status.node_id) == (backend.kind, True, engine.node_id)
        await engine.close()
        assert not engine.is_connected
        with pytest.raises(EngineUnavailable):
            await engine.publish("x", b"")

    run(scenario())


def test_engines_are_told_apart_by_node_id(backend: Backend) -> None:
    async def scenario() -> None:
        async with backend.open(2) as (a, b):
            assert a.node_id != b.node_id
            assert len(a.node_id) == 16

    run(scenario())
