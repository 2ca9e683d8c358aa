"""Signal names, values, typed reads, template helpers and the type check on browser values."""

from __future__ import annotations

import math

import pytest
from markupsafe import Markup, escape

from pyvia.errors import DeclarationError, SignalTooLarge
from pyvia.signals import Signal, check_name

# --- check_name ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["count", "a", "A1", "user_name", "x_", "camelCase", "via", "viaX", "VIA_x"])
def test_valid_names_are_returned_unchanged(name: str) -> None:
    assert check_name("signal", name, "page '/'") == name


@pytest.mark.parametrize("name", ["my count", "a-b", "a.b", "", "_local", "1st", "9", "é", "a\n", "a$", "count\nx"])
def test_invalid_names_are_refused(name: str) -> None:
    with pytest.raises(DeclarationError, match=r"\[A-Za-z\]\[A-Za-z0-9_\]\*"):
        check_name("signal", name, "page '/'")


def test_name_with_leading_digit_is_refused() -> None:
    with pytest.raises(DeclarationError, match="a letter first"):
        check_name("signal", "2fast", "page '/'")


@pytest.mark.parametrize("name", [None, 3, b"count"])
def test_non_str_name_is_refused(name: object) -> None:
    with pytest.raises(DeclarationError):
        check_name("signal", name, "page '/'")  # type: ignore[arg-type]  # the point of the test


@pytest.mark.parametrize("name", ["via_ctx", "via_", "via_anything"])
def test_via_prefix_is_reserved(name: str) -> None:
    with pytest.raises(DeclarationError, match="'via_' is reserved"):
        check_name("signal", name, "page '/'")


def test_refusal_message_names_the_signal_and_the_page() -> None:
    with pytest.raises(DeclarationError) as exc:
        check_name("signal", "my count", "page '/counter'")
    message = str(exc.value)
    assert message.startswith("signal name 'my count' in page '/counter'")


def test_reserved_message_names_the_kind_the_name_and_the_page() -> None:
    with pytest.raises(DeclarationError) as exc:
        check_name("action", "via_go", "page '/shop'")
    assert "action name 'via_go' in page '/shop'" in str(exc.value)


def test_declaration_error_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        check_name("signal", "bad name", "page '/'")


# --- value, set, change tracking -----------------------------------------------------------------


def test_new_signal_holds_initial_value_and_is_unsynced() -> None:
    sig = Signal("count", 5)
    assert sig.value == 5
    assert sig.id == "_count"  # server-owned: Datastar never sends a signal whose id starts with "_"
    assert sig.name == "count"
    assert sig.has_changed
    assert not sig.writable


def test_mark_synced_clears_the_change_flag() -> None:
    sig = Signal("count", 0)
    sig.mark_synced()
    assert not sig.has_changed


def test_assigning_value_marks_changed() -> None:
    sig = Signal("count", 0)
    sig.mark_synced()
    sig.value = 1
    assert sig.value == 1
    assert sig.has_changed


def test_set_is_assignment() -> None:
    sig = Signal("count", 0)
    sig.mark_synced()
    sig.set(7)
    assert sig.value == 7
    assert sig.has_changed


def test_a_writable_signal_keeps_its_name_as_its_id() -> None:
    sig = Signal("draft", "", writable=True)
    assert sig.writable
    assert sig.id == "draft"


def test_server_writes_of_a_writable_signal_are_numbered() -> None:
    draft = Signal("draft", "", writable=True)
    assert draft.revision == 0
    draft.value = "a"
    draft.set("")
    assert draft.revision == 2
    assert draft.accept_client_value("typed")  # the browser's value is not a server write
    assert draft.revision == 2
    count = Signal("count", 0)
    count.value = 3
    assert count.revision == 0  # a server-owned signal never takes a value, so it needs no number


def test_signal_has_no_instance_dict() -> None:
    sig = Signal("count", 0)
    with pytest.raises(AttributeError):
        sig.extra = 1  # type: ignore[attr-defined]  # __slots__ refuses new attributes


# --- typed reads ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [(3, 3), ("12", 12), (" 7 ", 7), (2.9, 2), (True, 1), ("abc", 0), (None, 0), ([1], 0), ("2.5", 0)],
)
def test_as_int(value: object, expected: int) -> None:
    assert Signal("x", value).as_int() == expected


