"""h11's invariant for form bodies under limits: parse within the limits, or refuse with a client
error (400 malformed, 413 over a limit), never anything else, never a hang; and what parses
holds no more than the limits allow, with every file closed by ``Form.close()``."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pyvia.errors import MalformedRequest, PayloadTooLarge
from pyvia.forms import Form, FormLimits, check_form, parse_form
from pyvia.http import Headers, Request
from tests.fuzz.bounds import bounded

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
LIMITS = FormLimits(max_fields=4, max_files=3, max_form_bytes=64, max_file_bytes=40, spool_bytes=16)
BOUNDARY = "fuzzB"

_pieces = st.sampled_from(
    [
        f"--{BOUNDARY}\r\n",
        f"--{BOUNDARY}--\r\n",
        f"\r\n--{BOUNDARY}",
        f"\r\n--{BOUNDARY}--",
        "\r\n",
        "\r\n\r\n",
        'Content-Disposition: form-data; name="a"\r\n',
        'Content-Disposition: form-data; name="a"; filename="x.bin"\r\n',
        'Content-Disposition: form-data; name="f"; filename=""\r\n',
        "Content-Disposition: form-data; name=a; filename=x\r\n",
        "Content-Disposition: form-data\r\n",
        'Content-Disposition: attachment; name="z"\r\n',
        "Content-Type: text/plain\r\n",
        "Content-Type: \r\n",
        "X-Other: 1\r\n" * 3,
        "Content-Transfer-Encoding: base64\r\n",
        "value",
        "x" * 30,
        "\x00\xff",
        "--",
    ]
).map(lambda s: s.encode("latin-1"))
# Bodies shaped like forms (parts, headers, data), mixed with raw bytes.
multipart_bodies = st.lists(st.one_of(_pieces, st.binary(max_size=20)), max_size=40).map(b"".join)
wellformed_parts = st.lists(
    st.tuples(
        st.sampled_from(["a", "b", "via_ctx"]),
        st.none() | st.sampled_from(["", "f.txt", "é.bin"]),
        st.binary(max_size=60),
    ),
    max_size=8,
)
content_types = st.one_of(
    st.just(f"multipart/form-data; boundary={BOUNDARY}"),
    st.just(f'multipart/form-data; boundary="{BOUNDARY}"'),
    st.just("multipart/form-data"),
    st.just("multipart/form-data; boundary=" + "b" * 71),
    st.text(st.characters(max_codepoint=0xFF), max_size=30).map(lambda extra: f"multipart/form-data; {extra}"),
)


def build(parts: list[tuple[str, str | None, bytes]]) -> bytes:
    out = bytearray()
    for name, filename, data in parts:
        extra = "" if filename is None else f'; filename="{filename}"'
        out += f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="{name}"{extra}\r\n\r\n'.encode() + data + b"\r\n"
    return bytes(out + f"--{BOUNDARY}--\r\n".encode())


def request(body: bytes, content_type: str) -> Request:
    return Request("POST", "/_action/x", "", Headers([("content-type", content_type)]), body)


def check_within_limits(form: Form) -> None:
    assert len(form.fields) <= LIMITS.max_fields
    assert sum(len(v.encode()) for v in form.fields.values()) <= 4 * LIMITS.max_form_bytes  # U+FFFD is 3 bytes
    files = [f for group in form.all_files.values() for f in group]
    assert len(files) <= LIMITS.max_files
    assert set(form.files) == set(form.all_files)
    for f in files:
        assert f.size <= (LIMITS.max_file_bytes or f.size) and len(f.data) == f.size
        assert f.in_memory == (f.size <= LIMITS.spool_bytes)
        assert f.filename != "" or f.size > 0  # an empty input is no file
    form.close()
    assert all(f.file.closed for f in files)


def parse_or_refuse(req: Request) -> Form | None:
    with bounded(5):
        try:
            return parse_form(req, LIMITS)
        except (MalformedRequest, PayloadTooLarge) as exc:
            assert exc.public_message.startswith(type(exc).public_message + ": ")  # a reason to show
            return None


@FUZZ
@given(body=multipart_bodies, content_type=content_types)
def test_any_multipart_body_parses_within_the_limits_or_is_refused(body: bytes, content_type: str) -> None:
    form = parse_or_refuse(request(body, content_type))
    if form is not None:
        check_within_limits(form)


@FUZZ
@given(parts=wellformed_parts)
def test_a_wellformed_form_parses_exactly_unless_over_a_limit(parts: list[tuple[str, str | None, bytes]]) -> None:
    form = parse_or_refuse(request(build(parts), f"multipart/form-data; boundary={BOUNDARY}"))
    fields = [(n, d) for n, f, d in parts if f is None]
    files = [(n, f, d) for n, f, d in parts if f is not None and (f or d)]
    over = (
        len(fields) > LIMITS.max_fields
        or len(files) > LIMITS.max_files
        or len(parts) > LIMITS.max_fields + LIMITS.max_files  # the count of parts before parsing
        or sum(len(d) for _, d in fields) > LIMITS.max_form_bytes
        or any(len(d) > (LIMITS.max_file_bytes or 0) for *_, d in files)
    )
    if form is None:
        assert over or any(b"\r\n--" + BOUNDARY.encode() in d for *_, d in parts)
        return
    assert not over
    assert form.fields == {n: d.decode(errors="replace") for n, d in fields}
    got = [(f.field_name, f.filename, f.data) for group in form.all_files.values() for f in group]
    assert sorted(got) == sorted(files)
    check_within_limits(form)


@FUZZ
@given(
    st.one_of(
        st.binary(max_size=200),
        st.lists(
            st.sampled_from([b"a=1", b"&", b"=", b"%", b"%4", b"%41", b"%FF", b"+", b"\xff", b"b", b";"]), max_size=40
        ).map(b"".join),
    )
)
def test_any_urlencoded_body_parses_within_the_limits_or_is_refused(body: bytes) -> None:
    form = parse_or_refuse(request(body, "application/x-www-form-urlencoded"))
    if form is not None:
        assert len(body) <= LIMITS.max_form_bytes and body.count(b"&") < LIMITS.max_fields
        assert len(form.fields) <= LIMITS.max_fields and form.files == {}


@FUZZ
@given(
    body=st.one_of(multipart_bodies, st.binary(max_size=100)),
    content_type=st.sampled_from(
        [
            f"multipart/form-data; boundary={BOUNDARY}",
            "application/x-www-form-urlencoded",
            "application/json",
            "text/plain",
            "",
        ]
    ),
)
def test_the_cheap_check_refuses_only_with_a_client_error(body: bytes, content_type: str) -> None:
    with bounded(5):
        try:
            check_form(request(body, content_type), LIMITS)
        except (MalformedRequest, PayloadTooLarge):
            assert content_type.startswith(("multipart/", "application/x-www-form-urlencoded"))
            return
    if content_type == "application/x-www-form-urlencoded":
        assert len(body) <= LIMITS.max_form_bytes and body.count(b"&") < LIMITS.max_fields
    elif content_type.startswith("multipart/"):
        assert body.count(b"\r\n--" + BOUNDARY.encode()) <= LIMITS.max_fields + LIMITS.max_files + 1
