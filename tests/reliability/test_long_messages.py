"""A long message posted by many tabs is not kept once its action is answered.

A tab keeps its latest request (``c.request``, ``c.cookies``) until its next one; that request
held the action's body and its parsed signals, so every tab that once sent a long message kept
it twice in memory for as long as it stayed open (200 tabs sending 400 KB: 230 MiB of RSS, measured). Over real
sockets, against ``tests.reliability.message_app``: 200 tabs with open streams each send one
message of 400 KB, every one is applied, and the server's RSS afterwards is back within 40 MB of
what it was before (the messages alone are 80 MB; freed, they go back to the OS, being large).
"""

from __future__ import annotations

from pathlib import Path

from tests.security.servers import server_process
from tests.server.test_app_over_http import open_page, open_stream, patch_of, post_action

TABS = 200
MESSAGE = 400_000
BOUND = 40 << 20


def rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def test_tabs_that_sent_a_long_message_do_not_keep_it() -> None:
    with server_process("tests.reliability.message_app:app") as server:
        host, port = server.address
        tabs = []
        for _ in range(TABS):
            _, seed, cookie = open_page(host, port)
            stream, head = open_stream(host, port, {"via_ctx": seed["via_ctx"]}, cookie)
            assert head.status == 200
            stream.read_chunk()  # the opening frame
            tabs.append((seed["via_ctx"], cookie, stream))
        before = rss(server.proc.pid)
        try:
            for i, (ctx, cookie, stream) in enumerate(tabs):
                text = chr(ord("a") + i % 26) * MESSAGE + "\u2028</script>$x @post('/')"
                answer = post_action(host, port, "send", {"via_ctx": ctx, "draft": text}, cookie)
                assert answer.status == 200, answer.body
                patch = patch_of(stream.read_chunk())
                assert (patch["draft"], patch["_received"]) == ("", len(text))
            after = rss(server.proc.pid)
        finally:
            for _, _, stream in tabs:
                stream.close()
    grown = after - before
    print(f"RSS {before >> 20} MiB before, +{grown / (1 << 20):.1f} MiB after {TABS} messages")
    assert grown < BOUND, f"RSS grew by {grown >> 20} MiB after {TABS} messages of {MESSAGE // 1000} KB"