def test_as_int_uses_the_given_default() -> None:
    assert Signal("x", "nope").as_int(default=-1) == -1


@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan])
def test_as_int_of_non_finite_float_is_the_default(value: float) -> None:
    assert Signal("x", value).as_int(default=-1) == -1


@pytest.mark.parametrize("value", ["inf", "-inf", "nan", float("inf"), float("nan"), 10**400])
def test_float_signal_refuses_non_finite_client_values(value: object) -> None:
    sig = Signal("ratio", 0.5)
    assert not sig.accept_client_value(value)
    assert sig.value == 0.5


@pytest.mark.parametrize(
    ("value", "expected"), [(1.5, 1.5), (2, 2.0), ("2.5", 2.5), (" 3 ", 3.0), ("x", 0.0), (None, 0.0), ({}, 0.0)]
)
def test_as_float(value: object, expected: float) -> None:
    assert Signal("x", value).as_float() == expected


def test_as_float_of_an_int_too_large_for_a_float_is_the_default() -> None:
    sig = Signal("n", 10**400)
    assert sig.as_float(default=-1.0) == -1.0


@pytest.mark.parametrize(("value", "expected"), [(None, ""), ("a", "a"), (3, "3"), (1.5, "1.5"), (False, "False")])
def test_as_str(value: object, expected: str) -> None:
    assert Signal("x", value).as_str() == expected
    assert str(Signal("x", value)) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (True, True),
        (False, False),
        ("true", True),
        (" Yes ", True),
        ("on", True),
        ("1", True),
        ("false", False),
        ("0", False),
        ("", False),
        ("nope", False),
        (1, True),
        (0, False),
        (None, False),
    ],
)
def test_as_bool(value: object, expected: bool) -> None:
    assert Signal("x", value).as_bool() is expected


# --- template helpers ----------------------------------------------------------------------------


def test_bind_is_a_safe_data_bind_attribute() -> None:
    attr = Signal("email", "", writable=True).bind()
    assert isinstance(attr, Markup)
    assert attr == 'data-bind="email"'
    assert escape(attr) == 'data-bind="email"'  # not escaped again in a template


def test_ref_is_the_datastar_expression() -> None:
    assert Signal("count", 0).ref() == "$_count"
    assert Signal("draft", "", writable=True).ref() == "$draft"


def test_a_server_owned_signal_cannot_be_bound_to_an_input() -> None:
    with pytest.raises(DeclarationError, match=r"'count' is server-owned.*writable=True"):
        Signal("count", 0).bind()


def test_html_escapes_the_value() -> None:
    assert Signal("msg", "<b>&\"'</b>").__html__() == "&lt;b&gt;&amp;&#34;&#39;&lt;/b&gt;"
    assert escape(Signal("msg", "<i>")) == "&lt;i&gt;"


def test_repr_shows_name_and_value() -> None:
    assert repr(Signal("count", 3)) == "Signal('count', 3)"


# --- accept_client_value -------------------------------------------------------------------------

_COERCIONS = [
    # (initial, sent, stored)
    (0, 5, 5),
    (0, -3, -3),
    (0, 4.0, 4),
    (0, "12", 12),
    (0, " 8 ", 8),
    (0, "-2", -2),
    (1.5, 2, 2.0),
    (1.5, 2.25, 2.25),
    (1.5, "3.5", 3.5),
    (1.5, " 1 ", 1.0),
    (False, True, True),
    (True, False, False),
    ("", "hi", "hi"),
    ("", 3, "3"),
    ("", 1.5, "1.5"),
    ([], [1, "a"], [1, "a"]),
    ({}, {"a": 1}, {"a": 1}),
    (None, "x", "x"),
    (None, 3, 3),
    (None, [1], [1]),
    (None, {"a": None}, {"a": None}),
    (None, None, None),
]


@pytest.mark.parametrize(("initial", "sent", "stored"), _COERCIONS)
def test_client_value_is_coerced_to_the_declared_type(initial: object, sent: object, stored: object) -> None:
    sig = Signal("x", initial)
    assert sig.accept_client_value(sent) is True
    assert sig.value == stored
    assert type(sig.value) is type(stored)


