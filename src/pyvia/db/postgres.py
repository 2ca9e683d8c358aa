"""PostgreSQL behind the same async API, through ``asyncpg``'s connection pool.

* The pool is made on first use, on the running event loop, not at start: an app starts and
  answers ``/_ready`` while its database is down (``ephpm-lessons.md`` §4.8); until it comes
  back, statements fail fast with :class:`~pyvia.errors.DatabaseUnavailable` (503).
* ``asyncpg`` keeps the pool invariants: a connection is reset when it comes back, one that
  broke is closed and replaced, never handed out again; a checkout waits at most ``[db]
  timeout`` and then :class:`~pyvia.errors.PoolTimeout` says so. A read that hit a connection
  the server had closed is run once more on a fresh one (a write is not: it may have run).
* No write permit: PostgreSQL takes concurrent writers itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Sequence
from typing import Any

from pyvia.db.base import Database, Session, error_message
from pyvia.db.sql import READ
from pyvia.errors import ConfigError, DatabaseError, DatabaseUnavailable, IntegrityError, PoolTimeout

__all__ = ["PostgresDatabase"]

log = logging.getLogger("pyvia.db")


def _asyncpg() -> Any:
    try:
        import asyncpg
    except ImportError:
        raise ConfigError("a postgresql:// [db] url needs asyncpg: pip install 'pyvia[db]'") from None
    return asyncpg


async def _run(conn: Any, op: str, sql: str, args: Sequence[Any]) -> Any:
    if op == "execute":
        status = await conn.execute(sql, *args)
        last = status.rsplit(" ", 1)[-1] if status else ""
        return int(last) if last.isdigit() else 0  # "INSERT 0 3", "UPDATE 2", "CREATE TABLE"
    if op == "executemany":
        await conn.executemany(sql, args)
        return None
    if op == "fetch":
        return await conn.fetch(sql, *args)
    if op == "fetchrow":
        return await conn.fetchrow(sql, *args)
    return await conn.fetchval(sql, *args)


class _ConnectionSession(Session):
    __slots__ = ("_conn",)

    def __init__(self, conn: Any) -> None:
        self._conn = conn

    async def run(self, op: str, sql: str, args: Sequence[Any]) -> Any:
        return await _run(self._conn, op, sql, args)


class PostgresDatabase(Database):
    """PostgreSQL through an ``asyncpg`` pool of up to ``pool_size`` connections."""

    kind = "postgresql"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._asyncpg = _asyncpg()  # a missing driver is refused when the App is made
        self._open = False
        self._pool: Any = None
        self._pool_loop: asyncio.AbstractEventLoop | None = None
        self._making: asyncio.Lock | None = None
        pg = self._asyncpg
        #: What a connection the server closed under us raises (a read is then run again).
        self._broken = (
            pg.ConnectionDoesNotExistError,
            pg.PostgresConnectionError,
            pg.AdminShutdownError,
            pg.InternalClientError,
            ConnectionError,
        )

    @property
    def is_open(self) -> bool:
        return self._open

    def open(self) -> None:
        self._open = True
        self._making = asyncio.Lock()
        self._opened()
        log.info(
            "db: PostgreSQL %s (pool of up to %d, connected on first use)",
            self.config.display_url,
            self.config.pool_size,
        )

    async def close(self) -> None:
        self._open = False
        pool, self._pool = self._pool, None
        if pool is not None:
            try:
                await asyncio.wait_for(pool.close(), self.config.timeout)
            except (TimeoutError, OSError, self._asyncpg.PostgresError, self._asyncpg.InterfaceError):
                pool.terminate()

    async def _get_pool(self) -> Any:
        pool = self._pool
        loop = asyncio.get_running_loop()
        if pool is not None and self._pool_loop is loop:
            return pool
        making = self._making
        assert making is not None
        async with making:
            if self._pool is not None and self._pool_loop is not loop:  # a new loop (a new test client)
                old, self._pool = self._pool, None
                old.terminate()
            if self._pool is None:
                try:
                    self._pool = await self._asyncpg.create_pool(
                        self.config.url, min_size=1, max_size=self.config.pool_size, timeout=self.config.timeout
                    )
                except (OSError, TimeoutError, self._asyncpg.PostgresError, self._asyncpg.InterfaceError) as exc:
                    raise DatabaseUnavailable(
                        f"postgresql: cannot connect to {self.config.display_url}: {type(exc).__name__}: {exc}"
                    ) from exc
                self._pool_loop = loop
            return self._pool

    @contextlib.asynccontextmanager
    async def _connection(self) -> AsyncIterator[Any]:
        pool = await self._get_pool()
        try:
            conn = await pool.acquire(timeout=self.config.timeout)
        except TimeoutError:
            self.metrics.db_pool_timeouts.inc()
            raise PoolTimeout(
                f"all {self.config.pool_size} PostgreSQL connections stayed busy for "
                f"{self.config.timeout} s ([db] pool_size, [db] timeout)"
            ) from None
        except (OSError, self._asyncpg.PostgresError, self._asyncpg.InterfaceError) as exc:
            raise DatabaseUnavailable(f"postgresql: no connection to {self.config.display_url}: {exc}") from exc
        try:
            yield conn
        finally:
            await pool.release(conn)  # asyncpg resets it, or closes it when it broke

    async def _run(self, op: str, sql: str, args: Sequence[Any], kind: str) -> Any:
        retries = self.config.pool_size if kind == READ and op != "executemany" else 0
        for _ in range(retries):  # a read is safe to run again: every idle connection may have broken
            try:
                async with self._connection() as conn:
                    return await _run(conn, op, sql, args)
            except self._broken:
                pass  # the pool closes that connection when it comes back
        async with self._connection() as conn:
            return await _run(conn, op, sql, args)

    @contextlib.asynccontextmanager
    async def _session(self) -> AsyncIterator[Session]:
        async with self._connection() as conn:
            tx = conn.transaction()
            await tx.start()
            try:
                yield _ConnectionSession(conn)
            except BaseException:
                with contextlib.suppress(Exception):  # a broken connection: the pool discards it
                    await tx.rollback()
                raise
            await tx.commit()

    def pool_stats(self) -> dict[str, int]:
        """asyncpg's pool: open connections and idle ones (it closes broken ones itself, uncounted)."""
        pool = self._pool
        if pool is None:
            return {"open": 0, "idle": 0, "discarded": 0}
        return {"open": pool.get_size(), "idle": pool.get_idle_size(), "discarded": 0}

    def _translate(self, exc: BaseException, sql: str) -> BaseException | None:
        pg = self._asyncpg
        if isinstance(exc, pg.IntegrityConstraintViolationError):
            return IntegrityError(error_message("postgresql", exc, sql))
        if isinstance(exc, (*self._broken, pg.CannotConnectNowError, pg.TooManyConnectionsError)):
            return DatabaseUnavailable(error_message("postgresql", exc, sql))
        if isinstance(exc, (pg.PostgresError, pg.InterfaceError, pg.DataError)):
            return DatabaseError(error_message("postgresql", exc, sql))
        return None
