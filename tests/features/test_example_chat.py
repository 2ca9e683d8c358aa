"""The chat example: its history in the database, new messages appended to every tab of the room,
and requests whose size does not depend on the history's."""

from __future__ import annotations

import html
import importlib.util
import re
import sqlite3
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from types import ModuleType

import orjson
import pytest

from pyvia import protocol
from pyvia.testing import Tab, TestClient

HOSTILE = [
    "try this: @post('/x')",
    "$x = 1; $via_ctx",
    "</script><script>alert(1)</script>",
    "quotes \" and ' and `back`",
    "line\u2028separator\u2029paragraph",
    "&amp; <b>bold</b> \\ backslash",
]


HOSTILE_NAME = "@post('/x') $x </script>"


@pytest.fixture
def database(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    path = tmp_path / "chat.sqlite3"
    monkeypatch.setenv("PYVIA_CHAT_DB", str(path))
    yield path


def load_chat() -> ModuleType:
    """A new copy of the example, as a new process would load it (its own App and rooms)."""
    path = Path(__file__).resolve().parents[2] / "examples" / "chat.py"
    spec = importlib.util.spec_from_file_location("fresh_chat", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def seed(path: Path, room: str, count: int, length: int = 500) -> None:
    """``count`` messages of ``length`` characters in ``room``, written before the server starts."""
    with closing(sqlite3.connect(path)) as conn, conn:
        conn.execute(
            "CREATE TABLE IF NOT EXISTS messages ("
            " id INTEGER PRIMARY KEY, room TEXT NOT NULL, who TEXT NOT NULL, body TEXT NOT NULL)"
        )
        conn.executemany(
            "INSERT INTO messages (room, who, body) VALUES (?, ?, ?)",
            ((room, f"user{i % 7}", f"{i:05d} " + "x" * (length - 6)) for i in range(count)),
        )


def stored(path: Path, room: str) -> list[tuple[str, str]]:
    with closing(sqlite3.connect(path)) as conn:
        return conn.execute("SELECT who, body FROM messages WHERE room = ? ORDER BY id", (room,)).fetchall()


def _items(markup: str) -> list[tuple[str, str]]:
    return re.findall(r'<li id="(m-\d+)">(.*?)</li>', markup, re.DOTALL)


def listed(tab: Tab) -> list[str]:
    """The messages as the browser lists them: the last full render of the view, then what was
    appended to, prepended before or removed from ``#messages`` since."""
    items = _items(tab.page.split('id="messages"', 1)[1].split("</ul>", 1)[0])
    for event in tab.events:
        if event.type != protocol.PATCH_ELEMENTS:
            continue
        if event.view is not None:
            items = _items(event.elements.split('id="messages"', 1)[1].split("</ul>", 1)[0])
        elif event.selector == "#messages" and event.mode == "append":
            items += _items(event.elements)
        elif event.selector == "#messages" and event.mode == "prepend":
            items[:0] = _items(event.elements)
        elif event.selector and event.selector.startswith("#m-") and event.mode == "remove":
            items = [item for item in items if item[0] != event.selector[1:]]
    return [text for _, text in items]


def action_body(tab: Tab) -> bytes:
    """The body the page posts with an action: what Datastar sends (every signal whose id does not
    start with ``_``: the writable ones, their revisions and via_ctx)."""
    return orjson.dumps({k: v for k, v in tab.signals.items() if not k.startswith("_")})


def join(client: TestClient, room: str, name: str) -> Tab:
    tab = client.open(f"/chat/{room}")
    tab.submit("#name-form", name=name)
    return tab


def say(tab: Tab, text: str) -> int:
    tab.type("#draft", text)
    return tab.click("#send-form", event="submit").status


def test_a_message_is_stored_and_appended_to_every_tab_of_the_room(database: Path) -> None:
    chat = load_chat()
    with TestClient(chat.app) as ann_browser, TestClient(chat.app) as bob_browser:
        ann, ann_again = join(ann_browser, "lobby", "Ann"), ann_browser.open("/chat/lobby")
        bob, elsewhere = join(bob_browser, "lobby", "Bob"), bob_browser.open("/chat/random")
        for tab in (ann, ann_again, bob, elsewhere):
            tab.new_events()
        assert say(ann, "  hello <all>  ") == 200
        assert stored(database, "lobby") == [("Ann", "hello <all>")]
        for tab in (ann, ann_again, bob):
            events = tab.new_events()
            assert not [e for e in events if e.signals and "draft" in e.signals]  # no keystroke undone
            (patch,) = [e for e in events if e.type == protocol.PATCH_ELEMENTS and e.selector == "#messages"]
            assert patch.mode == "append"
            assert [text for _, text in _items(patch.elements)] == ["<b>Ann</b>: hello &lt;all&gt;"]  # alone
            assert listed(tab) == ["<b>Ann</b>: hello &lt;all&gt;"]
        assert listed(elsewhere) == [] and not [e for e in elsewhere.new_events() if e.selector == "#messages"]
        assert ann.signals["draft"] == ""  # the click cleared the input in the browser, at once
        assert say(bob, "hi Ann") == 200
        assert listed(ann) == ["<b>Ann</b>: hello &lt;all&gt;", "<b>Bob</b>: hi Ann"] == listed(bob)


def test_nothing_is_sent_without_a_name_or_a_text(database: Path) -> None:
    chat = load_chat()
    with TestClient(chat.app) as client:
        anonymous = client.open("/chat/lobby")
        anonymous.new_events()
        assert say(anonymous, "who am I?") == 200
        given_back = [e.signals.get("draft") for e in anonymous.new_events() if e.signals]
        assert given_back == ["who am I?"]  # the click cleared the box: the server gives the line back
        named = join(client, "lobby", "Ann")  # the same browser: the name is the session's
        assert anonymous.signals["_hint"] == "Set your name first."
        assert anonymous.signals["draft"] == "who am I?"  # kept, to send once named
        assert say(named, "   ") == 200
        assert stored(database, "lobby") == []
        assert say(named, "x" * chat.MAX_TEXT) == 200
        assert say(named, "x" * (chat.MAX_TEXT + 1)) == 413  # past the input's maxlength: refused out loud
        assert stored(database, "lobby") == [("Ann", "x" * chat.MAX_TEXT)]
        (draft,) = named.find("#draft")
        assert draft.attrs["maxlength"] == str(chat.MAX_TEXT)


def test_a_new_visitor_of_a_long_history_gets_the_latest_messages(database: Path) -> None:
    seed(database, "lobby", 10_000)
    chat = load_chat()
    with TestClient(chat.app) as old_hand, TestClient(chat.app) as visitor:
        watching = old_hand.open("/chat/lobby")
        page = visitor.get("/chat/lobby")
        assert page.status == 200
        newcomer = visitor.open("/chat/lobby")
        assert newcomer.stream_status == 200 and newcomer.is_connected
        shown = listed(newcomer)
        assert len(shown) == chat.LATEST
        assert shown[0].startswith(f"<b>user{9900 % 7}</b>: 09900 ") and shown[-1].startswith("<b>user3</b>: 09999 ")
        assert len(page.body) < 2 * chat.LATEST * 500  # the page holds the latest messages, not the history
        assert "09899" not in newcomer.page
        newcomer.submit("#name-form", name="Newcomer")
        assert say(newcomer, "first post") == 200
        for tab in (watching, newcomer):
            assert listed(tab)[-1] == "<b>Newcomer</b>: first post"
        assert len(stored(database, "lobby")) == 10_001


def test_an_action_body_does_not_grow_with_the_history(database: Path) -> None:
    seed(database, "heavy", 10_000)
    chat = load_chat()
    with TestClient(chat.app) as client:
        short, long = join(client, "empty", "Ann"), join(client, "heavy", "Ann")  # names of one length
        for tab in (short, long):
            tab.type("#draft", "y" * chat.MAX_TEXT)  # the longest message a user can send
            body = action_body(tab)
            assert len(body) < 1024, body
            assert set(orjson.loads(body)) <= {protocol.CONTEXT_SIGNAL, protocol.REVISION_SIGNAL, "name", "draft"}
        assert len(action_body(short)) == len(action_body(long))
        assert say(long, "y" * chat.MAX_TEXT) == 200
        assert listed(long)[-1] == "<b>Ann</b>: " + "y" * chat.MAX_TEXT


def test_show_older_messages_prepends_the_hundred_before(database: Path) -> None:
    seed(database, "lobby", 250, length=20)
    chat = load_chat()
    with TestClient(chat.app) as client:
        tab = join(client, "lobby", "Ann")
        first = [int(text.split(": ")[1][:5]) for text in listed(tab)]
        assert first == list(range(150, 250))
        tab.click("#show-older")
        assert [int(text.split(": ")[1][:5]) for text in listed(tab)] == list(range(50, 250))
        tab.click("#show-older")
        numbers = [int(text.split(": ")[1][:5]) for text in listed(tab)]
        assert numbers == list(range(250))
        assert tab.find("#show-older") == []  # the start of the room: nothing older
        assert say(tab, "new") == 200
        tab.submit("#name-form", name="Ann B")  # re-renders the whole view: the older ones stay
        client.clock.advance(0.05)
        assert len(listed(tab)) == 251 and listed(tab)[-1] == "<b>Ann</b>: new"


def test_one_page_shows_at_most_max_shown_messages(database: Path) -> None:
    seed(database, "lobby", 1_500, length=10)
    chat = load_chat()
    with TestClient(chat.app) as client:
        tab = client.open("/chat/lobby")
        while tab.find("#show-older"):
            tab.click("#show-older")
        assert len(listed(tab)) == chat.MAX_SHOWN
        assert "The latest 1,000 messages are shown." in tab.html


def test_hostile_messages_and_names_show_as_text(database: Path) -> None:
    chat = load_chat()
    with TestClient(chat.app) as client:
        tab = join(client, "lobby", HOSTILE_NAME)
        for text in HOSTILE:
            assert say(tab, text) == 200
        assert [who for who, _ in stored(database, "lobby")] == [HOSTILE_NAME] * len(HOSTILE)
        assert [body for _, body in stored(database, "lobby")] == HOSTILE
        newcomer = client.open("/chat/lobby")  # a new page: the seed and the view hold them all
        assert newcomer.stream_status == 200
        assert newcomer.signals["_session__username"] == HOSTILE_NAME
        texts = [html.unescape(item.split("</b>: ", 1)[1]) for item in listed(newcomer)]
        assert texts == HOSTILE
        assert "<script>alert" not in newcomer.page and "</script><script>" not in newcomer.page
        assert say(newcomer, "still works") == 200


def test_pages_revive_after_a_restart(database: Path) -> None:
    chat = load_chat()
    with TestClient(chat.app) as client:
        tab = join(client, "lobby", "Ann")
        assert say(tab, "before the restart") == 200
        cookies = dict(client.cookies)
        tab.disconnect()
    restarted = load_chat()  # a new process: no tabs, no rooms in memory; the same database and secret
    with TestClient(restarted.app) as client:
        client.cookies.update(cookies)
        tab.client = client
        tab.events.clear()
        tab.reconnect()
        assert tab.stream_status == 200 and tab.context is not None
        assert listed(tab) == ["<b>Ann</b>: before the restart"]
        assert tab.signals["name"] == "Ann"  # what the user typed came back with the revival
        assert say(tab, "after it") == 200  # the session's name is gone with the old process
        assert tab.signals["_hint"] == "Set your name first." and tab.signals["draft"] == "after it"
        tab.submit("#name-form")
        assert say(tab, "after it") == 200
        assert stored(database, "lobby") == [("Ann", "before the restart"), ("Ann", "after it")]
        assert listed(tab)[-1] == "<b>Ann</b>: after it"


def test_a_tab_opened_before_its_stream_gets_what_was_said_meanwhile(database: Path) -> None:
    chat = load_chat()
    with TestClient(chat.app) as client:
        speaker = join(client, "lobby", "Ann")
        response = client.get("/chat/lobby")  # a page loaded, its stream not yet open
        late = Tab(client, "/chat/lobby", response)
        assert say(speaker, "while you were loading") == 200
        late.connect()
        assert listed(late) == ["<b>Ann</b>: while you were loading"]


def test_room_names_are_checked_and_rooms_leave_memory_with_their_last_tab(database: Path) -> None:
    chat = load_chat()
    with TestClient(chat.app) as client:
        bad = client.get("/chat/" + "x" * 31)
        assert bad.status == 200 and "A room name is" in bad.body.decode()
        assert "A room name is" in client.get("/chat/%01").body.decode()  # a control character
        for name, shown in (("Not%20A%20Room", "Not A Room"), ("caf%C3%A9", "café"), ("a%3Ab", "a:b")):
            room = client.open(f"/chat/{name}")  # any other name is a room of its own (Scope.custom)
            assert f"<h1>#{shown}</h1>" in room.html and shown in chat.rooms
        tab = join(client, "lobby", "Ann")
        assert "lobby" in chat.rooms
        tab.expire()
        assert "lobby" not in chat.rooms
        assert join(client, "lobby", "Ann").find("#show-older") == []


def test_older_messages_join_the_latest_without_a_gap_or_a_repeat(database: Path) -> None:
    seed(database, "lobby", 300, length=20)
    chat = load_chat()
    with TestClient(chat.app) as client:
        tab = join(client, "lobby", "Ann")
        for text in ("new 1", "new 2", "new 3"):  # the room keeps the latest 100: three fall off
            assert say(tab, text) == 200
        tab.click("#show-older")
        numbers = [int(item.split(": ")[1][:5]) for item in listed(tab) if "new" not in item]
        assert numbers == list(range(100, 300))  # each once, in order
        assert listed(tab)[-3:] == ["<b>Ann</b>: new 1", "<b>Ann</b>: new 2", "<b>Ann</b>: new 3"]
        tab.submit("#name-form", name="Ann")  # a whole render lists the same
        client.clock.advance(0.05)
        assert len(listed(tab)) == 203 and len(set(listed(tab))) == 203


def test_a_page_open_for_long_keeps_at_most_max_shown_messages(database: Path) -> None:
    seed(database, "lobby", 200, length=10)
    chat = load_chat()
    chat.MAX_SHOWN = 300  # the rule, not the example's 1,000: the test tab's patching of its page grows as n²
    with TestClient(chat.app) as client:
        tab = join(client, "lobby", "Ann")
        watcher = client.open("/chat/lobby")
        for i in range(chat.MAX_SHOWN + 10):
            assert say(tab, f"m{i}") == 200
        for page in (tab, watcher):
            shown = listed(page)
            assert len(shown) == chat.MAX_SHOWN  # the oldest were removed as new ones came
            assert shown[0] == "<b>Ann</b>: m10" and shown[-1] == f"<b>Ann</b>: m{chat.MAX_SHOWN + 9}"
        watcher.submit("#name-form", name="Bob")  # a whole render lists the same
        client.clock.advance(0.05)
        assert len(listed(watcher)) == chat.MAX_SHOWN and listed(watcher)[0] == "<b>Ann</b>: m10"
