"""Any value is safe: in the page's seed, in signal patches and in views, in Chromium.

Hostile strings (Datastar expression syntax, script tags, quotes, line separators, NUL, emoji, the
markers of Datastar's own compiler, 1 MB) go seed → browser store → action → server and come back
in a patch exactly as they were, and nothing in them runs.
"""

from __future__ import annotations

import html
import time
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from playwright.sync_api import Browser, Page

from pyvia import App, Context
from tests.helpers import running_server

#: What a value may hold to break a page that evaluates or splices it.
HOSTILE = [
    "try this: @post('/x')",
    "@get('/x') and @post(\"/x\", {a: 1})",
    "$x $via_ctx ${window.__pwned = 1} $_disconnected = true",
    "</script><script>window.__pwned = 1</script>",
    '<img src=x onerror="window.__pwned = 1">',
    "'; window.__pwned = 1; '",
    '"); window.__pwned = 1; ("',
    "a;b;;c; return 1",
    "back\\slash \\\" \\' \\\\",
    "line\u2028separator\u2029paragraph",
    "nul\x00char",
    "emoji 🐍🚀 \U0001f595JS_ not escaped _DS🚀 __escaped0",
    "/* comment */ // comment\n`template ${1}`",
    '{"json": true}',
]


def hostile_app(current: dict[str, str]) -> App:
    app = App(title="Hostile")

    @app.page("/")
    def page(c: Context) -> None:
        value = current["value"]
        shown = c.signal(value, "shown")  # server-owned: in the seed
        typed = c.signal(value, "typed", writable=True, max_length=2_000_000)  # comes back with the action
        patched = c.signal("", "patched")
        result = c.signal("", "result")

        @c.action
        def check() -> None:
            result.value = "same" if typed.value == current["value"] else "changed"
            patched.value = current["value"]  # back to the browser in a signal patch

        c.view(
            lambda: (
                f"""
<p id="shown" data-text="{shown.ref()}"></p>
<p id="typed" data-text="{typed.ref()}"></p>
<p id="patched" data-text="{patched.ref()}"></p>
<p id="result" data-text="{result.ref()}"></p>
<pre id="rendered">{html.escape(value)}</pre>
<button id="check" data-on:click="{check}">check</button>"""
            )
        )

    return app


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[int, dict[str, str]]]:
    current = {"value": ""}
    with running_server(hostile_app(current)) as (_, port):
        yield port, current


def as_html_text(value: str) -> str:
    """What HTML itself keeps of a string in a ``<pre>``: its parser drops NUL, turns CR and CRLF
    into LF and drops a newline right after the start tag (signal values have no such limit)."""
    text = value.replace("\0", "").replace("\r\n", "\n").replace("\r", "\n")
    return text[1:] if text.startswith("\n") else text


def _text(page: Page, element_id: str) -> str:
    return str(page.evaluate(f"document.getElementById({element_id!r}).textContent"))


def _round_trip(browser: Browser, port: int, current: dict[str, str], value: str) -> None:
    current["value"] = value
    page = browser.new_page()
    errors: list[str] = []
    elsewhere: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("request", lambda r: elsewhere.append(r.url) if "/x" in r.url.split("?")[0][-3:] else None)
    try:
        page.goto(f"http://127.0.0.1:{port}/")
        page.wait_for_function(
            f"document.getElementById('shown').textContent.length > 0 || {len(value)} === 0", timeout=10_000
        )
        assert _text(page, "shown") == value  # the seed, evaluated by Datastar
        assert _text(page, "typed") == value
        assert _text(page, "rendered") == as_html_text(value)  # the view, escaped
        deadline = time.monotonic() + 10
        page.click("#check")
        while _text(page, "result") != "same":
            assert _text(page, "result") in ("", "same"), "the value that came back differs"
            assert time.monotonic() < deadline, "the action's patch never came"
            time.sleep(0.02)
        assert _text(page, "patched") == value  # a signal patch
        assert page.evaluate("window.__pwned") is None
        assert elsewhere == []
        assert errors == []
    finally:
        page.close()


@pytest.mark.parametrize("value", HOSTILE)
def test_each_hostile_value_round_trips_and_runs_nothing(
    browser: Browser, served: tuple[int, dict[str, str]], value: str
) -> None:
    port, current = served
    _round_trip(browser, port, current, value)


def test_a_value_of_a_million_characters_round_trips(browser: Browser, served: tuple[int, dict[str, str]]) -> None:
    port, current = served
    piece = "".join(HOSTILE).replace('"', "").replace("\\", "")  # few characters JSON must escape
    value = (piece * (1_000_000 // len(piece) + 1))[:1_000_000]
    _round_trip(browser, port, current, value)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.sampled_from(HOSTILE) | st.text(max_size=12), min_size=1, max_size=6).map("".join))
@example("$")
@example("@")
@example(";")
@example("\n")
@example("\r\nafter a line break")
def test_generated_values_round_trip_and_run_nothing(
    browser: Browser, served: tuple[int, dict[str, str]], value: str
) -> None:
    port, current = served
    _round_trip(browser, port, current, value)


def cookie_app(current: dict[str, str]) -> App:
    app = App(title="Cookies")

    @app.page("/")
    def page(c: Context) -> None:
        typed = c.signal(current["value"], "typed", writable=True)
        saved = c.signal("", "saved")

        @c.action
        def remember() -> None:
            c.set_cookie("name", typed.value)
            saved.value = "saved"

        c.view(
            lambda: (
                f'<pre id="cookie">{html.escape(c.cookies.get("name", "(none)"))}</pre>'
                f'<p id="saved" data-text="{saved.ref()}"></p>'
                f'<button id="remember" data-on:click="{remember}">remember</button>'
            )
        )

    return app


COOKIE_VALUES = [v for v in HOSTILE if "\x00" not in v] + ['Ann "the; boss" ö', "李 \u2028", "=;=", ""]


def test_any_text_set_as_a_cookie_comes_back_as_it_was_after_a_reload(browser: Browser) -> None:
    """A cookie value is any text: its action is answered (no "something went wrong" for a name
    with U+2028 or '李'), Chromium stores what the server sent, and the next page view reads the
    same text back from ``c.cookies``; nothing in it runs."""
    current = {"value": ""}
    with running_server(cookie_app(current)) as (_, port):
        for value in COOKIE_VALUES:
            current["value"] = value
            context = browser.new_context()
            page = context.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda exc, errors=errors: errors.append(str(exc)))
            try:
                page.goto(f"http://127.0.0.1:{port}/")
                page.wait_for_function("document.getElementById('cookie') !== null", timeout=10_000)
                assert _text(page, "cookie") == "(none)"
                with page.expect_response(lambda r: "/_action/remember" in r.url) as answer:
                    page.click("#remember")
                assert answer.value.status == 200, f"the action that set {value!r} was answered {answer.value.status}"
                page.wait_for_function("document.getElementById('saved').textContent === 'saved'", timeout=10_000)
                page.reload()
                page.wait_for_function("document.getElementById('cookie') !== null", timeout=10_000)
                assert _text(page, "cookie") == as_html_text(value), f"{value!r} came back changed"
                assert page.evaluate("window.__pwned") is None
                assert errors == []
            finally:
                context.close()
