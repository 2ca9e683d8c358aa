"""Signals on a real network: Chromium behind a proxy that adds 50 ms each way (a 100 ms round trip).

What a user does quickly (clicks, typing) while patches are on their way must count exactly once
and never be undone by a post that crossed a server write.
"""

from __future__ import annotations

import html
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect

from pyvia import App, Context, Request, Response, UserError
from tests.browser.latency import LatencyProxy, latency_proxy
from tests.helpers import running_server
from tests.processes import ServerProcess, free_port


@pytest.fixture
def counter() -> Iterator[LatencyProxy]:
    server = ServerProcess("examples.counter:app", free_port())
    server.start()
    try:
        with latency_proxy(server.port) as proxy:
            yield proxy
    finally:
        server.stop()


def _page(browser: Browser, proxy: LatencyProxy, path: str = "/") -> tuple[Page, list[str]]:
    page = browser.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(f"http://127.0.0.1:{proxy.port}{path}")
    _wait(lambda: proxy.requests_to(b"/_sse") >= 1, "the stream to open")
    time.sleep(0.3)  # its first frame has come back: the page is live
    return page, errors


def test_ten_quick_clicks_at_a_100_ms_round_trip_count_ten(browser: Browser, counter: LatencyProxy) -> None:
    page, errors = _page(browser, counter)
    try:
        expect(page.locator("#count")).to_have_text("0")
        for _ in range(10):
            page.locator("#inc").click()  # each click is posted before the last answer came back
        expect(page.locator("#count")).to_have_text("10", timeout=5000)
        time.sleep(0.5)  # nothing late may take it back
        expect(page.locator("#count")).to_have_text("10")
        assert counter.requests_to(b"/_action/increment") == 10
        assert errors == []
    finally:
        page.close()


def chat_app(said: list[str]) -> App:
    """A draft the server clears when it is sent, a ping that posts the draft too, and a clock
    that patches the page every 30 ms while the user types."""
    app = App(title="Draft")

    @app.page("/")
    def page(c: Context) -> None:
        draft = c.signal("", "draft", writable=True, max_length=200)
        ticks = c.signal(0, "ticks")
        pings = c.signal(0, "pings")

        @c.action
        def send() -> None:
            text = draft.value.strip()
            if text:
                said.append(text)
            draft.value = ""  # the server's write: a post that crossed it must not bring the text back

        @c.action
        def ping() -> None:
            pings.value += 1
            c.sync()  # the view shows what the server holds as the draft

        def tick() -> None:
            ticks.value += 1
            c.sync_signals()

        c.set_interval(tick, 0.03)
        c.view(
            lambda: (
                f"""
<form id="f" data-on:submit__prevent="{send}">
  <input id="draft" autocomplete="off" {draft.bind()}><button id="send">Send</button>
</form>
<button id="ping" data-on:click="{ping}">ping</button>
<p>ticks <span id="ticks" data-text="{ticks.ref()}"></span>,
   pings <span id="pings" data-text="{pings.ref()}"></span></p>
<p>the server holds: <q id="held">{html.escape(draft.value)}</q></p>"""
            )
        )

    return app


def test_a_draft_the_server_cleared_is_not_brought_back_by_a_post_that_crossed_the_clear(browser: Browser) -> None:
    said: list[str] = []
    with running_server(chat_app(said)) as (_, port), latency_proxy(port) as proxy:
        page, errors = _page(browser, proxy)
        try:
            expect(page.locator("#ticks")).not_to_have_text("0")
            page.locator("#draft").fill("hello")
            page.locator("#draft").press("Enter")  # send: the server clears the draft ...
            page.locator("#ping").click()  # ... and this post, made before the clear arrived, still carries "hello"
            expect(page.locator("#pings")).to_have_text("1")
            expect(page.locator("#held")).to_have_text("")  # the ping's stale "hello" was dropped
            expect(page.locator("#draft")).to_have_value("")
            time.sleep(0.3)
            page.locator("#send").click()  # sends what the server holds: nothing, not "hello" again
            time.sleep(0.5)
            assert said == ["hello"]
            expect(page.locator("#draft")).to_have_value("")
            assert errors == []
        finally:
            page.close()


def test_typing_while_patches_arrive_loses_no_keystroke(browser: Browser) -> None:
    said: list[str] = []
    text = "the quick brown fox jumps over the lazy dog"
    with running_server(chat_app(said)) as (_, port), latency_proxy(port) as proxy:
        page, errors = _page(browser, proxy)
        try:
            expect(page.locator("#ticks")).not_to_have_text("0")
            page.locator("#draft").click()
            page.keyboard.type(text, delay=15)  # about 20 patches arrive while the user types
            expect(page.locator("#draft")).to_have_value(text)
            page.locator("#draft").press("Enter")
            _wait(lambda: said == [text], f"the server to get {text!r}, not {said!r}")
            expect(page.locator("#draft")).to_have_value("")
            assert errors == []
        finally:
            page.close()


