"""Jinja2 templates and the document around a tab's view."""

from __future__ import annotations

import html
import json
from html.parser import HTMLParser
from pathlib import Path

import jinja2
import pytest
from markupsafe import Markup, escape

from pyvia.render import (
    FOOT_MARK,
    HEAD_MARK,
    Templates,
    body_of,
    bootstrap_head,
    build_document,
    is_document,
    output_escape,
    page_shell,
    signals_attr,
)

HEAD = '<meta name="via-head">'
FOOT = '<script id="via-foot"></script>'


@pytest.fixture
def templates(tmp_path: Path) -> Templates:
    (tmp_path / "hello.html").write_text("<p>Hello {{ name }}</p>")
    (tmp_path / "page.html").write_text(
        "<h1>{% block title %}T {{ name }}{% endblock %}</h1>{% block counter %}<span>{{ count }}</span>{% endblock %}"
    )
    (tmp_path / "doc.html").write_text(
        "<!doctype html><html><head>{{ via_head() }}<title>x</title></head>"
        "<body><p>{{ name }}</p>{{ via_foot() }}</body></html>"
    )
    return Templates(tmp_path)


# --- Templates -----------------------------------------------------------------------------------


class _Html:
    def __html__(self) -> str:
        return "<b>raw</b>"


class _Plain:
    def __str__(self) -> str:
        return "<i>'x'</i>"


_ESCAPED = [
    "<script>alert('x')</script>&\"",
    "",
    "plain text",
    "é ü — 🙂 <",
    3,
    -2.5,
    True,
    None,
    Markup("<em>safe</em>"),
    _Html(),
    _Plain(),
    ["<a>", 1],
]


@pytest.mark.parametrize("value", _ESCAPED, ids=repr)
def test_output_escape_writes_what_markupsafe_escape_does(value: object) -> None:
    assert output_escape(value) == str(escape(value))


def test_templates_output_what_markupsafe_escaping_outputs(tmp_path: Path) -> None:
    """Macros, call blocks, filter blocks, includes, set blocks, inheritance and concatenation
    render the same text as a plain Jinja environment with autoescape."""
    sources = {
        "base.html": "<main>{% block body %}{{ v }}{% endblock %}</main>",
        "part.html": "<aside>{{ v }}|{{ h }}</aside>",
        "all.html": (
            "{% extends 'base.html' %}{% block body %}"
            "{% macro box(x) %}<div>{{ x }}</div>{% endmacro %}"
            "{% macro frame(x) %}<div>{{ x }}{{ caller() }}</div>{% endmacro %}"
            "{{ box(v) }}{% call frame(h) %}<i>{{ v }}</i>{% endcall %}"
            "{% filter upper %}{{ v }}<p>{{ m }}</p>{% endfilter %}"
            "{% set block_set %}<s>{{ v }}</s>{% endset %}{{ block_set }}"
            "{% include 'part.html' %}{{ v ~ m }}{{ v | e }}{{ m | safe }}{{ n }}{{ f }}{{ o }}"
            "{% autoescape false %}{{ v }}{% endautoescape %}{{ super() }}"
            "{% for x in items %}{{ loop.index }}{{ x }}{% endfor %}"
            "{{ d.title }}{{ d['items'] }}{{ d.items is callable }}{{ d.get('title') }}{{ d.nested.k }}"
            "{% endblock %}"
        ),
    }
    for name, text in sources.items():
        (tmp_path / name).write_text(text)
    data = {
        "v": "<a href='x'>&\"",
        "m": Markup("<b>m</b>"),
        "h": _Html(),
        "n": 7,
        "f": 1.5,
        "o": _Plain(),
        "items": ["<1>", 2, None],
        "d": {"title": "<t>", "items": "<key>", "nested": {"k": "&"}},
    }
    plain = jinja2.Environment(loader=jinja2.FileSystemLoader(tmp_path), autoescape=True)
    expected = plain.get_template("all.html").render(data)
    assert "&lt;a href=&#39;x&#39;&gt;&amp;&#34;" in expected
    assert "&lt;t&gt;&lt;key&gt;True&lt;t&gt;&amp;" in expected
    assert Templates(tmp_path).render("all.html", data) == expected


class _Methods:
    def plain(self, x: object = "<p>") -> str:
        return f"plain {x}"

    @jinja2.pass_context
    def with_context(self, context: jinja2.runtime.Context, key: str) -> str:
        return f"context {context[key]}"

    def stop(self) -> str:
        raise StopIteration


