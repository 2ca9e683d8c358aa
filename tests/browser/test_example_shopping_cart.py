"""The shopping cart in Chromium: two tabs of one browser share the cart, another browser does not."""

from __future__ import annotations

from playwright.sync_api import Browser, Page, expect

from tests.processes import ServerProcess, free_port


def click(page: Page, selector: str) -> None:
    """Click in ``page`` as a user would, after switching to it: Chromium throttles the animation
    frames of a page in the background, and Playwright waits for them before it clicks."""
    page.bring_to_front()
    page.click(selector)


def test_two_tabs_share_the_cart(browser: Browser) -> None:
    server = ServerProcess("examples.shopping_cart:app", free_port())
    server.start()
    shopper, stranger = browser.new_context(), browser.new_context()
    errors: list[str] = []
    try:
        tab1, tab2 = shopper.new_page(), shopper.new_page()  # one session cookie for both
        other = stranger.new_page()
        for page in (tab1, tab2, other):
            page.on("pageerror", lambda exc: errors.append(str(exc)))
        tab1.goto(f"http://127.0.0.1:{server.port}/")
        expect(tab1.locator("#badge")).to_have_text("0")  # the session cookie is set
        tab2.goto(f"http://127.0.0.1:{server.port}/")
        other.goto(f"http://127.0.0.1:{server.port}/")
        expect(tab2.locator("#total")).to_have_text("$0.00")

        click(tab1, "#add-mug")
        expect(tab2.locator("#qty-mug")).to_have_text("1")
        click(tab2, "#inc-mug")
        click(tab2, "#add-socks")
        expect(tab1.locator("#qty-mug")).to_have_text("2")
        expect(tab1.locator("#total")).to_have_text("$33.90")
        expect(tab1.locator("#badge")).to_have_text("3")

        click(tab1, "#dec-mug")
        expect(tab2.locator("#subtotal-mug")).to_have_text("$12.50")
        click(tab2, "#remove-socks")
        expect(tab1.locator("#line-socks")).to_have_count(0)
        expect(tab1.locator("#total")).to_have_text("$12.50")

        expect(other.locator("#empty-note")).to_be_visible()  # another browser: its own, empty cart
        expect(other.locator("#total")).to_have_text("$0.00")
        click(other, "#add-cap")
        expect(other.locator("#qty-cap")).to_have_text("1")
        click(tab1, "#empty")
        expect(tab2.locator("#empty-note")).to_be_visible()
        expect(other.locator("#qty-cap")).to_have_text("1")
        assert errors == []
    finally:
        shopper.close()
        stranger.close()
        server.stop()
