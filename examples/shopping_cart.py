"""A shopping cart shared by every tab of one browser, and by nobody else.

The cart is kept on the server in ``c.session_data`` (one store per session cookie), so it
outlives the tabs: close them all and the cart is still there. Each tab's primary scope is its
SESSION, so after a change ``c.broadcast()`` re-renders every tab of this browser, and only
those. Prices are integer cents; the browser only says which product, never what it costs.
"""

from __future__ import annotations

from pyvia import App, Context, Markup, Scope, html, raw

app = App(
    title="Shopping cart",
    head=[
        """<style>
  body { font-family: system-ui, sans-serif; margin: 2rem; }
  main { display: grid; grid-template-columns: repeat(auto-fit, minmax(18rem, 1fr)); gap: 2rem; }
  h1 { grid-column: 1 / -1; margin: 0; }
  .product, .line { display: flex; justify-content: space-between; align-items: center;
                    padding: .4rem 0; border-bottom: 1px solid #eee; gap: .5rem; }
  .line .qty { min-width: 2ch; text-align: center; }
  .line .name { flex: 1; }
  #total { font-size: 1.3rem; font-weight: bold; }
  #badge { background: #333; color: white; border-radius: 1rem; padding: 0 .5rem; font-size: .9rem; }
</style>"""
    ],
)

CATALOG: dict[str, tuple[str, int]] = {  # id: (name, price in cents)
    "mug": ("Enamel mug", 1250),
    "tee": ("Cotton T-shirt", 1900),
    "cap": ("Baseball cap", 1500),
    "socks": ("Wool socks", 890),
    "bottle": ("Steel bottle", 2400),
    "stickers": ("Sticker pack", 350),
}
MAX_QUANTITY = 99


def money(cents: int) -> str:
    return f"${cents // 100}.{cents % 100:02d}"


@app.page("/")
def shop(c: Context) -> None:
    c.scope(Scope.SESSION)  # c.broadcast() reaches every tab of this browser session

    def cart() -> dict[str, int]:
        return c.session_data.get("cart", {})

    def change(product: str, by: int | None) -> None:
        """Add ``by`` to the quantity of ``product`` (``None`` removes it); the view binds the
        product (``add(product="mug")``), but a user may post any string: check it."""
        if product not in CATALOG:
            return
        items = dict(cart())
        quantity = 0 if by is None else min(MAX_QUANTITY, items.get(product, 0) + by)
        if quantity > 0:
            items[product] = quantity
        else:
            items.pop(product, None)
        c.session_data["cart"] = items  # a new dict: no await between the read and this write
        c.broadcast()

    @c.action
    def add(product: str) -> None:
        change(product, 1)

    @c.action
    def decrease(product: str) -> None:
        change(product, -1)

    @c.action
    def remove(product: str) -> None:
        change(product, None)

    @c.action
    def empty() -> None:
        c.session_data["cart"] = {}
        c.broadcast()

    def view() -> Markup:
        items = cart()
        products = (
            html(
                """
  <div class="product"><span>{name}</span><span>{price}</span>
    <button id="add-{pid}" data-on:click="{add}">Add to cart</button></div>""",
                name=name,
                price=money(price),
                pid=pid,
                add=add(product=pid),
            )
            for pid, (name, price) in CATALOG.items()
        )
        lines = [
            html(
                """
  <div class="line" id="line-{pid}"><span class="name">{name}</span>
    <button id="dec-{pid}" data-on:click="{decrease}">&minus;</button>
    <span class="qty" id="qty-{pid}">{qty}</span>
    <button id="inc-{pid}" data-on:click="{add}">+</button>
    <span id="subtotal-{pid}">{subtotal}</span>
    <button id="remove-{pid}" title="Remove" data-on:click="{remove}">&times;</button></div>""",
                pid=pid,
                name=CATALOG[pid][0],
                qty=qty,
                subtotal=money(CATALOG[pid][1] * qty),
                decrease=decrease(product=pid),
                add=add(product=pid),
                remove=remove(product=pid),
            )
            for pid, qty in items.items()
            if pid in CATALOG
        ]
        total = sum(CATALOG[pid][1] * qty for pid, qty in items.items() if pid in CATALOG)
        return html(
            """
<main>
<h1>Shop <span id="badge">{count}</span></h1>
<section id="catalog"><h2>Catalog</h2>{products}</section>
<section id="cart"><h2>Your cart</h2>
  {lines}
  <p>Total: <span id="total">{total}</span></p>
  <button id="empty" data-on:click="{empty}"{disabled}>Empty the cart</button>
  <p><small>Open this page in another tab of the same browser: the cart follows.</small></p>
</section>
</main>""",
            count=sum(items.values()),
            products=products,
            lines=lines or html('<p id="empty-note">Your cart is empty.</p>'),
            total=money(total),
            empty=empty,
            disabled="" if items else raw(" disabled"),
        )

    c.view(view)


if __name__ == "__main__":
    app.run(host="127.0.0.1", port=3000)
