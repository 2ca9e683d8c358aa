"""Signed context ids, the app secret and session ids."""

from __future__ import annotations

import base64
import os
import stat
from pathlib import Path
from typing import Any

import orjson
import pytest

from pyvia.session import ContextIds, SessionIds, is_session_id, load_secret

SESSION = "0123456789abcdef0123456789abcdef"
OTHER_SESSION = "fedcba9876543210fedcba9876543210"
SIGNED = SessionIds(b"secret-one").make()


@pytest.fixture
def ids() -> ContextIds:
    return ContextIds(b"secret-one")


# --- ContextIds ----------------------------------------------------------------------------------


def test_made_id_verifies_to_its_route_and_params(ids: ContextIds) -> None:
    cid = ids.make("/rooms/{room}", {"room": "lobby"}, SESSION)
    assert ids.verify(cid, SESSION) == ("/rooms/{room}", {"room": "lobby"})


def test_id_without_params_round_trips(ids: ContextIds) -> None:
    assert ids.verify(ids.make("/", {}, SESSION), SESSION) == ("/", {})


def test_non_ascii_params_round_trip(ids: ContextIds) -> None:
    cid = ids.make("/u/{name}", {"name": "zoë ✓"}, SESSION)
    assert ids.verify(cid, SESSION) == ("/u/{name}", {"name": "zoë ✓"})


def test_id_is_url_and_cookie_safe(ids: ContextIds) -> None:
    cid = ids.make("/rooms/{room}", {"room": "a b/c?d=e"}, SESSION)
    assert set(cid) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.")
    assert cid.count(".") == 1


def test_ids_are_unique_for_the_same_route_and_session(ids: ContextIds) -> None:
    made = {ids.make("/", {}, SESSION) for _ in range(500)}
    assert len(made) == 500


def test_id_does_not_verify_for_another_session(ids: ContextIds) -> None:
    cid = ids.make("/", {}, SESSION)
    assert ids.verify(cid, OTHER_SESSION) is None


def test_id_does_not_verify_with_another_secret(ids: ContextIds) -> None:
    cid = ids.make("/", {}, SESSION)
    assert ContextIds(b"secret-two").verify(cid, SESSION) is None


def test_same_secret_in_another_process_verifies(ids: ContextIds) -> None:
    cid = ids.make("/p/{x}", {"x": "1"}, SESSION)
    assert ContextIds(b"secret-one").verify(cid, SESSION) == ("/p/{x}", {"x": "1"})


def _flip(text: str, index: int) -> str:
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    ch = text[index]
    return text[:index] + alphabet[(alphabet.index(ch) + 7) % 64] + text[index + 1 :]


def test_tampered_payload_is_refused(ids: ContextIds) -> None:
    cid = ids.make("/p/{x}", {"x": "1"}, SESSION)
    body, sig = cid.split(".")
    for i in range(0, len(body) - 1, 3):
        assert ids.verify(_flip(body, i) + "." + sig, SESSION) is None


def test_payload_swapped_from_another_id_is_refused(ids: ContextIds) -> None:
    mine = ids.make("/p/{x}", {"x": "1"}, SESSION)
    theirs = ids.make("/admin", {}, SESSION)
    assert ids.verify(theirs.split(".")[0] + "." + mine.split(".")[1], SESSION) is None


def test_an_id_says_when_it_was_made_under_its_signature(ids: ContextIds) -> None:
    cid = ids.make("/", {}, SESSION, 1_796_000_000)
    assert ids.verify(cid, SESSION) == ("/", {}) and ContextIds.issued(cid) == 1_796_000_000
    assert ContextIds.issued(ids.make("/", {}, SESSION)) == 0  # undated: the process-age rule decides
    body, sig = cid.split(".")
    payload = orjson.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    payload[3] = 1_796_999_999  # a browser re-dating its id to revive it later
    redated = base64.urlsafe_b64encode(orjson.dumps(payload)).rstrip(b"=").decode() + "." + sig
    assert ContextIds.issued(redated) == 1_796_999_999 and ids.verify(redated, SESSION) is None
    for garbage in ("", "x", "a.b", "WyIvIix7fV0.x", "WyIvIix7fSwibiIsIjEyIl0.x"):  # no date, or one that is no int
        assert ContextIds.issued(garbage) == 0


def test_tampered_signature_is_refused(ids: ContextIds) -> None:
    cid = ids.make("/", {}, SESSION)
    body, sig = cid.split(".")
    for i in range(len(sig)):
        assert ids.verify(body + "." + _flip(sig, i), SESSION) is None


def test_truncated_signature_is_refused(ids: ContextIds) -> None:
    cid = ids.make("/", {}, SESSION)
    assert ids.verify(cid[:-4], SESSION) is None
    assert ids.verify(cid.split(".")[0] + ".", SESSION) is None


@pytest.mark.parametrize(
    "garbage",
    ["", ".", "..", "abc", "abc.def", "!!!.@@@", "é.é", "a" * 3000, "x." + "a" * 24, "\x00.\x00", "=.="],
)
def test_garbage_id_is_refused(ids: ContextIds, garbage: str) -> None:
    assert ids.verify(garbage, SESSION) is None


@pytest.mark.parametrize("garbage", [None, 12, b"abc.def", ["a", "b"], {"a": 1}])
def test_non_str_id_is_refused(ids: ContextIds, garbage: object) -> None:
    assert ids.verify(garbage, SESSION) is None  # type: ignore[arg-type]  # what a client may send