def test_template_method_calls_answer_as_jinja_calls_them(tmp_path: Path) -> None:
    """Bound methods, with or without Jinja's pass_context, inside blocks and loops, raising
    StopIteration (undefined, so an error under StrictUndefined) — as a plain environment does."""
    (tmp_path / "m.html").write_text(
        "{{ m.plain() }}{{ m.plain(x='<b>') }}{{ m.with_context('v') }}"
        "{% block b %}{% for i in [1, 2] %}{% set v = i %}{{ m.plain(i) }}{{ m.with_context('v') }}"
        "{% endfor %}{% endblock %}{{ m.stop() is defined }}"
    )
    data = {"m": _Methods(), "v": "<top>"}
    plain = jinja2.Environment(loader=jinja2.FileSystemLoader(tmp_path), autoescape=True)
    expected = plain.get_template("m.html").render(data)
    assert "plain &lt;p&gt;plain &lt;b&gt;context &lt;top&gt;plain 1context 1" in expected
    assert expected.endswith("False")
    assert Templates(tmp_path).render("m.html", data) == expected
    assert Templates(tmp_path).render("m.html", data, block="b") == "plain 1context 1plain 2context 2"


def test_a_missing_dict_key_is_an_error_not_blank(tmp_path: Path) -> None:
    (tmp_path / "d.html").write_text("<p>{{ d.missing }}</p>")
    with pytest.raises(jinja2.UndefinedError, match="missing"):
        Templates(tmp_path).render("d.html", {"d": {"present": 1}})


def test_render_fills_the_template(templates: Templates) -> None:
    assert templates.render("hello.html", {"name": "Ada"}) == "<p>Hello Ada</p>"


def test_render_autoescapes_values(templates: Templates) -> None:
    out = templates.render("hello.html", {"name": "<script>alert('x')</script>&"})
    assert out == "<p>Hello &lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;&amp;</p>"


def test_missing_variable_is_an_error_not_blank(templates: Templates) -> None:
    with pytest.raises(jinja2.UndefinedError):
        templates.render("hello.html", {})


def test_render_one_block_only(templates: Templates) -> None:
    assert templates.render("page.html", {"name": "A", "count": 3}, block="counter") == "<span>3</span>"


def test_block_render_also_autoescapes(templates: Templates) -> None:
    assert templates.render("page.html", {"name": "<b>"}, block="title") == "T &lt;b&gt;"


def test_missing_block_names_the_template_and_block(templates: Templates) -> None:
    with pytest.raises(KeyError, match=r"template 'page.html' has no block 'nope'"):
        templates.render("page.html", {}, block="nope")


def test_missing_template_is_an_error(templates: Templates) -> None:
    with pytest.raises(jinja2.TemplateNotFound):
        templates.render("nope.html", {})


def test_via_head_and_via_foot_leave_markers(templates: Templates) -> None:
    out = templates.render("doc.html", {"name": "x"})
    assert HEAD_MARK in out
    assert FOOT_MARK in out


def test_templates_without_a_directory_have_no_templates() -> None:
    with pytest.raises(jinja2.TemplateNotFound):
        Templates(None).render("x.html", {})


# --- documents -----------------------------------------------------------------------------------


def test_fragment_is_wrapped_in_the_shell() -> None:
    doc = build_document("<p>hi</p>", title="My <App>", head=HEAD, foot=FOOT, lang="fr")
    assert doc.startswith('<!doctype html>\n<html lang="fr">')
    assert '<div id="via-view"><p>hi</p></div>' in doc
    assert "<title>My &lt;App&gt;</title>" in doc
    assert doc.index(HEAD) < doc.index("</head>")
    assert doc.index('<div id="via-view">') < doc.index(FOOT) < doc.index("</body>")


def test_fragment_view_content_is_not_escaped_again() -> None:
    doc = build_document("<b>&amp;</b>", title="t", head="", foot="")
    assert '<div id="via-view"><b>&amp;</b></div>' in doc


def test_fragment_with_braces_is_inserted_literally() -> None:
    doc = build_document("<p>{title} {0} {{x}}</p>", title="T", head="", foot="")
    assert '<div id="via-view"><p>{title} {0} {{x}}</p></div>' in doc


