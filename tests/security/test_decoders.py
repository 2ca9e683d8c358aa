"""Issue 21 item 6, outside the signals: every decode of a client-supplied number is total.

Over real sockets: a todo id SQLite cannot store (23 digits), a 5,000-digit one and a
superscript digit answer 400 with the reason, not a 500 with a traceback, and the list is
untouched; an int or float path parameter that is no number a page can mean answers 404; a
``Content-Length`` of 4,400 digits (leading zeros) is read as the number it is.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest

from pyvia import App, Context
from tests.helpers import RawClient, RawResponse, running_server
from tests.processes import ServerProcess, free_port
from tests.server.test_app_over_http import open_page


def request(host: str, port: int, head: str, body: bytes = b"") -> RawResponse:
    with RawClient(host, port) as client:
        client.send(head.encode() + body)
        return client.read_response()


@pytest.fixture
def todo(tmp_path: Path) -> Iterator[tuple[int, Path]]:
    database = tmp_path / "todo.sqlite3"
    server = ServerProcess("examples.todo:app", free_port(), env={"PYVIA_TODO_DB": str(database)})
    server.start()
    try:
        yield server.port, database
    finally:
        server.stop()


def post_todo(port: int, cookie: str, ctx: str, query: str) -> RawResponse:
    body = f'{{"via_ctx": "{ctx}"}}'.encode()
    return request(
        "127.0.0.1",
        port,
        f"POST /_action/{query} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        f"Origin: http://127.0.0.1:{port}\r\nCookie: {cookie}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n",
        body,
    )


@pytest.mark.parametrize("bad_id", ["9" * 23, "9" * 5000, "%C2%B2", "%221%22", "1e3", "", "0x10"])
def test_a_todo_id_the_page_never_wrote_is_a_400_with_its_reason(todo: tuple[int, Path], bad_id: str) -> None:
    port, database = todo
    _, seed, cookie = open_page("127.0.0.1", port)
    ctx = seed["via_ctx"]
    with closing(sqlite3.connect(database)) as conn, conn:  # a row, as the page writes it
        conn.execute("INSERT INTO todos (title) VALUES ('keep')")
    for action in ("toggle", "delete"):
        response = post_todo(port, cookie, ctx, f"{action}?item_id={bad_id}")
        assert response.status == 400, response.body[:200]
        assert b"argument 'item_id'" in response.body
        assert b"Traceback" not in response.body
    with closing(sqlite3.connect(database)) as conn, conn:
        assert conn.execute("SELECT id, title, done FROM todos").fetchall() == [(1, "keep", 0)]
    assert post_todo(port, cookie, ctx, "toggle?item_id=1").status == 200  # the control
    with closing(sqlite3.connect(database)) as conn, conn:
        assert conn.execute("SELECT done FROM todos").fetchall() == [(1,)]


def path_app() -> App:
    app = App()

    @app.page("/item/{n}")
    def item(c: Context, n: int) -> None:
        c.view(lambda: f"<p id='n'>{n + 1}</p>")  # arithmetic on it: a real int

    @app.route("GET", "/price/{p}")
    def price(p: float) -> str:
        return f"<p>{p * 2}</p>"

    return app


@pytest.mark.parametrize(
    ("path", "status", "shown"),
    [
        ("/item/42", 200, b"43"),
        ("/item/-7", 200, b"-6"),
        ("/item/9223372036854775807", 200, b"9223372036854775808"),
        ("/item/9223372036854775808", 404, b""),
        ("/item/" + "9" * 4000, 404, b""),  # under Python's 4300-digit limit: a huge int the page never meant
        ("/item/" + "9" * 5000, 404, b""),
        ("/item/1_000", 404, b""),
        ("/item/%D9%A3", 404, b""),  # ٣, an Arabic-Indic three: int() would take it
        ("/item/%C2%B2", 404, b""),  # ², which str.isdigit() calls a digit
        ("/item/%201", 404, b""),
        ("/price/2.5", 200, b"5.0"),
        ("/price/nan", 404, b""),
        ("/price/inf", 404, b""),
        ("/price/1e999", 404, b""),
        ("/price/" + "9" * 5000, 404, b""),
        ("/price/1_0", 404, b""),
    ],
)
def test_a_number_in_the_path_is_one_a_page_can_mean_or_a_404(
    path: str, status: int, shown: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR), running_server(path_app()) as (host, port):
        response = request(host, port, f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n")
    assert response.status == status
    assert shown in response.body
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]  # no traceback logged


def test_a_content_length_with_thousands_of_leading_zeros_is_refused(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR), running_server(path_app()) as (host, port):
        length = "0" * 4400 + "5"
        response = request(
            host, port, f"POST /price/1 HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Length: {length}\r\n\r\n", b"hello"
        )
        # More than 20 digits, as h11 refuses them (tests/security/test_http_strictness.py): a 400, never a 500
        assert response.status == 400
        huge = request(
            host,
            port,
            f"POST /price/1 HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Length: {'0' * 4400}{'9' * 25}\r\n\r\n",
        )
        assert huge.status in (400, 413)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
