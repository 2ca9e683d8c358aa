"""h11's invariant for pyvia's parsers: parse, or raise the one documented error, never anything else.

And its mirror for the formatter: whatever text goes in, exactly one well-formed SSE event comes out.
"""

from __future__ import annotations

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pyvia import protocol
from pyvia.errors import MalformedRequest, PayloadTooLarge
from pyvia.forms import parse_form
from pyvia.http import Headers, Request, format_cookie, parse_cookies

FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Text that leans on the characters that matter to SSE framing.
_FRAMING = st.sampled_from(["\n", "\r", "\r\n", "\n\n", "event: ", "data: ", ":", " ", "\x00", "\u2028", "\x85"])
sse_text = st.lists(st.one_of(st.text(max_size=20), _FRAMING), max_size=12).map("".join)


def _events(raw: bytes) -> list[bytes]:
    """Split an SSE byte stream into events the way a browser does (any line break ends a line)."""
    text = raw.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    assert text.endswith(b"\n\n")
    return text[:-2].split(b"\n\n")


@FUZZ
@given(html=sse_text, selector=st.none() | sse_text, mode=st.sampled_from(sorted(protocol.MODES)))
def test_patch_elements_is_always_exactly_one_event(html: str, selector: str | None, mode: str) -> None:
    try:
        out = protocol.patch_elements(html, selector, mode)
    except ValueError:
        assert selector is not None
        assert selector == "" or "\n" in selector or "\r" in selector
        return
    events = _events(out)
    assert len(events) == 1
    lines = events[0].split(b"\n")
    assert lines[0] == b"event: " + protocol.PATCH_ELEMENTS.encode()
    assert all(line.startswith(b"data: ") for line in lines[1:])
    assert not any(line.startswith(b"event:") for line in lines[1:])
    # The elements lines, joined as Datastar joins them, give back the HTML with normalised line breaks.
    elements = [line.removeprefix(b"data: elements ") for line in lines if line.startswith(b"data: elements ")]
    expected = html.replace("\r\n", "\n").replace("\r", "\n")
    assert b"\n".join(elements).decode() == expected
    if selector is not None:
        assert lines[1] == b"data: selector " + selector.encode()


@FUZZ
@given(st.text(max_size=200))
def test_execute_script_is_always_one_event_with_one_closing_tag(js: str) -> None:
    events = _events(protocol.execute_script(js))
    assert len(events) == 1
    assert events[0].count(b"</script") == 1


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=8), inner, max_size=5),
    max_leaves=30,
)


@FUZZ
@given(st.dictionaries(st.text(max_size=10), _json_values, max_size=8))
def test_patch_signals_is_one_event_that_round_trips(signals: dict[str, object]) -> None:
    out = protocol.patch_signals(signals)
    events = _events(out)
    assert len(events) == 1
    head, data = events[0].split(b"\n")
    assert head == b"event: " + protocol.PATCH_SIGNALS.encode()
    assert orjson.loads(data.removeprefix(b"data: signals ")) == orjson.loads(orjson.dumps(signals))


_json_ish = st.lists(
    st.one_of(
        st.binary(max_size=8),
        st.sampled_from(
            [b"{", b"}", b"[", b"]", b'"', b":", b",", b"1", b"null", b"\\u", b"\\ud800", b"1e999", b"-", b"\xff"]
        ),
    ),
    max_size=40,
).map(b"".join)


@FUZZ
@given(st.one_of(st.binary(max_size=300), _json_ish, _json_values.map(orjson.dumps)))
def test_parse_signals_returns_a_dict_or_a_client_error(raw: bytes) -> None:
    try:
        value = protocol.parse_signals(raw)
    except (MalformedRequest, PayloadTooLarge):
        return
    assert isinstance(value, dict)


@FUZZ
@given(st.text(max_size=300))
def test_parse_signals_of_text_returns_a_dict_or_a_client_error(raw: str) -> None:
    try:
        value = protocol.parse_signals(raw)
    except (MalformedRequest, PayloadTooLarge):
        return
    assert isinstance(value, dict)


@FUZZ
@given(st.lists(st.text(max_size=60), max_size=4))
def test_parse_cookies_never_raises(headers: list[str]) -> None:
    cookies = parse_cookies(headers)
    assert all(isinstance(k, str) and k and isinstance(v, str) for k, v in cookies.items())


@FUZZ
@given(st.text(), st.text(min_size=1, max_size=20).filter(lambda t: t.isascii()))
def test_any_cookie_value_is_an_ascii_header_and_comes_back_as_it_was(value: str, other: str) -> None:
    """``c.set_cookie`` takes any text (a name with U+2028, '李', quotes, ';'): the header fits any
    HTTP/1.1 head, and what the browser sends back reads as the same text."""
    header = format_cookie("name", value)
    header.encode("ascii")  # no UnicodeEncodeError when the response is written
    assert "\r" not in header and "\n" not in header
    sent_back = header.split("; ")[0]  # what a browser keeps and sends: the name=value pair as given
    next_one = format_cookie("other", other).split("; ")[0]
    cookies = parse_cookies([f"{sent_back}; {next_one}"])
    assert cookies["name"] == value and cookies["other"] == other


_BOUNDARY = "fuzzBoundary"
_part_pieces = st.sampled_from(
    [
        f"--{_BOUNDARY}\r\n",
        f"--{_BOUNDARY}--\r\n",
        f"\r\n--{_BOUNDARY}",
        'Content-Disposition: form-data; name="a"\r\n',
        'Content-Disposition: form-data; name="f"; filename="x.bin"\r\n',
        "Content-Disposition: form-data\r\n",
        "Content-Type: text/plain\r\n",
        "Content-Transfer-Encoding: base64\r\n",
        "Content-Transfer-Encoding: quoted-printable\r\n",
        "\r\n",
        "value",
        "=41=\r\n",
        "--",
    ]
).map(str.encode)
multipart_body = st.lists(st.one_of(_part_pieces, st.binary(max_size=12)), max_size=30).map(b"".join)
multipart_type = st.one_of(
    st.just(f"multipart/form-data; boundary={_BOUNDARY}"),
    st.just("multipart/form-data"),
    # Front ends decode header bytes as latin-1, so a header value never holds a character above U+00FF.
    st.text(st.characters(max_codepoint=0xFF), max_size=30).map(lambda extra: f"multipart/form-data; {extra}"),
)


@FUZZ
@given(body=multipart_body, content_type=multipart_type)
def test_parse_form_on_any_multipart_body_raises_only_malformed_request(body: bytes, content_type: str) -> None:
    request = Request("POST", "/_action/x", "", Headers([("content-type", content_type)]), body)
    try:
        form = parse_form(request)
    except MalformedRequest:
        return
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in form.fields.items())


@FUZZ
@given(st.binary(max_size=200))
def test_parse_form_on_any_urlencoded_body_raises_only_malformed_request(body: bytes) -> None:
    request = Request("POST", "/", "", Headers([("content-type", "application/x-www-form-urlencoded")]), body)
    try:
        form = parse_form(request)
    except MalformedRequest:
        return
    assert all(isinstance(v, str) for v in form.fields.values())
