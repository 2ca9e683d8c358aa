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

import functools
import string
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import markupsafe
from markupsafe import Markup, escape

__all__ = ["Markup", "html", "raw"]

#: MarkupSafe's own escape of a plain string (its C one), without a ``Markup`` around it.
_escape_text: Callable[[str], str] = getattr(markupsafe, "_escape_inner", None) or (lambda text: str(escape(text)))


def html(template: str, /, *args: Any, **values: Any) -> Markup:
    """``template`` (HTML you wrote) with ``{name}`` / ``{0}`` fields filled by escaped values."""
    if not isinstance(template, str):
        raise TypeError(f"html() takes the template as a str, not {type(template).__name__}")
    pieces = _fields_of(template)
    if pieces is None:  # a field with an attribute, an item, a conversion or a format spec
        return Markup(template).format(*map(_piece, args), **{k: _piece(v) for k, v in values.items()})
    out: list[str] = []
    for literal, field in pieces:
        if literal:
            out.append(literal)
        if field is not None:
            out.append(_field_text(args[field] if isinstance(field, int) else values[field]))
    return Markup("".join(out))


@functools.lru_cache(maxsize=1024)
def _fields_of(template: str) -> tuple[tuple[str, int | str | None], ...] | None:
    """``template`` as (text, field) pairs, a field being an argument's index or name (None after
    the last text); None when a field needs ``Markup.format`` itself. A view's templates are the
    same few strings at every render: read once, not by ``string.Formatter`` at each call."""
    pieces: list[tuple[str, int | str | None]] = []
    automatic = numbered = 0
    for text, name, spec, conversion in string.Formatter().parse(template):
        if name is None:
            pieces.append((text, None))
            continue
        if spec or conversion:
            return None
        field: int | str
        if name == "":
            field = automatic
            automatic += 1
        elif name.isascii() and name.isdigit():
            field = int(name)
            numbered += 1
        elif name.isidentifier():
            field = name
        else:
            return None
        pieces.append((text, field))
    if automatic and numbered:
        return None  # Markup.format says why that is refused
    return tuple(pieces)


def _field_text(value: Any) -> str:
    """What ``Markup.format`` writes for ``value`` in a field without a format spec."""
    if type(value) is str:
        return _escape_text(value)
    value = _piece(value)
    if hasattr(value, "__html_format__"):
        text = value.__html_format__("")
    elif hasattr(value, "__html__"):
        text = value.__html__()
    else:
        text = format(value, "")
    return _escape_text(text) if type(text) is str else str(escape(text))


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