_REFUSALS = [
    # (initial, sent)
    (0, 1.5),
    (0, "1.5"),
    (0, "abc"),
    (0, ""),
    (0, True),
    (0, False),
    (0, None),
    (0, [1]),
    (0, {"a": 1}),
    (0, math.inf),
    (0, math.nan),
    (0, 1e308),  # an int too large for a browser to hold exactly (and for orjson to write)
    (0, 2**64),
    (0, 2**53),
    (0, -(2**53)),
    (0, "9" * 17),
    (0, "1" + "0" * 5000),
    (1.5, "1" * 5000),
    (1.5, "abc"),
    (1.5, True),
    (1.5, None),
    (1.5, [1.0]),
    (False, 1),
    (False, 0),
    (False, "true"),
    (False, None),
    (True, "false"),
    ("", True),
    ("", None),
    ("", ["a"]),
    ("", {"a": "b"}),
    ([], {}),
    ([], "a,b"),
    ([], None),
    ({}, []),
    ({}, "{}"),
    ({}, None),
]


@pytest.mark.parametrize(("initial", "sent"), _REFUSALS)
def test_client_value_of_the_wrong_type_is_refused_and_leaves_the_value(initial: object, sent: object) -> None:
    sig = Signal("x", initial)
    assert sig.accept_client_value(sent) is False
    assert sig.value == initial
    assert type(sig.value) is type(initial)


def test_refused_client_value_keeps_a_server_set_value() -> None:
    sig = Signal("count", 0)
    sig.value = 41
    sig.mark_synced()
    assert not sig.accept_client_value("forty-two")
    assert sig.value == 41
    assert not sig.has_changed


def test_accepted_client_value_is_not_echoed_back() -> None:
    # The browser already holds the value it sent; only server-side assignments are synced.
    sig = Signal("count", 0)
    sig.mark_synced()
    assert sig.accept_client_value(3)
    assert sig.value == 3
    assert not sig.has_changed


def test_the_largest_exact_integers_are_accepted() -> None:
    sig = Signal("n", 0)
    assert sig.accept_client_value(2**53 - 1) and sig.value == 2**53 - 1
    assert sig.accept_client_value(str(-(2**53 - 1))) and sig.value == -(2**53 - 1)


def test_a_value_over_max_length_is_refused_out_loud_with_the_signal_named() -> None:
    draft = Signal("draft", "", writable=True, max_length=5)
    assert draft.accept_client_value("12345")
    with pytest.raises(SignalTooLarge, match="signal 'draft' got 6 characters; it takes at most 5") as exc:
        draft.accept_client_value("123456")
    assert exc.value.status == 413
    assert exc.value.signal == "draft"
    assert draft.value == "12345"
    tags = Signal("tags", [], writable=True, max_length=2)
    with pytest.raises(SignalTooLarge, match="3 items"):
        tags.accept_client_value([1, 2, 3])


def test_type_check_follows_the_declared_initial_not_the_current_value() -> None:
    # Once an int signal holds an int, it still refuses strings that are not numbers.
    sig = Signal("n", 0)
    assert sig.accept_client_value("10")
    assert not sig.accept_client_value("ten")
    assert sig.value == 10


# --- what is sent: a dict that lost keys -----------------------------------------------------------


def test_a_dict_that_replaced_a_dict_is_sent_with_its_lost_keys_blank() -> None:
    sig = Signal("errors", {"email": "taken", "name": "short", "form": {"a": 1, "b": 2}})
    assert sig.take_patch() == {"email": "taken", "name": "short", "form": {"a": 1, "b": 2}}  # as declared
    sig.value = {"name": "short", "form": {"a": 1}}
    assert sig.take_patch() == {"name": "short", "email": "", "form": {"a": 1, "b": ""}}
    sig.value = {"name": "short", "form": {"a": 1}}
    assert sig.take_patch() == {"name": "short", "form": {"a": 1}}  # nothing lost since
    sig.value = 3
    assert sig.take_patch() == 3
    assert sig.accept_client_value(4) and (sig.value, sig.has_changed) == (4, False)
