"""The database API, the same test functions on SQLite and on a real PostgreSQL."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

from pyvia.db import Database
from pyvia.errors import DatabaseError, IntegrityError, PoolTimeout, UsageError
from tests.db.conftest import Backend, run

SCHEMA = "CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, qty INTEGER NOT NULL DEFAULT 0)"


async def with_items(db: Database) -> None:
    await db.execute(SCHEMA)
    await db.executemany(
        "INSERT INTO items (id, name, qty) VALUES ($1, $2, $3)", [(1, "apple", 3), (2, "pear", 0), (3, "plum", 7)]
    )


def test_create_read_update_delete(backend: Backend) -> None:
    async def scenario() -> None:
        db = backend.database()
        try:
            await with_items(db)
            rows = await db.fetch("SELECT id, name, qty FROM items WHERE qty > $1 ORDER BY id", 0)
            assert [dict(r) for r in rows] == [
                {"id": 1, "name": "apple", "qty": 3},
                {"id": 3, "name": "plum", "qty": 7},
            ]
            row = await db.fetchrow("SELECT name, qty FROM items WHERE id = $1", 3)
            assert (row["name"], row[1]) == ("plum", 7)
            assert await db.fetchrow("SELECT name FROM items WHERE id = $1", 99) is None
            assert await db.fetchval("SELECT count(*) FROM items") == 3
            assert await db.fetchval("SELECT name FROM items WHERE id = $1", 99) is None
            assert await db.execute("UPDATE items SET qty = qty + $1 WHERE qty < $2", 10, 5) == 2
            assert await db.execute("DELETE FROM items WHERE name = $1", "pear") == 1
            rows = await db.fetch("SELECT name, qty FROM items ORDER BY id")
            assert [tuple(r) for r in rows] == [("apple", 13), ("plum", 7)]
            # a parameter is bound, never formatted: quotes and "$1" inside a literal stay text
            await db.execute("INSERT INTO items (id, name) VALUES ($1, $2)", 4, "o'hara; DROP TABLE items")
            assert (
                await db.fetchval("SELECT name FROM items WHERE id = $1 AND name <> '$1'", 4)
                == "o'hara; DROP TABLE items"
            )
        finally:
            await db.close()

    run(scenario())


def test_constraint_violations_raise_integrity_error_on_both(backend: Backend) -> None:
    async def scenario() -> None:
        db = backend.database()
        try:
            await with_items(db)
            with pytest.raises(IntegrityError, match=r"(UNIQUE|unique).*\(in: INSERT INTO items"):
                await db.execute("INSERT INTO items (id, name) VALUES ($1, $2)", 9, "apple")
            with pytest.raises(DatabaseError, match="no_such_table"):
                await db.fetch("SELECT * FROM no_such_table")
            assert db.stats()["write"]["errors"] == 1 and db.stats()["read"]["errors"] == 1
            assert await db.fetchval("SELECT count(*) FROM items") == 3  # still usable afterwards
        finally:
            await db.close()

    run(scenario())


def test_fifty_concurrent_write_transactions_all_commit(backend: Backend) -> None:
    """Never "database is locked": the write permit queues SQLite's writers in the process."""

    async def scenario() -> None:
        db = backend.database()
        try:
            await db.execute("CREATE TABLE counter (n INTEGER NOT NULL)")
            await db.execute("CREATE TABLE log (writer INTEGER PRIMARY KEY)")
            await db.execute("INSERT INTO counter VALUES (0)")

            async def writer(i: int) -> None:
                async with db.transaction() as tx:
                    await tx.execute("INSERT INTO log (writer) VALUES ($1)", i)
                    await asyncio.sleep(0)  # let the others pile up behind this transaction
                    await tx.execute("UPDATE counter SET n = n + 1")

            await asyncio.gather(*(writer(i) for i in range(50)))
            assert await db.fetchval("SELECT n FROM counter") == 50
            assert [r[0] for r in await db.fetch("SELECT writer FROM log ORDER BY writer")] == list(range(50))
            assert db.stats()["write"]["errors"] == 0
        finally:
            await db.close()

    run(scenario())


def test_sqlite_read_then_write_transactions_lose_no_update(tmp_path: object) -> None:
    """A transaction that reads, then writes what it read, is serialised whole by the permit
    (no lost update, no SQLITE_BUSY upgrading a read lock)."""
    from pyvia.db import connect

    async def scenario() -> None:
        db = connect(f"sqlite:///{tmp_path}/rmw.db")
        db.open()
        try:
            await db.execute("CREATE TABLE counter (n INTEGER NOT NULL)")
            await db.execute("INSERT INTO counter VALUES (0)")

            async def bump() -> None:
                async with db.transaction() as tx:
                    n = await tx.fetchval("SELECT n FROM counter")
                    await asyncio.sleep(0)
                    await tx.execute("UPDATE counter SET n = $1", n + 1)

            await asyncio.gather(*(bump() for _ in range(50)))
            assert await db.fetchval("SELECT n FROM counter") == 50
        finally:
            await db.close()

    run(scenario())


