"""Issue 18, uploads: a file input left empty gives no file, big files are spooled to disk and
gone once the action is answered, and every limit answers 413 (or 400 for a malformed body) with
a reason the page can show. In Chromium where the browser decides what is sent; over raw sockets
for what a browser would not send.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, expect

from pyvia import App, Context
from tests.browser.conftest import browser  # noqa: F401  # the Chromium fixture
from tests.helpers import RawClient, RawResponse, running_server
from tests.server.test_app_over_http import open_page

#: What the upload action saw, for the test to read: (field, filename, size, in memory, its file).
SEEN: list[tuple[str, str, int, bool, Any]] = []


def upload_app(**options: Any) -> App:
    app = App(action_rate=0, **options)

    @app.page("/")
    def page(c: Context) -> None:
        got = c.signal("nothing yet", "got")

        @c.action
        def upload() -> None:
            files = c.files_of("doc")
            for f in files:
                where = os.readlink(f"/proc/self/fd/{f.file.fileno()}") if not f.in_memory else ""
                SEEN.append((f.field_name, f.filename, f.size, f.in_memory, (f.file, where)))
            got.value = f"{len(files)} files, title {c.input('title', '')!r}"
            c.sync()  # the view shows it

        c.view(
            lambda: (
                f"""
<form id="form" enctype="multipart/form-data"
      data-on:submit__prevent="@post('{upload.url}', {{contentType: 'form'}})">
  <input type="hidden" name="via_ctx" value="{c.id}">
  <input id="title" name="title" value="a title">
  <input id="doc" type="file" name="doc" multiple>
  <button id="send">Send</button>
</form>
<p id="got">{got.value}</p>"""
            )
        )

    return app


@pytest.fixture(autouse=True)
def _forget() -> Iterator[None]:
    SEEN.clear()
    yield
    SEEN.clear()


def test_a_form_posted_with_no_file_chosen_gives_no_file(browser: Browser) -> None:  # noqa: F811
    with running_server(upload_app()) as (host, port):
        page = browser.new_page()
        try:
            page.goto(f"http://{host}:{port}/")
            page.click("#send")  # nothing chosen: Chromium sends an empty part with filename=""
            expect(page.locator("#got")).to_have_text("0 files, title 'a title'")
            assert SEEN == []
            page.set_input_files(
                "#doc",
                [
                    {"name": "a.txt", "mimeType": "text/plain", "buffer": b"A"},
                    {"name": "empty.txt", "mimeType": "text/plain", "buffer": b""},
                ],
            )
            page.click("#send")
            expect(page.locator("#got")).to_have_text("2 files, title 'a title'")
            assert [(field, name, size) for field, name, size, *_ in SEEN] == [
                ("doc", "a.txt", 1),
                ("doc", "empty.txt", 0),
            ]
        finally:
            page.close()


# --- over raw sockets ----------------------------------------------------------------------------


class Poster:
    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        _, seed, self.cookie = open_page(host, port)
        self.ctx = seed["via_ctx"]

    def post(self, body: bytes, content_type: str) -> RawResponse:
        with RawClient(self.host, self.port, timeout=20) as client:
            client.send(
                f"POST /_action/upload HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
                f"Origin: http://{self.host}:{self.port}\r\nCookie: {self.cookie}\r\n"
                f"Content-Type: {content_type}\r\nContent-Length: {len(body)}\r\n\r\n".encode()
                + body
            )
            return client.read_response()

    def multipart(self, fields: dict[str, bytes], files: list[tuple[str, bytes]]) -> RawResponse:
        boundary = "----pyvia" + secrets.token_hex(8)
        out = bytearray(
            f'--{boundary}\r\nContent-Disposition: form-data; name="via_ctx"\r\n\r\n{self.ctx}\r\n'.encode()
        )
        for name, value in fields.items():
            out += f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n'.encode() + value + b"\r\n"
        for filename, data in files:
            out += (
                (
                    f'--{boundary}\r\nContent-Disposition: form-data; name="doc"; filename="{filename}"\r\n'
                    "Content-Type: application/octet-stream\r\n\r\n"
                ).encode()
                + data
                + b"\r\n"
            )
        out += f"--{boundary}--\r\n".encode()
        return self.post(bytes(out), f"multipart/form-data; boundary={boundary}")


def test_files_above_the_threshold_are_spooled_to_disk_and_deleted_after_the_answer(tmp_path: Path) -> None:
    app = upload_app(upload_spool_bytes=64 * 1024, upload_dir=str(tmp_path))
    with running_server(app) as (host, port):
        poster = Poster(host, port)
        big, small = os.urandom(3 * 1024 * 1024), b"small file"
        assert poster.multipart({}, [("big.bin", big), ("small.txt", small)]).status == 200
        (_, _, big_size, big_in_memory, (big_file, big_path)), (_, _, small_size, small_in_memory, _) = SEEN
        assert (big_size, big_in_memory, small_size, small_in_memory) == (len(big), False, len(small), True)
        assert big_path.startswith(str(tmp_path)) and big_path.endswith("(deleted)")  # unnamed from the start
        assert big_file.closed  # closed once the action was answered: the disk space is back
        assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("options", "send", "status", "reason"),
    [
        (
            {"max_form_files": 3},
            lambda p: p.multipart({}, [(f"f{i}", b"x") for i in range(4)]),
            413,
            "a form with more than 3 files",
        ),
        (
            {"max_file_bytes": 1000},
            lambda p: p.multipart({}, [("big.bin", b"x" * 1001)]),
            413,
            "the file 'big.bin' is over the limit of 1000 bytes",
        ),
        (
            {"max_form_bytes": 1000},
            lambda p: p.multipart({"title": b"t" * 1001}, []),
            413,
            "form fields of more than 1000 bytes (files aside)",
        ),
        (
            {"max_form_fields": 5},
            lambda p: p.multipart({f"t{i}": b"v" for i in range(6)}, []),
            413,
            "a form with more than 5 fields",
        ),
        (
            {"max_form_fields": 5},
            lambda p: p.post(b"&".join(b"a=1" for _ in range(6)), "application/x-www-form-urlencoded"),
            413,
            "a form with more than 5 fields",
        ),
        (
            {},
            lambda p: p.post(b"x" * (1024 * 1024 + 1), "application/x-www-form-urlencoded"),
            413,
            "a form of 1048577 bytes is over the limit of 1048576",
        ),
        ({}, lambda p: p.post(b"--x\r\n", "multipart/form-data"), 400, "malformed multipart body: no boundary"),
        (
            {},
            lambda p: p.post(f"via_ctx={p.ctx}&a=%FF".encode(), "application/x-www-form-urlencoded"),
            200,
            "",
        ),  # a percent escape that is not UTF-8 decodes to U+FFFD, as browsers do
        ({}, lambda p: p.post(b"a=\xff", "application/x-www-form-urlencoded"), 400, "the form is not UTF-8"),
    ],
)
def test_each_limit_refuses_with_its_reason(
    options: dict[str, Any], send: Any, status: int, reason: str, tmp_path: Path
) -> None:
    with running_server(upload_app(upload_dir=str(tmp_path), **options)) as (host, port):
        poster = Poster(host, port)
        response = send(poster)
        assert response.status == status, response.body
        assert reason in response.body.decode()
        assert SEEN == [] and list(tmp_path.iterdir()) == []
        assert poster.multipart({}, [("ok.txt", b"fine")]).status == 200  # the next form is served
