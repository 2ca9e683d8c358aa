"""``pyvia.db``: one small async API over SQLite (the default) and PostgreSQL.

::

    app = App(db_url="sqlite:///app.db")        # or [db] url in pyvia.toml, or PYVIA_DB__URL

    @c.action
    async def add() -> None:
        await app.db.execute("INSERT INTO todos (title) VALUES ($1)", title)
        rows = await app.db.fetch("SELECT id, title FROM todos ORDER BY id")
        async with app.db.transaction() as tx:
            ...

The App opens ``app.db`` when it starts and closes it when it stops. SQLite runs in WAL mode
with one writer behind one write permit and a pool of readers, all off the event loop
(:mod:`pyvia.db.sqlite`); PostgreSQL goes through ``asyncpg``'s pool (:mod:`pyvia.db.postgres`).
See ``docs/database.md``.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING, Any

from pyvia.db.base import Database, Session, Transaction
from pyvia.db.url import DatabaseConfig, parse_url, redact_url
from pyvia.errors import DatabaseError, DatabaseUnavailable, IntegrityError, PoolTimeout, UsageError

if TYPE_CHECKING:
    from pyvia.ops.metrics import PyviaMetrics

__all__ = [
    "Database",
    "DatabaseConfig",
    "DatabaseError",
    "DatabaseUnavailable",
    "IntegrityError",
    "PoolTimeout",
    "Transaction",
    "connect",
    "parse_url",
    "redact_url",
]


def connect(
    url: str | DatabaseConfig,
    *,
    pool_size: int = 4,
    timeout: float = 30.0,
    busy_timeout: float = 5.0,
    metrics: PyviaMetrics | None = None,
) -> Database:
    """A :class:`Database` for ``url`` (not opened yet: call ``open()``, or let the App do it).

    Raises ValueError (a :class:`~pyvia.errors.ConfigError` from the App) for a bad URL.
    """
    config = (
        url
        if isinstance(url, DatabaseConfig)
        else parse_url(url, pool_size=pool_size, timeout=timeout, busy_timeout=busy_timeout)
    )
    if config.kind == "sqlite":
        from pyvia.db.sqlite import SqliteDatabase

        return SqliteDatabase(config, metrics=metrics)
    from pyvia.db.postgres import PostgresDatabase

    return PostgresDatabase(config, metrics=metrics)


class NoDatabase(Database):
    """``app.db`` when no ``[db] url`` is set: every use says how to configure one."""

    kind = "none"

    def __init__(self, *, metrics: PyviaMetrics | None = None) -> None:
        super().__init__(DatabaseConfig("", "none"), metrics=metrics)

    def __repr__(self) -> str:
        return "<NoDatabase: set [db] url>"

    @property
    def is_open(self) -> bool:
        return False

    def open(self) -> None:
        pass

    async def close(self) -> None:
        pass

    def _check_open(self) -> None:
        raise UsageError(
            "no database is configured: give App(db_url='sqlite:///app.db'), "
            "or set [db] url in pyvia.toml, or PYVIA_DB__URL"
        )

    async def _run(self, op: str, sql: str, args: Sequence[Any], kind: str) -> Any:
        self._check_open()

    @contextlib.asynccontextmanager
    async def _session(self) -> AsyncIterator[Session]:
        self._check_open()
        yield Session()

    def _translate(self, exc: BaseException, sql: str) -> BaseException | None:
        return None
