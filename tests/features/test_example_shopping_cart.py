"""The shopping cart example: one cart per browser session, shared by its tabs at once."""

from __future__ import annotations

import re

from examples.shopping_cart import CATALOG, MAX_QUANTITY, app, money

from pyvia.testing import Tab, TestClient


def cart(tab: Tab) -> dict[str, int]:
    return {pid: int(q) for pid, q in re.findall(r'id="qty-(\w+)">(\d+)<', tab.html)}


def total(tab: Tab) -> str:
    found = re.search(r'id="total">([^<]+)<', tab.html)
    assert found
    return found.group(1)


def test_money() -> None:
    assert money(0) == "$0.00" and money(5) == "$0.05" and money(1250) == "$12.50" and money(123456) == "$1234.56"


def test_the_cart_follows_every_tab_of_the_session_and_no_other() -> None:
    with TestClient(app) as ann, TestClient(app) as bob:
        a1, a2 = ann.open("/"), ann.open("/")
        b1 = bob.open("/")
        assert 'id="empty-note"' in a1.html and total(a1) == "$0.00"
        a1.click("#add-mug")
        a1.click("#add-mug")
        a1.click("#add-socks")
        app.flush_broadcasts()
        assert cart(a2) == {"mug": 2, "socks": 1}
        assert total(a2) == money(2 * 1250 + 890) == "$33.90"
        assert 'id="badge">3<' in a2.html
        assert 'id="subtotal-mug">$25.00<' in a2.html
        assert cart(b1) == {} and 'id="empty-note"' in b1.html  # another browser, another cart

        b1.click("#add-tee")
        app.flush_broadcasts()
        assert cart(b1) == {"tee": 1} and cart(a1) == {"mug": 2, "socks": 1}


def test_quantities_remove_and_empty() -> None:
    with TestClient(app) as client:
        a, b = client.open("/"), client.open("/")
        a.click("#add-cap")
        app.flush_broadcasts()
        b.click("#inc-cap")
        b.click("#inc-cap")
        app.flush_broadcasts()
        assert cart(a) == {"cap": 3}
        a.click("#dec-cap")
        app.flush_broadcasts()
        assert cart(b) == {"cap": 2}
        b.click("#dec-cap")
        b.click("#dec-cap")  # down to zero: the line goes
        app.flush_broadcasts()
        assert cart(a) == {} and "line-cap" not in a.html

        for pid in ("mug", "bottle", "stickers"):
            a.click(f"#add-{pid}")
        app.flush_broadcasts()
        b.click("#remove-bottle")
        app.flush_broadcasts()
        assert cart(a) == {"mug": 1, "stickers": 1} and total(a) == "$16.00"
        a.click("#empty")
        app.flush_broadcasts()
        assert cart(b) == {} and total(b) == "$0.00"
        assert re.search(r'<button id="empty" [^>]* disabled>', b.html)


def test_the_browser_names_products_never_prices() -> None:
    with TestClient(app) as client:
        tab = client.open("/")
        for url in ("/_action/add?product=%22unicorn%22", "/_action/remove?product=%22%3Cx%3E%22"):
            assert tab.post(url).status == 200
        for url in ("/_action/add", "/_action/add?product=mug", "/_action/add?product=%5B%22mug%22%5D"):
            assert tab.post(url).status == 400  # no product, or not a JSON str
        tab.post("/_action/add?product=%22mug%22", price=1)  # an extra signal: ignored
        app.flush_broadcasts()
        assert cart(tab) == {"mug": 1} and total(tab) == money(CATALOG["mug"][1])
        for _ in range(MAX_QUANTITY + 5):
            tab.post("/_action/add?product=%22stickers%22")
        app.flush_broadcasts()
        assert cart(tab)["stickers"] == MAX_QUANTITY


def test_the_cart_outlives_the_tabs_of_its_session() -> None:
    with TestClient(app) as client:
        tab = client.open("/")
        tab.click("#add-bottle")
        tab.expire()  # the last tab is gone: its context is destroyed
        assert tab.context is None
        later = client.open("/")
        assert cart(later) == {"bottle": 1}
