"""Chat rooms: the history in the app's database, each new message pushed to the room's tabs.

Open ``/chat/lobby`` in two browsers.

- **History on the server.** Every message is a row of the app's database (:mod:`pyvia.db`: a
  SQLite file by default, ``PYVIA_CHAT_DB`` names another file or a PostgreSQL URL). A page shows
  the room's latest 100 messages, and "Show older messages" brings the 100 before them, up to
  1,000 on one page. None of it is a signal: an action sends the context id and what the user
  typed, however long the room's history is.
- **Live.** A message sent is stored, then appended to the list of every tab of the room
  (``patch_elements(..., mode="append")``): one small patch, the history is never sent again.
  Who is here and who is typing are patched the same way, each tab its own line.
- **Names** live in the session: the name you pick is a SESSION-scoped signal, shared by every
  tab of your browser, and only the server writes it.

A room's latest messages and its tabs are kept in this process: run it as one worker (the
default of ``pyvia run``). A restarted server reads the history again and revives the pages;
the names, kept in the sessions of this process, are asked for again unless the app saves its
state (``App(persist_path=...)``, docs/deployment.md).
"""

from __future__ import annotations

import asyncio
import os
import tempfile
from collections import deque
from pathlib import Path

from pyvia import App, Context, Markup, Scope, html
from pyvia.db import Database

LATEST = 100  # messages a page opens with
OLDER = 100  # messages "Show older messages" brings
MAX_SHOWN = 1000  # messages one page shows at most
MAX_TEXT = 500  # characters of a message
MAX_NAME = 30  # characters of a name
MAX_ROOM = 30  # characters of a room's name
TYPING_SECONDS = 3.0


def database_url() -> str:
    return os.environ.get("PYVIA_CHAT_DB") or str(Path(tempfile.gettempdir()) / "pyvia-chat.sqlite3")


app = App(
    title="Chat",
    db_url=database_url(),
    head=[
        """<style>
  body { font-family: system-ui, sans-serif; margin: 2rem; max-width: 44rem; }
  #messages { list-style: none; padding: 0; max-height: 60vh; overflow-y: auto; }
  #messages li { padding: .15rem 0; overflow-wrap: anywhere; white-space: pre-wrap; }
  #typing { color: #666; min-height: 1.2em; }
  #draft { width: 30rem; max-width: 70%; }
</style>"""
    ],
)


@app.db.on_open
async def schema(db: Database) -> None:
    await db.execute(
        "CREATE TABLE IF NOT EXISTS messages ("
        " id INTEGER PRIMARY KEY, room TEXT NOT NULL, who TEXT NOT NULL, body TEXT NOT NULL)"
    )
    await db.execute("CREATE INDEX IF NOT EXISTS messages_by_room ON messages (room, id)")


class Message:
    """One message of a room, as stored."""

    __slots__ = ("id", "text", "who")

    def __init__(self, id: int, who: str, text: str) -> None:
        self.id, self.who, self.text = id, who, text

    def markup(self) -> Markup:
        return html('<li id="m-{id}"><b>{who}</b>: {text}</li>', id=self.id, who=self.who, text=self.text)


class Viewer:
    """What one tab shows of its room: the older messages it asked for, then the live ones."""

    __slots__ = ("ctx", "last", "older", "since")

    def __init__(self, ctx: Context, since: int) -> None:
        self.ctx = ctx
        self.older: list[Message] = []  # shown before the live part, oldest first
        self.since = since  # the live part: the room's latest messages from this id on
        self.last = 0  # the newest message this tab was sent

    @property
    def name(self) -> str:
        return str(self.ctx.session_data.get("name", ""))


class Room:
    """A room's latest messages (the database holds them all), its tabs and who is typing."""

    __slots__ = ("lock", "name", "oldest", "recent", "typing", "viewers")

    def __init__(self, name: str, recent: list[Message], oldest: int) -> None:
        self.name = name
        self.recent: deque[Message] = deque(recent, maxlen=LATEST)
        self.oldest = oldest  # the id of the room's first message (0: none yet)
        self.viewers: dict[str, Viewer] = {}  # by context id
        self.typing: dict[str, float] = {}  # name -> when they last typed
        self.lock = asyncio.Lock()  # one message stored and sent at a time, so ids arrive in order

    def add(self, message: Message) -> None:
        """Keep ``message`` among the latest. The one that falls off the front is still listed by
        the pages that show it: they keep it among their older ones."""
        if len(self.recent) == LATEST:
            dropped = self.recent[0]
            for viewer in self.viewers.values():
                if viewer.since <= dropped.id:
                    viewer.older.append(dropped)
                    viewer.since = dropped.id + 1
                    if len(viewer.older) > MAX_SHOWN - LATEST:  # the page keeps at most MAX_SHOWN
                        oldest = viewer.older.pop(0)
                        viewer.ctx.patch_elements("", f"#m-{oldest.id}", "remove")
        self.recent.append(message)
        self.oldest = self.oldest or message.id

    def shown(self, viewer: Viewer) -> list[Message]:
        """The messages ``viewer``'s page lists: its older ones, then the live ones, without a gap."""
        recent = self.recent
        if viewer.older and recent and recent[0].id > viewer.since:
            viewer.older = []  # the live part moved past them: start again from the latest
        live = [m for m in recent if m.id >= viewer.since]
        return [*viewer.older, *live]

    def connected(self) -> list[Viewer]:
        return [v for v in self.viewers.values() if v.ctx.is_connected]


