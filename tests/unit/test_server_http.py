"""The pure half of the native server: limits, heads, chunks, canned errors, request targets."""

from __future__ import annotations

import pytest

from pyvia.http import Headers, SharedFields
from pyvia.server.http import (
    CONNECTION_CLOSE,
    CONNECTION_KEEP_ALIVE,
    ERRORS,
    LAST_CHUNK,
    ServerLimits,
    encode_response,
    encode_stream_head,
    frame_chunk,
    internal_error,
    split_target,
    status_line,
)


def test_default_limits_are_the_documented_ones() -> None:
    limits = ServerLimits()
    assert limits.max_request_line == 8192
    assert limits.max_header_count == 100
    assert limits.max_header_bytes == 65536
    assert limits.max_body == 16 * 1024 * 1024
    assert (limits.header_timeout, limits.keep_alive_timeout, limits.max_pipelined) == (10.0, 75.0, 32)


def test_limits_are_frozen_and_must_be_positive() -> None:
    with pytest.raises(AttributeError):
        ServerLimits().max_body = 1  # type: ignore[misc]  # frozen on purpose
    with pytest.raises(ValueError, match="header_timeout must be positive"):
        ServerLimits(header_timeout=0)


@pytest.mark.parametrize(
    ("status", "line"),
    [
        (200, "HTTP/1.1 200 OK\r\n"),
        (413, "HTTP/1.1 413 Content Too Large\r\n"),
        (418, "HTTP/1.1 418 I'm a Teapot\r\n"),
        (599, "HTTP/1.1 599 \r\n"),
    ],
)
def test_status_lines_are_precomputed_for_every_code(status: int, line: str) -> None:
    assert status_line(status) == line


@pytest.mark.parametrize("status", [99, 600, -1, 0])
def test_status_outside_100_599_is_refused(status: int) -> None:
    with pytest.raises(ValueError, match="100-599"):
        encode_response(status, [], b"")


def test_response_is_one_bytes_object_with_content_length() -> None:
    data = encode_response(201, [("content-type", "text/plain"), ("x-a", "1")], b"hello")
    assert data == (b"HTTP/1.1 201 Created\r\ncontent-type: text/plain\r\nx-a: 1\r\ncontent-length: 5\r\n\r\nhello")


def test_head_only_keeps_content_length_and_drops_the_body() -> None:
    data = encode_response(200, [], b"hello", head_only=True)
    assert data == b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\n"


def test_head_without_the_body_keeps_the_declared_length_or_sends_none() -> None:
    declared = encode_response(200, [("content-type", "text/html"), ("content-length", "1234")], b"", head_only=True)
    assert declared == b"HTTP/1.1 200 OK\r\ncontent-type: text/html\r\ncontent-length: 1234\r\n\r\n"
    unknown = encode_response(200, [("content-type", "text/html")], b"", head_only=True)
    assert unknown == b"HTTP/1.1 200 OK\r\ncontent-type: text/html\r\n\r\n"  # never a wrong length
    assert encode_response(200, [("content-length", "12; x")], b"", head_only=True) == b"HTTP/1.1 200 OK\r\n\r\n"


@pytest.mark.parametrize("status", [101, 204, 304])
def test_bodiless_statuses_carry_no_length_and_no_body(status: int) -> None:
    data = encode_response(status, [("etag", '"x"')], b"ignored")
    assert b"content-length" not in data and data.endswith(b'etag: "x"\r\n\r\n')


def test_connection_headers_are_added_as_asked() -> None:
    assert encode_response(200, [], b"", connection=CONNECTION_CLOSE).endswith(
        b"connection: close\r\ncontent-length: 0\r\n\r\n"
    )
    assert b"connection: keep-alive\r\n" in encode_response(200, [], b"", connection=CONNECTION_KEEP_ALIVE)


def test_framing_headers_from_the_app_are_dropped() -> None:
    data = encode_response(
        200,
        [("Content-Length", "99"), ("transfer-encoding", "chunked"), ("Connection", "upgrade"), ("x-kept", "1")],
        b"ab",
    )
    assert data == b"HTTP/1.1 200 OK\r\nx-kept: 1\r\ncontent-length: 2\r\n\r\nab"


@pytest.mark.parametrize("value", ["a\r\nset-cookie: x=1", "a\nb", "a\rb", "a\x00b", "\r\n"])
def test_header_value_injection_is_refused(value: str) -> None:
    with pytest.raises(ValueError, match="x-evil"):
        encode_response(200, [("x-ok", "fine"), ("x-evil", value)], b"")
    with pytest.raises(ValueError):
        encode_stream_head(200, [("x-evil", value)])


