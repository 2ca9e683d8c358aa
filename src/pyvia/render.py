"""Templates and documents: Jinja2 rendering and the HTML around a tab's view.

A view is either a Jinja2 template (rendered whole on page load; with ``block=`` only that
block on updates) or a callable returning HTML. Fragment views are wrapped in the default
shell; a full document (one containing ``<html``) gets the bootstrap injected before
``</head>`` and ``</body>`` unless the template placed it with ``via_head()``/``via_foot()``.
"""

from __future__ import annotations

import functools
import html
import re
import types
from collections.abc import Callable, Mapping, Sequence
from os import PathLike
from typing import Any

import jinja2
import markupsafe
import orjson
from jinja2.runtime import new_context
from markupsafe import Markup, escape

from pyvia.alerts import FETCH_EVENTS
from pyvia.protocol import FILTER_DOWN, patch_elements, seed_json

VIEW_ID = "via-view"
#: The element the page shell puts the view in, as :func:`view_patch` opens and closes it.
VIEW_OPEN = f'<div id="{VIEW_ID}">'
VIEW_CLOSE = "</div>"
_HTML_TAG = re.compile(r"<html[\s>]", re.IGNORECASE)
_HEAD_END = re.compile(r"</head\s*>", re.IGNORECASE)
_BODY_END = re.compile(r"</body\s*>", re.IGNORECASE)
_BODY = re.compile(r"<body[^>]*>(.*)</body\s*>", re.IGNORECASE | re.DOTALL)

#: Placeholders the ``via_head()`` / ``via_foot()`` template helpers leave; replaced per page.
HEAD_MARK = "<!--via:head-->"
FOOT_MARK = "<!--via:foot-->"


def view_patch(markup: str) -> bytes:
    """The event that makes ``markup`` the page's view: the view's element whole, which Datastar
    morphs by its id. No selector or mode line: 17 bytes fewer than the inside alone with
    ``selector #via-view`` and ``mode inner``."""
    return patch_elements("".join((VIEW_OPEN, markup, VIEW_CLOSE)))  # str.join: a Markup would escape


def is_document(markup: str) -> bool:
    return _HTML_TAG.search(markup) is not None


def body_of(document: str) -> str:
    m = _BODY.search(document)
    return m.group(1) if m else document


def _replace_escape(value: str) -> str:
    return (
        value.replace("&", "&amp;")
        .replace(">", "&gt;")
        .replace("<", "&lt;")
        .replace("'", "&#39;")
        .replace('"', "&#34;")
    )


#: markupsafe's own escape of a plain string (its C one, in markupsafe 3), without the ``Markup``
#: around it; the same replacements where that version has none.
_escape_str: Callable[[str], str] = getattr(markupsafe, "_escape_inner", None) or _replace_escape


def output_escape(value: Any) -> str:
    """What a template writes for ``{{ value }}``: the characters of markupsafe's ``escape(value)``.

    Jinja's compiled templates call ``escape`` only on what they output, and the outputs are joined
    into one string (Jinja wraps what it buffers, a macro's or a block's, in ``Markup`` itself), so
    nothing needs the ``Markup`` object that markupsafe makes for each. A plain string is escaped
    with the same replacements; an object with ``__html__`` writes what it returns.
    """
    kind = type(value)
    if kind is str:
        return _escape_str(value)
    if kind is int or kind is float:
        return str(value)  # no character to escape
    html_of = getattr(value, "__html__", None)
    if html_of is not None:
        out = html_of()
        return out if isinstance(out, str) else str(out)
    return escape(value)


class _Template(jinja2.Template):
    """A template whose output goes through :func:`output_escape`."""

    @classmethod
    def from_code(
        cls,
        environment: jinja2.Environment,
        code: Any,
        globals: Any,
        uptodate: Any = None,
    ) -> jinja2.Template:
        template = super().from_code(environment, code, globals, uptodate)
        # the module namespace the compiled template runs in: its ``escape`` is a global name there
        template.root_render_func.__globals__["escape"] = output_escape
        return template


#: What a dict has as attributes: ``{{ d.name }}`` reads the key ``name`` unless it is one of these.
_DICT_ATTRIBUTES = frozenset(dir(dict))


class _Environment(jinja2.Environment):
    """Jinja's environment, with ``{{ d.key }}`` on a dict read without the failed attribute
    lookup (and its exception) that precedes the item lookup in Jinja's own ``getattr``: a dict
    has no attributes but its type's, so when ``key`` is not one of them the answer is the same.
    Anything else is looked up as Jinja documents it: the attribute, else the item, else undefined."""

    def getattr(self, obj: Any, attribute: str) -> Any:
        if type(obj) is dict and attribute not in _DICT_ATTRIBUTES:
            try:
                return obj[attribute]
            except KeyError:
                return self.undefined(obj=obj, name=attribute)
        try:
            return getattr(obj, attribute)
        except AttributeError:
            pass
        try:
            return obj[attribute]
        except (TypeError, LookupError, AttributeError):
            return self.undefined(obj=obj, name=attribute)


