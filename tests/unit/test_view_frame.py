"""Which views go without the page's wrapper: exactly one element with an id, and nothing the
tag count could misread (raw text, comments, elements the parser closes or moves)."""

from __future__ import annotations

import pytest

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