@pytest.mark.parametrize("name", ["x-evil\r\nset-cookie", "bad name", "colon:", "", "caf\u00e9", "x\ny"])
def test_header_names_must_be_tokens(name: str) -> None:
    with pytest.raises(ValueError, match="header name"):
        encode_response(200, [(name, "v")], b"")


def test_text_outside_latin1_is_refused() -> None:
    with pytest.raises(ValueError):
        encode_response(200, [("x-snow", "\u2603")], b"")


def test_a_name_refused_once_is_refused_again() -> None:
    for _ in range(2):
        with pytest.raises(ValueError):
            encode_response(200, [("bad name", "v")], b"")


def test_stream_head_is_chunked_unless_asked_otherwise() -> None:
    head = encode_stream_head(200, [("content-type", "text/event-stream")])
    assert head == b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    assert b"transfer-encoding" not in encode_stream_head(200, [], chunked=False)


def test_chunk_framing() -> None:
    assert frame_chunk(b"data: x\n\n") == b"9\r\ndata: x\n\n\r\n"
    assert frame_chunk(b"a" * 255).startswith(b"ff\r\n")
    assert LAST_CHUNK == b"0\r\n\r\n"
    with pytest.raises(ValueError, match="empty chunk"):
        frame_chunk(b"")


@pytest.mark.parametrize("status", sorted(ERRORS))
def test_canned_errors_close_the_connection_and_are_well_formed(status: int) -> None:
    data = ERRORS[status]
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    assert lines[0].startswith(b"HTTP/1.1 %d " % status)
    assert b"connection: close" in lines
    assert b"content-length: %d" % len(body) in lines


def test_internal_error_leaks_nothing_and_honours_head() -> None:
    assert internal_error().endswith(b"\r\n\r\nInternal Server Error")
    assert internal_error(head_only=True).endswith(b"content-length: 21\r\n\r\n")


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        (b"/", ("/", "")),
        (b"/a/b?x=1&y=%20", ("/a/b", "x=1&y=%20")),
        (b"/caf%C3%A9/%2F", ("/caf\u00e9//", "")),
        (b"/a#frag", ("/a", "")),
        (b"/a?q#frag", ("/a", "q")),
        (b"*", ("*", "")),
        (b"http://example.com/p?q=1", ("/p", "q=1")),
        (b"HTTPS://example.com", ("/", "")),
        (b"http://example.com?q=1", ("/", "q=1")),
        (b"/bad%ZZescape", ("/bad%ZZescape", "")),
    ],
)
def test_split_target(target: bytes, expected: tuple[str, str]) -> None:
    assert split_target(target) == expected


@pytest.mark.parametrize("target", [b"example.com", b"ftp://x/y", b"", b"a:443"])
def test_split_target_refuses_other_forms(target: bytes) -> None:
    with pytest.raises(ValueError):
        split_target(target)


def test_headers_from_raw_match_headers_built_one_by_one() -> None:
    raw = [(b"Host", b"x"), (b"Cookie", b"a=1"), (b"COOKIE", b"b=2"), (b"X-Caf", b"caf\xc3\xa9")]
    fast = Headers.from_raw(raw)
    slow = Headers()
    for name, value in raw:
        slow.add(name.decode("latin-1"), value.decode("latin-1"))
    assert list(fast) == list(slow)
    assert fast.get("cookie") == "b=2" and fast.get_all("cookie") == ["a=1", "b=2"]
    assert "HOST" in fast and len(fast) == 4


def test_headers_without_a_repeat_are_one_dict_whose_names_every_request_shares() -> None:
    """A tab keeps its latest request while it is open: its headers must not hold a second copy."""
    first = Headers.from_raw([(b"User-Agent", b"a"), (b"Accept", b"*/*")])
    second = Headers.from_raw([(b"user-agent", b"b"), (b"ACCEPT", b"text/html")])
    assert not first.repeats_a_name() and first._items is None
    assert list(first) == [("user-agent", "a"), ("accept", "*/*")] and len(first) == 2
    assert next(iter(first))[0] is next(iter(second))[0]
    assert first.get_all("accept") == ["*/*"] and first.get_all("cookie") == []
    first.add("Accept", "text/plain")  # the first repeat keeps every field, in order, from then on
    assert first.repeats_a_name() and list(first) == [("user-agent", "a"), ("accept", "*/*"), ("accept", "text/plain")]
    assert first.get("accept") == "text/plain" and first.get_all("accept") == ["*/*", "text/plain"]
    assert len(first) == 3 and repr(first).startswith("Headers([('user-agent'")


