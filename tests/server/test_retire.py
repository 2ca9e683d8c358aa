"""A worker's stop in a reload (``StopPlan``): state saved first, then the streams ended spread out."""

from __future__ import annotations

import sqlite3
import threading
import time
from contextlib import closing
from pathlib import Path

from pyvia import App, Context
from pyvia.server.runner import StopPlan
from tests.helpers import RawClient, ServerThread
from tests.server.test_app_over_http import open_page, open_stream


def test_a_retiring_server_saves_then_ends_its_streams_spread_over_the_window(tmp_path: Path) -> None:
    state = tmp_path / "state.db"
    app = App(persist_path=str(state))

    @app.page("/")
    def page(c: Context) -> None:
        hits = c.signal(0, "hits", scope="global")
        hits.increment()
        c.view(lambda: f"<p>{hits.value}</p>")

    saved_at: list[float] = []
    saved_rows: list[int] = []

    def saved() -> None:
        saved_at.append(time.monotonic())
        with closing(sqlite3.connect(state)) as db:  # written before the call: a new worker may read it now
            saved_rows.append(db.execute("SELECT count(*) FROM state WHERE kind != 'tab'").fetchone()[0])
            saved_rows.append(db.execute("SELECT count(*) FROM state WHERE kind = 'tab'").fetchone()[0])

    server = ServerThread(app, plan=StopPlan(spread=1.0, saved=saved), graceful_timeout=3.0)
    host, port = server.start()
    ends: list[float] = []
    readers = []
    for _ in range(8):
        _, seed, cookie = open_page(host, port)
        stream, head = open_stream(host, port, {"via_ctx": seed["via_ctx"]}, cookie)
        assert head.status == 200
        stream.read_chunk()

        def read_to_end(stream: RawClient = stream) -> None:
            with stream:
                while stream.read_chunk():
                    pass
                ends.append(time.monotonic())

        readers.append(threading.Thread(target=read_to_end))
        readers[-1].start()
    server.stop()
    for reader in readers:
        reader.join(5)
    assert len(ends) == 8 and len(saved_at) == 1
    assert saved_rows == [1, 8]  # the global signal and what revives each tab, in the file when saved() ran
    assert min(ends) >= saved_at[0]  # no stream ended before the state was saved
    assert max(ends) - min(ends) > 0.5  # spread over the second, in batches, not at once