def test_full_document_gets_head_before_head_end() -> None:
    page = "<!doctype html><html><head><title>t</title></head><body><p>x</p></body></html>"
    doc = build_document(page, title="ignored", head=HEAD, foot=FOOT)
    assert f"<title>t</title>{HEAD}\n</head>" in doc
    assert 'id="via-view"' not in doc
    assert "ignored" not in doc


def test_full_document_gets_foot_before_the_last_body_end() -> None:
    page = "<html><head></head><body><pre>&lt;/body&gt; and <!-- </body> --></pre></body></html>"
    doc = build_document(page, title="t", head=HEAD, foot=FOOT)
    assert doc.endswith(f"{FOOT}\n</body></html>")
    assert doc.count(FOOT) == 1


def test_head_and_body_end_tags_are_found_in_any_case() -> None:
    page = "<HTML><HEAD></HEAD ><BODY>x</BODY></HTML>"
    doc = build_document(page, title="t", head=HEAD, foot=FOOT)
    assert f"{HEAD}\n</HEAD >" in doc
    assert f"{FOOT}\n</BODY>" in doc


def test_document_without_head_gets_head_at_the_start() -> None:
    doc = build_document("<html><body>x</body></html>", title="t", head=HEAD, foot=FOOT)
    assert doc.startswith(HEAD)


def test_document_without_body_end_gets_foot_at_the_end() -> None:
    doc = build_document("<html><head></head><body>x", title="t", head=HEAD, foot=FOOT)
    assert doc.endswith(FOOT)


def test_markers_are_replaced_instead_of_injecting(templates: Templates) -> None:
    page = templates.render("doc.html", {"name": "x"})
    doc = build_document(page, title="t", head=HEAD, foot=FOOT)
    assert doc.count(HEAD) == 1
    assert doc.count(FOOT) == 1
    assert f"<head>{HEAD}<title>x</title></head>" in doc
    assert f"<p>x</p>{FOOT}</body>" in doc
    assert HEAD_MARK not in doc
    assert FOOT_MARK not in doc


def test_foot_marker_is_removed_when_there_is_no_foot() -> None:
    page = f"<html><head>{HEAD_MARK}</head><body>{FOOT_MARK}</body></html>"
    assert build_document(page, title="t", head=HEAD, foot="") == f"<html><head>{HEAD}</head><body></body></html>"


@pytest.mark.parametrize(
    ("markup", "expected"),
    [
        ("<html>", True),
        ("<!doctype html><HTML lang=en>", True),
        ("<p>html</p>", False),
        ("<htmlish>", False),
        ("&lt;html&gt;", False),
    ],
)
def test_is_document(markup: str, expected: bool) -> None:
    assert is_document(markup) is expected


def test_body_of_returns_the_body_content() -> None:
    assert body_of("<html><body class='x'>\n<p>a</p>\n</body></html>") == "\n<p>a</p>\n"
    assert body_of("<p>fragment</p>") == "<p>fragment</p>"


# --- bootstrap -----------------------------------------------------------------------------------


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))


def _parse(markup: str) -> list[tuple[str, dict[str, str | None]]]:
    parser = _Tags()
    parser.feed(markup)
    parser.close()
    return parser.tags


def _boot(signals: dict[str, object]) -> str:
    return bootstrap_head(signals, "/datastar.js?v=1", "sha384-abc", "/_sse", "/_session/close")


def test_bootstrap_seeds_signals_and_loads_the_bundle() -> None:
    tags = _parse(_boot({"via_ctx": "id1", "_count": 0}))
    assert [t for t, _ in tags] == ["meta", "meta", "script"]
    meta, revive, script = tags[0][1], tags[1][1], tags[2][1]
    assert meta["id"] == "via-boot"
    assert json.loads(meta["data-signals"] or "") == {"via_ctx": "id1", "_count": 0}
    assert script == {
        "type": "module",
        "src": "/datastar.js?v=1",
        "integrity": "sha384-abc",
        "crossorigin": "anonymous",
    }
    # the stream's request carries the context id only; Datastar's retries keep it open, but for a
    # hidden tab over HTTP/1.1 (six connections a host: tests/browser/test_many_tabs_on_http1.py)
    assert meta["data-init"] == (
        "@get('/_sse', {filterSignals: {include: /^via_ctx$/}, "
        "openWhenHidden: performance.getEntriesByType('navigation')[0]?.nextHopProtocol !== 'http/1.1', "
        "retry: 'always', retryMaxCount: Infinity, retryMaxWait: 8000}).catch(() => {})"
    )
    # asked to, the page opens it again with a POST carrying its writable signals and its snapshot
    assert revive["id"] == "via-revive"
    assert (revive["data-effect"] or "").startswith(
        "$_via_revive && @post('/_sse', {filterSignals: {exclude: /(^|\\.)_(?!via_snap)/}"
    )


