"""With ``persist_in_db`` and one process, global state, shared signals and session data survive a
graceful restart in the database (issue 8: "persistent global state is backed by it")."""

from __future__ import annotations

from pyvia import App, Context
from pyvia.testing import TestClient
from tests.db.conftest import Backend, run


def make_app(url: str) -> App:
    app = App(db_url=url, persist_in_db=True)

    @app.page("/")
    def page(c: Context) -> None:
        hits = c.signal(0, "hits", scope="global")
        room = c.signal([], "said", scope="room:lobby")

        @c.action
        def hit() -> None:
            hits.increment()
            room.mutate(lambda said: [*said, len(said)])
            app.global_state.increment("visits")
            c.session_data["seen"] = hits.value

        c.add_scope("room:lobby")
        c.view(lambda: f"<p>{hits.value}</p>")

    return app


def test_shared_state_comes_back_from_the_database_after_a_graceful_restart(backend: Backend) -> None:
    first = make_app(backend.url)
    assert first.persists_in_db
    with TestClient(first) as client:
        tab = client.open("/")
        for _ in range(3):
            tab.action("hit")
        session_id = tab.context.session_id
    restarted = make_app(backend.url)
    with TestClient(restarted) as client:
        signals = client.open("/").signals
        assert signals["_global__hits"] == 3 and signals["_room_lobby__said"] == [0, 1, 2]
        assert restarted.global_state["visits"] == 3
        assert restarted.session_data(session_id)["seen"] == 3

    async def rows(condition: str) -> int:
        db = backend.database()
        try:
            return int(await db.fetchval(f"SELECT count(*) FROM pyvia_state WHERE {condition}"))
        finally:
            await db.close()

    assert run(rows("kind != 'tab'")) == 4  # visits, two shared signals, one session
    assert run(rows("kind = 'tab'")) == 2  # what revives the tab of each run


def test_persist_in_db_needs_a_database_and_excludes_persist_path(backend: Backend, tmp_path) -> None:
    import pytest

    from pyvia import ConfigError

    assert not App(db_url=backend.url).persists_in_db  # opt-in: no table appears in a user's database
    with pytest.raises(ConfigError, match="choose one"):
        App(db_url=backend.url, persist_in_db=True, persist_path=str(tmp_path / "state.db"))
    with pytest.raises(ConfigError, match="give \\[db\\] url"):
        App(persist_in_db=True)
