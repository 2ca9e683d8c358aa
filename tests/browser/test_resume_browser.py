"""In Debian's Chromium: a stream cut while frames flow resumes with exactly the frames it missed
(Datastar's retry sends the last id), and the Datastar answers of plain routes do what they say."""

from __future__ import annotations

import asyncio
import contextlib
import re
import socket
import threading
import time
import urllib.request
from collections.abc import AsyncIterator, Callable, Iterator

from playwright.sync_api import Browser, Page, expect

from pyvia import App, Context, Request, Response, Scope, UserError
from pyvia.datastar import DatastarResponse, elements_response, patch_elements, script_response, signals_response
from tests.browser.conftest import Proxy, ServerProcess, free_port
from tests.browser.latency import latency_proxy

ITEMS = 150

app = App()


@app.page("/")
def flowing(c: Context) -> None:
    count = c.signal(0, "count")

    def add() -> None:
        if count.value >= ITEMS:
            return
        c.patch_elements(f'<li id="i{count.value}">{count.value}</li>', selector="#list", mode="append")
        count.value += 1
        c.sync_signals()

    @c.action
    def start() -> None:
        c.set_interval(add, 0.02)

    c.view(
        lambda: (
            '<button id="start" data-on:click="@post(\'/_action/start\')">start</button>'
            f'<span id="count" data-text="$_count">{count.value}</span>'
            '<ul id="list">' + "".join(f'<li id="i{n}">{n}</li>' for n in range(count.value)) + "</ul>"
        )
    )


@app.page("/board")
def board(c: Context) -> None:
    """Every tick re-renders the route's whole view for its tabs (a broadcast), and ``note``
    appends to this tab's own list outside it: the first kind of frame is never replayed and
    empties the tab's buffer, the second is."""
    c.scope(Scope.ROUTE)
    ticks = c.signal(0, "ticks", scope=Scope.ROUTE)
    notes = c.signal(0, "notes")

    def tick() -> None:
        if ticks.value < ITEMS:
            ticks.increment()

    @c.action
    def start() -> None:
        c.set_interval(tick, 0.02)

    @c.action
    def note() -> None:
        c.patch_elements(f'<li id="k{notes.value}">{notes.value}</li>', selector="#notes", mode="append")
        notes.value += 1

    c.view(
        lambda: (
            '<button id="start" data-on:click="@post(\'/_action/start\')">start</button>'
            f'<button id="note" data-on:click="{note}">note</button>'
            f'<p id="ticks">{ticks.value}</p>' + "<i></i>" * 200
        ),
        share_render=True,
    )
    c.patch_elements('<ul id="notes"></ul>', selector="body", mode="append")


@app.page("/gate")
def gate(c: Context) -> None:
    """A click that signs in (a cookie, then a navigation), and one the app refuses."""

    @c.action
    def enter() -> None:
        c.set_cookie("seen", "yes")
        c.redirect("/board")

    @c.action
    def bid() -> None:
        raise UserError("This lot is closed.")

    c.view(
        lambda: (
            f'<button id="enter" data-on:click="{enter}">enter</button>'
            f'<button id="bid" data-on:click="{bid}">bid</button>'
        )
    )


@app.page("/routes")
def routes_page(c: Context) -> None:
    c.view(
        lambda: (
            """
<div data-signals="{theme: 'light'}">
  <svg id="vis" width="10" height="10"></svg>
  <p id="theme" data-text="$theme"></p>
  <ul id="feed"></ul>
  <button id="frag" data-on:click="@get('/frag')">frag</button>
  <button id="sig" data-on:click="@get('/sig')">sig</button>
  <button id="sig2" data-on:click="@get('/sig2')">sig2</button>
  <button id="js" data-on:click="@get('/js')">js</button>
  <button id="stream" data-on:click="@get('/feed')">stream</button>
</div>"""
        )
    )


@app.route("GET", "/frag")
def frag(request: Request) -> Response:
    return elements_response('<circle id="dot" cx="5" cy="5" r="4"/>', selector="#vis", mode="append", namespace="svg")


@app.route("GET", "/sig")
def sig(request: Request) -> Response:
    return signals_response({"theme": "dark"}, only_if_missing=True)


@app.route("GET", "/sig2")
def sig2(request: Request) -> Response:
    return signals_response({"theme": "dark"})


@app.route("GET", "/js")
def js(request: Request) -> Response:
    # import.meta parses only in a module script: it runs only if the attribute reached the element
    return script_response("window.ranAsModule = typeof import.meta === 'object'", attributes={"type": "module"})


@app.route("GET", "/feed")
def feed(request: Request) -> DatastarResponse:
    async def events() -> AsyncIterator[bytes]:
        for n in range(3):
            yield patch_elements(f'<li id="f{n}">{n}</li>', "#feed", "append")
            await asyncio.sleep(0.05)

    return DatastarResponse(events())


