"""Pure pieces of the cluster package: name rules, wire-scope checks, subject matching, backoff."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pyvia.cluster import check_engine_url, create_engine, valid_wire_scope
from pyvia.cluster.base import Backoff, InvalidName, check_bucket, check_key, check_subject, redact_url, subject_matches
from pyvia.cluster.nats import decode_key, encode_key
from pyvia.scopes import Scope


@pytest.mark.parametrize(
    "name",
    [
        "global",
        Scope.session("0123456789abcdef0123456789abcdef"),
        "route:/",
        "route:/items/{id}",
        "route:/a-b_c.d/~x",
        "room:lobby",
        "room:lobby-2:table-7",
        "room:*",
        "route:/chat/*",
        "*",
        Scope.custom("room", "my room"),  # any text is a name: the browser ids made from it are escaped
        Scope.custom("room", "<script>"),
        Scope.custom("room", "café", "a:b*c"),
    ],
)
def test_scopes_the_core_makes_are_valid_on_the_wire(name: str) -> None:
    assert valid_wire_scope(name)


@pytest.mark.parametrize(
    "name",
    [
        "",
        "x" * 257,
        "tab",
        "route",
        "session",
        "tab:abc",
        "session:not-hex",
        "session:0123",
        "route:items",  # a route pattern starts with '/'
        "route:/a b",
        "room:lobby\n",
        "room:lob\x00by",
        "room::lobby",
        "room:**",
        None,
        42,
    ],
)
def test_anything_else_from_the_engine_is_rejected(name: object) -> None:
    assert not valid_wire_scope(name)


def test_patterns_can_be_refused_where_only_concrete_scopes_make_sense() -> None:
    assert valid_wire_scope("room:*")
    assert not valid_wire_scope("room:*", allow_pattern=False)
    assert not valid_wire_scope("route:/chat/*", allow_pattern=False)
    assert valid_wire_scope("room:lobby", allow_pattern=False)


@pytest.mark.parametrize(
    ("pattern", "subject", "expected"),
    [
        ("a.b", "a.b", True),
        ("a.b", "a.b.c", False),
        ("a.*", "a.b", True),
        ("a.*", "a.b.c", False),
        ("a.*", "a", False),
        ("a.>", "a.b", True),
        ("a.>", "a.b.c", True),
        ("a.>", "a", False),
        ("*.b", "a.b", True),
        (">", "a", True),
        ("a.*.c", "a.b.c", True),
        ("a.*.c", "a.b.d", False),
    ],
)
def test_subjects_match_as_in_nats(pattern: str, subject: str, expected: bool) -> None:
    assert subject_matches(pattern, subject) is expected


def test_names_that_break_the_rules_say_which_rule() -> None:
    with pytest.raises(InvalidName, match=r"bucket 'a b' must match \[A-Za-z0-9_-\]"):
        check_bucket("a b")
    with pytest.raises(InvalidName, match="printable characters without whitespace"):
        check_key("a\tb")
    with pytest.raises(InvalidName, match="tokens of"):
        check_subject("a.*")
    assert check_subject("a.*.>", pattern=True) == "a.*.>"
    with pytest.raises(InvalidName):
        check_subject("a.>.b", pattern=True)
    assert check_key("route:/items/{id}") == "route:/items/{id}"


def test_backoff_doubles_from_one_second_to_thirty() -> None:
    backoff = Backoff(jitter=0)
    assert [backoff.next() for _ in range(8)] == [1, 2, 4, 8, 16, 30, 30, 30]
    backoff.reset()
    assert backoff.next() == 1
    jittered = Backoff()
    assert all(1.0 <= d <= 1.1 for d in [jittered.next()] for _ in range(1))


def test_urls_lose_their_password_in_logs() -> None:
    assert redact_url("redis://user:secret@cache:6379/0") == "redis://user:***@cache:6379/0"
    assert redact_url("nats://127.0.0.1:4222") == "nats://127.0.0.1:4222"


def test_engine_urls_are_checked_before_anything_is_imported() -> None:
    assert type(create_engine("memory://")).__name__ == "MemoryEngine"
    assert type(create_engine("nats://127.0.0.1:4222")).__name__ == "NatsEngine"
    assert type(create_engine("redis://127.0.0.1:6379/0")).__name__ == "RedisEngine"
    with pytest.raises(ValueError, match="must start with memory://, nats://"):
        check_engine_url("ftp://host")
    with pytest.raises(ValueError, match="the memory engine lives in one process"):
        check_engine_url("memory://", workers=2)
    with pytest.raises(InvalidName):
        create_engine("nats://127.0.0.1:4222", prefix="has.dot")


@given(st.text(min_size=1, max_size=60))
def test_nats_key_escaping_round_trips_and_stays_in_the_nats_alphabet(key: str) -> None:
    wire = encode_key(key)
    assert decode_key(wire) == key
    assert all(ch.isascii() and (ch.isalnum() or ch in "-/_=") for ch in wire)
