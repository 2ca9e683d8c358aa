"""The documentation site: guides rendered from ``docs/*.md`` and every example, live, beside its source.

Run it with ``pyvia run website.app:app`` (the README's first command does). Each example is
loaded as its own copy of its module and mounted under ``/examples/<name>/``, so it keeps its
own tabs, scopes and settings, exactly as when it runs alone.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from markdown_it import MarkdownIt
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import PythonLexer, get_lexer_by_name
from pygments.util import ClassNotFound

from pyvia import App, Context, Markup, Request, Response, html, raw
from website.api import render_reference

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
EXAMPLES = ROOT / "examples"
PLOTS = ROOT / "website" / "static" / "perf"  # the performance plots, drawn by bench/plots.py


@dataclass(frozen=True)
class Example:
    name: str
    title: str
    blurb: str


#: The gallery, in reading order; an entry whose file is missing is left out.
GALLERY = [
    Example("counter", "Counter", "Tab-private state: each tab counts on its own, and survives a restart."),
    Example("greeter", "Greeter", "A form with an input bound to a signal, answered by the server."),
    Example("components", "Components", "Named parts of a page with their own signals and actions."),
    Example("todo", "Todo list", "A list kept in SQLite and shared by everyone on the page."),
    Example("shared_counter", "Shared counter", "One value for every tab on the route, rendered once per flush."),
    Example("chat", "Chat rooms", "History in the database, each new message appended to every tab of the room."),
    Example("game_of_life", "Game of Life", "2,500 cells shared by everyone, advanced by a server timer."),
    Example("spreadsheet", "Spreadsheet", "SQLite-backed grid: virtual scrolling, live cursors, keyboard."),
    Example("live_search", "Live search", "Search as you type over a thousand items."),
    Example("shopping_cart", "Shopping cart", "A cart in the session scope: every tab of the browser agrees."),
    Example("stock_ticker", "Stock ticker", "Prices moved by a server timer while someone watches."),
    Example("live_poll", "Live poll", "Atomic vote counts, one vote per session, live results."),
    Example("type_race", "Type race", "Rooms, a countdown and live progress of every player."),
    Example("file_upload", "File upload", "Multipart uploads with progress and one-shot downloads."),
    Example("login", "Login", "Middleware guarding an area, with session rotation at login."),
]

_STYLE = """<style>
  body { font: 16px/1.55 system-ui, sans-serif; margin: 0; color: #1d1d1f; }
  header.site { display: flex; gap: 1.5rem; align-items: baseline; padding: .8rem 1.5rem;
                background: #14213d; color: #fff; }
  header.site a { color: #fca311; text-decoration: none; font-weight: 600; }
  header.site .brand { font-size: 1.3rem; color: #fff; }
  main.page { max-width: 60rem; margin: 0 auto; padding: 1rem 1.5rem 3rem; }
  main.wide { max-width: none; }
  nav.docs { display: flex; flex-wrap: wrap; gap: .4rem 1rem; margin: .5rem 0 1.5rem; font-size: .95rem; }
  pre.doc { white-space: pre-wrap; background: none; padding: 0 0 0 1rem; font: inherit; font-size: .95rem; }
  pre { background: #f6f8fa; padding: .8rem; overflow: auto; border-radius: 6px; font-size: .85rem; }
  code { font-size: .9em; }
  table { border-collapse: collapse; } td, th { border: 1px solid #ddd; padding: .3rem .6rem; text-align: left; }
  .cards { display: grid; grid-template-columns: repeat(auto-fill, minmax(16rem, 1fr)); gap: 1rem; }
  .card { border: 1px solid #ddd; border-radius: 8px; padding: .8rem 1rem; }
  .card h3 { margin: .2rem 0; } .card a { text-decoration: none; }
  .example { display: grid; grid-template-columns: minmax(0, 1fr) minmax(0, 1fr); gap: 1rem; }
  .example iframe { width: 100%; height: 80vh; border: 1px solid #ddd; border-radius: 6px; }
  .example pre { height: 80vh; margin: 0; }
  article img { max-width: 100%; height: auto; }
  @media (max-width: 900px) { .example { grid-template-columns: 1fr; } }
</style>"""

app = App(title="pyvia", head=[_STYLE, f"<style>{HtmlFormatter().get_style_defs('.highlight')}</style>"])
_markdown = MarkdownIt("commonmark", {"html": False}).enable("table")


def _highlight(code: str, lang: str, _attrs: str) -> str:
    try:
        lexer = get_lexer_by_name(lang.split()[0]) if lang else None
    except ClassNotFound:
        lexer = None
    return highlight(code, lexer, HtmlFormatter(nowrap=True)) if lexer else ""


_markdown.options["highlight"] = _highlight


def _load_example(name: str) -> ModuleType | None:
    """A fresh copy of ``examples/<name>.py`` (its own App), so mounting it changes nothing else."""
    path = EXAMPLES / f"{name}.py"
    if not path.exists():
        return None
    module_name = f"website_examples.{name}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module


EXAMPLE_APPS: dict[str, App] = {}
for _example in GALLERY:
    _module = _load_example(_example.name)
    if _module is not None and isinstance(getattr(_module, "app", None), App):
        EXAMPLE_APPS[_example.name] = _module.app
        app.mount(f"/examples/{_example.name}", _module.app)
SHOWN = [e for e in GALLERY if e.name in EXAMPLE_APPS]


def _doc_pages() -> list[tuple[str, str]]:
    """(slug, title) of every guide, index first."""
    pages = []
    for path in sorted(DOCS.glob("*.md"), key=lambda p: (p.stem != "index", p.stem)):
        first = path.read_text().split("\n", 1)[0]
        pages.append((path.stem, first.lstrip("# ").strip() or path.stem))
    return pages


_HEADER = raw(
    '<header class="site"><a class="brand" href="/">pyvia</a>'
    '<a href="/docs/index">Docs</a><a href="/examples">Examples</a>'
    '<a href="/docs/getting-started">Get started</a></header>'
)


def _layout(body: Markup, *, wide: bool = False) -> Markup:
    return html('{}<main class="page{}">{}</main>', _HEADER, " wide" if wide else "", body)


def _docs_nav() -> Markup:
    return html(
        '<nav class="docs">{}<a href="/docs/api">API reference</a></nav>',
        (html('<a href="/docs/{}">{}</a>', s, t) for s, t in _doc_pages()),
    )


_LINK = re.compile(r'href="(?!https?:|#|/)([\w-]+)\.md(#[^"]*)?"')
_IMAGE = re.compile(r'src="\.\./website/static/')


def render_markdown(text: str) -> Markup:
    """Markdown to HTML, with links between the guides pointing at their site pages.

    Images under ``website/static`` are linked relative to ``docs/`` (so the Markdown shows them in
    the repository too) and served from the site's root.
    """
    rendered = _markdown.render(text)
    rendered = _IMAGE.sub('src="/', rendered)
    # markdown-it escapes the text and drops raw HTML blocks (``html=False``): the guides' own markup
    return raw(_LINK.sub(lambda m: f'href="/docs/{m.group(1)}{m.group(2) or ""}"', rendered))


@app.page("/")
def home(c: Context) -> None:
    cards = [
        html('<div class="card"><h3><a href="/gallery/{}">{}</a></h3><p>{}</p></div>', e.name, e.title, e.blurb)
        for e in SHOWN
    ]
    body = html(
        """
<h1>pyvia</h1>
<p>Real-time, server-rendered web apps in Python, without writing JavaScript. Every open tab gets a
context on the server; one Server-Sent-Events stream per tab carries HTML and signal patches that
the Datastar client morphs into the page; scopes decide who shares what. The server owns every
value unless it is an input the user edits, so a click sends the tab's id and what was typed.</p>
<p><a href="/docs/getting-started">Get started</a> · <a href="/docs/index">Read the guides</a> ·
<a href="/examples">See the examples</a> (open any of them in two tabs).</p>
<h2>Examples</h2>
<div class="cards" id="gallery">{}</div>""",
        cards,
    )
    c.view(lambda: _layout(body))


@app.page("/docs/api")
def api_reference(c: Context) -> None:
    nav, reference = _docs_nav(), render_reference()
    c.view(lambda: _layout(html('{}<article id="doc">{}</article>', nav, reference)))


@app.page("/docs/{slug}")
def doc(c: Context, slug: str) -> None:
    path = DOCS / f"{slug}.md"
    if not re.fullmatch(r"[\w-]+", slug) or not path.is_file():
        c.view(lambda: _layout(html("<h1>No guide named {}</h1>", slug)))
        return
    nav, article = _docs_nav(), render_markdown(path.read_text())
    c.view(lambda: _layout(html('{}<article id="doc">{}</article>', nav, article)))


@app.page("/examples")
def gallery(c: Context) -> None:
    items = [html('<li><a href="/gallery/{}">{}</a> — {}</li>', e.name, e.title, e.blurb) for e in SHOWN]
    c.view(lambda: _layout(html('<h1>Examples</h1><ul id="examples">{}</ul>', items)))


@app.route("GET", "/gallery/{name}")
def example(request: Request, name: str) -> Response:
    """An example beside its source; the example itself runs in the frame, mounted at /examples/<name>/."""
    entry = next((e for e in SHOWN if e.name == name), None)
    if entry is None:
        return _not_found_page(request)
    source = (EXAMPLES / f"{name}.py").read_text()
    code = raw(highlight(source, PythonLexer(), HtmlFormatter()))  # Pygments escapes the source
    body = html(
        """
<h1>{title}</h1><p>{blurb}
 <a href="/examples/{name}/" target="_blank">Open it alone</a> (try two tabs).</p>
<div class="example"><div class="source">{code}</div>
<iframe id="live" src="/examples/{name}/" title="{title}"></iframe></div>""",
        title=entry.title,
        blurb=entry.blurb,
        name=name,
        code=code,
    )
    return Response.html(_document(f"{entry.title} · pyvia", _layout(body, wide=True)))


@app.route("GET", "/perf/{name}")
def plot(request: Request, name: str) -> Response:
    """A performance plot of the performance guide (``python -m bench.plots`` draws them)."""
    path = PLOTS / name
    if not re.fullmatch(r"[\w-]+\.svg", name) or not path.is_file():
        return _not_found_page(request)
    return Response(200, [("content-type", "image/svg+xml"), ("cache-control", "no-cache")], path.read_bytes())


def _document(title: str, body: Markup) -> str:
    """A plain page (no live tab) with the site's look."""
    return html(
        '<!doctype html><html lang="en"><head><meta charset="utf-8"><link rel="icon" href="data:,">'
        "<title>{}</title>{}</head><body>{}</body></html>",
        title,
        raw("".join(app.config.head)),
        body,
    )


@app.not_found
def _not_found_page(request: Request) -> Response:
    return Response.html(_document("Not found · pyvia", _layout(html("<h1>Nothing at {}</h1>", request.path))), 404)
