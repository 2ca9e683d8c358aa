"""pyvia.html: values are escaped for text and attributes; markup goes in as it is; raw() is explicit."""

from __future__ import annotations

import html as stdlib_html

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from markupsafe import Markup

from pyvia import Action, Signal, html, raw
from pyvia.markup import html as html_function


def test_values_are_escaped_and_the_template_is_not() -> None:
    out = html('<p class="{cls}">{msg}</p>', msg="<script>alert(1)</script>", cls='x" onclick="evil()')
    assert out == ('<p class="x&#34; onclick=&#34;evil()">&lt;script&gt;alert(1)&lt;/script&gt;</p>')
    assert isinstance(out, Markup)


def test_positional_fields_are_escaped_too() -> None:
    assert html("<b>{0}</b><i>{1}</i>", "<", "&") == "<b>&lt;</b><i>&amp;</i>"


def test_markup_goes_in_as_it_is_and_nesting_does_not_escape_twice() -> None:
    item = html("<li>{}</li>", "a & b")
    assert html("<ul>{}</ul>", item) == "<ul><li>a &amp; b</li></ul>"
    assert html("<div>{}</div>", raw("<hr>")) == "<div><hr></div>"


def test_lists_and_generators_are_joined_with_each_item_escaped_unless_markup() -> None:
    names = ["<a>", "b"]
    assert html("<ul>{}</ul>", (html("<li>{}</li>", n) for n in names)) == "<ul><li>&lt;a&gt;</li><li>b</li></ul>"
    assert html("<p>{}</p>", ["<x>", raw("<br>")]) == "<p>&lt;x&gt;<br></p>"
    assert html("<p>{}</p>", []) == "<p></p>"


def test_signals_actions_and_bindings_are_markup_aware() -> None:
    draft = Signal("draft", "<typed>", writable=True)
    assert html("<input {}>", draft.bind()) == '<input data-bind="draft">'
    assert html("<p>{}</p>", draft) == "<p>&lt;typed&gt;</p>"


def test_an_action_goes_into_an_attribute_escaped_once() -> None:
    inc = Action("inc", lambda: None, "/_action/inc")
    out = html('<button data-on:click="{}">+</button>', inc)
    assert out == (
        '<button data-on:click="@post(&#39;/_action/inc&#39;, {requestCancellation: &#39;disabled&#39;, '
        "filterSignals: {exclude: $_via_filter}, headers: {&#39;via-click&#39;: Math.random()}, "
        'retryMaxCount: Infinity, retryMaxWait: 8000})">+</button>'
    )
    assert stdlib_html.unescape(str(out).split('"')[1]) == str(inc)


def test_numbers_and_none_render_as_text() -> None:
    assert html("{a} {b} {c}", a=3, b=1.5, c=None) == "3 1.5 None"


def test_a_template_that_is_not_a_str_is_refused() -> None:
    with pytest.raises(TypeError, match="takes the template as a str"):
        html_function(b"<p>")  # type: ignore[arg-type]  # the point of the test


@given(st.text())
def test_any_text_comes_back_as_itself_and_cannot_open_a_tag_or_end_an_attribute(value: str) -> None:
    out = html('<p title="{v}">{v}</p>', v=value)
    body = str(out)[len('<p title="') : -len("</p>")]
    attribute, _, text = body.partition('">')
    assert "<" not in text and '"' not in attribute and "'" not in attribute
    assert stdlib_html.unescape(text) == value == stdlib_html.unescape(attribute)


_VALUES = st.one_of(
    st.text(),
    st.integers(),
    st.floats(allow_nan=False),
    st.booleans(),
    st.none(),
    st.text().map(Markup),
    st.lists(st.one_of(st.text(), st.text().map(Markup)), max_size=3),
)
_TEMPLATE_TEXT = st.text(alphabet=st.characters(blacklist_characters="{}"), max_size=8)


@st.composite
def _templates(draw: st.DrawFn) -> tuple[str, list[object], dict[str, object]]:
    """A template with ``{}``, ``{0}`` or ``{name}`` fields (one style, as Python requires), literal
    braces and text, and the values its fields ask for."""
    style = draw(st.sampled_from(["auto", "numbered", "named"]))
    parts, args, values = [draw(_TEMPLATE_TEXT)], [], {}
    for _ in range(draw(st.integers(0, 4))):
        if style == "auto":
            parts.append("{}")
            args.append(draw(_VALUES))
        elif style == "numbered":
            index = draw(st.integers(0, len(args)))
            parts.append("{" + str(index) + "}")
            if index == len(args):
                args.append(draw(_VALUES))
        else:
            name = draw(st.sampled_from(["who", "text", "n"]))
            parts.append("{" + name + "}")
            values[name] = values.get(name, draw(_VALUES))
        parts.append(draw(st.sampled_from(["", "{{", "}}", "<b>", '" x="'])) + draw(_TEMPLATE_TEXT))
    return "".join(parts), args, values


@given(_templates())
@settings(max_examples=500, deadline=None)  # a loaded machine may pause one case
def test_html_writes_what_markupsafes_format_writes(case: tuple[str, list[object], dict[str, object]]) -> None:
    """``html()`` fills a template it has read once; what it writes is what Markup.format would."""
    from pyvia.markup import _piece

    template, args, values = case
    expected = Markup(template).format(*map(_piece, args), **{k: _piece(v) for k, v in values.items()})
    assert html(template, *args, **values) == expected


def test_fields_html_reads_itself_and_those_it_leaves_to_markupsafe() -> None:
    assert html("{0!r}", "<") == Markup("{0!r}").format("<")  # a conversion
    assert html("{0:>3}", "a") == "  a"  # a format spec
    assert html("{0[k]}", {"k": "<"}) == "&lt;"  # an item
    with pytest.raises(ValueError, match="manual field specification"):
        html("{} {0}", "a")
    with pytest.raises(IndexError):
        html("{} {}", "a")
    with pytest.raises(KeyError):
        html("{who}")
