"""Safe HTML in Python: interpolations are escaped unless they are markup already.

``html("<li>{who}: {text}</li>", who=name, text=message)`` returns :class:`markupsafe.Markup`
with every value escaped for text and for quoted attributes alike (MarkupSafe's ``format``
semantics, as Jinja's autoescape). A value that is markup already (another ``html(...)``, an
``Action``, ``sig.bind()``, a component, ``raw(...)``) goes in as it is; a list, tuple or generator
of values is joined, each item escaped unless it is markup. ``raw(text)`` is the one explicit
way to put text in as HTML: a reader can grep for it.

A view may return ``str`` as well; a plain string is taken as HTML as written, so views that
interpolate user data should build it with ``html``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from markupsafe import Markup, escape

__all__ = ["Markup", "html", "raw"]


def html(template: str, /, *args: Any, **values: Any) -> Markup:
    """``template`` (HTML you wrote) with ``{name}`` / ``{0}`` fields filled by escaped values."""
    if not isinstance(template, str):
        raise TypeError(f"html() takes the template as a str, not {type(template).__name__}")
    return Markup(template).format(*map(_piece, args), **{k: _piece(v) for k, v in values.items()})


def raw(text: str) -> Markup:
    """Text that is already HTML, put in as it is: only for markup you made or trust."""
    return Markup(text)


def _piece(value: Any) -> Any:
    """A value ready for ``Markup.format``: markup as is, iterables joined, the rest left to escape."""
    if hasattr(value, "__html__") or isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, (list, tuple, Iterator)) or (isinstance(value, Iterable) and not isinstance(value, dict)):
        return Markup("").join(escape(item) for item in value)
    return value