@pytest.mark.parametrize(
    "value", ["\"'><script>alert(1)</script>", "</meta><script>x</script>", "&quot;", "a\"b'c<d>e&f", "\u2028"]
)
def test_signal_values_cannot_break_out_of_the_attribute(value: str) -> None:
    markup = _boot({"msg": value})
    tags = _parse(markup)
    assert [t for t, _ in tags] == ["meta", "meta", "script"]
    assert json.loads(tags[0][1]["data-signals"] or "") == {"msg": value}
    assert "<script>" not in markup


def test_the_boot_tags_hold_their_expressions_whole_in_their_attributes() -> None:
    """They escape only ``&`` and ``"`` (what can end or change a double-quoted value): a URL with
    both stays inside its attribute, and each expression reads back as it was written."""
    markup = bootstrap_head({}, "/d.js", "sha384-x", '/a"b&c/_sse', '/a"><script>x</script>')
    tags = _parse(markup)
    assert [t for t, _ in tags] == ["meta", "meta", "script"]
    assert "@get('/a\"b&c/_sse'" in (tags[0][1]["data-init"] or "")
    assert "$_via_failed = $_via_failed || 'waiting'" in (tags[0][1]["data-on:datastar-fetch"] or "")
    assert tags[0][1]["data-on:pagehide__window"] == "navigator.sendBeacon('/a\"><script>x</script>', $via_ctx)"


def test_signals_attr_escapes_quotes_and_angle_brackets() -> None:
    out = signals_attr({"k": "\"'<>&"})
    for ch in "\"'<>":
        assert ch not in out.replace("&quot;", "").replace("&#x27;", "").replace("&lt;", "").replace("&gt;", "")
    assert html.unescape(out) == '{"k":"\\"\'<>&"}'


# --- the page shell ------------------------------------------------------------------------------

_URLS = ("/datastar.js?v=1", "sha384-abc", "/_sse", "/_session/close")


@pytest.mark.parametrize("nonce", [None, "n<1>"])
@pytest.mark.parametrize("app_head", [(), ('<link rel="a">', "<meta b>")])
@pytest.mark.parametrize("tab_head", [[], ["<meta tab>"]])
@pytest.mark.parametrize("tab_foot", [[], ["<p>tab foot</p>", "<p>2</p>"]])
@pytest.mark.parametrize("panel", ["", "<aside>dev</aside>"])
def test_the_page_shell_writes_the_document_the_shell_and_bootstrap_make(
    nonce: str | None, app_head: tuple[str, ...], tab_head: list[str], tab_foot: list[str], panel: str
) -> None:
    seed = {"via_ctx": "id.sig", "msg": "<'\"&@$;>"}
    foot = ('<div id="alert">ß</div>', "<footer>app</footer>")
    shell = page_shell("fr", "Über <T>", app_head, foot, panel, *_URLS)
    got = shell.render(signals_attr(seed), nonce, tab_head, tab_foot, "<p>é {x}</p>")
    head = bootstrap_head(seed, *_URLS, nonce=nonce)
    if app_head or tab_head:
        head += "\n" + "\n".join([*app_head, *tab_head])
    feet = "\n".join([*foot, *tab_foot, *([panel] if panel else [])])
    assert got == build_document("<p>é {x}</p>", title="Über <T>", head=head, foot=feet, lang="fr").encode()


def test_the_page_shell_is_made_again_when_what_it_holds_differs() -> None:
    values = ("en", "T", (), ("<div>alert</div>",), "", *_URLS)
    shell = page_shell(*values)
    assert page_shell(*values) is shell  # once per route and app
    for at, other in [
        (0, "de"),
        (1, "U"),
        (2, ("<meta x>",)),
        (3, ("<div>other</div>",)),
        (4, "<aside>"),
        (5, "/b.js"),
    ]:
        changed = list(values)
        changed[at] = other
        page = page_shell(*changed).render("{}", None, [], [], "<p>x</p>")
        assert page != shell.render("{}", None, [], [], "<p>x</p>")
        assert (other if isinstance(other, str) else other[0]).encode() in page