def notes_app(notes: list[str]) -> App:
    """A list of notes: the input is cleared in the browser by the click that sends it (what
    docs/signals-and-actions.md advises for an input the user fills again at once)."""
    app = App(title="Notes")

    @app.page("/")
    def page(c: Context) -> None:
        note = c.signal("", "note", writable=True, max_length=200)
        count = c.signal(0, "count")

        @c.action
        def add() -> None:
            if len(note.value) < 3:
                raise UserError("A note needs three letters.")
            notes.append(note.value)
            count.value = len(notes)

        c.view(
            lambda: (
                f"""<input id="note" autocomplete="off" {note.bind()}>
<button id="add" data-on:click="{add}; {note.ref()} = ''">Add</button>
<p>notes <span id="count" data-text="{count.ref()}"></span></p>"""
            )
        )

    return app


def test_notes_typed_one_after_another_at_a_100_ms_round_trip_are_all_kept(browser: Browser) -> None:
    """Type, click Add, type the next at once, ten times, faster than the round trip: each note
    is posted with the click and none is wiped by an answer that arrives while the next is typed."""
    notes: list[str] = []
    typed = [f"note {i} </script> $x @post('/x') \u2028" for i in range(10)]
    with running_server(notes_app(notes)) as (_, port), latency_proxy(port) as proxy:
        page, errors = _page(browser, proxy)
        try:
            for text in typed:
                page.locator("#note").fill(text)
                page.locator("#add").click()
                expect(page.locator("#note")).to_have_value("")
            expect(page.locator("#count")).to_have_text("10", timeout=5000)
            assert notes == typed
            assert proxy.requests_to(b"/_action/add") == 10
            expect(page.locator("#note")).to_have_value("")
            assert errors == []
        finally:
            page.close()


def test_a_note_the_server_refuses_comes_back_into_the_input_the_click_cleared(browser: Browser) -> None:
    notes: list[str] = []
    with running_server(notes_app(notes)) as (_, port), latency_proxy(port) as proxy:
        page, errors = _page(browser, proxy)
        try:
            page.locator("#note").fill("ab")
            page.locator("#add").click()
            expect(page.get_by_role("alert")).to_contain_text("A note needs three letters.")
            expect(page.locator("#note")).to_have_value("ab")  # given back with the refusal
            page.locator("#note").fill("abc")
            page.locator("#add").click()
            expect(page.locator("#count")).to_have_text("1")
            expect(page.locator("#note")).to_have_value("")
            expect(page.get_by_role("alert")).to_be_hidden()
            assert notes == ["abc"] and errors == []
        finally:
            page.close()


def test_a_note_refused_before_its_action_runs_comes_back_whole(browser: Browser) -> None:
    """A note past the signal's ``max_length`` (413, before the action runs) and one holding half
    of an emoji pair (JSON that orjson refuses): the click cleared the input, and neither the too
    long text nor the next note is lost."""
    notes: list[str] = []
    with running_server(notes_app(notes)) as (_, port), latency_proxy(port) as proxy:
        page, errors = _page(browser, proxy)
        try:
            pasted = "too long \u2028 </script> " * 10  # 210 characters, the limit is 200
            page.locator("#note").fill(pasted)
            page.locator("#add").click()
            expect(page.get_by_role("alert")).to_contain_text("signal 'note' got 210 characters")
            expect(page.locator("#note")).to_have_value(pasted)  # given back to be shortened
            assert notes == []

            page.locator("#note").evaluate(  # a script cut an emoji in half: "ab" + "\ud83d"
                "el => { el.value = 'ab' + '\\ud83d'.slice(0, 1) + ' \\ud83d\\ude00';"
                " el.dispatchEvent(new Event('input', {bubbles: true})) }"
            )
            page.locator("#add").click()
            expect(page.locator("#count")).to_have_text("1")
            expect(page.get_by_role("alert")).to_be_hidden()
            assert notes == ["ab\ufffd \U0001f600"]  # the half shown as the page shows it
            assert errors == []
        finally:
            page.close()


def signup_app() -> App:
    """A form whose per-field errors live in one dict signal, as docs/signals-and-actions.md shows."""
    app = App(title="Sign up")

    @app.page("/")
    def page(c: Context) -> None:
        email = c.signal("", "email", writable=True, max_length=200)
        name = c.signal("", "name", writable=True, max_length=200)
        errors = c.signal({}, "errors")

        @c.action
        def save() -> None:
            found = {}
            if "@" not in email.value:
                found["email"] = "An email has an @."
            if len(name.value) < 2:
                found["name"] = "A name has two letters."
            errors.value = found

        c.view(
            lambda: (
                f"""<input id="email" {email.bind()}><p id="email-error" data-text="{errors.ref()}.email"></p>
<input id="name" {name.bind()}><p id="name-error" data-show="{errors.ref()}.name" data-text="{errors.ref()}.name"></p>
<button id="save" data-on:click="{save}">Save</button>"""
            )
        )

    return app


