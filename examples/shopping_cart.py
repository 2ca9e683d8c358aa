"""A shopping cart shared by every tab of one browser, and by nobody else.

The cart is kept on the server in ``c.session_data`` (one store per session cookie), so it
outlives the tabs: close them all and the cart is still there. Each tab's primary scope is its
SESSION, so after a change ``c.broadcast()`` re-renders every tab of this browser, and only
those. Prices are integer cents; the browser only says which product, never what it costs.
"""

from __future__ import annotations

from urllib.parse import urlencode

from pyvia import Action, App, Context, Scope

app = App(title="Shopping cart", head=["""<style>
  body { font-family: system-ui, sans-serif; margin: 2rem; }
  main { display: grid; grid-template-columns: repeat(auto-fit, minmax(18rem, 1fr)); gap: 2rem; }
  h1 { grid-column: 1 / -1; margin: 0; }
  .product, .line { display: flex; justify-content: space-between; align-items: center;
                    padding: .4rem 0; border-bottom: 1px solid #eee; gap: .5rem; }
  .line .qty { min-width: 2ch; text-align: center; }
  .line .name { flex: 1; }
  #total { font-size: 1.3rem; font-weight: bold; }
  #badge { background: #333; color: white; border-radius: 1rem; padding: 0 .5rem; font-size: .9rem; }
</style>"""])

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


def post(action: Action, **query: object) -> str:
    """The Datastar expression posting ``action`` with a query string (read with ``c.input``): the
    action's own expression, so it keeps its options, on the longer URL."""
    return str(action).replace(f"'{action.url}'", f"'{action.url}?{urlencode(query)}'", 1)


@app.page("/")
def shop(c: Context) -> None:
    c.scope(Scope.SESSION)  # c.broadcast() reaches every tab of this browser session

    def cart() -> dict[str, int]:
        return c.session_data.get("cart", {})

    def change(by: int | None) -> None:
        """Add ``by`` to the quantity of the product named in the query (``None`` removes it)."""
        product = c.input("product", "")
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
    def add() -> None:
        change(1)

    @c.action
    def decrease() -> None:
        change(-1)

    @c.action
    def remove() -> None:
        change(None)

    @c.action
    def empty() -> None:
        c.session_data["cart"] = {}
        c.broadcast()

    def view() -> str:
        items = cart()
        products = "".join(f"""
  <div class="product"><span>{name}</span><span>{money(price)}</span>
    <button id="add-{pid}" data-on:click="{post(add, product=pid)}">Add to cart</button></div>"""
            for pid, (name, price) in CATALOG.items())
        lines = "".join(f"""
  <div class="line" id="line-{pid}"><span class="name">{CATALOG[pid][0]}</span>
    <button id="dec-{pid}" data-on:click="{post(decrease, product=pid)}">&minus;</button>
    <span class="qty" id="qty-{pid}">{qty}</span>
    <button id="inc-{pid}" data-on:click="{post(add, product=pid)}">+</button>
    <span id="subtotal-{pid}">{money(CATALOG[pid][1] * qty)}</span>
    <button id="remove-{pid}" title="Remove" data-on:click="{post(remove, product=pid)}">&times;</button></div>"""
            for pid, qty in items.items() if pid in CATALOG)
        total = sum(CATALOG[pid][1] * qty for pid, qty in items.items() if pid in CATALOG)
        return f"""
<main>
<h1>Shop <span id="badge">{sum(items.values())}</span></h1>
<section id="catalog"><h2>Catalog</h2>{products}</section>
<section id="cart"><h2>Your cart</h2>
  {lines or '<p id="empty-note">Your cart is empty.</p>'}
  <p>Total: <span id="total">{money(total)}</span></p>
  <button id="empty" data-on:click="{empty}"{'' if items else ' disabled'}>Empty the cart</button>
  <p><small>Open this page in another tab of the same browser: the cart follows.</small></p>
</section>
</main>"""

    c.view(view)


if __name__ == "__main__":
    app.run(host="127.0.0.1", port=3000)