class LossyProxy(Proxy):
    """A proxy that can swallow what the server sends (a dying network drops frames in flight)
    before it cuts every connection."""

    def __init__(self, upstream_port: int) -> None:
        self.swallowing = False
        #: Swallow only what streams carry (the answers to actions still arrive).
        self.streams_only = False
        self.stream_sockets: set[socket.socket] = set()
        super().__init__(upstream_port)

    def _request(self, line: bytes, upstream: socket.socket) -> None:
        super()._request(line, upstream)
        if b"/_sse" in line:
            self.stream_sockets.add(upstream)

    def _passes(self, upstream: socket.socket) -> bool:
        return not self.swallowing or (self.streams_only and upstream not in self.stream_sockets)


def metric(port: int, name: str) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    found = re.search(rf"^{name} (\S+)$", text, re.MULTILINE)
    assert found, name
    return float(found.group(1))


@contextlib.contextmanager
def _tab(browser: Browser, path: str) -> Iterator[tuple[ServerProcess, LossyProxy, Page, list[str]]]:
    """A server behind a :class:`LossyProxy` and a page open on ``path`` with its stream: what
    the tests cut, and the page's errors."""
    server = ServerProcess("tests.browser.test_resume_browser:app", free_port())
    server.start()
    proxy = LossyProxy(server.port)
    page = browser.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        page.goto(f"http://127.0.0.1:{proxy.port}{path}")
        _wait(lambda: proxy.stream_requests() >= 1, "the tab to open its stream")
        yield server, proxy, page, errors
    finally:
        page.close()
        proxy.close()
        server.stop()


def test_a_stream_cut_while_frames_flow_resumes_without_loss_or_repeat(browser: Browser) -> None:
    with _tab(browser, "/") as (server, proxy, page, errors):
        page.click("#start")
        _wait(lambda: page.locator("#list li").count() >= 40, "frames to flow")
        streams = proxy.stream_requests()
        proxy.swallowing = True  # the network dies: what the server writes now never arrives ...
        time.sleep(0.3)
        proxy.cut_all()  # ... until the stream's socket is cut
        proxy.swallowing = False
        _wait(lambda: proxy.stream_requests() > streams, "Datastar's retry")
        expect(page.locator("#count")).to_have_text(str(ITEMS), timeout=20_000)
        ids = page.eval_on_selector_all("#list li", "els => els.map(e => e.id)")
        assert ids == [f"i{n}" for n in range(ITEMS)], "every item once, in order"
        assert metric(server.port, "pyvia_stream_resumes_total") >= 1
        assert metric(server.port, "pyvia_stream_full_renders_total") == 0
        assert metric(server.port, "pyvia_stream_replayed_frames_total") >= 5  # ~15 were swallowed
        assert errors == []


def test_the_one_shot_answers_and_a_route_s_stream_in_the_browser(browser: Browser) -> None:
    server = ServerProcess("tests.browser.test_resume_browser:app", free_port())
    server.start()
    page = browser.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        page.goto(f"http://127.0.0.1:{server.port}/routes")
        expect(page.locator("#theme")).to_have_text("light")
        page.click("#frag")
        page.wait_for_selector("#dot", state="attached")
        assert page.eval_on_selector("#dot", "e => e.namespaceURI") == "http://www.w3.org/2000/svg"
        with page.expect_response("**/sig?**"):
            page.click("#sig")
        page.wait_for_timeout(200)
        expect(page.locator("#theme")).to_have_text("light")  # only if missing: the page's value stays
        page.click("#sig2")
        expect(page.locator("#theme")).to_have_text("dark")  # the same answer without the header: applied
        page.click("#js")
        page.wait_for_function("window.ranAsModule === true")
        page.click("#stream")
        expect(page.locator("#feed li")).to_have_count(3)
        assert errors == []
    finally:
        page.close()
        server.stop()


