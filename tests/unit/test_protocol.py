"""Datastar events out (byte for byte) and signal payloads in (parse or MalformedRequest)."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pyvia import protocol
from pyvia.errors import ClientError, MalformedRequest, PayloadTooLarge
from pyvia.protocol import execute_script, parse_signals, patch_elements, patch_signals

# --- patch_elements ------------------------------------------------------------------------------


def test_patch_elements_default_mode_is_not_sent() -> None:
    assert patch_elements('<div id="a">1</div>') == (
        b'event: datastar-patch-elements\ndata: elements <div id="a">1</div>\n\n'
    )


def test_patch_elements_explicit_outer_mode_is_not_sent() -> None:
    assert patch_elements("<p>x</p>", mode="outer") == patch_elements("<p>x</p>")


def test_patch_elements_with_selector_and_mode() -> None:
    assert patch_elements("<li>x</li>", "#list", "append") == (
        b"event: datastar-patch-elements\ndata: selector #list\ndata: mode append\ndata: elements <li>x</li>\n\n"
    )


def test_patch_elements_selector_without_mode() -> None:
    assert patch_elements("<b>x</b>", "#a") == (
        b"event: datastar-patch-elements\ndata: selector #a\ndata: elements <b>x</b>\n\n"
    )


def test_patch_elements_mode_without_selector() -> None:
    assert patch_elements("<b>x</b>", mode="inner") == (
        b"event: datastar-patch-elements\ndata: mode inner\ndata: elements <b>x</b>\n\n"
    )


def test_patch_elements_remove_mode_with_no_html_sends_no_elements_line() -> None:
    assert patch_elements("", "#gone", "remove") == (
        b"event: datastar-patch-elements\ndata: selector #gone\ndata: mode remove\n\n"
    )


@pytest.mark.parametrize("mode", sorted(protocol.MODES - {"outer"}))
def test_every_non_default_mode_is_sent(mode: str) -> None:
    assert f"data: mode {mode}\n".encode() in patch_elements("<i></i>", "#x", mode)


def test_every_line_of_multiline_html_gets_its_own_data_prefix() -> None:
    assert patch_elements("<ul>\n<li>a</li>\n</ul>") == (
        b"event: datastar-patch-elements\ndata: elements <ul>\ndata: elements <li>a</li>\ndata: elements </ul>\n\n"
    )


@pytest.mark.parametrize("brk", ["\r\n", "\r", "\n"], ids=["crlf", "cr", "lf"])
def test_each_line_break_kind_splits_html(brk: str) -> None:
    assert patch_elements(f"<a>{brk}<b>") == (
        b"event: datastar-patch-elements\ndata: elements <a>\ndata: elements <b>\n\n"
    )


def test_crlf_counts_as_one_break_not_two() -> None:
    # "\r\n" must not leave an empty "data: elements" line in between.
    assert patch_elements("a\r\nb").count(b"data: elements") == 2


@pytest.mark.parametrize("brk", ["\r\n", "\r", "\n", "\n\n", "\r\r", "\r\n\r\n"])
def test_user_text_cannot_inject_an_event_or_end_one_early(brk: str) -> None:
    hostile = f'<p>hi{brk}event: datastar-patch-signals{brk}data: signals {{"admin":true}}{brk}{brk}</p>'
    out = patch_elements(hostile)
    assert out.endswith(b"\n\n")
    body = out[:-2]
    assert b"\n\n" not in body
    assert b"\r" not in out
    lines = body.split(b"\n")
    assert lines[0] == b"event: datastar-patch-elements"
    assert all(line.startswith(b"data: elements ") for line in lines[1:])


def test_empty_lines_in_html_stay_data_lines() -> None:
    assert patch_elements("a\n\nb") == (
        b"event: datastar-patch-elements\ndata: elements a\ndata: elements \ndata: elements b\n\n"
    )


def test_non_ascii_html_is_utf8_encoded() -> None:
    assert patch_elements("<p>héllo ✓</p>").endswith("data: elements <p>héllo ✓</p>\n\n".encode())


@pytest.mark.parametrize("selector", ["#a\nevent: x", "#a\r", "\r\n#a", "#a\rdata: mode inner"])
def test_selector_with_line_break_is_refused(selector: str) -> None:
    with pytest.raises(ValueError, match="selector"):
        patch_elements("<p></p>", selector)


def test_empty_selector_is_refused() -> None:
    with pytest.raises(ValueError, match="non-empty"):
        patch_elements("<p></p>", "")


@pytest.mark.parametrize("mode", ["", "Inner", "morph", "inner\nevent: x", "outer "])
def test_unknown_mode_is_refused(mode: str) -> None:
    with pytest.raises(ValueError, match="mode"):
        patch_elements("<p></p>", "#a", mode)


# --- patch_signals -------------------------------------------------------------------------------


def test_patch_signals_is_one_json_data_line() -> None:
    assert patch_signals({"count": 1, "name": "x"}) == (
        b'event: datastar-patch-signals\ndata: signals {"count":1,"name":"x"}\n\n'
    )


def test_patch_signals_none_is_json_null_to_remove_a_signal() -> None:
    assert patch_signals({"gone": None}) == b'event: datastar-patch-signals\ndata: signals {"gone":null}\n\n'


def test_patch_signals_escapes_line_breaks_in_values() -> None:
    out = patch_signals({"msg": "a\nb\r\n\nevent: x"})
    assert out.count(b"\n") == 3  # end of "event:" line, end of data line, the blank line
    assert b"\r" not in out
    assert orjson.loads(out.split(b"data: signals ", 1)[1][:-2]) == {"msg": "a\nb\r\n\nevent: x"}


def test_patch_signals_nested_values_round_trip() -> None:
    value = {"form": {"tags": ["a", "b"], "n": 1.5, "ok": True}}
    out = patch_signals(value)
    assert orjson.loads(out.removeprefix(b"event: datastar-patch-signals\ndata: signals ")) == value


# --- execute_script ------------------------------------------------------------------------------


def test_execute_script_appends_a_self_removing_script_to_body() -> None:
    assert execute_script("alert(1)") == (
        b"event: datastar-patch-elements\n"
        b"data: selector body\n"
        b"data: mode append\n"
        b'data: elements <script data-effect="el.remove()">alert(1)</script>\n'
        b"\n"
    )


def test_execute_script_escapes_closing_script_tag() -> None:
    out = execute_script("x = '</script><img src=x onerror=alert(1)>'")
    assert out.count(b"</script") == 1  # only the tag execute_script closes itself
    assert b"<\\/script><img" in out


def test_execute_script_escapes_closing_script_tag_in_any_case() -> None:
    # HTML end tags are case-insensitive: "</SCRIPT>" ends a script element just as "</script>" does.
    out = execute_script("x = '</SCRIPT><img src=x onerror=alert(1)>'")
    assert out.lower().count(b"</script") == 1


def test_execute_script_multiline_js_is_split_into_data_lines() -> None:
    out = execute_script("a()\nb()")
    assert b'data: elements <script data-effect="el.remove()">a()\ndata: elements b()</script>\n' in out


def test_keep_alive_is_an_sse_comment() -> None:
    assert protocol.keep_alive() == b": keep-alive\n\n"


# --- parse_signals -------------------------------------------------------------------------------


def test_parse_signals_reads_a_json_object() -> None:
    assert parse_signals(b'{"count": 3, "via_ctx": "abc", "nested": {"a": [1, 2]}}') == {
        "count": 3,
        "via_ctx": "abc",
        "nested": {"a": [1, 2]},
    }


def test_parse_signals_accepts_str() -> None:
    assert parse_signals('{"a": "é"}') == {"a": "é"}


@pytest.mark.parametrize("raw", [b"", ""])
def test_parse_signals_empty_payload_is_no_signals(raw: bytes | str) -> None:
    assert parse_signals(raw) == {}


@pytest.mark.parametrize("raw", [b"[]", b"[1, 2]", b"1", b'"x"', b"null", b"true"])
def test_parse_signals_non_object_is_malformed(raw: bytes) -> None:
    with pytest.raises(MalformedRequest, match="JSON object") as exc:
        parse_signals(raw)
    assert exc.value.status == 400


@pytest.mark.parametrize("raw", [b"{", b"{'a': 1}", b'{"a": NaN}', b"\xff\xfe", b"   ", b'{"a": 1} x'])
def test_parse_signals_bad_json_is_malformed(raw: bytes) -> None:
    with pytest.raises(MalformedRequest, match="not valid JSON"):
        parse_signals(raw)


def test_parse_signals_turns_half_of_an_emoji_pair_into_the_replacement_character() -> None:
    """A browser's string may hold half of a UTF-16 pair; orjson refuses it, the user's text is kept."""
    raw = b'{"note": "ab\\ud83d \\ud83d\\ude00", "\\udc00k": ["\\udfff", 1], "n": 2}'
    assert parse_signals(raw) == {"note": "ab\ufffd \U0001f600", "\ufffdk": ["\ufffd", 1], "n": 2}
    assert parse_signals(raw.decode()) == parse_signals(raw)


@pytest.mark.parametrize(
    "raw",
    [
        b'{"a": "\\ud800",',
        b'{"a": "\\ud800"} x',
        b'{"a": "\\ud800", "b": NaN}',
        b'{"a": "\\ud800", "b": -Infinity}',
        b'{"a": "\\ud800", "b": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
    ],
)
def test_parse_signals_with_half_a_pair_is_still_refused_when_wrong_in_another_way(raw: bytes) -> None:
    with pytest.raises(MalformedRequest, match="not valid JSON"):
        parse_signals(raw)


def test_parse_signals_with_half_a_pair_keeps_the_nesting_limit() -> None:
    raw = b'{"a": "\\ud800", "b": ' + b"[" * 20 + b"]" * 20 + b"}"
    with pytest.raises(MalformedRequest, match="nested deeper"):
        parse_signals(raw)


def test_parse_signals_too_large_is_payload_too_large() -> None:
    raw = b'{"a": "' + b"x" * protocol.MAX_SIGNAL_BYTES + b'"}'
    with pytest.raises(PayloadTooLarge) as exc:
        parse_signals(raw)
    assert exc.value.status == 413
    assert isinstance(exc.value, ClientError)
    assert str(protocol.MAX_SIGNAL_BYTES) in str(exc.value)


def test_parse_signals_at_the_size_limit_is_accepted() -> None:
    # four long strings, each within the string limit, filling the payload limit exactly
    frame = len(b'{"a":"","b":"","c":"","d":""}')
    share, extra = divmod(protocol.MAX_SIGNAL_BYTES - frame, 4)
    sizes = [share + extra, share, share, share]
    pairs = zip((b"a", b"b", b"c", b"d"), sizes, strict=True)
    raw = b"{" + b",".join(b'"%s":"%s"' % (k, b"x" * n) for k, n in pairs) + b"}"
    assert len(raw) == protocol.MAX_SIGNAL_BYTES
    assert sum(len(v) for v in parse_signals(raw).values()) == sum(sizes)


def _nested(depth: int) -> bytes:
    return b'{"a":' * depth + b"1" + b"}" * depth


def test_parse_signals_moderate_nesting_is_accepted() -> None:
    assert parse_signals(_nested(5)) == {"a": {"a": {"a": {"a": {"a": 1}}}}}


@pytest.mark.parametrize("depth", [protocol.MAX_SIGNAL_DEPTH + 2, 100, 600])
def test_parse_signals_too_deep_is_malformed(depth: int) -> None:
    with pytest.raises(MalformedRequest):
        parse_signals(_nested(depth))


def test_parse_signals_too_deep_list_is_malformed() -> None:
    raw = b'{"a":' + b"[" * 40 + b"]" * 40 + b"}"
    with pytest.raises(MalformedRequest, match="deeper"):
        parse_signals(raw)


def test_parse_signals_too_many_keys_is_malformed() -> None:
    raw = orjson.dumps({f"k{i}": i for i in range(protocol.MAX_SIGNAL_ITEMS + 1)})
    with pytest.raises(MalformedRequest, match="signals"):
        parse_signals(raw)


def test_parse_signals_max_keys_is_accepted() -> None:
    raw = orjson.dumps({f"k{i}": i for i in range(protocol.MAX_SIGNAL_ITEMS)})
    assert len(parse_signals(raw)) == protocol.MAX_SIGNAL_ITEMS


def test_parse_signals_too_many_keys_in_a_nested_object_is_malformed() -> None:
    raw = orjson.dumps({"inner": {f"k{i}": i for i in range(protocol.MAX_SIGNAL_ITEMS + 1)}})
    with pytest.raises(MalformedRequest, match="signal 'inner' holds an object of more than"):
        parse_signals(raw)


def test_parse_signals_too_long_list_is_malformed_and_named() -> None:
    raw = orjson.dumps({"a": list(range(protocol.MAX_SIGNAL_ITEMS + 1))})
    with pytest.raises(MalformedRequest, match="signal 'a' holds a list of more than"):
        parse_signals(raw)


@given(
    st.lists(st.text(alphabet=st.characters(blacklist_categories=("Cs",))) | st.sampled_from(["\r", "\n", "\r\n"])).map(
        "".join
    )
)
@settings(max_examples=300, deadline=None)
def test_elements_read_back_as_sent_whatever_their_line_breaks(text: str) -> None:
    """What a browser's SSE parser reads back from the ``elements`` lines is the markup, each of
    CR LF, CR and LF read as a line feed (the SSE rule), and nothing else."""
    event = patch_elements(text).decode()
    assert event.startswith("event: datastar-patch-elements\n") and event.endswith("\n\n")
    body = event[len("event: datastar-patch-elements\n") : -1]
    lines = body.split("\n")[:-1] if text else []
    assert all(line.startswith("data: elements ") for line in lines)
    read = "\n".join(line[len("data: elements ") :] for line in lines)
    assert read == text.replace("\r\n", "\n").replace("\r", "\n")