rooms: dict[str, Room] = {}


@app.on_start
def forget_rooms() -> None:
    rooms.clear()  # a new start reads the history from the database again


async def room_of(name: str) -> Room:
    """The room, its latest messages read from the database the first time a tab opens it."""
    room = rooms.get(name)
    if room is not None:
        return room
    rows = await app.db.fetch(
        "SELECT id, who, body FROM messages WHERE room = $1 ORDER BY id DESC LIMIT $2", name, LATEST
    )
    oldest = await app.db.fetchval("SELECT min(id) FROM messages WHERE room = $1", name)
    recent = [Message(row["id"], row["who"], row["body"]) for row in reversed(rows)]
    return rooms.setdefault(name, Room(name, recent, oldest or 0))  # another tab may have loaded it meanwhile


def catch_up(room: Room, viewer: Viewer) -> None:
    """Append to ``viewer``'s list the messages it has not been sent yet."""
    missing = [m for m in room.recent if m.id > viewer.last]
    if not missing:
        return
    if len(room.recent) == LATEST and missing[0] is room.recent[0]:
        viewer.ctx.sync()  # more than the room keeps at hand: the whole list again
        return
    viewer.last = missing[-1].id
    viewer.ctx.patch_elements(html("{}", (m.markup() for m in missing)), "#messages", "append")


def present_line(room: Room) -> Markup:
    names = sorted({v.name or "(anonymous)" for v in room.connected()})
    return html('<p id="present">Here: {}</p>', ", ".join(names))


def typing_line(room: Room, me: str) -> Markup:
    typists = [who for who in room.typing if who != me]
    return html('<p id="typing">{}</p>', ", ".join(typists) + " typing…" if typists else "")


def show_presence(room: Room) -> None:
    line = present_line(room)
    for viewer in room.connected():
        viewer.ctx.patch_elements(line)


def show_typing(room: Room) -> None:
    for viewer in room.connected():
        viewer.ctx.patch_elements(typing_line(room, viewer.name))


def expire_typing() -> None:
    """Forget typists who stopped typing (one app timer for every room)."""
    now = app.now()
    for room in rooms.values():
        fresh = {who: at for who, at in room.typing.items() if now - at < TYPING_SECONDS}
        if len(fresh) != len(room.typing):
            room.typing = fresh
            show_typing(room)


app.set_interval(expire_typing, 1.0)


def room_scope(room: str) -> str:
    """The room's scope: any name a URL can carry (``my-room``, ``a b``, ``café``, ``a:b``) is its
    own scope, escaped by ``Scope.custom``, so two rooms never share one."""
    return Scope.custom("room", room)


