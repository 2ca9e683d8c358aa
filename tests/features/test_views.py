"""Views: Jinja templates with injected signals and actions, blocks, callables and documents."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from pyvia import App, Context
from pyvia.testing import TestClient

TEMPLATES = Path(__file__).parent / "templates"


def make_app(**options: object) -> App:
    app = App(
        template_dir=TEMPLATES,
        title="Views",
        head=['<link rel="stylesheet" href="/app.css">'],
        foot=["<footer>app foot</footer>"],
        **options,
    )

    @app.page("/list")
    def listing(c: Context) -> None:
        items = ["<b>a</b>"]
        count = c.signal(1, "count")

        @c.action
        def add() -> None:
            items.append(f"item {len(items)}")
            count.value += 1
            c.sync()

        c.view("list.html", lambda: {"items": items, "heading": "Items"}, block="items")

    @app.page("/doc")
    def doc(c: Context) -> None:
        count = c.signal(5, "count")

        @c.action
        def bump() -> None:
            count.value += 1
            c.sync()

        c.view("doc.html", block="main")

    @app.page("/placed")
    def placed(c: Context) -> None:
        c.signal(9, "count")
        c.append_head('<meta name="page" content="placed">')
        c.append_foot("<script>/* page foot */</script>")
        c.view("placed.html")

    @app.page("/fullcallable")
    def full(c: Context) -> None:
        n = c.signal(0, "n")

        @c.action
        def bump() -> None:
            n.value += 1
            c.sync()

        c.view(lambda: f"<html><head></head><body><p id='n'>{n.value}</p></body></html>")

    return app


def test_template_gets_signals_and_actions_by_name_and_escapes() -> None:
    with TestClient(make_app()) as client:
        tab = client.open("/list")
        assert "<h2>Items</h2>" in tab.page
        assert "&lt;b&gt;a&lt;/b&gt;" in tab.html
        assert (
            'data-on:click="@post(&#39;/_action/add&#39;, {requestCancellation: &#39;disabled&#39;, '
            "filterSignals: {exclude: $_via_filter}, headers: {&#39;via-click&#39;: Math.random()}, "
            'retryMaxCount: Infinity, retryMaxWait: 8000})"'
        ) in tab.html
        assert "<title>Views</title>" in tab.page
        assert '<link rel="stylesheet" href="/app.css">' in tab.page
        assert "<footer>app foot</footer>" in tab.page


def test_update_renders_only_the_block_and_morphs_it_by_id() -> None:
    with TestClient(make_app()) as client:
        tab = client.open("/list")
        tab.new_events()
        tab.click("#add")
        view = tab.new_events()[0]
        assert view.selector is None and view.mode == "outer"
        assert view.elements.startswith('<ul id="items">') and "<h2>" not in view.elements
        assert "item 1" in tab.html and "<h2>Items</h2>" in tab.html


def test_full_document_gets_bootstrap_injected() -> None:
    with TestClient(make_app()) as client:
        tab = client.open("/doc")
        head, body = tab.page.split("</head>")
        assert 'id="via-boot"' in head and "<title>Own document</title>" in head
        assert body.index("<footer>app foot</footer>") < body.index("</body>")
        assert "<title>Views</title>" not in tab.page
        tab.new_events()
        tab.action("bump")
        view = tab.new_events()[0]
        assert view.elements == '<main id="main">6</main>'


def test_via_head_and_via_foot_place_the_bootstrap() -> None:
    with TestClient(make_app()) as client:
        page = client.get("/placed").body.decode()
        assert page.index('id="via-boot"') < page.index("<title>Placed</title>")
        assert page.index("<footer>app foot</footer>") < page.index("<p>after</p>")
        assert page.count('id="via-boot"') == 1
        assert page.index('<meta name="page" content="placed">') < page.index("<title>Placed</title>")
        assert page.index("<footer>app foot</footer>") < page.index("/* page foot */") < page.index("<p>after</p>")


def test_full_document_callable_without_block_patches_the_body() -> None:
    with TestClient(make_app()) as client:
        tab = client.open("/fullcallable")
        tab.new_events()
        tab.action("bump")
        view = tab.new_events()[0]
        assert (view.selector, view.mode) == ("body", "inner")
        assert view.elements.startswith("<p id='n'>1</p>")
        # what the page put after the document's body stays: the alert, the app's foot
        foot = tab.page.split("<p id='n'>0</p>", 1)[1].rsplit("</body>", 1)[0]
        assert 'id="via-alert"' in foot and "<footer>app foot</footer>" in foot
        assert view.elements == "<p id='n'>1</p>" + foot


def test_a_full_document_built_with_html_keeps_its_bootstrap_and_its_foot() -> None:
    from pyvia import html

    app = App(foot=['<footer id="mine">app foot</footer>'])

    @app.page("/")
    def page(c: Context) -> None:
        n = c.signal(0, "n")

        @c.action
        def bump() -> None:
            n.value += 1
            c.sync()

        c.view(
            lambda: html(
                "<!doctype html><html><head><title>t</title></head><body>"
                '<main id="m"><p id="n">{}</p><button id="b" data-on:click="{}">+</button></main>'
                "{}</body></html>",
                n.value,
                bump,
                html("<script>/* after the main */</script>"),
            )
        )

    with TestClient(app) as client:
        tab = client.open("/")  # a page whose bootstrap was escaped has no meta#via-boot
        assert "&lt;meta" not in tab.page
        tab.click("#b")
        tab.click("#b")
        update = [e for e in tab.events if e.selector == "body"][-1]
        assert update.elements.startswith('<main id="m"><p id="n">2</p>')
        assert 'id="via-alert"' in update.elements and '<footer id="mine">app foot</footer>' in update.elements
        assert update.elements.index("/* after the main */") < update.elements.index('id="via-alert"')


def test_the_test_client_applies_every_patch_mode_at_an_id() -> None:
    from pyvia import html

    app = App()

    @app.page("/")
    def page(c: Context) -> None:
        @c.action
        def edit() -> None:
            c.patch_elements(html("<li>b</li>"), selector="#list", mode="append")
            c.patch_elements(html("<li>a</li>"), selector="#list", mode="prepend")
            c.patch_elements(html("<p>top</p>"), selector="#list", mode="before")
            c.patch_elements(html("<p>bottom</p>"), selector="#list", mode="after")
            c.patch_elements("", selector="#gone", mode="remove")
            c.patch_elements(html('<span id="x">new</span>'), selector="#x", mode="outer")
            c.patch_elements(html("inner"), selector="#box", mode="inner")

        c.view(lambda: '<ul id="list"></ul><i id="gone">old</i><span id="x">old</span><div id="box">-</div>')

    with TestClient(app) as client:
        tab = client.open("/")
        tab.action("edit")
        assert tab.html == (
            '<p>top</p><ul id="list"><li>a</li><li>b</li></ul><p>bottom</p>'
            '<span id="x">new</span><div id="box">inner</div>'
        )


def test_a_block_whose_top_level_element_has_no_id_is_named_in_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    app = App(template_dir=TEMPLATES)

    @app.page("/")
    def page(c: Context) -> None:
        n = c.signal(0, "n")

        @c.action
        def bump() -> None:
            n.value += 1
            c.sync()

        c.view("noid.html", block="counts")

    with TestClient(app) as client, caplog.at_level(logging.WARNING, logger="pyvia"):
        tab = client.open("/")
        tab.click("#bump")
        tab.click("#bump")  # warned once, not at every update
        warnings = [r.getMessage() for r in caplog.records if "view block" in r.getMessage()]
        assert warnings == [
            "page /: the view block 'counts' has a top-level <p> without an id: Datastar finds what an update "
            "replaces by the ids of its top-level elements, so that part of the page is never updated "
            "(give it an id, or make the block one element with an id)"
        ]
        caplog.clear()
        client.open("/").click("#bump")  # another tab of the route: checked already
        assert not [r for r in caplog.records if "view block" in r.getMessage()]


def test_blocks_of_elements_with_ids_are_not_warned_about(caplog: pytest.LogCaptureFixture) -> None:
    with TestClient(make_app()) as client, caplog.at_level(logging.WARNING, logger="pyvia"):
        client.open("/list").click("#add")
        client.open("/doc").action("bump")
        assert not [r for r in caplog.records if "view block" in r.getMessage()]
