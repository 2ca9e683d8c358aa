"""The multi-user examples through pyvia.testing."""

from __future__ import annotations

import importlib
import importlib.util
import re
from pathlib import Path
from types import ModuleType

import pytest

from pyvia import protocol
from pyvia.testing import Tab, TestClient


def fresh_copy(name: str) -> ModuleType:
    """Another copy of the example module, with its own App (so its own database and rooms)."""
    path = Path(__file__).resolve().parents[2] / "examples" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"fresh_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_shared_counter_click_reaches_every_tab() -> None:
    module = importlib.import_module("examples.shared_counter")
    with TestClient(module.app) as client:
        a, b = client.open("/"), client.open("/")
        a.click("#inc")
        a.click("#inc")
        client.clock.advance(0.05)
        assert 'id="count">2</strong>' in b.html
        b.click("#reset")
        client.clock.advance(0.05)
        assert 'id="count">0</strong>' in a.html


def test_game_of_life_advances_while_watched_and_cells_toggle_for_everyone() -> None:
    module = importlib.import_module("examples.game_of_life")
    app = module.app
    app.global_state["board"] = module.new_board(seed=7)
    with TestClient(app) as client:
        before = list(app.global_state["board"])
        client.clock.advance(1)
        assert app.global_state["board"] == before  # nobody watches: no generations
        assert module.generation.value == 0
        a, b = client.open("/"), client.open("/")
        assert a.html.count("<div") >= 2500
        client.clock.advance(0.5)
        generations = module.generation.value
        assert generations >= 2
        expected = before
        for _ in range(generations):
            expected = module.step(expected)
        assert app.global_state["board"] == expected
        assert b.signals["_route__generation"] == generations
        cell = 0
        was = app.global_state["board"][cell]
        a.post("/_action/toggle?cell=0")
        assert app.global_state["board"][cell] is (not was)
        app.flush_broadcasts()
        first_cell = b.html.split('<div id="board"', 1)[1].split(">", 1)[1][:30]
        assert first_cell.startswith('<div class="on">' if not was else "<div></div>")


def test_glider_moves() -> None:
    module = importlib.import_module("examples.game_of_life")
    size = module.SIZE
    board = [False] * (size * size)
    for x, y in [(1, 0), (2, 1), (0, 2), (1, 2), (2, 2)]:
        board[y * size + x] = True
    for _ in range(4):
        board = module.step(board)
    alive = {(i % size, i // size) for i, v in enumerate(board) if v}
    assert alive == {(x + 1, y + 1) for x, y in [(1, 0), (2, 1), (0, 2), (1, 2), (2, 2)]}


def listed(tab: Tab) -> list[str]:
    """The chat's messages as the browser lists them: the last full render of the view, then the
    messages appended to (or prepended before) ``#messages`` since."""
    items = re.findall(r'<li id="m-\d+">(.*?)</li>', tab.page.split('id="messages"', 1)[1].split("</ul>", 1)[0])
    for event in tab.events:
        if event.type != protocol.PATCH_ELEMENTS:
            continue
        if event.view is not None:
            listing = event.elements.split('id="messages"', 1)[1].split("</ul>")[0]
            items = re.findall(r'<li id="m-\d+">(.*?)</li>', listing)
        elif event.selector == "#messages" and event.mode == "append":
            items += re.findall(r'<li id="m-\d+">(.*?)</li>', event.elements)
        elif event.selector == "#messages" and event.mode == "prepend":
            items[:0] = re.findall(r'<li id="m-\d+">(.*?)</li>', event.elements)
    return items


def test_chat_rooms_session_names_presence_and_typing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYVIA_CHAT_DB", str(tmp_path / "chat.sqlite3"))
    module = fresh_copy("chat")
    app = module.app
    with TestClient(app) as ann_browser, TestClient(app) as bob_browser:
        ann = ann_browser.open("/chat/lobby")
        ann_other_tab = ann_browser.open("/chat/random")
        bob = bob_browser.open("/chat/lobby")
        elsewhere = bob_browser.open("/chat/random")
        ann.type("#name", "Ann")
        ann.submit("#name-form")
        ann_browser.clock.advance(0.05)
        assert ann_other_tab.signals["_session__username"] == "Ann"  # SESSION scope
        assert "_session__username" not in bob.signals or bob.signals["_session__username"] == ""
        assert "Ann" in bob.html.split('id="present"')[1].split("</p>")[0]
        bob.type("#name", "Bob")
        bob.submit("#name-form")
        bob.type("#draft", "hi")
        bob.click("#draft", event="input")
        ann_browser.clock.advance(0.05)
        assert "Bob typing" in ann.html
        bob.submit("#send-form")
        ann_browser.clock.advance(0.05)
        assert listed(ann) == ["<b>Bob</b>: hi"] == listed(bob)
        assert "Bob typing" not in ann.html
        assert listed(elsewhere) == []  # another room
        bob.type("#draft", "again")
        bob.click("#draft", event="input")
        ann_browser.clock.advance(5)
        assert "typing" not in ann.html.split('id="typing"')[1].split("</p>")[0]
