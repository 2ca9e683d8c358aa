"""The file upload example: multipart posts with several files, the size limit, the session's
list in every tab, one-shot downloads."""

from __future__ import annotations

import importlib.util
import re
import secrets
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
from examples.file_upload import MAX_FILE, MAX_KEPT, app

from pyvia import App
from pyvia.testing import Tab, TestClient


@pytest.fixture(autouse=True)
def no_tabs_left_over() -> Iterator[None]:
    """A closed TestClient leaves its tabs (and their session scopes) in the module's app."""
    yield
    with TestClient(app):
        for ctx in list(app.contexts.values()):
            app.destroy(ctx)


def fresh_copy(name: str) -> ModuleType:
    """Another copy of the example module, with its own App (the documentation site mounts one)."""
    path = Path(__file__).resolve().parents[2] / "examples" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"mounted_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def multipart(fields: dict[str, str], files: list[tuple[str, str, str, bytes]]) -> tuple[bytes, str]:
    """A multipart/form-data body as a browser sends a form: (name, filename, type, data) per file."""
    boundary = "----pyvia" + secrets.token_hex(8)
    out = bytearray()
    for name, value in fields.items():
        out += f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'.encode()
    for name, filename, ctype, data in files:
        out += (
            (
                f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"; filename="{filename}"\r\n'
                f"Content-Type: {ctype}\r\n\r\n"
            ).encode()
            + data
            + b"\r\n"
        )
    out += f"--{boundary}--\r\n".encode()
    return bytes(out), f"multipart/form-data; boundary={boundary}"


def upload(tab: Tab, *files: tuple[str, str, bytes]) -> int:
    """Post the form as Datastar does: the context id in ``via_ctx``, every file under ``files``."""
    (form,) = tab.find("form#upload")
    assert "contentType: 'form'" in form.attrs["data-on:submit__prevent"]
    assert form.attrs["enctype"] == "multipart/form-data"
    (ctx_field,) = tab.find("input[name=via_ctx]")
    body, ctype = multipart({"via_ctx": ctx_field.attrs["value"]}, [("files", *f) for f in files])
    status = tab.client.post(tab.context.actions["upload"].url, body=body, headers={"content-type": ctype}).status
    app.flush_broadcasts()  # the session's list reaches its tabs with the next flush
    return status


def names(tab: Tab) -> list[str]:
    return re.findall(r'<td class="name">(.*?)</td>', tab.html)


def test_several_files_in_one_post_are_listed_with_size_and_type() -> None:
    with TestClient(app) as client:
        tab = client.open("/")
        assert "No files yet." in tab.html
        binary = bytes(range(256)) * 8  # 2 KiB with CR, LF and NUL in it
        status = upload(tab, ("notes.txt", "text/plain", b"hello"), ("<data>.bin", "application/octet-stream", binary))
        assert status == 200
        assert tab.signals["_status"] == "Uploaded 2 files (2.0 KiB)." and tab.signals["_failed"] is False
        listed = tab.signals["_session__files"]
        assert [(f["name"], f["size"], f["type"]) for f in listed] == [
            ("notes.txt", 5, "text/plain"),
            ("<data>.bin", 2048, "application/octet-stream"),
        ]
        assert names(tab) == ["notes.txt", "&lt;data&gt;.bin"]  # escaped
        assert "2.0 KiB" in tab.html and "text/plain" in tab.html

        tab.post(tab.context.actions["download"].url + f"?file_id=%22{listed[1]['id']}%22")
        url = tab.scripts[-1].split('"')[1]  # window.location.href = "/_download/…"
        got = client.get(url)
        assert got.body == binary
        assert ("content-type", "application/octet-stream") in got.headers
        assert any(k == "content-disposition" and "attachment" in v for k, v in got.headers)
        assert client.get(url).status == 404  # one shot