def test_packed_headers_answer_every_question_as_before_and_unpack_once_asked() -> None:
    """A tab's kept request holds its headers as shared strings (Headers.pack) until they are read."""
    raw = [(b"Host", b"x"), (b"User-Agent", b"Mozilla \xe9"), (b"X-Empty", b""), (b"Cookie", b"a=1; b=2")]
    before = Headers.from_raw(raw)
    fields = list(before)
    for ask in (
        lambda h: h.get("USER-AGENT"),
        lambda h: h.get("x-empty", "default"),  # an empty value is a value, not a miss
        lambda h: h.get("missing", "default"),
        lambda h: h.get_lower("cookie"),
        lambda h: h.get_lower("missing"),
        lambda h: h.get_all("Cookie"),
        lambda h: "HOST" in h,
        lambda h: len(h),
        lambda h: list(h),
    ):
        packed = Headers.from_raw(raw)
        packed.pack(SharedFields())
        assert packed._packed is not None and packed._map == {}
        assert ask(packed) == ask(before)
        assert packed._packed is None and list(packed) == fields  # unpacked once asked, as it was
    names = Headers.from_raw(raw)
    names.pack(SharedFields())
    assert next(iter(names))[0] is next(iter(before))[0]  # the shared name, not a copy
    names.pack(SharedFields())
    names.add("Cookie", "c=3")  # a repeat after packing keeps every field
    assert names.get_all("cookie") == ["a=1; b=2", "c=3"]
    from pyvia import http

    assert http._PACKED == {}  # the empty dict every packed Headers shares was never written
    for unpackable in (Headers([("A", "1"), ("a", "2")]), Headers()):
        kept = list(unpackable)
        unpackable.pack(SharedFields())
        assert unpackable._packed is None and list(unpackable) == kept
    line_break = Headers([("a", "line\nbreak"), ("b", "2")])  # no parser makes one; packing keeps it as is
    line_break.pack(SharedFields())
    assert line_break._packed is not None and list(line_break) == [("a", "line\nbreak"), ("b", "2")]


def test_tabs_of_one_browser_share_their_header_strings_but_not_their_own_values() -> None:
    shared = SharedFields(kept=8, longest=40)

    def tab(cookie: str, agent: str = "Mozilla/5.0 (X11; Linux x86_64)") -> Headers:
        headers = Headers.from_raw([(b"Host", b"x"), (b"User-Agent", agent.encode()), (b"Cookie", cookie.encode())])
        headers.pack(shared)
        return headers

    first, second = tab("via_session_id=a"), tab("via_session_id=b")
    assert first._packed is not None and second._packed is not None
    assert first._packed_names is second._packed_names  # one tuple of names for every such tab
    assert first._packed[1] is second._packed[1]  # the User-Agent: one string for both
    assert len(shared) == 2  # Host and User-Agent; the cookies are each tab's own and not kept
    assert second.get("cookie") == "via_session_id=b" and first.get("cookie") == "via_session_id=a"
    long_agent = tab("c=1", "x" * 41)  # longer than kept: the tab keeps its own copy
    assert len(shared) == 2 and long_agent.get("user-agent") == "x" * 41
    for n in range(20):  # a client sending a new value each time cannot grow the table past its bound
        assert tab("c=1", f"agent {n}").get("user-agent") == f"agent {n}"
        assert len(shared) <= 8


def test_a_client_inventing_header_names_cannot_grow_the_shared_names() -> None:
    from pyvia import http

    for i in range(3 * http._NAMES_KEPT):
        headers = Headers.from_raw([(f"X-Made-Up-{i}".encode(), b"v")])
        assert headers.get(f"x-made-up-{i}") == "v"
    assert len(http._NAMES) <= http._NAMES_KEPT
    assert Headers.from_raw([(b"Host", b"h")]).get("host") == "h"  # and known names still work


def test_equal_header_sets_give_equal_heads_and_different_ones_do_not_mix() -> None:
    headers = [("content-type", "text/html")]
    assert encode_response(200, headers, b"a") == encode_response(200, list(headers), b"a")
    assert encode_response(404, headers, b"a").startswith(b"HTTP/1.1 404 ")
    assert b"connection: close" in encode_response(200, headers, b"a", connection=CONNECTION_CLOSE)
    assert b"connection" not in encode_response(200, headers, b"a")


@pytest.mark.parametrize("value", [5, None, b"bytes"])
def test_header_values_must_be_text(value: object) -> None:
    with pytest.raises(ValueError, match="x-n"):
        encode_response(200, [("x-n", value)], b"")  # type: ignore[list-item]  # the point of the test


def test_a_header_is_found_whatever_the_case_of_the_name_asked() -> None:
    headers = Headers.from_raw([(b"User-Agent", b"ua"), (b"X-Custom", b"1")])
    assert headers.get("User-Agent") == headers.get("user-agent") == headers.get("USER-AGENT") == "ua"
    assert headers.get("X-CUSTOM") == "1" and headers.get_all("x-Custom") == ["1"]
    assert headers.get("Missing") is None and headers.get("missing", "d") == "d" and headers.get_all("Missing") == []