def test_errors_that_a_dict_signal_no_longer_holds_leave_the_page_and_come_back(browser: Browser) -> None:
    """Datastar deletes a key sent as null without re-running what reads it: the error stayed on
    screen after the user fixed the field, and one deleted never showed again."""
    with running_server(signup_app()) as (_, port), latency_proxy(port) as proxy:
        page, errors = _page(browser, proxy)
        email_error, name_error = page.locator("#email-error"), page.locator("#name-error")
        try:
            page.locator("#save").click()
            expect(email_error).to_have_text("An email has an @.")
            expect(name_error).to_have_text("A name has two letters.")
            page.locator("#email").fill("ann@example.org")
            page.locator("#save").click()
            expect(email_error).to_have_text("")
            expect(name_error).to_have_text("A name has two letters.")
            page.locator("#name").fill("Ann")
            page.locator("#save").click()
            expect(name_error).to_be_hidden()
            expect(name_error).to_have_text("")
            page.locator("#email").fill("ann")
            page.locator("#name").fill("A")
            page.locator("#save").click()
            expect(email_error).to_have_text("An email has an @.")
            expect(name_error).to_be_visible()
            expect(name_error).to_have_text("A name has two letters.")
            assert errors == []
        finally:
            page.close()


def quantity_app(seen: list[tuple[object, object]]) -> App:
    app = App(title="Quantity")

    @app.page("/")
    def page(c: Context) -> None:
        as_number = c.signal(5, "as_number", writable=True)
        as_text = c.signal("5", "as_text", writable=True, max_length=6)

        @c.action
        def save() -> None:
            seen.append((as_number.value, as_text.value))

        c.view(
            lambda: (
                f"""<input id="number" type="number" {as_number.bind()}>
<input id="text" inputmode="numeric" pattern="[0-9]*" {as_text.bind()}>
<button id="save" data-on:click="{save}">Save</button>"""
            )
        )

    return app


def test_a_cleared_number_input_posts_0_and_a_numeric_text_input_posts_nothing(browser: Browser) -> None:
    """What docs/signals-and-actions.md ("Type checks") tells the user to bind when an empty field
    means something: Datastar reads a cleared type=number field as 0."""
    seen: list[tuple[object, object]] = []
    with running_server(quantity_app(seen)) as (_, port), latency_proxy(port) as proxy:
        page, errors = _page(browser, proxy)
        try:
            page.locator("#number").fill("")
            page.locator("#text").fill("")
            page.locator("#save").click()
            _wait(lambda: len(seen) == 1, "the save")
            assert seen == [(0, "")]
            assert errors == []
        finally:
            page.close()


def _wait(predicate: object, what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]  # a callable
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def guarded_notes_app(notes: list[str], allowed: list[bool]) -> App:
    """The notes behind a login check written as a middleware, which answers 403 itself."""
    app = App(title="Guarded notes")

    def require_login(request: Request, call_next: Callable[[Request], Any]) -> Any:
        if request.kind == "action" and not allowed[0]:
            return Response.text("Log in first to add notes.", 403)
        return call_next(request)

    with app.group("", middleware=[require_login]) as area:

        @area.page("/")
        def page(c: Context) -> None:
            note = c.signal("", "note", writable=True)

            @c.action
            def add() -> None:
                notes.append(note.value)

            c.view(
                lambda: (
                    f"""<input id="note" autocomplete="off" {note.bind()}>
<button id="add" data-on:click="{add}; {note.ref()} = ''">Add</button>"""
                )
            )

    return app


def test_a_note_a_middleware_refuses_comes_back_with_its_words(browser: Browser) -> None:
    notes: list[str] = []
    allowed = [False]
    with running_server(guarded_notes_app(notes, allowed)) as (_, port), latency_proxy(port) as proxy:
        page, errors = _page(browser, proxy)
        try:
            page.locator("#note").fill("a note </script> $x")
            page.locator("#add").click()
            expect(page.get_by_role("alert")).to_contain_text("Log in first to add notes.")
            expect(page.locator("#note")).to_have_value("a note </script> $x")  # the click cleared it
            allowed[0] = True  # logged in meanwhile, in another tab
            page.locator("#add").click()
            expect(page.locator("#note")).to_have_value("")
            expect(page.get_by_role("alert")).to_be_hidden()
            assert notes == ["a note </script> $x"] and errors == []
        finally:
            page.close()
