"""Fuzz the decoders of what a browser holds: context ids, session ids and cookies.

The invariant is h11's: decode, or say no (``None`` / ``False``), never raise, never hang. And
the security one: no spelling but the one the server made verifies, so an id cannot be forged,
altered or aliased by any edit a fuzzer finds.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pyvia import App
from pyvia.http import Headers, Request, parse_cookies
from pyvia.session import ContextIds, SessionIds
from tests.fuzz.bounds import bounded

FUZZ = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SECRET = b"fuzz-secret"
IDS = ContextIds(SECRET)
SESSIONS = SessionIds(SECRET)
SESSION = SESSIONS.make()
APP = App(secret=SECRET)
B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
_route = st.sampled_from(["/", "/rooms/{room}", "/u/{name}/{tab}"])
_params = st.dictionaries(st.sampled_from(["room", "name", "tab"]), st.text(max_size=12), max_size=3)
_edit_chars = st.one_of(st.sampled_from(list(B64 + "=.+/!%*\t\n \x00é")), st.characters())


@st.composite
def edits(draw: st.DrawFn, text: str) -> str:
    """``text`` with a few insertions, deletions or replacements (what a forger tries)."""
    chars = list(text)
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["insert", "delete", "replace", "append"]))
        at = draw(st.integers(0, max(0, len(chars) - 1)))
        if op == "insert":
            chars.insert(at, draw(_edit_chars))
        elif op == "delete" and chars:
            del chars[at]
        elif op == "replace" and chars:
            chars[at] = draw(_edit_chars)
        else:
            chars.append(draw(_edit_chars))
    return "".join(chars)


@FUZZ
@given(st.one_of(st.text(max_size=200), st.text(alphabet=B64 + ".=", max_size=120)))
def test_verify_of_any_text_is_none_or_a_route_and_params(text: str) -> None:
    with bounded(5):
        found = IDS.verify(text, SESSION)
        issued = ContextIds.issued(text)
    assert found is None  # nothing random is an id this app made
    assert type(issued) is int and issued >= 0  # its date reads as a number or as none, never raises


@FUZZ
@given(data=st.data(), route=_route, params=_params)
def test_no_edit_of_a_made_id_verifies_unless_it_is_the_same_id(
    data: st.DataObject, route: str, params: dict[str, str]
) -> None:
    made = IDS.make(route, params, SESSION)
    assert IDS.verify(made, SESSION) == (route, {k: str(v) for k, v in params.items()})
    edited = data.draw(edits(made))
    with bounded(5):
        found = IDS.verify(edited, SESSION)
    assert found is None or edited == made


@FUZZ
@given(data=st.data())
def test_no_edit_of_an_issued_session_id_is_issued(data: st.DataObject) -> None:
    issued = SESSIONS.make()
    edited = data.draw(edits(issued))
    assert SESSIONS.is_issued(edited) == (edited == issued)


@FUZZ
@given(st.one_of(st.none(), st.text(max_size=100), st.text(alphabet="0123456789abcdef", min_size=64, max_size=64)))
def test_is_issued_of_any_text_is_a_bool_and_false(text: str | None) -> None:
    assert SESSIONS.is_issued(text) is False


_cookie_text = st.lists(
    st.one_of(st.text(max_size=20), st.sampled_from(["via_session_id=", SESSION, ";", "; ", "=", '"', ",", "\\"])),
    max_size=10,
).map("".join)


@FUZZ
@given(st.lists(_cookie_text, max_size=3))
def test_the_session_of_any_cookie_header_is_an_issued_id_or_none(headers: list[str]) -> None:
    app = APP
    with bounded(5):
        cookies = parse_cookies(headers)
        request = Request("GET", "/", headers=Headers([("cookie", h) for h in headers]))
        session = app.session_id(request)
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in cookies.items())
    assert session is None or (session == cookies.get("via_session_id") and app.session_ids.is_issued(session))
