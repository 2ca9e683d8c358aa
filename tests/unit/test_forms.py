"""Request bodies: url-encoded and multipart forms, and where a request's signals come from."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pyvia.errors import MalformedRequest
from pyvia.forms import Form, FormLimits, parse_form, request_signals
from pyvia.http import Headers, Request

BOUNDARY = "----pyviaBoundary7MA4YWxk"


def make_request(body: bytes = b"", content_type: str | None = None, method: str = "POST", query: str = "") -> Request:
    headers = Headers([("content-type", content_type)] if content_type is not None else [])
    return Request(method, "/_action/go", query, headers, body)


def multipart(*parts: tuple[str, bytes], boundary: str = BOUNDARY) -> bytes:
    """Each part is (Content-Disposition params and optional extra header lines, body)."""
    out = b""
    for head, data in parts:
        out += f"--{boundary}\r\nContent-Disposition: form-data; {head}\r\n\r\n".encode() + data + b"\r\n"
    return out + f"--{boundary}--\r\n".encode()


MULTIPART = f"multipart/form-data; boundary={BOUNDARY}"


# --- url-encoded ---------------------------------------------------------------------------------


def test_urlencoded_fields_are_decoded() -> None:
    form = parse_form(
        make_request(b"name=Ada+Lovelace&note=a%26b%3Dc&empty=&utf=%C3%A9", "application/x-www-form-urlencoded")
    )
    assert form.fields == {"name": "Ada Lovelace", "note": "a&b=c", "empty": "", "utf": "é"}
    assert form.files == {}


def test_urlencoded_content_type_parameters_are_ignored() -> None:
    form = parse_form(make_request(b"a=1", "Application/X-WWW-Form-Urlencoded; charset=UTF-8"))
    assert form.fields == {"a": "1"}


def test_urlencoded_repeated_name_keeps_the_last_value() -> None:
    assert parse_form(make_request(b"a=1&a=2", "application/x-www-form-urlencoded")).fields == {"a": "2"}


def test_urlencoded_non_utf8_body_is_malformed() -> None:
    with pytest.raises(MalformedRequest, match="not UTF-8"):
        parse_form(make_request(b"a=\xff\xfe", "application/x-www-form-urlencoded"))


@pytest.mark.parametrize("content_type", [None, "application/json", "text/plain", "application/octet-stream"])
def test_other_bodies_are_an_empty_form(content_type: str | None) -> None:
    form = parse_form(make_request(b"a=1", content_type))
    assert form.fields == {}
    assert form.files == {}


# --- multipart -----------------------------------------------------------------------------------


def test_multipart_fields_and_a_file() -> None:
    png = b"\x89PNG\r\n\x1a\n\x00\x00binary\r\n--not-a-boundary"
    body = multipart(
        ('name="title"', "héllo".encode()),
        ('name="avatar"; filename="me.png"\r\nContent-Type: image/png', png),
        ('name="note"', b""),
    )
    form = parse_form(make_request(body, MULTIPART))
    assert form.fields == {"title": "héllo", "note": ""}
    assert list(form.files) == ["avatar"]
    upload = form.files["avatar"]
    assert upload.field_name == "avatar"
    assert upload.filename == "me.png"
    assert upload.content_type == "image/png"
    assert upload.data == png
    assert upload.size == len(png)


def test_multipart_file_without_content_type_is_octet_stream() -> None:
    body = multipart(('name="doc"; filename="a.bin"', b"\x00\x01"))
    upload = parse_form(make_request(body, MULTIPART)).files["doc"]
    assert upload.content_type == "application/octet-stream"
    assert upload.data == b"\x00\x01"


def test_multipart_empty_file_is_kept() -> None:
    body = multipart(('name="doc"; filename="empty.txt"\r\nContent-Type: text/plain', b""))
    upload = parse_form(make_request(body, MULTIPART)).files["doc"]
    assert upload.filename == "empty.txt"
    assert upload.data == b""


def test_multipart_file_larger_than_the_spool_threshold_is_on_disk_and_read_whole() -> None:
    data = bytes(range(256)) * 5000  # 1.28 MB: over the 1 MiB upload_spool_bytes
    body = multipart(('name="big"; filename="big.bin"', data), ('name="small"; filename="s.bin"', b"tiny"))
    form = parse_form(make_request(body, MULTIPART))
    big, small = form.files["big"], form.files["small"]
    assert not big.in_memory and big.size == len(data) and big.data == data
    assert os.path.exists(f"/proc/self/fd/{big.file.fileno()}")  # a real file, already unlinked
    assert small.in_memory and small.data == b"tiny"
    form.close()
    assert big.file.closed and small.file.closed


def test_the_spool_threshold_and_directory_are_settings(tmp_path: Path) -> None:
    body = multipart(('name="doc"; filename="a.bin"', b"x" * 100))
    limits = FormLimits(spool_bytes=10, upload_dir=str(tmp_path))
    upload = parse_form(make_request(body, MULTIPART), limits).files["doc"]
    assert not upload.in_memory and upload.data == b"x" * 100
    assert os.readlink(f"/proc/self/fd/{upload.file.fileno()}").startswith(str(tmp_path))
    assert list(tmp_path.iterdir()) == []  # unnamed: nothing is left behind, even after a crash
    upload.close()


def test_a_file_input_left_empty_gives_no_file() -> None:
    # what Chromium sends for <input type="file" name="doc"> with nothing chosen
    body = multipart(('name="doc"; filename=""\r\nContent-Type: application/octet-stream', b""), ('name="title"', b"t"))
    form = parse_form(make_request(body, MULTIPART))
    assert form.files == {} and form.all_files == {} and form.fields == {"title": "t"}


def test_multipart_content_type_is_case_insensitive() -> None:
    body = multipart(('name="a"', b"1"))
    assert parse_form(make_request(body, f"Multipart/Form-Data; boundary={BOUNDARY}")).fields == {"a": "1"}


@pytest.mark.parametrize(
    "body",
    [
        b"garbage",
        b'--wrong-boundary\r\nContent-Disposition: form-data; name="a"\r\n\r\n1\r\n--wrong-boundary--\r\n',
        f"--{BOUNDARY}\r\nno header colon\r\n\r\nx\r\n--{BOUNDARY}--\r\n".encode(),
        f"--{BOUNDARY}\r\nContent-Disposition: form-data\r\n\r\nx\r\n--{BOUNDARY}--\r\n".encode(),
    ],
    ids=["garbage", "wrong-boundary", "bad-header", "no-field-name"],
)
def test_malformed_multipart_is_refused(body: bytes) -> None:
    with pytest.raises(MalformedRequest, match="malformed multipart"):
        parse_form(make_request(body, MULTIPART))


def test_multipart_without_boundary_is_refused() -> None:
    with pytest.raises(MalformedRequest, match="malformed multipart"):
        parse_form(make_request(multipart(('name="a"', b"1")), "multipart/form-data"))


def test_truncated_multipart_body_is_refused() -> None:
    complete = multipart(('name="title"', b"kept"), ('name="essay"', b"a long text the client never finished"))
    truncated = complete[: complete.index(b"never")]
    with pytest.raises(MalformedRequest):
        parse_form(make_request(truncated, MULTIPART))


# --- request_signals -----------------------------------------------------------------------------


def test_get_reads_the_datastar_query_parameter() -> None:
    request = make_request(method="GET", query="datastar=%7B%22count%22%3A2%7D&other=1")
    assert request_signals(request, None) == {"count": 2}


def test_get_without_datastar_parameter_has_no_signals() -> None:
    assert request_signals(make_request(method="GET", query="count=2"), None) == {}


def test_get_with_bad_datastar_parameter_is_malformed() -> None:
    with pytest.raises(MalformedRequest):
        request_signals(make_request(method="GET", query="datastar=%5B1%5D"), None)


def test_get_ignores_the_body() -> None:
    request = make_request(b'{"count": 9}', "application/json", method="GET", query="datastar=%7B%7D")
    assert request_signals(request, None) == {}


def test_post_json_body_is_read() -> None:
    request = make_request(b'{"count": 3}', "application/json; charset=utf-8", query="datastar=%7B%22count%22%3A1%7D")
    assert request_signals(request, None) == {"count": 3}


def test_post_bad_json_body_is_malformed() -> None:
    with pytest.raises(MalformedRequest):
        request_signals(make_request(b"{nope", "application/json"), None)


def test_form_datastar_field_beats_plain_fields() -> None:
    request = make_request(b"", "application/x-www-form-urlencoded")
    form = Form({"datastar": '{"count": 4}', "count": "99"}, {})
    assert request_signals(request, form) == {"count": 4}


def test_plain_form_fields_are_the_signals_without_a_datastar_field() -> None:
    body = b"via_ctx=abc&name=Ada"
    request = make_request(body, "application/x-www-form-urlencoded")
    assert request_signals(request, parse_form(request)) == {"via_ctx": "abc", "name": "Ada"}


def test_multipart_form_fields_are_the_signals() -> None:
    body = multipart(('name="via_ctx"', b"abc"), ('name="doc"; filename="a.txt"', b"x"))
    request = make_request(body, MULTIPART)
    assert request_signals(request, parse_form(request)) == {"via_ctx": "abc"}


def test_bad_datastar_form_field_is_malformed() -> None:
    with pytest.raises(MalformedRequest):
        request_signals(make_request(b"", "application/x-www-form-urlencoded"), Form({"datastar": "[]"}, {}))


@pytest.mark.parametrize("content_type", [None, "text/plain", "text/plain; charset=utf-8"])
def test_untyped_or_text_body_is_read_as_json(content_type: str | None) -> None:
    assert request_signals(make_request(b'{"a": 1}', content_type), None) == {"a": 1}


def test_empty_post_has_no_signals() -> None:
    assert request_signals(make_request(b"", None), None) == {}
    assert request_signals(make_request(b"", "application/x-www-form-urlencoded"), Form({}, {})) == {}


def test_other_body_types_carry_no_signals() -> None:
    assert request_signals(make_request(b'{"a": 1}', "application/octet-stream"), None) == {}
