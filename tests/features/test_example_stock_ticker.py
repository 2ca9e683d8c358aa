"""The stock ticker example: a seeded walk, ticks only while watched, one shared signal for all.

The module's app outlives each test's client, and two things of the previous test stay with it:
its tabs, still counted as watching (a client's close leaves its contexts connected), which
``forget_earlier_tabs`` destroys; and the time of its last flush, which the broadcaster compares
with a new clock starting at the same time again, so the tests flush the broadcasts themselves.
"""

from __future__ import annotations

from examples import stock_ticker as ticker
from examples.stock_ticker import HISTORY, SYMBOLS, Market, app, sparkline

from pyvia.testing import TestClient


def forget_earlier_tabs() -> None:
    for ctx in list(app.contexts.values()):
        app.destroy(ctx)


def test_the_walk_is_deterministic_and_bounded() -> None:
    one, two, other = Market(seed=1), Market(seed=1), Market(seed=2)
    assert one.history == two.history and one.history != other.history
    assert all(len(prices) == HISTORY for prices in one.history.values())
    for _ in range(100):
        one.step()
        two.step()
    assert one.history == two.history and one.ticks == 100
    assert all(len(prices) == HISTORY and min(prices) > 0 for prices in one.history.values())


def test_quotes_say_which_way_each_price_moved() -> None:
    market = Market(seed=3)
    market.step()
    for symbol, quote in market.quotes().items():
        prices, opening = market.history[symbol], market.opening[symbol]
        assert quote["price"] == f"{prices[-1]:.2f}"
        expected_move = "up" if prices[-1] > prices[-2] else "down" if prices[-1] < prices[-2] else ""
        assert quote["move"] == expected_move
        assert quote["trend"] == ("up" if prices[-1] >= opening else "down")
        assert quote["change"] == f"{(prices[-1] - opening) / opening * 100:+.2f}%"
        assert quote["points"] == sparkline(prices)


def test_sparkline_fits_its_box() -> None:
    points = [tuple(map(float, p.split(","))) for p in sparkline([5.0, 7.0, 6.0, 9.0] * 10).split()]
    assert len(points) == 40 and points[0][0] == 0 and points[-1][0] == 120
    assert min(y for _, y in points) == 2 and max(y for _, y in points) == 22  # the highest price is at the top
    flat = sparkline([3.0] * HISTORY)
    assert all(p.endswith(",22.0") for p in flat.split())


def test_prices_move_only_while_someone_watches() -> None:
    with TestClient(app) as ann, TestClient(app) as bob:
        forget_earlier_tabs()
        assert app.count_clients(ticker.PAGE) == 0
        ticks = ticker.market.ticks
        ann.clock.advance(2)
        assert ticker.market.ticks == ticks  # nobody watching: the market rests

        a = ann.open("/")
        b = bob.open("/")
        ann.clock.advance(0.5)
        assert ticker.market.ticks == ticks + 1
        ann.clock.advance(1.0)
        assert ticker.market.ticks == ticks + 3
        app.flush_broadcasts()
        expected = ticker.market.quotes()
        assert a.signals["_route__quotes"] == expected == b.signals["_route__quotes"]
        assert set(expected) == set(SYMBOLS)
        assert 'data-text="$_route__quotes.ACME.price"' in a.html
        assert "data-class:up=\"$_route__quotes.ACME.move == 'up'\"" in a.html
        assert 'data-attr:points="$_route__quotes.JADE.points"' in b.html
        assert "2 watching" in a.html and a.html == b.html  # one shared render

        b.disconnect()
        ann.clock.advance(0.5)
        app.flush_broadcasts()
        assert ticker.market.ticks == ticks + 4 and "1 watching" in a.html
        a.disconnect()
        ann.clock.advance(2)
        assert ticker.market.ticks == ticks + 4


def test_a_new_tab_starts_from_the_current_quotes() -> None:
    with TestClient(app) as client:
        forget_earlier_tabs()
        first = client.open("/")
        client.clock.advance(1.0)
        late = client.open("/")
        app.flush_broadcasts()
        assert late.signals["_route__quotes"] == ticker.quotes.value == first.signals["_route__quotes"]
