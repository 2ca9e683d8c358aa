"""Search as you type over 1,000 made-up places, each tab on its own.

The input is bound to the tab signal ``q``; ``data-on:input__debounce.250ms`` posts ``search``
once typing pauses. The action searches in memory and patches the ``#results`` element alone
(``c.patch_elements`` morphs it by its id): the matches, highlighted, with their count and the
time the search took. A search never re-renders the input, so it keeps its focus and caret.
"""

from __future__ import annotations

import random
import re
import time

from pyvia import App, Context, Markup, html

app = App(
    title="Live search",
    head=[
        """<style>
  body { font-family: system-ui, sans-serif; margin: 2rem; max-width: 36rem; }
  #q { width: 100%; font-size: 1.1rem; padding: .4rem; box-sizing: border-box; }
  #stats { color: #666; }
  #results { padding-left: 1.5rem; }
  #results .region { color: #888; margin-left: .5rem; }
  mark { background: #ffe066; padding: 0 1px; }
</style>"""
    ],
)

SHOWN = 50
MAX_QUERY = 100  # characters of a search
REGIONS = ["Northmarch", "Southdowns", "Eastvale", "Westreach", "Highlands", "Lowmoor", "Coastlands", "Midshire"]


def make_places(count: int = 1000, seed: int = 7) -> list[tuple[str, str]]:
    """``count`` distinct (place, region) pairs, the same on every run."""
    starts = [
        "Al",
        "Bel",
        "Car",
        "Dun",
        "El",
        "Fair",
        "Glen",
        "Har",
        "Ivy",
        "Kings",
        "Lan",
        "Mar",
        "New",
        "Oak",
        "Port",
        "Queens",
        "Ros",
        "Sand",
        "Thorn",
        "Ux",
        "Val",
        "West",
        "York",
        "Zell",
    ]
    middles = ["", "a", "en", "er", "i", "o"]
    ends = [
        "bridge",
        "brook",
        "bury",
        "by",
        "caster",
        "dale",
        "field",
        "ford",
        "gate",
        "ham",
        "haven",
        "holm",
        "hurst",
        "ington",
        "leigh",
        "mouth",
        "ness",
        "port",
        "stead",
        "ton",
        "vale",
        "wick",
    ]
    rng = random.Random(seed)
    names = rng.sample([s + m + e for s in starts for m in middles for e in ends], count)
    return sorted((name, rng.choice(REGIONS)) for name in names)


PLACES = make_places()


def search_places(query: str) -> list[tuple[str, str]]:
    """Places whose name or region contains ``query`` (any case), names starting with it first."""
    q = query.strip().lower()
    if not q:
        return PLACES
    found = [p for p in PLACES if q in p[0].lower() or q in p[1].lower()]
    return sorted(found, key=lambda p: not p[0].lower().startswith(q))  # stable: alphabetical within


def highlight(text: str, query: str) -> Markup:
    """``text`` escaped, with each occurrence of ``query`` in ``<mark>``."""
    q = query.strip()
    if not q:
        return html("{}", text)
    parts = re.split(f"({re.escape(q)})", text, flags=re.IGNORECASE)
    return html("{}", (html("<mark>{}</mark>", p) if i % 2 else p for i, p in enumerate(parts)))


def results(query: str) -> Markup:
    """The ``#results`` element for ``query``: count, time taken and the first matches."""
    started = time.perf_counter()
    found = search_places(query)
    took_ms = (time.perf_counter() - started) * 1000
    items = (
        html('<li>{}<span class="region">{}</span></li>', highlight(name, query), highlight(region, query))
        for name, region in found[:SHOWN]
    )
    more = html("<p>Showing the first {}.</p>", SHOWN) if len(found) > SHOWN else ""
    return html(
        """<div id="results">
  <p id="stats"><span id="count">{count}</span> results in <span id="took">{took:.2f}</span> ms</p>
  <ol>{items}</ol>{more}
</div>""",
        count=len(found),
        took=took_ms,
        items=items,
        more=more,
    )


@app.page("/")
def live_search(c: Context) -> None:
    q = c.signal("", "q", writable=True, max_length=MAX_QUERY)  # the search box

    @c.action
    def search() -> None:
        c.patch_elements(results(q.as_str()))  # morphs <div id="results"> alone

    c.view(
        lambda: html(
            """
<main>
  <h1>Live search</h1>
  <form data-on:submit__prevent="{search}">
    <input id="q" type="search" placeholder="Search {places} places or regions" autocomplete="off"
           maxlength="{max_query}" {bind} data-on:input__debounce.250ms="{search}">
  </form>
  {results}
</main>""",
            search=search,
            places=len(PLACES),
            max_query=MAX_QUERY,
            bind=q.bind(),
            results=results(q.as_str()),
        )
    )


if __name__ == "__main__":
    app.run(host="127.0.0.1", port=3000)
