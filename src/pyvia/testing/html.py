"""Finding elements in markup by a simple CSS selector, for a test's queries and a tab's clicks.

Separate from the tab because it works on any markup (a page, a fragment an event carried),
and because the test client needs no full DOM: only start tags and their attributes.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser

__all__ = ["Element", "select"]


class Element:
    """A start tag found in markup: its name and attributes (no children: queries need none)."""

    __slots__ = ("attrs", "tag")

    def __init__(self, tag: str, attrs: dict[str, str]) -> None:
        self.tag = tag
        self.attrs = attrs

    def __repr__(self) -> str:
        return f"<{self.tag} {self.attrs}>"


class _Collector(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.elements: list[Element] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements.append(Element(tag, {k: v or "" for k, v in attrs}))


_SIMPLE = re.compile(r"([a-zA-Z][\w-]*)?((?:[#.][\w-]+|\[[^\]]+\])*)\Z")
_PART = re.compile(r"#([\w-]+)|\.([\w-]+)|\[([^\]=]+)(?:=['\"]?([^\]'\"]*)['\"]?)?\]")


def select(markup: str, selector: str) -> list[Element]:
    """Elements of ``markup`` matching a simple selector: ``tag``, ``#id``, ``.cls``, ``[a=b]`` combined."""
    m = _SIMPLE.match(selector.strip())
    if not m:
        raise ValueError(
            f"unsupported selector {selector!r}: use a tag, #id, .class and [attr=value] together, without"
            " spaces (there are no descendant selectors: give the element an id or an attribute of its own)"
        )
    tag, rest = m.group(1), m.group(2)
    collector = _Collector()
    collector.feed(markup)
    found = []
    for el in collector.elements:
        if tag and el.tag != tag.lower():
            continue
        if all(_part_matches(el, *pm.groups()) for pm in _PART.finditer(rest)):
            found.append(el)
    return found


def _part_matches(el: Element, ident: str | None, cls: str | None, attr: str | None, value: str | None) -> bool:
    if ident is not None:
        return el.attrs.get("id") == ident
    if cls is not None:
        return cls in el.attrs.get("class", "").split()
    if attr is not None:
        return attr in el.attrs and (value is None or el.attrs[attr] == value)
    return True