def test_too_large_files_are_refused_with_a_clear_message() -> None:
    with TestClient(app) as client:
        tab = client.open("/")
        big = b"x" * (MAX_FILE + 1)
        assert upload(tab, ("small.txt", "text/plain", b"ok"), ("huge.iso", "application/x-iso9660-image", big)) == 200
        assert tab.signals["_failed"] is True
        assert tab.signals["_status"] == "Over the 2.0 MiB limit per file: huge.iso (2.0 MiB). Nothing was uploaded."
        assert tab.signals["_session__files"] == []  # not even the small one
        assert upload(tab, ("exact.bin", "application/octet-stream", b"x" * MAX_FILE)) == 200
        assert tab.signals["_failed"] is False and len(tab.signals["_session__files"]) == 1


def test_a_post_without_files_asks_for_some() -> None:
    with TestClient(app) as client:
        tab = client.open("/")
        assert upload(tab) == 200
        assert tab.signals["_status"] == "Choose one or more files first." and tab.signals["_failed"] is True


def test_the_list_belongs_to_the_session_and_downloads_to_it_too() -> None:
    with TestClient(app) as ann, TestClient(app) as bob:
        a1, a2, b = ann.open("/"), ann.open("/"), bob.open("/")
        upload(a1, ("ann.txt", "text/plain", b"ann's"))
        assert names(a2) == ["ann.txt"]  # the other tab of the same browser
        assert names(b) == [] and b.signals["_session__files"] == []
        key = a1.signals["_session__files"][0]["id"]

        b.post(b.context.actions["download"].url + f"?file_id=%22{key}%22")  # another session's id: nothing
        assert b.scripts == []
        a2.post(a2.context.actions["download"].url + f"?file_id=%22{key}%22")
        url = a2.scripts[-1].split('"')[1]
        assert bob.get(url).status == 404  # the URL is bound to ann's session
        assert ann.get(url).body == b"ann's"

        a2.post(a2.context.actions["remove"].url + f"?file_id=%22{key}%22")
        app.flush_broadcasts()
        assert names(a1) == [] and "No files yet." in a1.html
        assert ann.open("/").signals["_session__files"] == []


def test_only_the_newest_files_are_kept() -> None:
    with TestClient(app) as client:
        tab = client.open("/")
        for i in range(MAX_KEPT + 3):
            upload(tab, (f"f{i}.txt", "text/plain", b"."))
        assert [f["name"] for f in tab.signals["_session__files"]] == [f"f{i}.txt" for i in range(3, MAX_KEPT + 3)]


def test_the_page_shows_progress_while_the_request_is_in_flight() -> None:
    with TestClient(app) as client:
        tab = client.open("/")
        (form,) = tab.find("form#upload")
        assert form.attrs["data-indicator"] == "_uploading"  # true while Datastar's fetch runs
        assert "evt.detail.type === 'error'" in form.attrs["data-on:datastar-fetch"]
        assert f"f.size > {MAX_FILE}" in form.attrs["data-on:submit__prevent"]  # checked before sending
        (progress,) = tab.find("#progress")
        assert progress.attrs["data-show"] == "$_uploading"


def test_mounted_below_a_prefix_every_url_carries_it() -> None:
    site = App()
    site.mount("/examples/file_upload", fresh_copy("file_upload").app)  # as the documentation site does
    with TestClient(site) as client:
        tab = client.open("/examples/file_upload/")
        (form,) = tab.find("form#upload")
        posted = re.search(r"@post\('([^']+)', \{contentType: 'form'", form.attrs["data-on:submit__prevent"])
        assert posted and posted.group(1) == "/examples/file_upload/_action/upload"
        body, ctype = multipart({"via_ctx": tab.id}, [("files", "a.txt", "text/plain", b"mounted")])
        assert client.post(posted.group(1), body=body, headers={"content-type": ctype}).status == 200
        assert tab.signals["_status"] == "Uploaded 1 file (7 B)."
        (button,) = tab.find("button.download")
        assert "'/examples/file_upload/_action/download?file_id=" in button.attrs["data-on:click"]
        tab.click("button.download")
        url = tab.scripts[-1].split('"')[1]
        assert url.startswith("/examples/file_upload/_download/")
        assert client.get(url).body == b"mounted"
