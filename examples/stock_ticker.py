"""Ten made-up stocks, moving every 500 ms for everyone watching.

One app timer (``app.set_interval``) moves the prices along a seeded random walk, but only while
at least one tab has the page open (``app.count_clients``). The quotes travel in one ROUTE-scoped
shared signal, ``route__quotes``: writing it marks the page's scope, and the next flush sends the
new value and one shared render (``share_render=True``) to every tab. The prices, colours and
sparklines are Datastar bindings on that signal (``data-text``, ``data-class``, ``data-attr``).
"""

from __future__ import annotations

import math
import random

from pyvia import App, Context, Markup, Scope, html

app = App(
    title="Stock ticker",
    head=[
        """<style>
  body { font-family: system-ui, sans-serif; margin: 2rem; }
  table { border-collapse: collapse; font-variant-numeric: tabular-nums; }
  td, th { padding: .3rem .8rem; text-align: right; border-bottom: 1px solid #eee; }
  td:first-child, th:first-child { text-align: left; font-weight: bold; }
  .up { color: #0a7d28; } .down { color: #c62828; }
  svg { width: 120px; height: 24px; }
  polyline { fill: none; stroke: currentColor; stroke-width: 1.5; }
  #watching { color: #666; }
</style>"""
    ],
)

PAGE = Scope.route("/")
SYMBOLS = ["ACME", "BOLT", "CRUX", "DYNA", "EPIC", "FLUX", "GRID", "HALO", "IONX", "JADE"]
HISTORY = 40  # points in a sparkline
TICK_MS = 500


class Market:
    """Prices that follow a seeded random walk: the same seed gives the same prices, step by step."""

    def __init__(self, seed: int = 42) -> None:
        self.rng = random.Random(seed)
        self.history = {s: [round(self.rng.uniform(20, 400), 2)] for s in SYMBOLS}
        for _ in range(HISTORY - 1):  # a full sparkline from the start
            self._walk()
        self.opening = {s: prices[-1] for s, prices in self.history.items()}
        self.ticks = 0

    def _walk(self) -> None:
        for prices in self.history.values():
            moved = prices[-1] * math.exp(self.rng.gauss(0, 0.01))  # about 1% per tick
            prices.append(round(max(0.01, moved), 2))
            del prices[:-HISTORY]

    def step(self) -> None:
        self.ticks += 1
        self._walk()

    def quotes(self) -> dict[str, dict[str, object]]:
        """What the page shows of each symbol, as the value of the shared signal."""
        out: dict[str, dict[str, object]] = {}
        for symbol, prices in self.history.items():
            last, previous, opening = prices[-1], prices[-2], self.opening[symbol]
            out[symbol] = {
                "price": f"{last:.2f}",
                "change": f"{(last - opening) / opening * 100:+.2f}%",
                "move": "up" if last > previous else "down" if last < previous else "",
                "trend": "up" if last >= opening else "down",
                "points": sparkline(prices),
            }
        return out


def sparkline(prices: list[float], width: int = 120, height: int = 24) -> str:
    """The ``points`` of an SVG polyline drawing ``prices``, scaled to the box."""
    low, high = min(prices), max(prices)
    span = (high - low) or 1.0
    step = width / (HISTORY - 1)
    return " ".join(f"{i * step:.1f},{height - 2 - (p - low) / span * (height - 4):.1f}" for i, p in enumerate(prices))


market = Market()
quotes = app.signal(market.quotes(), "quotes", scope=PAGE)


def tick() -> None:
    if app.count_clients(PAGE) == 0:
        return  # nobody is watching: the market rests
    market.step()
    quotes.value = market.quotes()  # marks the page's scope: every tab gets it at the next flush


app.set_interval(tick, TICK_MS / 1000)


@app.on_connect
@app.on_disconnect
def presence_changed(c: Context) -> None:
    app.broadcast(PAGE)  # the "watching" line changes


@app.page("/")
def ticker(c: Context) -> None:
    c.scope(Scope.ROUTE)
    shared = c.signal({}, "quotes", scope=Scope.ROUTE)  # the same signal as ``quotes`` above

    def row(symbol: str) -> Markup:
        q = f"{shared.ref()}.{symbol}"  # $_route__quotes.ACME
        return html(
            """
  <tr id="row-{symbol}">
    <td>{symbol}</td>
    <td id="price-{symbol}" data-text="{q}.price"
        data-class:up="{q}.move == 'up'" data-class:down="{q}.move == 'down'"></td>
    <td id="change-{symbol}" data-text="{q}.change"
        data-class:up="{q}.trend == 'up'" data-class:down="{q}.trend == 'down'"></td>
    <td data-class:up="{q}.trend == 'up'" data-class:down="{q}.trend == 'down'">
      <svg viewBox="0 0 120 24" preserveAspectRatio="none">
        <polyline id="spark-{symbol}" data-attr:points="{q}.points"/></svg>
    </td>
  </tr>""",
            symbol=symbol,
            q=q,
        )

    # The markup holds no price: Datastar fills it in from the signal, so the render that each
    # flush sends is the same every time, apart from the "watching" line, and the morph is a no-op.
    c.view(
        lambda: html(
            """
<main>
  <h1>Stock ticker</h1>
  <table>
    <thead><tr><th>Symbol</th><th>Price</th><th>Since open</th><th>Last {history} ticks</th></tr></thead>
    <tbody>{rows}</tbody>
  </table>
  <p id="watching">{watching} watching. Prices move every {tick_ms} ms while someone does.</p>
</main>""",
            history=HISTORY,
            rows=(row(s) for s in SYMBOLS),
            watching=app.count_clients(PAGE),
            tick_ms=TICK_MS,
        ),
        share_render=True,
    )


if __name__ == "__main__":
    app.run(host="127.0.0.1", port=3000)