def test_readers_run_while_a_write_transaction_is_open(backend: Backend) -> None:
    async def scenario() -> None:
        db = backend.database()
        try:
            await with_items(db)
            inside = asyncio.Event()
            release = asyncio.Event()

            async def reader() -> list[int]:
                await inside.wait()
                seen = [await db.fetchval("SELECT count(*) FROM items") for _ in range(3)]
                release.set()
                return seen

            reading = asyncio.create_task(reader())  # made outside the transaction: not part of it

            async with db.transaction() as tx:
                await tx.execute("INSERT INTO items (id, name) VALUES ($1, $2)", 10, "kiwi")
                assert await db.fetchval("SELECT count(*) FROM items") == 4  # this task reads its own write
                inside.set()
                await asyncio.wait_for(release.wait(), 10)  # the reader finished while we hold the writer
            assert await reading == [3, 3, 3]  # it read the last committed state
            assert await db.fetchval("SELECT count(*) FROM items") == 4
        finally:
            await db.close()

    run(scenario())


def test_an_exception_rolls_the_transaction_back(backend: Backend) -> None:
    async def scenario() -> None:
        db = backend.database()
        try:
            await with_items(db)
            with pytest.raises(RuntimeError, match="changed my mind"):
                async with db.transaction() as tx:
                    await tx.execute("DELETE FROM items")
                    assert await tx.fetchval("SELECT count(*) FROM items") == 0
                    raise RuntimeError("changed my mind")
            assert await db.fetchval("SELECT count(*) FROM items") == 3

            async with db.transaction() as tx:  # a nested block is a savepoint
                await tx.execute("UPDATE items SET qty = 100 WHERE id = 1")
                with pytest.raises(IntegrityError):
                    async with db.transaction() as inner:
                        await inner.execute("UPDATE items SET qty = 200 WHERE id = 3")
                        await inner.execute("INSERT INTO items (id, name) VALUES ($1, $2)", 5, "apple")
                await db.execute("UPDATE items SET qty = 300 WHERE id = 2")  # db.* in the block joins it
            assert [tuple(r) for r in await db.fetch("SELECT id, qty FROM items ORDER BY id")] == [
                (1, 100),
                (2, 300),
                (3, 7),
            ]
            with pytest.raises(UsageError, match="has ended"):
                await tx.execute("DELETE FROM items")
        finally:
            await db.close()

    run(scenario())


def test_transaction_statements_are_refused_outside_the_helper(backend: Backend) -> None:
    async def scenario() -> None:
        db = backend.database()
        try:
            for sql in (
                "BEGIN",
                "begin immediate",
                "COMMIT",
                "END",
                "ROLLBACK",
                " /* x */ SAVEPOINT a",
                "RELEASE a",
                "START TRANSACTION",
            ):
                with pytest.raises(UsageError, match=r"async with db.transaction\(\)"):
                    await db.execute(sql)
            assert await db.fetchval("SELECT 1") == 1
        finally:
            await db.close()

    run(scenario())


def test_a_full_pool_queues_then_times_out_with_a_clear_error(backend: Backend) -> None:
    """SQLite has one write permit; PostgreSQL ``pool_size`` connections. Past them a caller
    waits ``timeout`` and is told why; once they are free, everything works again."""

    async def scenario() -> None:
        db = backend.database(pool_size=2, timeout=0.3)
        try:
            await db.execute("CREATE TABLE t (x INTEGER)")
            held = 1 if backend.kind == "sqlite" else 2
            entered = asyncio.Semaphore(0)
            done = asyncio.Event()

            async def hold() -> None:
                async with db.transaction() as tx:
                    await tx.execute("INSERT INTO t VALUES (1)")
                    entered.release()
                    await done.wait()

            holders = [asyncio.create_task(hold()) for _ in range(held)]
            for _ in range(held):
                await entered.acquire()
            message = "write permit stayed taken" if backend.kind == "sqlite" else "PostgreSQL connections stayed busy"
            with pytest.raises(PoolTimeout, match=message):
                await db.execute("INSERT INTO t VALUES (2)")
            queued = asyncio.create_task(db.execute("INSERT INTO t VALUES (3)"))  # waits, then gets in
            await asyncio.sleep(0.05)
            done.set()
            await asyncio.gather(*holders)
            assert await queued == 1
            assert sorted(r[0] for r in await db.fetch("SELECT x FROM t")) == [1] * held + [3]
            assert db.metrics.db_pool_timeouts.value == 1
        finally:
            await db.close()

    run(scenario())