def _wait(predicate: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def test_a_broadcast_board_cut_while_views_flow_comes_back_whole_and_its_notes_resume(browser: Browser) -> None:
    """A board whose every broadcast re-renders the view keeps no replay of it: cut mid-flow, the
    tab gets one full render and shows the current count; a note written after the last view, then
    lost with the connection, is resumed exactly, once."""
    with _tab(browser, "/board") as (server, proxy, page, errors):
        page.click("#start")
        _wait(lambda: int(page.locator("#ticks").inner_text()) >= 30, "broadcasts to flow")
        streams = proxy.stream_requests()
        proxy.swallowing = True
        time.sleep(0.3)
        proxy.cut_all()
        proxy.swallowing = False
        _wait(lambda: proxy.stream_requests() > streams, "Datastar's retry")
        expect(page.locator("#ticks")).to_have_text(str(ITEMS), timeout=20_000)
        assert metric(server.port, "pyvia_stream_full_renders_total") >= 1  # views are not replayed
        for _ in range(3):
            page.click("#note")
        expect(page.locator("#notes li")).to_have_count(3)
        resumes, streams = metric(server.port, "pyvia_stream_resumes_total"), proxy.stream_requests()
        proxy.streams_only = proxy.swallowing = True  # the action's answer arrives (else Datastar posts it again)
        page.click("#note")  # its frame on the stream is swallowed ...
        time.sleep(0.3)
        proxy.cut_all()  # ... and comes back from the replay, after the last view
        proxy.swallowing = False
        _wait(lambda: proxy.stream_requests() > streams, "Datastar's retry")
        expect(page.locator("#notes li")).to_have_count(4, timeout=20_000)
        ids = page.eval_on_selector_all("#notes li", "els => els.map(e => e.id)")
        assert ids == ["k0", "k1", "k2", "k3"], "every note once, in order"
        assert metric(server.port, "pyvia_stream_resumes_total") == resumes + 1
        assert errors == []


def test_a_click_whose_answer_the_network_lost_is_posted_again_and_runs_once(browser: Browser) -> None:
    """The network drops everything the server sends, the action's answer too, then the connection:
    Datastar posts the click again (same headers) and the tab, which ran it already, does not run
    it twice. The note appears once, from the stream's resume."""
    with _tab(browser, "/board") as (_server, proxy, page, errors):
        page.click("#note")
        expect(page.locator("#notes li")).to_have_count(1)
        posts = sum(1 for line in proxy.requests if line.startswith(b"POST /_action/note"))
        proxy.swallowing = True  # the answer to the next click is lost, and its frame on the stream
        page.click("#note")
        _wait(
            lambda: sum(1 for line in proxy.requests if line.startswith(b"POST /_action/note")) > posts,
            "the click to reach the server",
        )
        time.sleep(0.3)
        proxy.cut_all()
        proxy.swallowing = False
        _wait(
            lambda: sum(1 for line in proxy.requests if line.startswith(b"POST /_action/note")) > posts + 1,
            "Datastar to post the click again",
            timeout=15.0,
        )
        expect(page.locator("#notes li")).to_have_count(2, timeout=20_000)
        time.sleep(1.0)  # nothing more comes: a second run would add a third note
        ids = page.eval_on_selector_all("#notes li", "els => els.map(e => e.id)")
        assert ids == ["k0", "k1"], "the click ran once"
        assert errors == []


def test_typing_on_while_the_server_restarts_loses_no_keystroke(browser: Browser) -> None:
    """The server filled the box once, the user types on in it, and the server restarts mid-word
    (through the 50 ms proxy): the revived tab's first frame must not put back the text the
    page posted to revive it, which would wipe what was typed while it travelled."""
    server = ServerProcess("tests.browser.apps:notes_app", free_port())
    server.start()
    try:
        with latency_proxy(server.port) as proxy:
            page = browser.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.goto(f"http://127.0.0.1:{proxy.port}/")
            page.click("#load")
            expect(page.locator("#text")).to_have_value("loaded: ")
            page.evaluate(
                """() => { window.jumps = []; const box = document.querySelector('#text'); let last = box.value;
                   setInterval(() => { const v = box.value;
                     if (v !== last) { if (!v.startsWith(last)) window.jumps.push([last, v]); last = v; } }, 2); }"""
            )
            page.focus("#text")
            words = "".join(f"w{i} " for i in range(90))
            restarted = threading.Thread(target=lambda: (time.sleep(1.0), server.restart()))
            restarted.start()
            page.keyboard.type(words, delay=20)
            restarted.join()
            page.wait_for_timeout(1000)
            assert page.evaluate("window.jumps") == []
            expect(page.locator("#text")).to_have_value("loaded: " + words)
            assert errors == []
            page.close()
    finally:
        server.stop()


def _lose_the_answer_of(page: Page, proxy: LossyProxy, selector: str, action: bytes) -> None:
    """Click ``selector`` while everything the server sends is lost, then cut the connections:
    Datastar posts the click again, which the server ran already."""

    def posts() -> int:
        return sum(1 for line in proxy.requests if line.startswith(b"POST /_action/" + action))

    before = posts()
    proxy.swallowing = True
    page.click(selector)
    _wait(lambda: posts() > before, "the click to reach the server")
    time.sleep(0.3)
    proxy.cut_all()
    proxy.swallowing = False
    _wait(lambda: posts() > before + 1, "Datastar to post the click again", timeout=15.0)


def test_a_click_whose_answer_was_lost_still_signs_in_and_navigates(browser: Browser) -> None:
    """The retry of a click that ran gets the answer the first post got: the cookie and the
    navigation it carried (a newcomer's login page stayed put, without its cookie)."""
    with _tab(browser, "/gate") as (_server, proxy, page, errors):
        _lose_the_answer_of(page, proxy, "#enter", b"enter")
        page.wait_for_url("**/board", timeout=15_000)
        assert {c["name"]: c["value"] for c in page.context.cookies()}.get("seen") == "yes"
        assert errors == []


def test_a_refusal_whose_answer_was_lost_still_shows(browser: Browser) -> None:
    with _tab(browser, "/gate") as (_server, proxy, page, errors):
        _lose_the_answer_of(page, proxy, "#bid", b"bid")
        alert = page.locator("#via-alert")
        expect(alert).to_contain_text("This lot is closed.", timeout=15_000)
        time.sleep(1.5)  # the retry's answer is in: the refusal stays
        expect(alert).to_contain_text("This lot is closed.")
        expect(alert).to_be_visible()
        assert errors == []
