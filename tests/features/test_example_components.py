"""The components example: namespaced ids, and an action patches only its own component."""

from __future__ import annotations

import re

from examples.components import app

from pyvia import protocol
from pyvia.testing import Tab, TestClient


def renders(tab: Tab, name: str) -> int:
    found = re.search(rf'id="{name}-renders">renders: (\d+)', tab.html)
    assert found, f"no render count for {name}"
    return int(found.group(1))


def test_components_namespace_their_signals_and_actions() -> None:
    with TestClient(app) as client:
        tab = client.open("/")
        for sid in ("_apples__n", "_pears__n", "_notes__items", "notes__draft"):  # only the draft is writable
            assert sid in tab.signals
        assert 'data-on:click="@post(&#39;/_action/apples__inc&#39;' in tab.html
        assert '<div id="c-apples">' in tab.html and '<div id="c-notes">' in tab.html
        assert 'data-text="$_apples__n + $_pears__n"' in tab.html


def test_a_counter_action_patches_only_its_own_element() -> None:
    with TestClient(app) as client:
        tab = client.open("/")
        tab.new_events()
        tab.click("#apples-inc")
        tab.click("#apples-inc")
        events = tab.new_events()
        patches = [e for e in events if e.type == protocol.PATCH_ELEMENTS]
        assert len(patches) == 2
        for patch in patches:
            assert patch.selector is None and patch.mode == "outer"
            assert patch.elements.startswith('<div id="c-apples">')
            assert "c-pears" not in patch.elements and "c-notes" not in patch.elements
        assert tab.signals["_apples__n"] == 2 and tab.signals["_pears__n"] == 0
        assert 'id="apples-value">2<' in tab.html and 'id="pears-value">0<' in tab.html
        assert renders(tab, "apples") == 3
        assert renders(tab, "pears") == 1 and renders(tab, "notes") == 1
        tab.click("#pears-dec")  # never below zero
        assert tab.signals["_pears__n"] == 0
        tab.click("#apples-dec")
        assert tab.signals["_apples__n"] == 1


def test_the_same_setup_serves_two_independent_counters() -> None:
    with TestClient(app) as client:
        tab = client.open("/")
        tab.click("#pears-inc")
        assert (tab.signals["_apples__n"], tab.signals["_pears__n"]) == (0, 1)
        other = client.open("/")  # another tab: its own components
        assert other.signals["_pears__n"] == 0


def test_notes_add_escape_and_remove() -> None:
    with TestClient(app) as client:
        tab = client.open("/")
        tab.new_events()
        tab.submit("#notes-form", **{"notes-draft": "<b>milk</b>"})
        tab.type("#notes-draft", "   ")  # blank: ignored
        tab.submit("#notes-form")
        tab.submit("#notes-form", **{"notes-draft": "eggs"})
        assert tab.signals["_notes__items"] == ["<b>milk</b>", "eggs"]
        (form,) = tab.find("#notes-form")  # the click clears the input in the browser, not the server
        assert form.attrs["data-on:submit__prevent"].endswith("; $notes__draft = ''")
        assert '<li id="note-0">&lt;b&gt;milk&lt;/b&gt;' in tab.html
        patches = [e for e in tab.new_events() if e.type == protocol.PATCH_ELEMENTS]
        assert patches and all(p.elements.startswith('<div id="c-notes">') for p in patches)
        tab.click("#note-0-remove")
        assert tab.signals["_notes__items"] == ["eggs"]
        assert "milk" not in tab.html and '<li id="note-0">eggs' in tab.html
        tab.post("/_action/notes__remove?index=7")  # out of range: nothing happens
        tab.post("/_action/notes__remove?index=-1")
        assert tab.signals["_notes__items"] == ["eggs"]
        (draft,) = tab.find("#notes-draft")
        assert draft.attrs["maxlength"] == "80"
        assert tab.action("notes__add", notes__draft="x" * 81).status == 413  # past the input's limit
        assert tab.context is not None and tab.context.signals["notes__items"].value == ["eggs"]
        assert renders(tab, "apples") == 1


def test_notes_survive_revival_from_the_snapshot() -> None:
    with TestClient(app) as client:
        tab = client.open("/")
        tab.submit("#notes-form", **{"notes-draft": "keep me"})
        tab.click("#apples-inc")
        tab.revive()
        assert tab.context is not None
        assert "keep me" in tab.html and 'id="apples-value">1<' in tab.html


def test_render_all_re_renders_every_component() -> None:
    with TestClient(app) as client:
        tab = client.open("/")
        tab.click("#apples-inc")
        tab.new_events()
        tab.click("#render-all")
        (view,) = [e for e in tab.new_events() if e.type == protocol.PATCH_ELEMENTS]
        assert view.view is not None
        assert (renders(tab, "apples"), renders(tab, "pears"), renders(tab, "notes")) == (3, 2, 2)
        assert 'id="total" data-text="$_apples__n + $_pears__n">1<' in tab.html
