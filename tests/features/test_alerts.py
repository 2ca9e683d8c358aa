"""The error channel, server side: what the server tells a tab when its request fails."""

from __future__ import annotations

import asyncio

import pytest

from pyvia import App, Context, UserError, html
from pyvia.alerts import DEFAULT_MESSAGES, ErrorChannel
from pyvia.errors import ConfigError
from pyvia.testing import TestClient, select


def make_app(**options: object) -> App:
    app = App(action_timeout=1, **options)

    @app.page("/")
    def page(c: Context) -> None:
        name = c.signal("", "name", writable=True, max_length=10)

        @c.action
        def save() -> None:
            if name.value == "taken":
                raise UserError("That name is taken")

        @c.action
        def boom() -> None:
            raise RuntimeError("secret detail")

        @c.action
        def pick(n: int) -> None:
            pass

        @c.action
        async def hang() -> None:
            await asyncio.sleep(5)

        c.view(lambda: html("<p>{}</p>", name))

    @app.page("/custom", error_messages={500: "Our fault, sorry.", "lost": "Hold on…"})
    def custom(c: Context) -> None:
        @c.action
        def boom() -> None:
            raise RuntimeError("x")

        c.view(lambda: "<p>custom</p>")

    return app


def test_every_page_has_an_accessible_dismissable_alert() -> None:
    with TestClient(make_app()) as client:
        tab = client.open("/")
        (alert,) = select(tab.page, "#via-alert")
        assert alert.attrs["role"] == "alert"
        assert alert.attrs["data-show"] == "!!($_via_error || $_via_failed || $_via_lost)"
        assert "$_via_error = &#39;&#39;" in tab.page  # the dismiss button


def test_a_user_error_raised_in_an_action_shows_its_message_and_goes_when_an_action_succeeds() -> None:
    with TestClient(make_app()) as client:
        tab = client.open("/")
        response = tab.action("save", name="taken")
        assert (response.status, response.body) == (400, b"That name is taken")
        assert tab.signals["_via_error"] == "That name is taken"
        assert tab.action("save", name="free").status == 200
        assert tab.signals["_via_error"] == ""


def test_a_failing_action_shows_the_500_words_and_never_its_detail() -> None:
    with TestClient(make_app(), raise_server_exceptions=False) as client:
        tab = client.open("/")
        assert tab.action("boom").status == 500
        assert tab.signals["_via_error"] == DEFAULT_MESSAGES["500"]
        assert "secret" not in str(tab.events)


def test_a_value_over_its_limit_and_a_bad_argument_say_what_was_wrong() -> None:
    with TestClient(make_app()) as client:
        tab = client.open("/")
        tab.new_events()
        assert tab.action("save", name="x" * 11).status == 413
        assert tab.signals["_via_error"] == "signal 'name' got 11 characters; it takes at most 10"
        (back,) = [e.signals for e in tab.new_events() if e.signals]
        assert back["name"] == "x" * 11  # given back: the click may have cleared the input
        assert tab.post("/_action/pick?n=%22a%22").status == 400
        assert tab.signals["_via_error"] == "action 'pick' argument 'n' must be an int, not \"a\""


def test_a_rate_limit_says_how_long_to_wait() -> None:
    with TestClient(make_app(action_rate=1, action_burst=1)) as client:
        tab = client.open("/")
        assert tab.action("save").status == 200
        assert tab.action("save").status == 429
        assert tab.signals["_via_error"] == DEFAULT_MESSAGES["429"] + " (wait 1 s)"


def test_an_action_past_its_timeout_says_so() -> None:
    with TestClient(make_app(), raise_server_exceptions=False) as client:
        tab = client.open("/")
        assert tab.action("hang").status == 504
        assert tab.signals["_via_error"] == DEFAULT_MESSAGES["504"]


def test_a_page_and_an_app_choose_their_own_words() -> None:
    app = make_app(error_messages={"413": "Too long!", 429: "Slow down."})
    with TestClient(app, raise_server_exceptions=False) as client:
        tab = client.open("/custom")
        assert "Our fault, sorry." in tab.page and "Hold on…" in tab.page and "Slow down." in tab.page
        tab.action("boom")
        assert tab.signals["_via_error"] == "Our fault, sorry."


def test_an_app_draws_its_own_alert() -> None:
    def toast(e: ErrorChannel) -> str:
        return html('<output class="toast" role="alert" data-show="{}" data-text="{}"></output>', e.show, e.text)

    with TestClient(make_app(error_view=toast)) as client:
        tab = client.open("/")
        assert '<output class="toast" role="alert"' in tab.page
        assert 'id="via-alert"' not in tab.page


@pytest.mark.parametrize(
    ("messages", "error"),
    [
        ({"600": "x"}, "a status from 400 to 599"),
        ({"lost": 3}, "must be a str"),
    ],
)
def test_bad_words_are_a_config_error(messages: object, error: str) -> None:
    with pytest.raises(ConfigError, match=error):
        App(error_messages=messages)
