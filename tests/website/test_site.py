"""The documentation site: guides, the gallery, and every example live under its prefix."""

from __future__ import annotations

import re

import orjson
import pytest
from bench.plots import FIGURES
from website.app import EXAMPLE_APPS, SHOWN, app, render_markdown

from pyvia.testing import TestClient


@pytest.fixture(scope="module")
def client():
    with TestClient(app) as c:
        yield c


def test_home_lists_every_example(client: TestClient) -> None:
    tab = client.open("/")
    for example in SHOWN:
        assert f'href="/gallery/{example.name}"' in tab.html
    assert {"counter", "greeter", "shared_counter", "chat", "game_of_life"} <= set(EXAMPLE_APPS)


@pytest.mark.parametrize("slug", ["index", "getting-started", "lifecycle", "scopes-and-broadcasting", "testing"])
def test_guides_render_with_site_links(client: TestClient, slug: str) -> None:
    page = client.get(f"/docs/{slug}").body.decode()
    assert '<article id="doc">' in page and "<h1>" in page
    assert not re.search(r'href="[\w-]+\.md', page)  # links between guides point at site pages


def test_unknown_guide_and_example_are_not_served(client: TestClient) -> None:
    assert "No guide named" in client.get("/docs/nope").body.decode()
    traversal = client.get("/docs/..%2f..%2fetc")  # decoded as the servers do: /docs/../../etc, no page
    assert traversal.status == 404 and "No guide named" not in traversal.body.decode()
    assert client.get("/gallery/nope").status == 404


def test_gallery_page_shows_the_source_beside_the_live_example(client: TestClient) -> None:
    page = client.get("/gallery/counter").body.decode()
    assert 'src="/examples/counter/"' in page
    assert "c.signal" in re.sub(r"<[^>]+>", "", page)  # the highlighted source, tags stripped


def test_mounted_examples_work_under_their_prefix(client: TestClient) -> None:
    tab = client.open("/examples/counter/")
    tab.click("#inc")
    assert tab.signals["_count"] == 1
    a, b = client.open("/examples/shared_counter/"), client.open("/examples/shared_counter/")
    a.click("#inc")
    client.clock.advance(0.05)
    assert 'id="count">1</strong>' in b.html


def test_markdown_code_is_highlighted_and_html_is_not_passed_through() -> None:
    out = render_markdown("```python\nx = 1\n```\n\n<script>alert(1)</script>\n\n[next](lifecycle.md#flows)")
    assert '<span class="n">x</span>' in out
    assert "<script>" not in out
    assert 'href="/docs/lifecycle#flows"' in out


def test_api_reference_is_generated_from_docstrings(client: TestClient) -> None:
    import pyvia

    page = client.get("/docs/api").body.decode()
    assert "API reference" in page
    for name in ("App", "Context", "Signal", "TestClient"):
        assert f"id='{name}'" in page
    assert "broadcast" in page and "Mark a scope" in page  # App.broadcast's docstring
    assert pyvia.Context.signal.__doc__.split("\n")[0][:40] in page.replace("&#x27;", "'")


def test_performance_page_shows_every_plot(client: TestClient) -> None:
    page = client.get("/docs/performance").body.decode()
    plots = orjson.loads(FIGURES.read_bytes())["plots"]
    assert plots
    for plot in plots:
        assert f'<img src="/perf/{plot["id"]}.svg"' in page
        svg = client.get(f"/perf/{plot['id']}.svg")
        assert svg.status == 200 and dict(svg.headers)["content-type"].startswith("image/svg+xml")
        assert svg.body.lstrip().startswith(b"<?xml") and b"<svg" in svg.body


def test_only_plots_are_served_under_perf(client: TestClient) -> None:
    assert client.get("/perf/nope.svg").status == 404
    assert client.get("/perf/..%2f..%2fapp.py").status == 404
    assert client.get("/perf/storm.png").status == 404