class _Context(jinja2.runtime.Context):
    """Jinja's template context, with ``{{ signal.ref() }}`` (a bound method) called directly.

    Jinja's ``call`` looks for a ``jinja_pass_arg`` marker (``pass_context`` and the like) on the
    callable and on its ``__call__``, an attribute lookup that fails with an exception for a bound
    method. A bound method's marker is its function's, and its ``__call__`` never has one, so a
    method whose function is unmarked is called as Jinja would call it; anything else goes to
    Jinja's ``call``."""

    def call(__self, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # Jinja's spelling
        __traceback_hide__ = True  # Jinja's tracebacks leave this frame out
        if type(__obj) is not types.MethodType or hasattr(__obj.__func__, "jinja_pass_arg"):
            return super().call(__obj, *args, **kwargs)
        if kwargs:
            kwargs.pop("_block_vars", None)  # what Jinja adds to a call inside a loop or a block
            kwargs.pop("_loop_vars", None)
        try:
            return __obj(*args, **kwargs)
        except StopIteration:
            return __self.environment.undefined(
                "value was undefined because a callable raised a StopIteration exception"
            )


class Templates:
    """A Jinja2 environment with autoescape on and pyvia's helpers."""

    __slots__ = ("_globals", "env")

    def __init__(self, directory: str | PathLike[str] | None) -> None:
        loader: jinja2.BaseLoader = (
            jinja2.FileSystemLoader(directory) if directory is not None else jinja2.DictLoader({})
        )
        self.env = _Environment(
            loader=loader,
            autoescape=True,
            undefined=jinja2.StrictUndefined,
            auto_reload=False,
        )
        self.env.template_class = _Template
        self.env.context_class = _Context
        self.env.globals["via_head"] = lambda: Markup(HEAD_MARK)
        self.env.globals["via_foot"] = lambda: Markup(FOOT_MARK)
        # Jinja iterates its globals ChainMap twice per render (costing more than the counter
        # template itself); a plain dict merged into the data costs a fraction of that.
        self._globals = dict(self.env.globals)

    def add_global(self, name: str, value: Any) -> None:
        self.env.globals[name] = value
        self._globals[name] = value

    def render(self, name: str, data: Mapping[str, Any], block: str | None = None) -> str:
        template = self.env.get_template(name)
        context = new_context(self.env, template.name, template.blocks, {**self._globals, **data}, True)
        if block is None:
            render = template.root_render_func
        else:
            try:
                render = template.blocks[block]
            except KeyError:
                raise KeyError(f"template {name!r} has no block {block!r}") from None
        try:
            return "".join(render(context))
        except Exception:
            # what Template.render does: the traceback then names the template's own line, not
            # the line of the Python that Jinja compiled it to
            self.env.handle_exception()


def signals_attr(values: Mapping[str, Any]) -> str:
    """The escaped value of a ``data-signals`` attribute: any value, whatever its strings hold."""
    return html.escape(seed_json(dict(values)), quote=True)


#: How the stream is opened: Datastar's own retries keep it open for good (and send the id of
#: the last event they got, so the server can resume), backing off to at most 8 s between tries.
#: Over HTTP/1.1 a browser opens six connections to a host: six tabs' streams would take them all
#: and every click would wait. There a hidden tab closes its stream and resumes it when shown.
_STREAM_OPTIONS = (
    "openWhenHidden: performance.getEntriesByType('navigation')[0]?.nextHopProtocol !== 'http/1.1', "
    "retry: 'always', retryMaxCount: Infinity, retryMaxWait: 8000"
)
#: What the page does with Datastar's fetch events (pyvia.alerts): a failed request shows its
#: status, a stream that retries shows the tab as lost and makes its actions carry the snapshot.
_FETCH_EVENTS = FETCH_EVENTS % orjson.dumps(FILTER_DOWN).decode()


def bootstrap_head(
    signals: Mapping[str, Any],
    bundle_url: str,
    integrity: str,
    sse_url: str,
    close_url: str,
    *,
    nonce: str | None = None,
) -> str:
    """The tags that seed the tab's signals, load Datastar and keep the stream open.

    The stream's request carries the context id only. A server that no longer holds the tab (a
    restart, another worker) answers it with ``_via_revive``; the second tag then opens the stream
    with a POST whose body holds the writable signals and the signed snapshot of the server-owned
    ones, read at that moment, and the tab is revived from them.
    """
    before, after = _boot_tags(bundle_url, integrity, sse_url, close_url)
    nonce_attr = f' nonce="{html.escape(nonce)}"' if nonce else ""
    return f"{before}{signals_attr(signals)}{after}{nonce_attr}></script>"


@functools.lru_cache(maxsize=64)
def _boot_tags(bundle_url: str, integrity: str, sse_url: str, close_url: str) -> tuple[str, str]:
    """What :func:`bootstrap_head` writes around the seed and the nonce: the same for every page
    of an app, so escaped once (the seed and the nonce are a page's own)."""
    get = f"@get('{sse_url}', {{filterSignals: {{include: /^via_ctx$/}}, {_STREAM_OPTIONS}}}).catch(() => {{}})"
    post = (
        f"@post('{sse_url}', {{filterSignals: {{exclude: /(^|\\.)_(?!via_snap)/}}, {_STREAM_OPTIONS}}})"
        ".catch(() => {})"
    )
    after = (
        f'" data-init="{_attribute(get)}" '
        f'data-on:datastar-fetch="{_attribute(_FETCH_EVENTS)}" '
        f"data-on:pagehide__window=\"navigator.sendBeacon('{_attribute(close_url)}', $via_ctx)\">\n"
        f'<meta id="via-revive" data-effect="{_attribute("$_via_revive && " + post)}">\n'
        f'<script type="module" src="{bundle_url}" integrity="{integrity}" crossorigin="anonymous"'
    )
    return '<meta id="via-boot" data-signals="', after


def _attribute(text: str) -> str:
    """``text`` as the value of a double-quoted attribute: only ``&`` and ``"`` can end or change
    it there, and the boot tags' expressions are full of quotes and ``&&`` that every page carries."""
    return text.replace("&", "&amp;").replace('"', "&quot;")


_SHELL = """<!doctype html>
<html lang="{lang}">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="icon" href="data:,">
<title>{title}</title>
{head}
</head>
<body>
<div id="{view_id}">{content}</div>
{foot}
</body>
</html>
"""


class PageShell:
    """A fragment view's page around what differs per view, encoded once per route and app.

    Everything but the seed, the CSP nonce, the tags a tab adds to its head or foot, and the view
    is the same for every view of a route (the title, the bootstrap tags and their URLs, the app's
    head and foot, the route's alert, the dev panel); :meth:`render` joins those bytes with the
    view's own parts. The bytes are what :func:`build_document` around :func:`bootstrap_head`
    gives.
    """

    __slots__ = ("_after", "_foot", "_head", "_middle", "_panel", "_start", "end")

    def __init__(
        self,
        lang: str,
        title: str,
        head: tuple[str, ...],
        foot: tuple[str, ...],
        panel: str,
        bundle_url: str,
        integrity: str,
        sse_url: str,
        close_url: str,
    ) -> None:
        before, after = _boot_tags(bundle_url, integrity, sse_url, close_url)
        top, _, rest = _SHELL.partition("{head}")
        middle, _, _bottom = rest.partition("{content}")
        self._start = (top.format(lang=lang, title=html.escape(title)) + before).encode()
        self._after = after.encode()
        self._head = ("></script>" + "".join("\n" + tag for tag in head)).encode()
        self._middle = middle.format(view_id=VIEW_ID).encode()
        self._foot, self._panel = foot, panel
        self.end = self._end(())

    def _end(self, extra: Sequence[str]) -> bytes:
        foot = [*self._foot, *extra]
        if self._panel:
            foot.append(self._panel)
        return _SHELL.partition("{content}")[2].format(foot="\n".join(foot)).encode()

    def render(self, seed: str, nonce: str | None, head: Sequence[str], foot: Sequence[str], content: str) -> bytes:
        """The page: ``seed`` is the ``data-signals`` value (escaped), ``head``/``foot`` the tab's own tags."""
        parts = [self._start, seed.encode(), self._after]
        if nonce:
            parts.append(f' nonce="{html.escape(nonce)}"'.encode())
        parts.append(self._head)
        if head:
            parts.append(("\n" + "\n".join(head)).encode())
        parts += (self._middle, content.encode(), self._end(foot) if foot else self.end)
        return b"".join(parts)


@functools.lru_cache(maxsize=256)
def page_shell(
    lang: str,
    title: str,
    head: tuple[str, ...],
    foot: tuple[str, ...],
    panel: str,
    bundle_url: str,
    integrity: str,
    sse_url: str,
    close_url: str,
) -> PageShell:
    """The :class:`PageShell` of these values: made once, and again whenever one of them differs."""
    return PageShell(lang, title, head, foot, panel, bundle_url, integrity, sse_url, close_url)


def build_document(content: str, *, title: str, head: str, foot: str, lang: str = "en") -> str:
    """Wrap a fragment view in the shell, or inject ``head``/``foot`` into a full document."""
    content = str(content)  # a Markup (``html()``) would escape what is joined to it: the bootstrap
    if not is_document(content):
        return _SHELL.format(
            lang=lang, title=html.escape(title), head=head, foot=foot, view_id=VIEW_ID, content=content
        )
    if HEAD_MARK in content:
        content = content.replace(HEAD_MARK, head, 1)
    elif (m := _HEAD_END.search(content)) is not None:
        content = content[: m.start()] + head + "\n" + content[m.start() :]
    else:
        content = head + content
    return with_foot(content, foot)


def with_foot(document: str, foot: str) -> str:
    """``document`` with ``foot`` where ``via_foot()`` left its mark, else before its last
    ``</body>`` (else at its end): where the page has it, and where a body's update keeps it."""
    document = str(document)
    if FOOT_MARK in document:
        return document.replace(FOOT_MARK, foot, 1)
    if not foot:
        return document
    ends = list(_BODY_END.finditer(document))
    if ends:
        at = ends[-1].start()
        return document[:at] + foot + "\n" + document[at:]
    return document + foot
