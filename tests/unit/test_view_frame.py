"""Which views go without the page's wrapper: exactly one element with an id, and nothing the
tag count could misread (raw text, comments, elements the parser closes or moves)."""

from __future__ import annotations

from html.parser import HTMLParser

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pyvia import protocol
from pyvia.render import view_patch
from pyvia.view_frame import ViewFrame, view_root


@pytest.mark.parametrize(
    ("markup", "root"),
    [
        ('<section id="board" data-n="1"><h2>V</h2><p>x</p></section>', "board"),
        ('\n  <main id="chat">\n    <div>a</div>\n  </main>\n', "chat"),
        ('<div id="a"><div><div></div></div></div>', "a"),
        ('<div id="a"><divider>x</divider></div>', "a"),
        ('<div data-show="$n > 1" id="q">y</div>', "q"),
        ("<div id=q>y</div>", "q"),
        ('<DIV ID="Q">y</DIV>', "Q"),
        ('<main id="a"></main><p>x</p>', None),  # two elements
        ('<div id="a"><div></div></div><div></div>', None),
        ('<div id="a">x</div>tail', None),  # text beside it
        ('text<div id="a">x</div>', None),
        ('<div class="x">y</div>', None),  # no id
        ("<div data-x=' id=\"q\" '>y</div>", None),  # an id in a value is not an attribute
        ('<div id="">x</div>', None),
        ('<div id="via-view">x</div>', None),
        ('<div id="a b">x</div>', None),
        ('<p id="a">x</p>', None),  # a <p> is closed by a block inside it
        ('<table id="a"><tr><td>x</td></tr></table>', None),  # content can be moved before it
        ('<div id="a"><script>"</div>"</script></div>', None),  # raw text: tags are not counted there
        ('<div id="a"><!-- </div> --></div>', None),
        ('<div id="a"><textarea></div></textarea></div>', None),
        ("", None),
        ("plain text", None),
    ],
)
def test_view_root(markup: str, root: str | None) -> None:
    assert view_root(markup) == root


def test_a_view_frame_has_both_forms() -> None:
    markup = '\n<main id="chat">\n  <p>hi</p>\n</main>\n'
    frame = ViewFrame.of_view(markup)
    assert frame.root == "chat"
    assert frame.wrapped == view_patch(markup)
    assert frame.bare == protocol.patch_elements(markup.strip())
    assert len(frame.bare) < len(frame.wrapped) - 26
    assert frame.for_page("chat") == frame.bare
    assert frame.for_page(None) == frame.wrapped
    assert frame.for_page("other") == frame.wrapped


def test_a_view_of_several_elements_has_one_form() -> None:
    frame = ViewFrame.of_view("<p>a</p><p>b</p>")
    assert frame.root is None
    assert frame.for_page("a") == frame.wrapped == view_patch("<p>a</p><p>b</p>")


class _Roots(HTMLParser):
    """The top-level elements of a fragment, and whether text stands beside them."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.depth = 0
        self.tops: list[tuple[str, str | None]] = []
        self.loose_text = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if self.depth == 0:
            self.tops.append((tag, dict(attrs).get("id")))
        self.depth += 1

    def handle_endtag(self, tag: str) -> None:
        self.depth -= 1

    def handle_data(self, data: str) -> None:
        if self.depth == 0 and data.strip():
            self.loose_text = True


_TAG = st.sampled_from(["div", "main", "section", "span", "DIV", "Main", "divider", "p"])
_LEAF = st.sampled_from(["x", " ", "\n", "&amp;", "<b>y</b>", "<br>"])


@st.composite
def _fragments(draw: st.DrawFn, depth: int = 0) -> str:
    parts = []
    for _ in range(draw(st.integers(1, 3 if depth else 2))):
        if depth < 3 and draw(st.booleans()):
            tag = draw(_TAG)
            ident = draw(st.sampled_from(["", ' id="a"', " id=b", ' class="c" id="d"']))
            inner = draw(_fragments(depth + 1))
            parts.append(f"<{tag}{ident}>{inner}</{tag}>")
        else:
            parts.append(draw(_LEAF))
    return "".join(parts)


@given(_fragments())
@settings(max_examples=500, deadline=None)
def test_a_root_is_found_only_where_the_html_parser_sees_one_element_with_that_id(fragment: str) -> None:
    root = view_root(fragment)
    if root is None:
        return  # keeping the wrapper is always right
    parser = _Roots()
    parser.feed(fragment)
    parser.close()
    assert not parser.loose_text and len(parser.tops) == 1, (fragment, parser.tops)
    assert parser.tops[0][1] == root
