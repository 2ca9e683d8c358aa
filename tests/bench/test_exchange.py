"""The open loop's client (``bench.exchange``): answers framed each way, and the server's own time
told apart from the client's (what the overload target is judged on)."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Callable, Iterator

import pytest
from bench.exchange import Exchange, visit

REQUEST = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"
LENGTH = b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello"
CHUNKED = b"HTTP/1.1 503 Service Unavailable\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"
TO_CLOSE = b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\nuntil the end"


def _serve(answer: bytes, delay: float, close: bool) -> tuple[int, threading.Thread]:
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def run() -> None:
        conn, _ = listener.accept()
        with conn, listener:
            while conn.recv(4096):
                time.sleep(delay)
                conn.sendall(answer)
                if close:
                    return

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return port, thread


def _recorder(got: list[int | str], done: asyncio.Event) -> Callable[[Exchange, int | str, float], None]:
    def on_done(exchange: Exchange, outcome: int | str, at: float) -> None:
        got.append(outcome)
        done.set()

    return on_done


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


@pytest.mark.parametrize(("answer", "status"), [(LENGTH, 200), (CHUNKED, 503), (TO_CLOSE, 200)])
def test_each_framing_ends_in_its_status_and_a_kept_connection_takes_the_next(
    loop: asyncio.AbstractEventLoop, answer: bytes, status: int
) -> None:
    port, _ = _serve(answer, 0.0, close=answer is TO_CLOSE)
    got: list[int | str] = []

    async def main() -> None:
        done = asyncio.Event()
        exchange = Exchange(_recorder(got, done))
        await loop.create_connection(lambda: exchange, "127.0.0.1", port)
        for _ in range(1 if answer is TO_CLOSE else 3):
            done.clear()
            exchange.send(REQUEST, 5.0)
            await asyncio.wait_for(done.wait(), 5.0)
        exchange.close()

    loop.run_until_complete(main())
    assert got == [status] * (1 if answer is TO_CLOSE else 3)


def test_the_servers_time_excludes_a_client_that_parses_its_answer_late(loop: asyncio.AbstractEventLoop) -> None:
    """The server answers after 0.1 s; the client's loop is blocked for 0.4 s after its write (as a
    saturated generator's long turn): the answer is parsed late, its arrival is still ~0.1 s."""
    port, _ = _serve(LENGTH, 0.1, close=True)
    seen: list[tuple[Exchange, int | str, float]] = []

    async def main() -> None:
        done = asyncio.Event()

        def on_done(ex: Exchange, outcome: int | str, at: float) -> None:
            seen.append((ex, outcome, at))
            done.set()

        exchange = Exchange(on_done, once=True)
        await loop.create_connection(lambda: exchange, "127.0.0.1", port)
        exchange.send(REQUEST, 5.0)
        time.sleep(0.4)  # the client's own long turn, after the write
        await asyncio.wait_for(done.wait(), 5.0)

    loop.run_until_complete(main())
    [(exchange, outcome, parsed)] = seen
    assert outcome == 200 and exchange.closed  # a first visit closes after its answer
    assert parsed - exchange.written >= 0.39
    assert 0.09 <= exchange.arrived - exchange.written <= 0.16


def test_a_connection_closed_before_its_answer_is_a_reset(loop: asyncio.AbstractEventLoop) -> None:
    port, _ = _serve(b"", 0.0, close=True)
    got: list[int | str] = []

    async def main() -> None:
        done = asyncio.Event()
        await visit("127.0.0.1", port, REQUEST, 5.0, _recorder(got, done))
        await asyncio.wait_for(done.wait(), 5.0)

    loop.run_until_complete(main())
    assert got == ["reset"]
