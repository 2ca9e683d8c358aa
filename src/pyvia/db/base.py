"""The API both back ends share: ``execute``, ``executemany``, ``fetch``, ``fetchrow``,
``fetchval`` and ``transaction``; statistics and error translation live here once.

Invariants:

* Parameters are always bound (``$1, $2`` …), never formatted into the SQL text.
* A transaction begins and ends only through :meth:`Database.transaction`; ``BEGIN``,
  ``COMMIT`` and friends given to ``execute`` are refused (they would leave the writer held).
* Inside ``async with db.transaction() as tx`` the task's calls on ``db`` itself run in that
  transaction too (a ``ContextVar``), so helper functions need not pass ``tx`` around; a
  nested ``db.transaction()`` is a savepoint.
* Every statement is counted once, by kind (read or write, :func:`pyvia.db.sql.classify`) and
  outcome, with its latency as the caller saw it (``/metrics``: ``pyvia_db_*``).
* Errors come out as :mod:`pyvia.errors` classes whatever the driver: ``IntegrityError``,
  ``DatabaseError``, ``DatabaseUnavailable`` / ``PoolTimeout`` (503), with the driver's
  exception as ``__cause__``.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import itertools
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from typing import Any

from pyvia.db.sql import TRANSACTION, classify
from pyvia.db.url import DatabaseConfig
from pyvia.errors import PyviaError, UsageError
from pyvia.ops.metrics import PyviaMetrics

__all__ = ["Database", "Session", "Transaction", "error_message"]

_CURRENT: contextvars.ContextVar[Transaction | None] = contextvars.ContextVar("pyvia_db_transaction", default=None)
_SETTING_UP: contextvars.ContextVar[bool] = contextvars.ContextVar("pyvia_db_setting_up", default=False)
_SNIPPET = 160  # characters of SQL quoted in an error message (the SQL holds no values)


def _snippet(sql: str) -> str:
    flat = " ".join(sql.split())
    return flat if len(flat) <= _SNIPPET else flat[:_SNIPPET] + "…"


class Session:
    """One connection held for a transaction; the back end runs statements on it."""

    async def run(self, op: str, sql: str, args: Sequence[Any]) -> Any:
        raise NotImplementedError


class Transaction:
    """An open transaction: the same statement methods as :class:`Database`, on one connection.

    Commits when the ``async with`` block ends normally, rolls back when it raises.
    """

    __slots__ = ("_db", "_session", "active")

    def __init__(self, db: Database, session: Session) -> None:
        self._db = db
        self._session = session
        #: False once the block has ended; statements on it are then refused.
        self.active = True

    async def execute(self, sql: str, *args: Any) -> int:
        return await self._db._in_transaction(self, "execute", sql, args)  # type: ignore[no-any-return]

    async def executemany(self, sql: str, args: Iterable[Sequence[Any]]) -> None:
        await self._db._in_transaction(self, "executemany", sql, list(args))

    async def fetch(self, sql: str, *args: Any) -> list[Any]:
        return await self._db._in_transaction(self, "fetch", sql, args)  # type: ignore[no-any-return]

    async def fetchrow(self, sql: str, *args: Any) -> Any:
        return await self._db._in_transaction(self, "fetchrow", sql, args)

    async def fetchval(self, sql: str, *args: Any) -> Any:
        return await self._db._in_transaction(self, "fetchval", sql, args)

    def transaction(self) -> contextlib.AbstractAsyncContextManager[Transaction]:
        """A savepoint inside this transaction: rolled back alone if its block raises."""
        return self._db._savepoint(self)


class Database:
    """A database behind one small async API; made from ``[db] url`` by :func:`pyvia.db.connect`.

    ``open()`` happens at app start and ``close()`` at stop (the App does both for ``app.db``).
    Rows are mappings and sequences at once: ``row["title"]``, ``row[0]``, ``dict(row)``.
    """

    #: ``"sqlite"`` or ``"postgresql"``.
    kind = ""

    def __init__(self, config: DatabaseConfig, *, metrics: PyviaMetrics | None = None) -> None:
        self.config = config
        #: Where statements are counted; the App passes its own so ``/metrics`` shows them.
        self.metrics = metrics if metrics is not None else PyviaMetrics()
        self._savepoints = itertools.count(1)
        self._setup: list[Callable[[Database], Awaitable[Any]]] = []
        self._setup_due = False
        self._setup_lock: asyncio.Lock | None = None

    def on_open(self, fn: Callable[[Database], Awaitable[Any]]) -> Callable[[Database], Awaitable[Any]]:
        """Register ``async def fn(db)`` (creating tables, seeding): it runs once after each open,
        before any other statement, on the loop that serves (so it needs no loop at start)."""
        self._setup.append(fn)
        return fn

    def _opened(self) -> None:
        """The back ends call it at the end of ``open()``."""
        self._setup_due = bool(self._setup)
        self._setup_lock = asyncio.Lock()

    async def ready(self) -> None:
        """Run the ``on_open`` functions now if they have not run since the last open."""
        if not self._setup_due or _SETTING_UP.get():
            return
        lock = self._setup_lock
        assert lock is not None
        async with lock:
            if not self._setup_due:
                return
            token = _SETTING_UP.set(True)
            try:
                for fn in self._setup:
                    await fn(self)
            finally:
                _SETTING_UP.reset(token)
            self._setup_due = False

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.config.display_url}>"

    # --- life cycle (the back ends fill these in) -------------------------------------------------

    @property
    def is_open(self) -> bool:
        raise NotImplementedError

    def open(self) -> None:
        """Open connections (SQLite) or get ready to (PostgreSQL connects on first use)."""
        raise NotImplementedError

    async def close(self) -> None:
        """Close every connection; statements after it are refused until ``open()`` again."""
        raise NotImplementedError

    async def _run(self, op: str, sql: str, args: Sequence[Any], kind: str) -> Any:
        raise NotImplementedError

    def _session(self) -> contextlib.AbstractAsyncContextManager[Session]:
        raise NotImplementedError

    def _translate(self, exc: BaseException, sql: str) -> BaseException | None:
        """The pyvia error for a driver exception, or None to let it through unchanged."""
        raise NotImplementedError

    # --- the API ---------------------------------------------------------------------------------

    async def execute(self, sql: str, *args: Any) -> int:
        """Run one statement; return the number of rows it changed (0 for DDL)."""
        return await self._call("execute", sql, args)  # type: ignore[no-any-return]

    async def executemany(self, sql: str, args: Iterable[Sequence[Any]]) -> None:
        """Run one statement once per parameter tuple, all or nothing."""
        await self._call("executemany", sql, list(args))

    async def fetch(self, sql: str, *args: Any) -> list[Any]:
        """Every row of a query."""
        return await self._call("fetch", sql, args)  # type: ignore[no-any-return]

    async def fetchrow(self, sql: str, *args: Any) -> Any:
        """The first row of a query, or None."""
        return await self._call("fetchrow", sql, args)

    async def fetchval(self, sql: str, *args: Any) -> Any:
        """The first column of the first row, or None."""
        return await self._call("fetchval", sql, args)

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[Transaction]:
        """``async with db.transaction() as tx:`` — commit at the end, roll back on an exception.

        On SQLite it holds the one write permit from ``BEGIN IMMEDIATE`` to ``COMMIT``: other
        writers queue in order, readers go on reading the last committed state (WAL). Nested
        inside another transaction of this task it is a savepoint.
        """
        current = _CURRENT.get()
        if current is not None and current.active and current._db is self:
            async with self._savepoint(current) as inner:
                yield inner
            return
        self._check_open()
        await self.ready()
        async with self._session() as session:
            tx = Transaction(self, session)
            token = _CURRENT.set(tx)
            try:
                yield tx
            finally:
                tx.active = False
                _CURRENT.reset(token)

    def stats(self) -> dict[str, dict[str, float]]:
        """Statements run so far: ``{"read": {"count", "errors", "seconds"}, "write": {...}}``."""
        m = self.metrics
        out: dict[str, dict[str, float]] = {}
        for kind in ("read", "write"):
            hist = m.db_seconds.labels(kind=kind)
            out[kind] = {
                "count": m.db_queries.labels(kind=kind, status="ok").value
                + m.db_queries.labels(kind=kind, status="error").value,
                "errors": m.db_queries.labels(kind=kind, status="error").value,
                "seconds": hist.sum,
            }
        return out

    def pool_stats(self) -> dict[str, int]:
        """Connections now: ``open`` (held by the pool), ``idle`` (free to hand out), and
        ``discarded`` (closed as broken since the last open). Read at each ``/metrics`` scrape."""
        return {"open": 0, "idle": 0, "discarded": 0}

    # --- the machinery ---------------------------------------------------------------------------

    def _check_open(self) -> None:
        if not self.is_open:
            raise UsageError(
                f"the database {self.config.display_url} is not open: app.db opens when the app "
                "starts (TestClient or app.run); a standalone Database needs db.open() first"
            )

    def _kind(self, sql: str) -> str:
        if not isinstance(sql, str):
            raise UsageError(f"SQL must be a string, got {type(sql).__name__}")
        kind = classify(sql)
        if kind == TRANSACTION:
            raise UsageError(
                f"{_snippet(sql)!r}: transactions begin and end with `async with db.transaction()`, "
                "not with BEGIN/COMMIT/ROLLBACK statements"
            )
        return kind

    async def _call(self, op: str, sql: str, args: Sequence[Any]) -> Any:
        kind = self._kind(sql)
        current = _CURRENT.get()
        if current is not None and current.active and current._db is self:
            return await self._statement(current, op, sql, args, kind)
        self._check_open()
        if self._setup_due:
            await self.ready()
        started = time.perf_counter()
        try:
            result = await self._run(op, sql, args, kind)
        except Exception as exc:
            self.metrics.observe_query(kind, False, time.perf_counter() - started)
            raise self._wrap(exc, sql) from exc
        self.metrics.observe_query(kind, True, time.perf_counter() - started)
        return result

    async def _in_transaction(self, tx: Transaction, op: str, sql: str, args: Sequence[Any]) -> Any:
        return await self._statement(tx, op, sql, args, self._kind(sql))

    async def _statement(self, tx: Transaction, op: str, sql: str, args: Sequence[Any], kind: str) -> Any:
        if not tx.active:
            raise UsageError("this transaction has ended; statements go in its `async with` block")
        started = time.perf_counter()
        try:
            result = await tx._session.run(op, sql, args)
        except Exception as exc:
            self.metrics.observe_query(kind, False, time.perf_counter() - started)
            raise self._wrap(exc, sql) from exc
        self.metrics.observe_query(kind, True, time.perf_counter() - started)
        return result

    def _wrap(self, exc: Exception, sql: str) -> Exception:
        if isinstance(exc, PyviaError):
            return exc
        translated = self._translate(exc, sql)
        if translated is None:
            return exc
        return translated  # type: ignore[return-value]  # the back ends return Exceptions

    @contextlib.asynccontextmanager
    async def _savepoint(self, tx: Transaction) -> AsyncIterator[Transaction]:
        if not tx.active:
            raise UsageError("this transaction has ended; statements go in its `async with` block")
        name = f"pyvia_sp{next(self._savepoints)}"
        await tx._session.run("execute", f"SAVEPOINT {name}", ())
        inner = Transaction(self, tx._session)
        token = _CURRENT.set(inner)
        try:
            yield inner
        except BaseException:
            await tx._session.run("execute", f"ROLLBACK TO SAVEPOINT {name}", ())
            await tx._session.run("execute", f"RELEASE SAVEPOINT {name}", ())
            raise
        else:
            await tx._session.run("execute", f"RELEASE SAVEPOINT {name}", ())
        finally:
            inner.active = False
            _CURRENT.reset(token)


def error_message(backend: str, exc: BaseException, sql: str) -> str:
    """``"sqlite: UNIQUE constraint failed: t.x (in: INSERT INTO t …)"``: the driver's words and
    the statement (which holds no values: they are bound)."""
    return f"{backend}: {' '.join(str(exc).split())} (in: {_snippet(sql)})"
