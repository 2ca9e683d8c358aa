"""The live search example: the data, the search, the highlighting and the tab-private results."""

from __future__ import annotations

import re

from examples.live_search import MAX_QUERY, PLACES, SHOWN, app, highlight, make_places, search_places

from pyvia import protocol
from pyvia.testing import Tab, TestClient


def shown(tab: Tab) -> list[str]:
    """The names listed in the tab's results, without their markup."""
    items = re.findall(r"<li>(.*?)<span", tab.html.split('id="results"')[1])
    return [re.sub(r"</?mark>", "", item) for item in items]


def stats(tab: Tab) -> tuple[int, float]:
    found = re.search(r'id="count">(\d+)</span> results in <span id="took">([\d.]+)</span> ms', tab.html)
    assert found, tab.html
    return int(found.group(1)), float(found.group(2))


def test_the_data_is_deterministic_and_distinct() -> None:
    assert len(PLACES) == 1000 == len({name for name, _ in PLACES})
    assert make_places() == PLACES
    assert sorted(PLACES) == PLACES


def test_search_matches_name_or_region_in_any_case_prefixes_first() -> None:
    found = search_places("  HaR ")
    expected = {p for p in PLACES if "har" in p[0].lower() or "har" in p[1].lower()}
    assert set(found) == expected and len(found) == len(expected)
    starts = [p[0].lower().startswith("har") for p in found]
    assert starts == sorted(starts, reverse=True) and starts[0]  # every prefix match comes first
    assert search_places("north") and all("north" in (n + r).lower() for n, r in search_places("north"))
    assert search_places("") == PLACES
    assert search_places("qqq") == []


def test_highlight_marks_every_occurrence_and_escapes() -> None:
    assert highlight("Banana", "an") == "B<mark>an</mark><mark>an</mark>a"
    assert highlight("Oakham", "OAK") == "<mark>Oak</mark>ham"
    assert highlight("<b>", "b") == "&lt;<mark>b</mark>&gt;"
    assert highlight("a.c", ".") == "a<mark>.</mark>c"  # the query is not a regex
    assert highlight("Plain", "") == "Plain"


def test_typing_patches_only_the_results() -> None:
    with TestClient(app) as client:
        tab = client.open("/")
        assert stats(tab)[0] == 1000 and len(shown(tab)) == SHOWN
        tab.new_events()
        tab.type("#q", "north")
        tab.click("#q", event="input")  # what the debounced input handler posts
        (patch,) = tab.new_events()
        assert patch.type == protocol.PATCH_ELEMENTS and patch.selector is None
        assert patch.elements.startswith('<div id="results">')
        assert 'id="q"' not in patch.elements  # the input is left alone
        count, took = stats(tab)
        assert count == len(search_places("north")) and took >= 0
        assert shown(tab) == [name for name, _ in search_places("north")[:SHOWN]]
        assert "<mark>North</mark>march" in tab.html
        assert "Showing the first 50." in tab.html

        tab.type("#q", "Kingser")
        tab.submit("form")  # Enter searches at once
        assert stats(tab)[0] == len(search_places("kingser")) < SHOWN
        assert all(name.startswith("Kingser") for name in shown(tab))
        assert "Showing the first" not in tab.html

        tab.type("#q", "<script>")
        tab.submit("form")
        assert stats(tab)[0] == 0 and "<script>" not in tab.html


def test_each_tab_searches_on_its_own() -> None:
    with TestClient(app) as client, TestClient(app) as other_browser:
        a, b = client.open("/"), client.open("/")
        c = other_browser.open("/")
        b.new_events(), c.new_events()
        a.type("#q", "vale")
        a.submit("form")
        app.flush_broadcasts()
        assert stats(a)[0] == len(search_places("vale"))
        assert b.new_events() == [] and c.new_events() == []  # nothing reached the other tabs
        assert stats(b)[0] == 1000 and stats(c)[0] == 1000


def test_a_revived_tab_renders_the_query_the_browser_holds() -> None:
    with TestClient(app) as client:
        tab = client.open("/")
        tab.type("#q", "ford")
        tab.submit("form")
        tab.revive()
        assert stats(tab)[0] == len(search_places("ford"))


def test_a_query_is_at_most_max_query_characters() -> None:
    with TestClient(app) as client:
        tab = client.open("/")
        (box,) = tab.find("#q")
        assert box.attrs["maxlength"] == str(MAX_QUERY)  # the browser stops the user there
        tab.new_events()
        assert tab.action("search", q="a" * (MAX_QUERY + 1)).status == 413  # the server too, out loud
        events = tab.new_events()
        assert [e.type for e in events] == [protocol.PATCH_SIGNALS]  # the action did not run: no results
        assert "signal 'q' got 101 characters" in events[0].signals["_via_error"]  # what the user is shown
        assert tab.action("search", q="a" * MAX_QUERY).status == 200
        assert stats(tab)[0] == 0
