"""What a user sees when something fails, in Chromium: a short message in an alert, gone once the
tab recovers (issue 18's error channel), for each kind of failure."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, Page, expect

from pyvia import App, Context, ServiceError, UserError, html
from pyvia.alerts import DEFAULT_MESSAGES, ErrorChannel
from tests.browser.latency import LatencyProxy, latency_proxy
from tests.helpers import running_server


def alert_app(**options: object) -> App:
    app = App(title="Alerts", **{"action_rate": 50, "action_burst": 50, **options})

    @app.page("/")
    def page(c: Context) -> None:
        name = c.signal("", "name", writable=True, max_length=1000)
        saved = c.signal(0, "saved")

        @c.action
        def save() -> None:
            if name.value == "taken":
                raise UserError("That name is taken")
            saved.value += 1

        @c.action
        def boom() -> None:
            raise RuntimeError("secret detail")

        @c.action
        def busy() -> None:
            raise ServiceError("overloaded", retry_after=3)

        @c.action
        def upload() -> None:
            saved.value += 1

        c.view(
            lambda: html(
                '<input id="name" {bind}><button id="save" data-on:click="{save}">save</button>'
                '<button id="boom" data-on:click="{boom}">boom</button>'
                '<button id="busy" data-on:click="{busy}">busy</button>'
                '<button id="bad" data-on:click="{bad}">bad</button>'
                '<form id="up" enctype="multipart/form-data" data-on:submit__prevent="{up}">'
                '<input id="file" type="file" name="file"><button id="send">send</button></form>'
                '<p>saved <b id="saved" data-text="{saved}"></b></p>',
                bind=name.bind(),
                save=save,
                boom=boom,
                busy=busy,
                saved=saved.ref(),
                bad="@post('/_action/nope', {requestCancellation: 'disabled'})",
                up=raw_form_post(upload.url),
            )
        )

    return app


def raw_form_post(url: str) -> str:
    return f"@post('{url}', {{contentType: 'form', requestCancellation: 'disabled'}})"


@pytest.fixture
def served() -> Iterator[LatencyProxy]:
    with running_server(alert_app()) as (_, port), latency_proxy(port, delay=0.01) as proxy:
        yield proxy


def _open(browser: Browser, proxy: LatencyProxy) -> Page:
    page = browser.new_page()
    page.goto(f"http://127.0.0.1:{proxy.port}/")
    expect(page.locator("#saved")).to_have_text("0")
    time.sleep(0.2)  # the stream's first frame is in
    return page


def test_each_failure_shows_its_message_and_the_alert_goes_when_the_tab_recovers(
    browser: Browser, served: LatencyProxy
) -> None:
    page = _open(browser, served)
    try:
        alert = page.get_by_role("alert")
        expect(alert).to_be_hidden()

        page.locator("#boom").click()  # an action that raises: 500, its detail never shown
        expect(alert).to_have_text(DEFAULT_MESSAGES["500"] + "\N{MULTIPLICATION SIGN}")  # and the dismiss button
        page.locator("#save").click()  # the next action succeeds: the alert goes
        expect(alert).to_be_hidden()
        expect(page.locator("#saved")).to_have_text("1")

        page.locator("#name").fill("taken")  # a refusal meant for the user
        page.locator("#save").click()
        expect(alert).to_contain_text("That name is taken")

        page.locator("#name").fill("x" * 300_000)  # a paste past the signal's limit: 413, named
        page.locator("#save").click()
        expect(alert).to_contain_text("signal 'name' got 300,000 characters; it takes at most 1,000")

        page.locator("#name").fill("ok")
        page.locator("#busy").click()  # a service error: 503
        expect(alert).to_contain_text(DEFAULT_MESSAGES["503"])

        page.locator("#bad").click()  # a request the server refuses before it reaches a tab: 404
        expect(alert).to_contain_text(DEFAULT_MESSAGES["404"])

        page.locator("#name").fill("fine")
        page.locator("#save").click()
        expect(alert).to_be_hidden()
    finally:
        page.close()


def test_an_upload_past_the_servers_body_limit_says_it_is_too_large(browser: Browser, served: LatencyProxy) -> None:
    page = _open(browser, served)
    try:
        page.locator("#file").set_input_files(
            {"name": "big.bin", "mimeType": "application/octet-stream", "buffer": b"\0" * (17 << 20)}
        )
        page.locator("#send").click()
        expect(page.get_by_role("alert")).to_contain_text(DEFAULT_MESSAGES["413"])
    finally:
        page.close()


def test_a_rate_limit_shows_how_long_to_wait(browser: Browser) -> None:
    app = alert_app(action_rate=1.0, action_burst=1.0)
    with running_server(app) as (_, port), latency_proxy(port, delay=0.01) as proxy:
        page = _open(browser, proxy)
        try:
            page.locator("#save").click()
            page.locator("#save").click()
            expect(page.get_by_role("alert")).to_contain_text(DEFAULT_MESSAGES["429"] + " (wait 1 s)")
        finally:
            page.close()


def test_a_lost_stream_says_it_is_reconnecting_and_goes_once_it_is_back(browser: Browser, served: LatencyProxy) -> None:
    page = _open(browser, served)
    try:
        served.go_down()
        alert = page.get_by_role("alert")
        expect(alert).to_contain_text(DEFAULT_MESSAGES["lost"], timeout=5000)
        served.come_back()
        expect(alert).to_be_hidden(timeout=15000)
        page.locator("#save").click()
        expect(page.locator("#saved")).to_have_text("1")
    finally:
        page.close()


def test_a_lost_connection_is_said_before_an_earlier_failure_which_shows_again_once_back(
    browser: Browser, served: LatencyProxy
) -> None:
    page = _open(browser, served)
    try:
        page.locator("#name").fill("taken")
        page.locator("#save").click()
        alert = page.get_by_role("alert")
        expect(alert).to_contain_text("That name is taken")
        served.go_down()  # the server went away: that is what the user must read now
        expect(alert).to_contain_text(DEFAULT_MESSAGES["lost"], timeout=5000)
        expect(alert).not_to_contain_text("That name is taken")
        served.come_back()
        expect(alert).to_contain_text("That name is taken", timeout=15000)  # still true: not saved
        page.locator("#name").fill("free")
        page.locator("#save").click()
        expect(page.locator("#saved")).to_have_text("1")
        expect(alert).to_be_hidden()
    finally:
        page.close()


#: Recorded in the page itself, in order: when the save button's request ended, and each time the
#: alert was shown or hidden (a test reading the page from outside would race its own events).
_WATCH_THE_ALERT = """() => {
    window.seen = [];
    document.addEventListener('datastar-fetch', e => {
        if (e.detail.el.id === 'save' && e.detail.type === 'finished') window.seen.push('save answered');
    });
    const alert = document.getElementById('via-alert');
    new MutationObserver(() => window.seen.push(alert.style.display === 'none' ? 'hidden' : 'shown'))
        .observe(alert, {attributes: true, attributeFilter: ['style']});
}"""


def test_a_click_made_while_the_server_is_down_says_it_waits_until_it_lands(
    browser: Browser, served: LatencyProxy
) -> None:
    # Datastar sends the click's post again until the server is back. The alert said the
    # connection was lost, then nothing once the stream was back, while the post still waited
    # for its next try: a user clicks again (found by a newcomer's support desk).
    page = _open(browser, served)
    try:
        alert = page.get_by_role("alert")
        page.evaluate(_WATCH_THE_ALERT)
        served.go_down()
        expect(alert).to_contain_text(DEFAULT_MESSAGES["lost"], timeout=5000)
        page.locator("#save").click()
        page.wait_for_timeout(1500)  # it has been sent again at least once
        served.come_back()
        expect(page.locator("#saved")).to_have_text("1", timeout=30_000)
        expect(alert).to_be_hidden()
        seen = page.evaluate("window.seen")
        assert "save answered" in seen, seen
        assert "hidden" not in seen[: seen.index("save answered")], f"the alert went before the click landed: {seen}"
    finally:
        page.close()


def test_a_click_made_early_in_a_long_outage_lands_soon_after_the_server_is_back(
    browser: Browser, served: LatencyProxy
) -> None:
    # Datastar's own backoff doubles to 30 s and gives up after ten tries (about 150 s): a click
    # made as the server went down, back 17 s later, waited 14 s more for its next try, and a
    # longer outage lost it with what the click had cleared (a newcomer's kanban card). A click
    # is tried at most 8 s apart, and never given up while the page is open.
    page = _open(browser, served)
    try:
        page.locator("#name").fill("a card typed before the outage")
        served.go_down()
        page.locator("#save").click()
        page.wait_for_timeout(17_000)
        served.come_back()
        back = time.monotonic()
        expect(page.locator("#saved")).to_have_text("1", timeout=9_500)
        assert time.monotonic() - back < 9.5
        expect(page.get_by_role("alert")).to_be_hidden()
    finally:
        page.close()


def test_the_alert_can_be_dismissed(browser: Browser, served: LatencyProxy) -> None:
    page = _open(browser, served)
    try:
        page.locator("#boom").click()
        alert = page.get_by_role("alert")
        expect(alert).to_be_visible()
        alert.get_by_role("button", name="Dismiss").click()
        expect(alert).to_be_hidden()
    finally:
        page.close()


def test_an_app_draws_its_own_alert_with_its_own_words(browser: Browser) -> None:
    def banner(e: ErrorChannel) -> str:
        return html('<p id="banner" role="alert" data-show="{}">Oops: <span data-text="{}"></span></p>', e.show, e.text)

    app = alert_app(error_view=banner, error_messages={500: "We broke it."})
    with running_server(app) as (_, port), latency_proxy(port, delay=0.01) as proxy:
        page = _open(browser, proxy)
        try:
            page.locator("#boom").click()
            expect(page.locator("#banner")).to_have_text("Oops: We broke it.")
        finally:
            page.close()


def turns_app() -> App:
    """Three cells; the middle one is never the player's turn (a game's refusal)."""
    app = App(title="Turns", action_rate=0)

    @app.page("/")
    def page(c: Context) -> None:
        moves = c.signal(0, "moves")

        @c.action
        def play() -> None:
            moves.value += 1

        @c.action
        def out_of_turn() -> None:
            raise UserError("Not your turn.")

        c.view(
            lambda: html(
                '<main id="board"><button id="a" data-on:click="{play}">a</button>'
                '<button id="b" data-on:click="{out}">b</button>'
                '<button id="c" data-on:click="{play}">c</button>'
                '<b id="moves" data-text="{moves}"></b></main>',
                play=play,
                out=out_of_turn,
                moves=moves.ref(),
            )
        )

    return app


def _click_in_turn(page: Page, ids: str, gap_ms: int = 0) -> None:
    """Click the buttons in the page itself, ``gap_ms`` apart: faster than the round trip."""
    page.evaluate(
        "([ids, gap]) => ids.split('').forEach("
        "(id, i) => setTimeout(() => document.getElementById(id).click(), i * gap))",
        [ids, gap_ms],
    )


def test_a_refusal_answered_after_a_later_click_succeeded_does_not_stay(browser: Browser) -> None:
    # A player clicks three cells within one round trip (100 ms): the middle click is refused,
    # the last one is played. The refusal's 400 came back after the last click had started, and
    # stayed on screen as "The page sent something the server could not read." (found by a newcomer).
    with running_server(turns_app()) as (_, port), latency_proxy(port, delay=0.05) as proxy:
        page = browser.new_page()
        try:
            page.goto(f"http://127.0.0.1:{proxy.port}/")
            expect(page.locator("#moves")).to_have_text("0")
            time.sleep(0.3)  # the stream's first frame is in
            alert = page.get_by_role("alert")
            for round_ in range(1, 4):
                _click_in_turn(page, "abc")
                expect(page.locator("#moves")).to_have_text(str(2 * round_))
                time.sleep(0.4)  # every answer is in
                expect(alert).to_be_hidden()
            _click_in_turn(page, "acb", gap_ms=20)  # the refused click is the last: it shows, in its words
            expect(alert).to_contain_text("Not your turn.")
            expect(page.locator("#moves")).to_have_text("8")
            time.sleep(0.4)
            expect(alert).to_contain_text("Not your turn.")
        finally:
            page.close()