def test_oversized_id_is_refused_even_if_signed(ids: ContextIds) -> None:
    cid = ids.make("/p/{x}", {"x": "y" * 2000}, SESSION)
    assert len(cid) > 2048
    assert ids.verify(cid, SESSION) is None


# --- load_secret ---------------------------------------------------------------------------------


@pytest.fixture
def state_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.delenv("PYVIA_SECRET", raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    return tmp_path


def test_explicit_str_secret_wins(state_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYVIA_SECRET", "from-env")
    assert load_secret("given") == b"given"
    assert not (state_dir / "pyvia").exists()


def test_explicit_bytes_secret_is_used_as_is(state_dir: Path) -> None:
    assert load_secret(b"\x00raw") == b"\x00raw"


def test_env_secret_beats_the_state_file(state_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (state_dir / "pyvia").mkdir()
    (state_dir / "pyvia" / "secret").write_bytes(b"from-file")
    monkeypatch.setenv("PYVIA_SECRET", "from-env")
    assert load_secret(None) == b"from-env"


def test_empty_explicit_secret_falls_back_to_env(state_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYVIA_SECRET", "from-env")
    assert load_secret("") == b"from-env"


def test_secret_file_is_created_private_and_reused(state_dir: Path) -> None:
    first = load_secret(None)
    path = state_dir / "pyvia" / "secret"
    assert path.read_bytes() == first
    assert len(first) == 64
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert load_secret(None) == first


def test_existing_secret_file_is_read_and_stripped(state_dir: Path) -> None:
    (state_dir / "pyvia").mkdir()
    (state_dir / "pyvia" / "secret").write_bytes(b"kept-secret\n")
    assert load_secret(None) == b"kept-secret"


def test_two_state_dirs_get_different_secrets(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("PYVIA_SECRET", raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "a"))
    a = load_secret(None)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "b"))
    assert load_secret(None) != a


# --- session ids ---------------------------------------------------------------------------------


def test_new_session_ids_are_issued_and_unique() -> None:
    ids = SessionIds(b"secret-one")
    made = {ids.make() for _ in range(200)}
    assert len(made) == 200
    assert all(is_session_id(s) and ids.is_issued(s) for s in made)


def test_a_session_id_is_issued_for_its_secret_only() -> None:
    made = SessionIds(b"secret-one").make()
    assert SessionIds(b"secret-one").is_issued(made)  # another worker, or after a restart
    assert not SessionIds(b"secret-two").is_issued(made)


@pytest.mark.parametrize(
    "tamper",
    [
        lambda s: s[:-1] + ("0" if s[-1] != "0" else "1"),  # another signature
        lambda s: ("0" if s[0] != "0" else "1") + s[1:],  # another nonce, same signature
        lambda s: s[:32] + "0" * 32,
        lambda s: "0" * 32 + s[32:],
        lambda s: s[:32],  # the old unsigned shape
        lambda s: s.upper(),
        lambda s: s + "\n",
        lambda s: " " + s,
    ],
)
def test_a_well_formed_id_the_server_never_issued_is_not_a_session(tamper: Any) -> None:
    ids = SessionIds(b"secret-one")
    assert not ids.is_issued(tamper(ids.make()))


def test_made_up_ids_do_not_fill_the_cache() -> None:
    ids = SessionIds(b"secret-one")
    for n in range(100):
        assert not ids.is_issued(f"{n:064x}")
    assert not ids._issued


@pytest.mark.parametrize(
    "value",
    [
        None,
        "",
        SESSION,  # 32 digits: the unsigned ids of earlier versions
        SIGNED[:-1],
        SIGNED + "0",
        SIGNED.upper(),
        SIGNED[:-1] + "g",
        SIGNED + "\n",
        " " + SIGNED,
    ],
)
def test_is_session_id_refuses_anything_but_64_lowercase_hex(value: str | None) -> None:
    assert not is_session_id(value)


def test_is_session_id_accepts_64_lowercase_hex() -> None:
    assert is_session_id(SIGNED)


# --- canonical context ids (issue 21 item 10) --------------------------------------------------


def _aliases(cid: str) -> list[str]:
    body, sig = cid.split(".")
    return [
        cid + "=",
        cid + "==",
        body + "=." + sig,
        body + ".=" + sig,
        body + "." + sig[:4] + "!!!!" + sig[4:],  # a group of characters base64 skips
        body[:4] + "****" + body[4:] + "." + sig,
        body + "." + sig[:8] + "\n" + sig[8:],
        body + "." + sig.replace("-", "+").replace("_", "/"),  # the other alphabet
        body + ".." + sig,
        body + "." + sig + ".",
    ]


def test_only_the_canonical_spelling_of_an_id_verifies(ids: ContextIds) -> None:
    checked = 0
    for _ in range(20):  # ids whose signature has - or _ in it too
        cid = ids.make("/rooms/{room}", {"room": "lobby"}, SESSION)
        assert ids.verify(cid, SESSION) is not None
        for alias in _aliases(cid):
            if alias != cid:
                assert ids.verify(alias, SESSION) is None, alias
                checked += 1
    assert checked > 150


def test_stray_low_bits_in_the_last_character_do_not_verify(ids: ContextIds) -> None:
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    cid = ids.make("/", {}, SESSION)
    while len(cid.split(".")[0]) % 4 == 0:  # a body with spare low bits in its last character
        cid = ids.make("/", {"n": "x" * len(cid)}, SESSION)
    body, sig = cid.split(".")
    aliases = [body[:-1] + c + "." + sig for c in alphabet if c != body[-1]]
    assert [a for a in aliases if ids.verify(a, SESSION) is not None] == []
