"""Actions with typed arguments: bound in the view, converted by their annotations, refused when bad."""

from __future__ import annotations

import enum
import html as stdlib_html
import re
from dataclasses import dataclass
from typing import Literal

import pytest

from pyvia import App, Context, DeclarationError, html
from pyvia.testing import TestClient


class Colour(enum.Enum):
    RED = "red"
    BLUE = "blue"


@dataclass
class Move:
    row: int
    col: int
    label: str = ""


def make_app(calls: list[tuple[str, object]]) -> App:
    app = App()

    @app.page("/")
    def page(c: Context) -> None:
        items = [{"id": 3, "title": "<b>milk</b>"}, {"id": 10**15, "title": "bread"}]

        @c.action
        def toggle(item_id: int) -> None:
            calls.append(("toggle", item_id))

        @c.action
        def paint(ctx: Context, colour: Colour, note: str | None = None) -> None:
            calls.append(("paint", (colour, note, ctx is c)))

        @c.action
        def move(to: Move, how: Literal["fast", "slow"] = "slow", weights: list[float] | None = None) -> None:
            calls.append(("move", (to, how, weights)))

        c.view(
            lambda: html(
                "<ul>{items}</ul>{paint}",
                items=(
                    html(
                        '<li><button data-on:click="{act}">{title}</button></li>',
                        act=toggle(item_id=i["id"]),
                        title=i["title"],
                    )
                    for i in items
                ),
                paint=html('<button id="red" data-on:click="{}">red</button>', paint(colour=Colour.RED)),
            )
        )

    return app


def _url_of(tab_html: str, index: int) -> str:
    return re.findall(r"@post\('([^']+)'", stdlib_html.unescape(tab_html))[index]


def test_arguments_bound_in_the_view_reach_the_action_converted() -> None:
    calls: list[tuple[str, object]] = []
    with TestClient(make_app(calls)) as client:
        tab = client.open("/")
        assert "&lt;b&gt;milk&lt;/b&gt;" in tab.html  # the title is text
        assert _url_of(tab.html, 0) == "/_action/toggle?item_id=3"
        assert tab.post(_url_of(tab.html, 0)).status == 200
        assert tab.post(_url_of(tab.html, 1)).status == 200
        tab.click("#red")
        assert calls == [("toggle", 3), ("toggle", 10**15), ("paint", (Colour.RED, None, True))]


def test_dataclasses_literals_lists_and_optionals_are_converted() -> None:
    calls: list[tuple[str, object]] = []
    with TestClient(make_app(calls)) as client:
        tab = client.open("/")
        url = '/_action/move?to={"row":1,"col":2}&how="fast"&weights=[1,2.5]'
        assert tab.post(url).status == 200
        assert tab.post('/_action/move?to={"row":0,"col":0,"label":"x"}').status == 200
        assert calls == [("move", (Move(1, 2), "fast", [1.0, 2.5])), ("move", (Move(0, 0, "x"), "slow", None))]


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("/_action/toggle", "action 'toggle' needs its argument 'item_id'"),
        ("/_action/toggle?item_id=abc", "action 'toggle' argument 'item_id' is not JSON: 'abc'"),
        ('/_action/toggle?item_id="3"', "action 'toggle' argument 'item_id' must be an int, not \"3\""),
        ("/_action/toggle?item_id=1.5", "action 'toggle' argument 'item_id' must be an int, not 1.5"),
        ("/_action/toggle?item_id=true", "action 'toggle' argument 'item_id' must be an int, not true"),
        ("/_action/toggle?item_id=1e3", "action 'toggle' argument 'item_id' must be an int, not 1e3"),  # as sent
        ("/_action/toggle?item_id=99999999999999999999999", "must be an int"),
        ('/_action/paint?colour="green"', "action 'paint' argument 'colour' must be a Colour, not \"green\""),
        ('/_action/move?to={"row":1}', "action 'move' argument 'to' must be a Move"),
        ('/_action/move?to={"row":1,"col":2,"extra":0}', "must be a Move"),
        ('/_action/move?to={"row":1,"col":2}&how="sideways"', "argument 'how' must be"),
    ],
)
def test_a_missing_or_ill_typed_argument_answers_400_naming_it_and_the_action_does_not_run(
    url: str, message: str
) -> None:
    calls: list[tuple[str, object]] = []
    with TestClient(make_app(calls), raise_server_exceptions=False) as client:
        tab = client.open("/")
        response = tab.post(url)
        assert response.status == 400
        assert message in response.body.decode()
        assert calls == []


def test_an_enum_is_taken_by_value_or_by_name() -> None:
    calls: list[tuple[str, object]] = []
    with TestClient(make_app(calls)) as client:
        tab = client.open("/")
        tab.post('/_action/paint?colour="blue"&note="hi"')
        tab.post('/_action/paint?colour="RED"')
        assert [c[1][0] for c in calls] == [Colour.BLUE, Colour.RED]  # type: ignore[index]


def test_binding_an_argument_the_action_does_not_take_is_a_declaration_error() -> None:
    app = App()

    @app.page("/")
    def page(c: Context) -> None:
        @c.action
        def toggle(item_id: int) -> None:
            pass

        c.view(lambda: html("<b>{}</b>", toggle(id=3)))

    with TestClient(app) as client, pytest.raises(DeclarationError, match="has no argument 'id'; it takes"):
        client.get("/")


def test_a_test_posts_an_action_with_its_arguments_as_the_view_binds_them() -> None:
    # a newcomer's tab.action("bid", lot_id=1) sent lot_id as a signal and got 400
    calls: list[tuple[str, object]] = []
    with TestClient(make_app(calls)) as client:
        tab = client.open("/")
        assert tab.action("toggle", arguments={"item_id": 7}).status == 200
        assert tab.action("move", arguments={"to": Move(1, 2, "a&b"), "how": "fast"}).status == 200
        assert tab.action("toggle").status == 400  # none given: named in the answer
        assert calls == [("toggle", 7), ("move", (Move(1, 2, "a&b"), "fast", None))]