@app.page("/chat/{name}")
async def chat(c: Context, name: str) -> None:
    if not 0 < len(name) <= MAX_ROOM or not name.isprintable():
        c.view(
            lambda: html(
                '<p id="problem">A room name is 1 to {} characters, none of them a control character. '
                '<a href="{}">The rooms</a></p>',
                MAX_ROOM,
                app.url("/"),
            )
        )
        return
    c.scope(room_scope(name))  # app.count_clients(room_scope(name)) counts the room's tabs
    room = await room_of(name)
    viewer = room.viewers[c.id] = Viewer(c, room.recent[0].id if room.recent else 0)
    username = c.signal(c.session_data.get("name", ""), "username", scope=Scope.SESSION)
    name_field = c.signal(c.session_data.get("name", ""), "name", writable=True, max_length=MAX_NAME)
    draft = c.signal("", "draft", writable=True, max_length=MAX_TEXT)
    hint = c.signal("", "hint")  # why a message was not sent

    @c.on_cleanup
    def leave() -> None:
        if room.viewers.get(c.id) is viewer:
            del room.viewers[c.id]
        if not room.viewers:
            rooms.pop(room.name, None)  # the database keeps it; nothing else needs it in memory
        show_presence(room)

    @c.on_connect
    def connected() -> None:
        # A tab revived by two requests at once (its stream and an action) runs this handler
        # twice; the context that connects is the one that serves it.
        room.viewers[c.id] = viewer
        catch_up(room, viewer)  # what was said between the page and its stream
        show_presence(room)

    c.on_disconnect(lambda: show_presence(room))

    @c.action
    def set_name() -> None:
        chosen = name_field.as_str().strip()
        if chosen:
            c.session_data["name"] = username.value = chosen
            hint.value = ""
            for open_room in rooms.values():  # every room this browser is in shows the new name
                show_presence(open_room)

    @c.action
    async def send() -> None:
        text, who = draft.as_str().strip(), username.as_str()
        hint.value = "" if who or not text else "Set your name first."
        if not text or not who:
            if text:  # the click cleared the box in the browser: give the line back with the hint
                draft.value = draft.as_str()
            return
        async with room.lock:
            new_id = await app.db.fetchval(
                "INSERT INTO messages (room, who, body) VALUES ($1, $2, $3) RETURNING id", room.name, who, text
            )
            room.add(Message(new_id, who, text))
            for other in room.connected():
                catch_up(room, other)
        if room.typing.pop(who, None) is not None:
            show_typing(room)

    @c.action
    def is_typing() -> None:
        who = username.as_str()
        if who:
            known = who in room.typing
            room.typing[who] = app.now()
            if not known:
                show_typing(room)

    @c.action
    async def older() -> None:
        shown = room.shown(viewer)
        if not shown or len(shown) >= MAX_SHOWN:
            return
        if not viewer.older:
            viewer.since = shown[0].id  # pin the live part where the older ones end
        rows = await app.db.fetch(
            "SELECT id, who, body FROM messages WHERE room = $1 AND id < $2 ORDER BY id DESC LIMIT $3",
            room.name,
            shown[0].id,
            min(OLDER, MAX_SHOWN - len(shown)),
        )
        earlier = [Message(row["id"], row["who"], row["body"]) for row in reversed(rows)]
        viewer.older = [*earlier, *viewer.older]
        if earlier:
            c.patch_elements(html("{}", (m.markup() for m in earlier)), "#messages", "prepend")
        c.patch_elements(older_line(room.shown(viewer)))

    def older_line(shown: list[Message]) -> Markup:
        if not shown or shown[0].id <= room.oldest:
            return html('<p id="older"></p>')
        if len(shown) >= MAX_SHOWN:
            return html('<p id="older">The latest {:,} messages are shown.</p>', len(shown))
        return html('<p id="older"><button id="show-older" data-on:click="{}">Show older messages</button></p>', older)

    def view() -> Markup:
        shown = room.shown(viewer)
        viewer.last = max(viewer.last, shown[-1].id if shown else 0)
        return html(
            """
<main id="chat">
  <h1>#{name}</h1>
  <p id="offline" data-show="$_disconnected" style="display: none">Reconnecting…</p>
  <form id="name-form" data-on:submit__prevent="{set_name}">
    <input id="name" placeholder="Your name" maxlength="{max_name}" autocomplete="off" {name_field}>
    <button>Set name</button>
    <span id="me" data-text="{username_ref}">{username}</span>
  </form>
  {present}
  {older}
  <ul id="messages">{messages}</ul>
  {typing}
  <form id="send-form" data-on:submit__prevent="{send}; {draft_ref} = ''">
    <input id="draft" autocomplete="off" maxlength="{max_text}" {draft}
           data-on:input__debounce.300ms="{is_typing}">
    <button>Send</button>
  </form>
  <p id="hint" data-text="{hint_ref}">{hint}</p>
</main>""",
            name=name,
            set_name=set_name,
            max_name=MAX_NAME,
            name_field=name_field.bind(),
            username_ref=username.ref(),
            username=username.as_str(),
            present=present_line(room),
            older=older_line(shown),
            messages=(m.markup() for m in shown),
            typing=typing_line(room, username.as_str()),
            send=send,
            max_text=MAX_TEXT,
            draft=draft.bind(),
            draft_ref=draft.ref(),
            is_typing=is_typing,
            hint_ref=hint.ref(),
            hint=hint.as_str(),
        )

    c.view(view)


@app.page("/")
def index(c: Context) -> None:
    links = html(", ").join(html('<a href="{}">{}</a>', app.url(f"/chat/{name}"), name) for name in ("lobby", "random"))
    c.view(lambda: html("<p>Rooms: {}</p>", links))


if __name__ == "__main__":
    app.run(host="127.0.0.1", port=3000)