def test_a_broken_connection_is_never_handed_out_again(backend: Backend) -> None:
    async def scenario() -> None:
        db = backend.database(pool_size=2)
        try:
            await with_items(db)
            assert [await db.fetchval("SELECT count(*) FROM items") for _ in range(4)] == [3] * 4
            if backend.kind == "sqlite":
                for conn in list(db._idle):  # type: ignore[attr-defined]  # break the idle readers
                    conn.close()
            else:
                admin = await asyncpg.connect(backend.url)
                try:
                    await admin.execute(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                        "WHERE datname = current_database() AND pid <> pg_backend_pid()"
                    )
                finally:
                    await admin.close()
            # every read succeeds: a broken connection is replaced, the read run again on a fresh one
            assert [await db.fetchval("SELECT count(*) FROM items") for _ in range(6)] == [3] * 6
            assert await db.execute("UPDATE items SET qty = 0") == 3
            if backend.kind == "sqlite":
                assert db.pool_stats()["discarded"] == 2  # both broken readers, closed, not reused
            pool = db.pool_stats()
            assert 1 <= pool["idle"] <= pool["open"] <= 3
        finally:
            await db.close()

    run(scenario())


def test_a_statement_before_open_or_after_close_says_so(backend: Backend) -> None:
    async def scenario() -> None:
        db = backend.database()
        await db.close()
        with pytest.raises(UsageError, match="is not open"):
            await db.fetch("SELECT 1")

    run(scenario())


def test_on_open_runs_once_per_open_before_the_first_statement(backend: Backend) -> None:
    async def scenario() -> None:
        db = backend.database()
        runs = []

        @db.on_open
        async def schema(d: Database) -> None:
            runs.append(1)
            await d.execute("CREATE TABLE IF NOT EXISTS notes (body TEXT)")

        db._opened()  # as if it had been registered before open(), like app.db's
        try:
            await asyncio.gather(*(db.fetch("SELECT * FROM notes") for _ in range(5)))
            await db.execute("INSERT INTO notes VALUES ($1)", "hi")
            assert runs == [1]
        finally:
            await db.close()
        db.open()
        try:
            assert await db.fetchval("SELECT body FROM notes") == "hi" and runs == [1, 1]
        finally:
            await db.close()

    run(scenario())


def test_cancelled_callers_always_give_their_permits_back(backend: Backend) -> None:
    """Callers cancelled while they wait, while their statement runs, or inside a transaction
    leave every checkout and the write permit free: afterwards the whole pool still works."""

    async def scenario() -> None:
        db = backend.database(pool_size=2, timeout=5)
        try:
            await with_items(db)
            slow = (
                "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 300000) "
                "SELECT count(*) FROM n"
            )

            async def in_transaction() -> None:
                async with db.transaction() as tx:
                    await tx.execute("UPDATE items SET qty = 999")
                    await asyncio.sleep(10)

            tasks = [asyncio.create_task(db.fetchval(slow)) for _ in range(6)]
            tasks += [asyncio.create_task(db.execute("UPDATE items SET qty = qty + 1")) for _ in range(6)]
            tasks.append(asyncio.create_task(in_transaction()))
            await asyncio.sleep(0.05)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            # every checkout is free again: pool_size slow reads at once, then a transaction
            assert await asyncio.gather(*(db.fetchval(slow) for _ in range(2))) == [300000, 300000]
            async with db.transaction() as tx:
                assert await tx.fetchval("SELECT count(*) FROM items WHERE qty = 999") == 0  # rolled back
        finally:
            await db.close()

    run(scenario())


def test_sqlite_refuses_attach(tmp_path: object) -> None:
    from pyvia.db import connect

    async def scenario() -> None:
        db = connect(f"sqlite:///{tmp_path}/main.db")
        db.open()
        try:
            for sql in (f"ATTACH DATABASE '{tmp_path}/other.db' AS other", "DETACH DATABASE main"):
                with pytest.raises(DatabaseError, match="ATTACH and DETACH are refused"):
                    await db.execute(sql)
        finally:
            await db.close()

    run(scenario())


def test_two_sqlite_databases_on_one_file_wait_for_each_other(tmp_path: object) -> None:
    """As two workers would: each has its own permit, and SQLite's busy_timeout makes one wait
    for the other's transaction instead of failing."""
    from pyvia.db import connect

    async def scenario() -> None:
        first, second = (connect(f"sqlite:///{tmp_path}/shared.db") for _ in range(2))
        first.open()
        second.open()
        try:
            await first.execute("CREATE TABLE counter (n INTEGER NOT NULL)")
            await first.execute("INSERT INTO counter VALUES (0)")

            async def bump(db: Database) -> None:
                async with db.transaction() as tx:
                    n = await tx.fetchval("SELECT n FROM counter")
                    await asyncio.sleep(0.001)  # hold the file lock while the other worker tries
                    await tx.execute("UPDATE counter SET n = $1", n + 1)

            await asyncio.gather(*(bump(db) for _ in range(25) for db in (first, second)))
            assert await second.fetchval("SELECT n FROM counter") == 50
        finally:
            await first.close()
            await second.close()

    run(scenario())
