"""Database fixtures: ``backend`` runs a test on SQLite and on a real PostgreSQL.

The PostgreSQL server is started once per session by the test setup (:mod:`tests.db.servers`)
and each test gets a database of its own; a missing or failing server fails the test.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Awaitable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import asyncpg
import pytest
import uvloop

from pyvia.db import Database, connect
from tests.db.servers import PostgresServer

T = TypeVar("T")
BACKENDS = ["sqlite", "postgresql"]


def run(coro: Awaitable[T], timeout: float = 60.0) -> T:
    """Run a scenario on uvloop (the loop the server uses), failing after ``timeout`` s."""

    async def bounded() -> T:
        return await asyncio.wait_for(coro, timeout)

    return uvloop.run(bounded())


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    server = PostgresServer()
    try:
        server.start()
        yield server
    finally:
        server.stop()


class Backend:
    """Where one test's database lives: a SQLite file, or a fresh PostgreSQL database."""

    def __init__(self, kind: str, url: str) -> None:
        self.kind = kind
        self.url = url

    def database(self, **options: Any) -> Database:
        db = connect(self.url, **options)
        db.open()
        return db


def _new_pg_database(server: PostgresServer) -> str:
    name = "t_" + secrets.token_hex(6)

    async def create() -> None:
        admin = await asyncpg.connect(server.url)
        try:
            await admin.execute(f"CREATE DATABASE {name}")
        finally:
            await admin.close()

    run(create())
    return server.url.rsplit("/", 1)[0] + "/" + name


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    if request.param == "sqlite":
        return Backend("sqlite", f"sqlite:///{tmp_path / 'test.db'}")
    server = request.getfixturevalue("postgres_server")
    return Backend("postgresql", _new_pg_database(server))
