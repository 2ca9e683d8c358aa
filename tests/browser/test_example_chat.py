"""The chat example in Chromium: a 10,000-message history, small requests, hostile text shown as
text, and pages that keep working across a restart."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import orjson
from playwright.sync_api import Browser, BrowserContext, Page, Request, expect

from tests.browser.latency import latency_proxy
from tests.processes import ServerProcess, free_port

HOSTILE_TEXTS = [
    "try this: @post('/x')",
    "$x = 1; $via_ctx",
    "</script><script>document.title = 'owned'</script>",
    "quotes \" and ' and `back`",
    "line\u2028separator\u2029paragraph",
    "</p><script>alert(1)</script>@post('/x') $x",
]
HOSTILE_NAME = "@post('/x') $x </script>"


def seed(path: Path, room: str, count: int, length: int = 500) -> None:
    with closing(sqlite3.connect(path)) as conn, conn:
        conn.execute(
            "CREATE TABLE IF NOT EXISTS messages ("
            " id INTEGER PRIMARY KEY, room TEXT NOT NULL, who TEXT NOT NULL, body TEXT NOT NULL)"
        )
        conn.executemany(
            "INSERT INTO messages (room, who, body) VALUES (?, ?, ?)",
            ((room, f"user{i % 7}", f"{i:05d} " + "x" * (length - 6)) for i in range(count)),
        )


@contextmanager
def chat_server(tmp_path: Path) -> Iterator[ServerProcess]:
    server = ServerProcess("examples.chat:app", free_port(), env={"PYVIA_CHAT_DB": str(tmp_path / "chat.sqlite3")})
    server.start()
    try:
        yield server
    finally:
        server.stop()


def open_room(context: BrowserContext, server: ServerProcess, errors: list[str], name: str) -> Page:
    page = context.new_page()
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(f"http://127.0.0.1:{server.port}/chat/lobby")
    page.bring_to_front()
    page.fill("#name", name)
    page.press("#name", "Enter")
    expect(page.locator("#me")).to_have_text(name)
    return page


def send(page: Page, text: str) -> None:
    page.bring_to_front()
    page.fill("#draft", text)
    page.press("#draft", "Enter")
    expect(page.locator("#draft")).to_have_value("")  # the click cleared it, in the browser
    newest = "() => Array.from(document.querySelectorAll('#messages li')).map(li => li.textContent).pop() || ''"
    deadline = time.monotonic() + 5
    while not str(page.evaluate(newest)).endswith(f": {text}"):  # the server took it: the newest line
        assert time.monotonic() < deadline, f"{text!r} never showed; newest: {page.evaluate(newest)!r}"
        time.sleep(0.02)


def last_message(page: Page) -> str:
    return str(page.locator("#messages li").last.evaluate("el => el.textContent"))


def test_a_long_history_serves_new_visitors_with_small_requests(browser: Browser, tmp_path: Path) -> None:
    seed(tmp_path / "chat.sqlite3", "lobby", 10_000)
    with chat_server(tmp_path) as server:
        ann_context, bob_context = browser.new_context(), browser.new_context()
        errors: list[str] = []
        bodies: list[bytes] = []
        streams: list[str] = []

        def watch(request: Request) -> None:
            if "/_action/" in request.url:
                bodies.append(request.post_data_buffer or b"")
            elif "/_sse" in request.url and request.method == "GET":
                streams.append(request.url)

        try:
            ann_context.on("request", watch)
            ann = open_room(ann_context, server, errors, "Ann")
            bob = open_room(bob_context, server, errors, "Bob")
            ann_again = ann_context.new_page()
            ann_again.goto(f"http://127.0.0.1:{server.port}/chat/lobby")
            for page in (ann, bob, ann_again):
                expect(page.locator("#messages li")).to_have_count(100)  # the latest, not the history
                assert last_message(page).startswith("user3: 09999 ")

            send(ann, "y" * 500)
            send(bob, "hello from Bob")
            for page in (ann, bob, ann_again):
                expect(page.locator("#messages li").last).to_have_text("Bob: hello from Bob")
                expect(page.locator("#messages li")).to_have_count(102)

            assert bodies and max(len(body) for body in bodies) < 1024, [len(b) for b in bodies]
            posted = orjson.loads(max(bodies, key=len))
            assert set(posted) <= {"via_ctx", "via_rev", "name", "draft"}, posted
            assert posted["draft"] == "y" * 500
            assert streams and all(  # the stream's URL carries the context id only
                set(orjson.loads(parse_qs(urlsplit(url).query)["datastar"][0])) == {"via_ctx"} for url in streams
            )

            ann.bring_to_front()
            ann.click("#show-older")
            expect(ann.locator("#messages li")).to_have_count(202)
            texts = ann.locator("#messages li").evaluate_all("els => els.map(el => el.textContent.slice(0, 12))")
            assert texts[:2] == [f"user{9800 % 7}: 09800", f"user{9801 % 7}: 09801"] and len(set(texts)) == 202
            assert errors == []
        finally:
            ann_context.close()
            bob_context.close()


def test_hostile_messages_show_as_text_and_the_page_keeps_working(browser: Browser, tmp_path: Path) -> None:
    with chat_server(tmp_path) as server:
        context, other = browser.new_context(), browser.new_context()
        errors: list[str] = []
        dialogs: list[str] = []
        elsewhere: list[str] = []
        for ctx in (context, other):  # no alert() and no request to /x from any page of either browser
            ctx.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
            ctx.on("request", lambda r: elsewhere.append(r.url) if r.url.split("?")[0].endswith("/x") else None)
        try:
            ann = open_room(context, server, errors, HOSTILE_NAME)
            bob = open_room(other, server, errors, "Bob")
            for text in HOSTILE_TEXTS:
                send(ann, text)
                expect(bob.locator("#messages li").last).to_have_text(f"{HOSTILE_NAME}: {text}")
                assert last_message(bob) == f"{HOSTILE_NAME}: {text}"  # U+2028/2029 exactly

            newcomer = other.new_page()  # a new visitor: every value is in the page's seed and view
            newcomer.on("pageerror", lambda exc: errors.append(str(exc)))
            newcomer.goto(f"http://127.0.0.1:{server.port}/chat/lobby")
            texts = newcomer.locator("#messages li").evaluate_all("els => els.map(el => el.textContent)")
            assert texts == [f"{HOSTILE_NAME}: {text}" for text in HOSTILE_TEXTS]
            reloaded = context.new_page()  # the hostile name is in this browser's session: its seed too
            reloaded.on("pageerror", lambda exc: errors.append(str(exc)))
            reloaded.goto(f"http://127.0.0.1:{server.port}/chat/lobby")
            expect(reloaded.locator("#me")).to_have_text(HOSTILE_NAME)
            send(reloaded, "still works")
            expect(newcomer.locator("#messages li").last).to_have_text(f"{HOSTILE_NAME}: still works")
            assert newcomer.title() != "owned" and reloaded.title() != "owned"
            for page in (bob, newcomer, reloaded):
                assert page.locator("#messages script").count() == 0
            assert errors == [] and dialogs == [] and elsewhere == []
        finally:
            context.close()
            other.close()


def test_an_open_page_keeps_working_across_a_restart(browser: Browser, tmp_path: Path) -> None:
    with chat_server(tmp_path) as server:
        context = browser.new_context()
        errors: list[str] = []
        try:
            ann = open_room(context, server, errors, "Ann")
            send(ann, "before the restart")
            server.stop()
            expect(ann.locator("#offline")).to_be_visible()
            server.start()  # a new process: the history is in the database, the tab revives
            expect(ann.locator("#offline")).to_be_hidden(timeout=15_000)
            expect(ann.locator("#messages li")).to_have_text(["Ann: before the restart"])
            expect(ann.locator("#name")).to_have_value("Ann")  # what the user typed came back
            ann.bring_to_front()
            ann.press("#name", "Enter")  # the session's name lived in the old process: set it again
            expect(ann.locator("#me")).to_have_text("Ann")
            send(ann, "after it")
            expect(ann.locator("#messages li")).to_have_text(["Ann: before the restart", "Ann: after it"])
            assert errors == []
        finally:
            context.close()


def test_lines_typed_one_after_another_at_a_100_ms_round_trip_all_arrive_whole(
    browser: Browser, tmp_path: Path
) -> None:
    """Type a line, Enter, type the next at once: each line takes longer to type than the round
    trip, so an answer arrives while the next one is being typed, and none of it may be undone."""
    lines = [f"line {i}: </script> $x @post('/x') \u2028 end" for i in range(6)]
    with chat_server(tmp_path) as server, latency_proxy(server.port) as proxy:
        context = browser.new_context()
        errors: list[str] = []
        try:
            page = context.new_page()
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.goto(f"http://127.0.0.1:{proxy.port}/chat/lobby")
            page.fill("#name", "Ann")
            page.press("#name", "Enter")
            expect(page.locator("#me")).to_have_text("Ann")
            page.locator("#draft").click()
            for line in lines:
                page.keyboard.type(line, delay=8)
                page.keyboard.press("Enter")
            expect(page.locator("#messages li")).to_have_count(len(lines), timeout=10_000)
            texts = page.locator("#messages li").evaluate_all("els => els.map(el => el.textContent)")
            assert texts == [f"Ann: {line}" for line in lines]
            expect(page.locator("#draft")).to_have_value("")
            assert errors == []
        finally:
            context.close()
