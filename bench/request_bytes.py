"""``python -m bench request_bytes``: the body one chat message post carries, as the room grows.

Drives ``examples/chat.py`` with ``pyvia.testing`` (in-process, no sockets): a tab sets a name,
posts N messages of 500 characters, then the size of the JSON body the page would post for the
next message is measured (what Datastar sends: every signal it does not filter out, the draft
included). A count of bytes, not a timing: the machine's load does not change it. It works on
any pyvia commit whose chat example has ``set_name`` and ``send`` actions and a ``draft`` input.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import tempfile
from pathlib import Path

import orjson


def body_size(messages: int, text_length: int = 500) -> int:
    from pyvia.testing import TestClient

    os.environ["PYVIA_CHAT_DB"] = str(Path(tempfile.mkdtemp()) / "chat.sqlite3")
    sys.modules.pop("examples.chat", None)
    chat = importlib.import_module("examples.chat")
    with TestClient(chat.app) as client:
        tab = client.open("/chat/lobby")
        name_id = "name" if "name" in tab.signals else next(k for k in tab.signals if k.endswith("name"))
        tab.action("set_name", **{name_id: "bench"})
        for i in range(messages):
            tab.action("send", draft=f"{i:05d} " + "x" * (text_length - 6))
            client.clock.advance(0.05)  # the room's broadcast goes out: the page holds what it was sent
        tab.signals["draft"] = "y" * text_length
        return len(orjson.dumps(tab._outgoing()))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench request_bytes", description=__doc__)
    parser.add_argument("--messages", default="0,20,50,200", help="room sizes, comma-separated")
    args = parser.parse_args(argv)
    print("messages in the room | bytes of the next message's post body")
    for n in (int(x) for x in args.messages.split(",")):
        print(f"{n:>20} | {body_size(n):,}")


if __name__ == "__main__":
    main()
