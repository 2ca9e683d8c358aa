"""SQLite behind the async API: one writer connection behind one write permit, a reader pool,
WAL, every call run in a thread off the event loop (stdlib ``sqlite3``).

Why it is shaped this way (``ephpm-lessons.md`` §4.3, §4.4):

* **Exactly one write permit** (an ``asyncio.Lock``), taken by every write and held by a
  transaction from ``BEGIN IMMEDIATE`` to ``COMMIT``. Writers queue in order in the process
  instead of fighting over SQLite's file lock; more permits only move the queue into the lock,
  where it collapses. So "database is locked" never comes from this process's own writers.
* **The writer is one connection on one thread**, so statements run in the order the permit
  was given, and a statement still running when its caller was cancelled is finished before
  the next one starts.
* **Reads take no permit**: WAL lets the readers (``pool_size`` connections, ``query_only``)
  read the last committed state while a write transaction is open. A checkout permit means
  "a checkout is in progress", never "a connection exists": a connection goes back to the
  idle list before its permit is released, and a broken one is closed, never handed out again.
* Autocommit mode (``isolation_level=None``): the framework, not the driver, decides when a
  transaction begins. ``synchronous=NORMAL``, ``foreign_keys=ON``, a ``busy_timeout`` on every
  connection (other processes may write the same file), and ``ATTACH``/``DETACH`` refused by an
  authorizer and by ``SQLITE_LIMIT_ATTACHED = 0``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import os
import sqlite3
import time
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any

from pyvia.db.base import Database, Session, error_message
from pyvia.db.sql import READ, sqlite_params
from pyvia.errors import ConfigError, DatabaseError, DatabaseUnavailable, IntegrityError, PoolTimeout, UsageError

__all__ = ["SqliteDatabase"]

log = logging.getLogger("pyvia.db")

_DENIED = frozenset({sqlite3.SQLITE_ATTACH, sqlite3.SQLITE_DETACH})
_CLOSED = "closed database"  # sqlite3.ProgrammingError: Cannot operate on a closed database.


def _authorize(action: int, *_: Any) -> int:
    return sqlite3.SQLITE_DENY if action in _DENIED else sqlite3.SQLITE_OK


def _run(conn: sqlite3.Connection, op: str, sql: str, args: Sequence[Any]) -> Any:
    """One statement on ``conn``, in the calling (pool) thread; the cursor is always closed so
    no read transaction stays open on the connection."""
    sql = sqlite_params(sql)
    if op == "executemany":
        conn.executemany(sql, args).close()
        return None
    cur = conn.execute(sql, args)
    try:
        if op == "execute":
            return max(cur.rowcount, 0)
        if op == "fetch":
            return cur.fetchall()
        row = cur.fetchone()
        if op == "fetchrow":
            return row
        return None if row is None else row[0]  # fetchval
    finally:
        cur.close()


def _is_broken(exc: BaseException | None) -> bool:
    """Whether a connection that raised ``exc`` must not be used again."""
    if exc is None or isinstance(exc, (sqlite3.IntegrityError, sqlite3.OperationalError, sqlite3.DataError)):
        return False
    if isinstance(exc, sqlite3.ProgrammingError):
        return _CLOSED in str(exc)
    return isinstance(exc, (sqlite3.InterfaceError, sqlite3.DatabaseError, sqlite3.InternalError)) or not isinstance(
        exc, (sqlite3.Error, ValueError, TypeError, OverflowError)
    )


class _WriterSession(Session):
    __slots__ = ("_db",)

    def __init__(self, db: SqliteDatabase) -> None:
        self._db = db

    async def run(self, op: str, sql: str, args: Sequence[Any]) -> Any:
        return await self._db._on_writer(lambda conn: _run(conn, op, sql, args))


class SqliteDatabase(Database):
    """SQLite in WAL mode: one writer, ``pool_size`` readers (see the module docstring)."""

    kind = "sqlite"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.path = Path(self.config.path)
        self._writer: sqlite3.Connection | None = None
        self._idle: list[sqlite3.Connection] = []
        self._write_thread: concurrent.futures.ThreadPoolExecutor | None = None
        self._read_threads: concurrent.futures.ThreadPoolExecutor | None = None
        self._permit: asyncio.Lock | None = None
        self._checkouts: asyncio.Semaphore | None = None
        #: Reader connections opened, and closed as broken, since this object was made (pool health).
        self.readers_opened = 0
        self.readers_discarded = 0
        self._checked_out = 0

    # --- connections -------------------------------------------------------------------------------

    def _connect(self, *, reader: bool) -> sqlite3.Connection:
        conn = sqlite3.connect(
            self.path,
            timeout=self.config.busy_timeout,
            isolation_level=None,
            check_same_thread=False,
            cached_statements=256,
        )
        try:
            conn.row_factory = sqlite3.Row
            conn.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
            conn.set_authorizer(_authorize)
            conn.execute("PRAGMA synchronous = NORMAL")
            conn.execute("PRAGMA foreign_keys = ON")
            if reader:
                conn.execute("PRAGMA query_only = ON")
        except BaseException:
            conn.close()
            raise
        return conn

    def _open_reader(self) -> sqlite3.Connection:
        conn = self._connect(reader=True)
        self.readers_opened += 1
        return conn

    @property
    def is_open(self) -> bool:
        return self._writer is not None

    def open(self) -> None:
        """Open the writer (switching the file to WAL) and the readers; a bad path fails here."""
        if self._writer is not None:
            return
        folder = self.path.parent if str(self.path.parent) else Path(".")
        if not folder.is_dir():
            raise ConfigError(
                f"[db] url {self.config.url!r}: the folder {str(folder)!r} does not exist "
                f"(working folder: {os.getcwd()})"
            )
        try:
            writer = self._connect(reader=False)
        except sqlite3.Error as exc:
            raise ConfigError(f"[db] url {self.config.url!r}: cannot open the SQLite file: {exc}") from exc
        try:
            mode = writer.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise ConfigError(
                    f"[db] url {self.config.url!r}: SQLite refused WAL mode (got {mode!r}); "
                    "the file system may not support it"
                )
            readers = [self._open_reader() for _ in range(self.config.pool_size)]
        except sqlite3.Error as exc:
            writer.close()
            raise ConfigError(f"[db] url {self.config.url!r}: cannot use the SQLite file: {exc}") from exc
        except BaseException:
            writer.close()
            raise
        self._writer = writer
        self._idle = readers
        self._write_thread = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="pyvia-db-writer")
        self._read_threads = concurrent.futures.ThreadPoolExecutor(
            self.config.pool_size, thread_name_prefix="pyvia-db-reader"
        )
        self._permit = asyncio.Lock()
        self._checkouts = asyncio.Semaphore(self.config.pool_size)
        self._opened()
        log.info(
            "db: SQLite %s (WAL, 1 writer, %d readers, sqlite %s)",
            self.path,
            self.config.pool_size,
            sqlite3.sqlite_version,
        )

    async def close(self) -> None:
        writer, idle = self._writer, self._idle
        threads = (self._write_thread, self._read_threads)
        self._writer, self._idle = None, []
        self._write_thread = self._read_threads = None
        self._permit = self._checkouts = None
        for pool in threads:
            if pool is not None:
                pool.shutdown(wait=True)  # statements in flight finish; nothing new was accepted
        for conn in idle:
            conn.close()
        if writer is not None:
            with contextlib.suppress(sqlite3.Error):
                writer.execute("PRAGMA optimize")
            writer.close()

    # --- running statements ------------------------------------------------------------------------

    async def _run(self, op: str, sql: str, args: Sequence[Any], kind: str) -> Any:
        if kind == READ and op != "executemany":
            for _ in range(self.config.pool_size):  # every idle reader may have broken
                try:
                    return await self._on_reader(lambda conn: _run(conn, op, sql, args))
                except sqlite3.ProgrammingError as exc:
                    if _CLOSED not in str(exc):
                        raise
                    # that connection was discarded: a read is safe to run again on another one
            return await self._on_reader(lambda conn: _run(conn, op, sql, args))
        async with self._write_permit():
            if op == "executemany":
                return await self._on_writer(lambda conn: _atomic(conn, lambda: _run(conn, op, sql, args)))
            return await self._on_writer(lambda conn: _run(conn, op, sql, args))

    @contextlib.asynccontextmanager
    async def _session(self) -> AsyncIterator[Session]:
        async with self._write_permit():
            await self._on_writer(lambda conn: conn.execute("BEGIN IMMEDIATE").close())
            try:
                yield _WriterSession(self)
            except BaseException:
                await self._on_writer(_rollback)
                raise
            await self._on_writer(_commit)

    @contextlib.asynccontextmanager
    async def _write_permit(self) -> AsyncIterator[None]:
        permit = self._permit
        if permit is None:
            self._check_open()
            raise AssertionError("unreachable")
        started = time.perf_counter()
        try:
            async with asyncio.timeout(self.config.timeout):
                await permit.acquire()
        except TimeoutError:
            self.metrics.db_pool_timeouts.inc()
            raise PoolTimeout(
                f"SQLite's write permit stayed taken for {self.config.timeout} s ([db] timeout): "
                "a transaction is holding it too long"
            ) from None
        self.metrics.db_write_wait.observe(time.perf_counter() - started)
        try:
            yield
        finally:
            permit.release()

    async def _on_writer(self, job: Callable[[sqlite3.Connection], Any]) -> Any:
        """Run ``job(writer)`` on the writer thread (the caller holds the write permit)."""
        writer, thread = self._writer, self._write_thread
        if writer is None or thread is None:
            self._check_open()
            raise AssertionError("unreachable")
        # a cancelled caller does not stop the thread: shield, so the permit's order still holds
        return await asyncio.shield(asyncio.get_running_loop().run_in_executor(thread, job, writer))

    async def _on_reader(self, job: Callable[[sqlite3.Connection], Any]) -> Any:
        """Check out a reader, run ``job(reader)`` on a pool thread, check the reader back in."""
        checkouts, threads = self._checkouts, self._read_threads
        if checkouts is None or threads is None:
            self._check_open()
            raise AssertionError("unreachable")
        try:
            async with asyncio.timeout(self.config.timeout):
                await checkouts.acquire()
        except TimeoutError:
            self.metrics.db_pool_timeouts.inc()
            raise PoolTimeout(
                f"all {self.config.pool_size} SQLite read connections stayed busy for "
                f"{self.config.timeout} s ([db] pool_size, [db] timeout)"
            ) from None
        loop = asyncio.get_running_loop()
        try:
            conn = self._idle.pop() if self._idle else await loop.run_in_executor(threads, self._open_reader)
        except BaseException:
            checkouts.release()
            raise
        self._checked_out += 1
        future = loop.run_in_executor(threads, job, conn)
        # the reader goes back (or is closed) only once its thread is done with it
        future.add_done_callback(lambda f: self._check_in(conn, f, checkouts))
        return await asyncio.shield(future)

    def _check_in(self, conn: sqlite3.Connection, future: asyncio.Future[Any], checkouts: asyncio.Semaphore) -> None:
        exc = None if future.cancelled() else future.exception()
        self._checked_out -= 1
        try:
            if _is_broken(exc) or checkouts is not self._checkouts:  # broken, or the pool was closed meanwhile
                self.readers_discarded += _is_broken(exc)
                with contextlib.suppress(sqlite3.Error):
                    conn.close()
            elif conn.in_transaction:  # never hand out a connection inside a transaction
                try:
                    conn.rollback()
                    self._idle.append(conn)
                except sqlite3.Error:
                    self.readers_discarded += 1
                    conn.close()
            else:
                self._idle.append(conn)
        finally:
            checkouts.release()  # after the connection is visible in the idle list

    def pool_stats(self) -> dict[str, int]:
        """The writer and the readers: open ones, idle readers, readers discarded as broken."""
        if self._writer is None:
            return {"open": 0, "idle": 0, "discarded": self.readers_discarded}
        return {
            "open": 1 + len(self._idle) + self._checked_out,
            "idle": len(self._idle),
            "discarded": self.readers_discarded,
        }

    # --- errors ------------------------------------------------------------------------------------

    def _translate(self, exc: BaseException, sql: str) -> BaseException | None:
        if isinstance(exc, sqlite3.IntegrityError):
            return IntegrityError(error_message("sqlite", exc, sql))
        if isinstance(exc, sqlite3.OperationalError):
            text = str(exc).lower()
            if "locked" in text or "busy" in text:
                return DatabaseUnavailable(
                    error_message("sqlite", exc, sql) + f"; another process held the file past [db] busy_timeout "
                    f"({self.config.busy_timeout} s)"
                )
            if "readonly" in text or "read-only" in text or "disk i/o" in text or "unable to open" in text:
                return DatabaseUnavailable(error_message("sqlite", exc, sql))
        if isinstance(exc, sqlite3.DatabaseError) and "not authorized" in str(exc):
            return DatabaseError(error_message("sqlite", exc, sql) + "; ATTACH and DETACH are refused")
        if isinstance(exc, sqlite3.ProgrammingError) and _CLOSED in str(exc):
            return DatabaseUnavailable(error_message("sqlite", exc, sql))
        if isinstance(exc, (sqlite3.Error, OverflowError)) or (
            isinstance(exc, (TypeError, ValueError)) and not isinstance(exc, UsageError)
        ):
            return DatabaseError(error_message("sqlite", exc, sql))
        return None


def _atomic(conn: sqlite3.Connection, job: Callable[[], Any]) -> Any:
    conn.execute("BEGIN IMMEDIATE").close()
    try:
        result = job()
    except BaseException:
        _rollback(conn)
        raise
    _commit(conn)
    return result


def _commit(conn: sqlite3.Connection) -> None:
    try:
        conn.execute("COMMIT").close()
    except BaseException:
        _rollback(conn)
        raise


def _rollback(conn: sqlite3.Connection) -> None:
    if conn.in_transaction:
        conn.execute("ROLLBACK").close()
