"""A view's patch event in the two forms a tab may need, and which one its page can take.

The page shell puts the view in ``<div id="via-view">``, and a re-render replaces that element
whole: right for any markup. Most views are one element with an id of their own (``<main
id="chat">``); Datastar morphs such an element by its id, so the event can carry it without the
wrapper (26 bytes fewer per tab and broadcast). That form is right only for a page whose view
already has a root with that id, which only the tab's stream knows (:class:`~pyvia.stream.Stream`
keeps the root it last wrote): the frame carries both forms and the stream picks.
"""

from __future__ import annotations

import logging
import re
from html.parser import HTMLParser

from pyvia.protocol import patch_elements
from pyvia.render import VIEW_ID, view_patch

__all__ = ["ViewFrame", "check_block", "first_element_without_id", "view_root"]

logger = logging.getLogger("pyvia")

#: Root elements whose content the HTML parser never moves out of them (a ``<p>`` is closed by a
#: ``<div>`` inside it, a ``<table>`` fosters stray content before itself, a ``<form>`` drops a
#: nested one): the markup's tree is the DOM's, so one element in the text is one in the page.
_ROOT_TAGS = frozenset(
    ("div", "main", "section", "article", "aside", "header", "footer", "nav", "ul", "ol", "figure", "span")
)
_START_TAG = re.compile(
    r"""<([a-zA-Z][a-zA-Z0-9]*)((?:\s+[^\s"'>/=]+(?:\s*=\s*(?:"[^"]*"|'[^']*'|[^\s"'=<>`]+))?)*)\s*>"""
)
_ATTRIBUTE = re.compile(r"""\s+([^\s"'>/=]+)(?:\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s"'=<>`]+)))?""")
#: Text the parser does not read as tags (a ``</div>`` there is not a close), or a comment:
#: counting tags cannot judge such markup, so it keeps the wrapper. Matched in lower case (a
#: case-blind pattern scans several times slower).
_RAW_TEXT = re.compile(
    r"<(?:script|style|textarea|title|template|noscript|xmp|iframe|noembed|noframes|plaintext)[\s/>]|<!--|<!\[cdata\["
)
_TAGS = {tag: re.compile(rf"<(/?){tag}[\s/>]") for tag in _ROOT_TAGS}
#: What an id taken as a view's root may not hold: a space (not one id) or ``&`` (not decoded here).
_NOT_IN_ID = re.compile(r"[ \t\n\r\f&]")


def view_root(markup: str) -> str | None:
    """The id of ``markup``'s root element if it is exactly one element with an id (whitespace
    around it aside), else None. Conservative: any doubt answers None, which costs 26 bytes."""
    text = markup.strip()
    start = _START_TAG.match(text)
    if start is None:
        return None
    tag = start.group(1).lower()
    if tag not in _ROOT_TAGS:
        return None
    root = None
    for attribute in _ATTRIBUTE.finditer(start.group(2)):
        if attribute.group(1).lower() == "id":
            root = attribute.group(2) or attribute.group(3) or attribute.group(4)
            break
    if not root or root == VIEW_ID or _NOT_IN_ID.search(root) is not None:
        return None
    close = f"</{tag}>"
    lower = text.lower()
    if not lower.endswith(close):
        return None
    inside = lower[start.end() : len(lower) - len(close)]
    if f"<{tag}" not in inside and f"</{tag}" not in inside:
        return root  # nothing inside names its tag: whatever else is there, its close is the last
    if _RAW_TEXT.search(inside) is not None:
        return None  # a "</div>" there may be text, not a close: the count cannot tell
    # One root: the tag's first close that balances its opens is the last one.
    depth = 1
    for found in _TAGS[tag].finditer(inside):
        depth += -1 if found.group(1) else 1
        if depth == 0:
            return None
    return root if depth == 1 else None


class ViewFrame:
    """One render of a view as a ``datastar-patch-elements`` event: ``wrapped`` (the page's view
    element whole: right for any page) and, when the view is one element with an id (``root``),
    ``bare`` (that element alone, morphed by its id). ``whole``: False for a part of the view (a
    component's element), which leaves the view's root as it was."""

    __slots__ = ("_bare", "root", "whole", "wrapped")

    def __init__(
        self, wrapped: bytes, root: str | None = None, bare: bytes | str | None = None, *, whole: bool = True
    ) -> None:
        self.wrapped = wrapped
        self.root = root
        #: The bare event, or the markup to make it from when a page first takes it.
        self._bare = bare if bare is not None else wrapped
        self.whole = whole

    @property
    def bare(self) -> bytes:
        bare = self._bare
        if isinstance(bare, str):  # made once, by the first tab whose page shows this root
            bare = self._bare = patch_elements(bare)
        return bare

    @classmethod
    def of_view(cls, markup: str) -> ViewFrame:
        """The frame that makes ``markup`` the page's view."""
        wrapped = view_patch(markup)
        root = view_root(markup)
        if root is None:
            return cls(wrapped)
        return cls(wrapped, root, markup.strip())

    def then(self, later: ViewFrame) -> ViewFrame:
        """This frame and ``later`` in one, as a tab waiting for both must get them: ``later`` alone
        when it is a whole view (it shows all this one did, newer), else both in order (a
        component's frame after the view it is part of, or after another component's)."""
        if later.whole:
            return later
        bare = self.bare + later.wrapped if self.root is not None else None
        return ViewFrame(self.wrapped + later.wrapped, self.root, bare, whole=self.whole)

    def for_page(self, shown_root: str | None) -> bytes:
        """The form for a page whose view's root is ``shown_root`` (None: not known to be one element)."""
        return self.bare if shown_root is not None and shown_root == self.root else self.wrapped

    def __len__(self) -> int:
        return len(self.wrapped)

    def __repr__(self) -> str:
        return f"ViewFrame(root={self.root!r}, {len(self.wrapped)} bytes wrapped, {len(self.bare)} bare)"


_VOID = frozenset(
    ("area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr")
)


class _TopLevel(HTMLParser):
    """Finds the first top-level element of a fragment that has no id."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.depth = 0
        self.found: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if self.depth == 0 and self.found is None and not dict(attrs).get("id"):
            self.found = tag
        if tag not in _VOID:
            self.depth += 1

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if self.depth == 0 and self.found is None and not dict(attrs).get("id"):
            self.found = tag

    def handle_endtag(self, tag: str) -> None:
        if tag not in _VOID and self.depth:
            self.depth -= 1


def first_element_without_id(fragment: str) -> str | None:
    """The tag of the first top-level element of ``fragment`` without an id, if any: Datastar
    morphs a fragment's top-level elements by their ids, and ignores one it cannot find."""
    parser = _TopLevel()
    parser.feed(str(fragment))
    parser.close()
    return parser.found


def check_block(page: str, block: str, fragment: str) -> None:
    """Warn once that a view block's update cannot reach the page (the docs' rule: one element,
    with an id), instead of letting that part of the page stay as it was without a word."""
    tag = first_element_without_id(fragment)
    if tag is not None:
        logger.warning(
            "page %s: the view block %r has a top-level <%s> without an id: Datastar finds what an update "
            "replaces by the ids of its top-level elements, so that part of the page is never updated "
            "(give it an id, or make the block one element with an id)",
            page,
            block,
            tag,
        )
