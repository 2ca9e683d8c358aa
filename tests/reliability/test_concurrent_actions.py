"""Two posts of one tab in flight at once: each action runs on the values its own post carried.

A browser posts each click or Enter as soon as it happens: a user who types and sends quickly has
several actions of one tab on their way, and an ``async`` action awaits (a database write) while
the next one arrives. Over real sockets, against ``tests.reliability.async_send_app``: two threads
post 150 messages each to the same tab; every message must be stored exactly once, as it was
sent, and no action may see its value change while it runs.
"""

from __future__ import annotations

import json
import threading

from tests.helpers import RawClient
from tests.security.servers import server_process
from tests.server.test_app_over_http import open_page, open_stream, post_action

POSTS = 150


def test_each_action_of_a_tab_runs_on_its_own_posts_values() -> None:
    with server_process("tests.reliability.async_send_app:app") as server:
        host, port = server.address
        _, seed, cookie = open_page(host, port)
        stream, head = open_stream(host, port, {"via_ctx": seed["via_ctx"]}, cookie)
        assert head.status == 200
        failures: list[str] = []

        def poster(name: str) -> None:
            for i in range(POSTS):
                answer = post_action(host, port, "send", {"via_ctx": seed["via_ctx"], "draft": f"{name}#{i}"}, cookie)
                if answer.status != 200:
                    failures.append(f"{name}#{i}: {answer.status} {answer.body[:200]!r}")

        threads = [threading.Thread(target=poster, args=(name,)) for name in ("a", "b")]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        stream.close()
        with RawClient(host, port) as client:
            client.send(f"GET /said HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode())
            said = json.loads(client.read_response().body)
    assert failures == []
    sent = sorted(f"{name}#{i}" for name in ("a", "b") for i in range(POSTS))
    assert [s for s in said if s.startswith("changed")] == []
    lost, twice = len(set(sent) - set(said)), len(said) - len(set(said))
    assert sorted(said) == sent, f"{lost} messages lost, {twice} stored twice"
