"""The SDK options of protocol.py's events: defaults left off the wire, bad values refused with a
reason, nothing a value holds able to end an event early."""

from __future__ import annotations

import pytest

from pyvia import protocol
from pyvia.protocol import (
    execute_script,
    frame_id,
    parse_frame_id,
    patch_elements,
    patch_signals,
    removal_patch,
    remove_signals,
)


def test_defaults_are_left_off_the_wire() -> None:
    plain = patch_elements('<p id="a">1</p>')
    assert (
        patch_elements('<p id="a">1</p>', mode="outer", namespace="html", use_view_transition=False, retry=1000)
        == plain
    )
    assert patch_signals({"a": 1}, only_if_missing=False, retry=1000) == patch_signals({"a": 1})
    assert execute_script("x()", auto_remove=True, attributes=None) == execute_script("x()")


def test_raw_json_signals_are_the_same_event_as_the_mapping() -> None:
    assert patch_signals('{"a":1,"b":[true,null]}') == patch_signals({"a": 1, "b": [True, None]})
    assert patch_signals(b'{"a":1}') == patch_signals({"a": 1})


@pytest.mark.parametrize("raw", ["[1]", "1", "nope", '{"a":1', ""])
def test_raw_json_that_is_not_one_object_is_refused(raw: str) -> None:
    with pytest.raises(ValueError, match="JSON"):
        patch_signals(raw)


def test_raw_json_line_breaks_become_data_lines_never_a_new_field() -> None:
    event = patch_signals('{"a":\r\n1,\r"b":\n2}')
    assert event == (
        b'event: datastar-patch-signals\ndata: signals {"a":\ndata: signals 1,\n'
        b'data: signals "b":\ndata: signals 2}\n\n'
    )


@pytest.mark.parametrize("event_id", ["", "a\nb", "a\rb", "a\0b"])
def test_an_event_id_the_client_could_not_keep_is_refused(event_id: str) -> None:
    with pytest.raises(ValueError, match="event_id"):
        patch_elements("<p>", event_id=event_id)


@pytest.mark.parametrize("retry", [-1, 1.5, True, "2000"])
def test_retry_must_be_whole_milliseconds(retry: object) -> None:
    with pytest.raises(ValueError, match="retry"):
        patch_signals({"a": 1}, retry=retry)  # type: ignore[arg-type]


def test_retry_zero_is_sent() -> None:
    assert b"retry: 0\n" in patch_signals({"a": 1}, retry=0)


def test_namespace_must_be_one_the_client_knows() -> None:
    with pytest.raises(ValueError, match="namespace 'xml'"):
        patch_elements("<p>", "#a", "inner", namespace="xml")


@pytest.mark.parametrize("attributes", [{"on click": "x"}, {"a>b": "x"}, ['x="1"><script>'], [""]])
def test_script_attributes_that_would_break_the_tag_are_refused(attributes: object) -> None:
    with pytest.raises(ValueError, match="attribute"):
        execute_script("x()", attributes=attributes)  # type: ignore[arg-type]


def test_a_script_cannot_close_its_own_tag() -> None:
    assert b"<\\/script>alert(1)" in execute_script("</script>alert(1)", auto_remove=False)


def test_removal_patch_nests_dotted_paths_and_a_parent_covers_its_children() -> None:
    assert removal_patch("a") == {"a": None}
    assert removal_patch(["user.email", "user.name", "x.y.z"]) == {
        "user": {"email": None, "name": None},
        "x": {"y": {"z": None}},
    }
    assert removal_patch(["user", "user.email"]) == {"user": None}
    assert remove_signals("a.b") == b'event: datastar-patch-signals\ndata: signals {"a":{"b":null}}\n\n'


@pytest.mark.parametrize("paths", ["", "a..b", ".a", [], ["ok", ""]])
def test_removal_patch_refuses_empty_paths(paths: object) -> None:
    with pytest.raises(ValueError, match=r"signal path|at least one"):
        removal_patch(paths)  # type: ignore[arg-type]


def test_frame_ids_round_trip_and_anything_else_is_not_one() -> None:
    assert frame_id("ab12", 7) == b"id: ab12.7\n\n"
    assert parse_frame_id("ab12.7") == ("ab12", 7)
    assert parse_frame_id("a.b.12") == ("a.b", 12)
    for other in (None, "", "7", "ab12.", ".7", "ab12.-1", "ab12.٣", "x" * 80 + ".1", "123"):
        assert parse_frame_id(other) is None, other


def test_check_events_keeps_id_and_retry_lines() -> None:
    raw = "event: datastar-patch-signals\nid: 9\nretry: 50\ndata: signals {}\n\n"
    assert protocol.check_events(raw) == raw.encode()
