"""Engine fixtures: one real NATS and one real Redis server per test session, started lazily.

``backend`` is parametrized over memory, NATS and Redis; each test gets its own prefix (so its
own buckets and subjects) and opens as many connected engines as it needs with
``backend.open(n)``, all sharing one store, as workers would.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any, TypeVar

import pytest
import uvloop

from pyvia.cluster import Engine, MemoryEngine, MemoryHub, create_engine
from pyvia.cluster.nats_server import LocalNats
from tests.cluster.servers import RedisServer

T = TypeVar("T")

ENGINES = ["memory", "nats", "redis"]


def run(coro: Awaitable[T], timeout: float = 30.0) -> T:
    """Run a scenario on uvloop (the loop the server uses), failing after ``timeout`` s."""

    async def bounded() -> T:
        return await asyncio.wait_for(coro, timeout)

    return uvloop.run(bounded())


async def eventually(check: Callable[[], Any], timeout: float = 5.0, what: str = "condition") -> None:
    """Wait until ``check()`` is truthy, polling every 10 ms."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not check():
        if loop.time() > deadline:
            raise AssertionError(f"{what} not reached within {timeout} s")
        await asyncio.sleep(0.01)


class Backend:
    """One engine server (or memory hub) and a fresh prefix for one test."""

    def __init__(self, kind: str, url: str) -> None:
        self.kind = kind
        self.url = url
        self.prefix = "t" + secrets.token_hex(6)
        self.hub = MemoryHub()

    def engine(self) -> Engine:
        if self.kind == "memory":
            return MemoryEngine(self.hub)
        return create_engine(self.url, prefix=self.prefix)

    @contextlib.asynccontextmanager
    async def open(self, count: int = 1) -> AsyncIterator[list[Engine]]:
        engines = [self.engine() for _ in range(count)]
        try:
            for engine in engines:
                await engine.connect()
            yield engines
        finally:
            for engine in engines:
                await engine.close()


@pytest.fixture(scope="session")
def nats_url() -> Iterator[str]:
    server = LocalNats()
    try:
        yield server.start()
    finally:
        server.close()


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    server = RedisServer()
    try:
        yield server.start()
    finally:
        server.close()


def backend_for(request: pytest.FixtureRequest, kind: str) -> Backend:
    if kind == "nats":
        return Backend(kind, request.getfixturevalue("nats_url"))
    if kind == "redis":
        return Backend(kind, request.getfixturevalue("redis_url"))
    return Backend(kind, "memory://")


@pytest.fixture(params=ENGINES)
def backend(request: pytest.FixtureRequest) -> Backend:
    return backend_for(request, request.param)


@pytest.fixture(params=["nats", "redis"])
def server_backend(request: pytest.FixtureRequest) -> Backend:
    """Only the engines shared between processes."""
    return backend_for(request, request.param)
