"""``app.db``: configured like every other setting, opened at start, closed at stop, counted on
``/metrics``, and its failures answered through the app's error path."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from pyvia import App, ConfigError, Context, UsageError
from pyvia.db import Database
from pyvia.errors import IntegrityError
from pyvia.ops.settings import load_settings
from pyvia.testing import TestClient
from tests.db.conftest import Backend
from tests.ops.promtext import parse
from tests.processes import ROOT, free_port


def notes_app(url: str) -> App:
    app = App(db_url=url, db_timeout=5)

    @app.db.on_open
    async def schema(db: Database) -> None:
        await db.execute("CREATE TABLE IF NOT EXISTS notes (body TEXT NOT NULL UNIQUE)")

    @app.page("/")
    async def page(c: Context) -> None:
        body = c.signal("", "body", writable=True)
        count = await app.db.fetchval("SELECT count(*) FROM notes")
        shown = c.signal(count, "count")

        @c.action
        async def add() -> None:
            await app.db.execute("INSERT INTO notes (body) VALUES ($1)", body.value)
            shown.value = await app.db.fetchval("SELECT count(*) FROM notes")

        @c.action
        async def broken() -> None:
            await app.db.fetch("SELECT * FROM no_such_table")

        c.view(lambda: f'<p id="count">{shown.value}</p>')

    return app


def test_the_app_opens_the_database_at_start_and_closes_it_at_stop(backend: Backend) -> None:
    app = notes_app(backend.url)
    assert not app.db.is_open
    with TestClient(app) as client:
        assert app.db.is_open and app.db.kind == backend.kind
        tab = client.open("/")
        assert tab.signals["_count"] == 0
        tab.action("add", body="first")
        assert tab.signals["_count"] == 1
        again = client.open("/")
        assert again.signals["_count"] == 1
    assert not app.db.is_open
    with TestClient(app) as client:  # opened again on the next start; the data is still there
        assert client.open("/").signals["_count"] == 1


def test_statements_are_counted_on_metrics_by_kind(backend: Backend) -> None:
    app = notes_app(backend.url)
    with TestClient(app, raise_server_exceptions=False) as client:
        tab = client.open("/")
        tab.action("add", body="a")
        tab.action("add", body="a")  # the UNIQUE constraint refuses it
        _, samples = parse(client.get("/metrics").body.decode())

    def sample(name: str, **labels: str) -> float:
        return samples[(name, frozenset(labels.items()))]

    assert sample("pyvia_db_queries_total", kind="write", status="ok") == 2  # CREATE, then one INSERT
    assert sample("pyvia_db_queries_total", kind="write", status="error") == 1
    assert sample("pyvia_db_queries_total", kind="read", status="ok") == 2  # page count, then after the INSERT
    assert sample("pyvia_db_query_duration_seconds_count", kind="read") == 2
    assert sample("pyvia_db_write_wait_seconds_count") == (3 if backend.kind == "sqlite" else 0)
    assert sample("pyvia_db_connections") == (5 if backend.kind == "sqlite" else 1)  # 1 writer + 4 readers
    assert 1 <= sample("pyvia_db_connections_idle") <= sample("pyvia_db_connections")
    assert sample("pyvia_db_connections_discarded_total") == 0
    label_sets = {labels for name, labels in samples if name.startswith("pyvia_db_")}
    assert {k for labels in label_sets for k, _ in labels} <= {"kind", "status", "le"}  # no SQL, table or path


def test_a_database_error_in_an_action_is_a_500_without_a_traceback(backend: Backend) -> None:
    app = notes_app(backend.url)
    errors: list[BaseException] = []
    app.on_error(lambda exc, ctx, phase: errors.append(exc))
    with TestClient(app, raise_server_exceptions=False) as client:
        tab = client.open("/")
        assert tab.action("add", body="x").status == 200
        response = tab.action("add", body="x")
        assert response.status == 500 and response.body == b"Action failed"
        response = tab.action("broken")
        assert response.status == 500 and response.body == b"Action failed"
    assert [type(e) for e in errors] == [IntegrityError, type(errors[1])]
    assert "no_such_table" in str(errors[1])


def test_an_unreachable_postgresql_is_a_503_and_the_app_stays_ready() -> None:
    app = notes_app(f"postgresql://postgres@127.0.0.1:{free_port()}/nothing")
    with TestClient(app, raise_server_exceptions=False) as client:
        assert client.get("/_ready").status == 200  # readiness never waits on the database
        response = client.get("/")
        assert response.status == 503 and response.body == b"Service Unavailable"
        assert ("retry-after", "1") in response.headers


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("mysql://root@localhost/app", "unknown database scheme 'mysql'"),
        ("sqlite:///:memory:", "in-memory SQLite database cannot be shared"),
        ("sqlite://host/app.db", "names a file, not a host"),
        ("postgresql://u:hunter2@/app", "no host"),
        ("postgresql://u:hunter2@db:99999/app", "port is not a number"),
    ],
)
def test_a_bad_url_is_refused_when_the_app_is_made(url: str, message: str) -> None:
    with pytest.raises(ConfigError, match="keyword argument db_url") as refused:
        App(db_url=url)
    assert message in str(refused.value)
    assert "hunter2" not in str(refused.value)  # a password never reaches a message


def test_a_sqlite_file_that_cannot_be_opened_is_refused_at_start(tmp_path: Path) -> None:
    app = App(db_url=f"sqlite:///{tmp_path}/missing/app.db")
    with pytest.raises(ConfigError, match=r"the folder '.*missing' does not exist"):
        TestClient(app)


def test_db_settings_come_from_the_file_the_environment_and_keywords(tmp_path: Path) -> None:
    toml = tmp_path / "pyvia.toml"
    toml.write_text('[db]\nurl = "postgresql://app:s3cret@db.internal:5432/app"\npool_size = 8\n')
    settings = load_settings(toml, env={"PYVIA_DB__TIMEOUT": "2.5"}, db_busy_timeout=1)
    config = settings.db_config()
    assert (config.kind, config.pool_size, config.timeout, config.busy_timeout) == ("postgresql", 8, 2.5, 1.0)
    rows = {name: (value, where) for name, value, where in settings.describe()}
    assert rows["db.url"][0] == "postgresql://app:***@db.internal:5432/app"
    assert rows["db.timeout"] == (2.5, "PYVIA_DB__TIMEOUT")
    assert "s3cret" not in repr(settings)
    toml.write_text('[db]\nurl = "app.db"\nreaders = 4\n')
    with pytest.raises(ConfigError, match=r"\[db\] readers: unknown key 'readers' in \[db\]"):
        load_settings(toml, env={})
    with pytest.raises(ConfigError, match="db_pool_size: 0: must be a number of connections"):
        load_settings(None, env={}, db_pool_size=0)


def test_without_a_url_app_db_says_how_to_set_one() -> None:
    app = App()

    @app.page("/")
    async def page(c: Context) -> None:
        await app.db.fetch("SELECT 1")

    with TestClient(app) as client, pytest.raises(UsageError, match=r"App\(db_url='sqlite:///app.db'\)"):
        client.get("/")


def test_pyvia_run_refuses_an_unopenable_sqlite_file_with_one_line(tmp_path: Path) -> None:
    (tmp_path / "dbapp.py").write_text("from pyvia import App\napp = App(db_url='sqlite:///nowhere/app.db')\n")
    done = subprocess.run(
        [sys.executable, "-m", "pyvia", "run", "dbapp:app", "--port", str(free_port())],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        env={"PYTHONPATH": f"{ROOT / 'src'}:{ROOT}", "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 2
    assert "pyvia run: error: [db] url 'sqlite:///nowhere/app.db': the folder 'nowhere' does not exist" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("kind", ["native", "uvicorn"])
def test_over_http_the_server_opens_the_database_and_closes_it_on_stop(backend: Backend, kind: str) -> None:
    from tests.server.test_app_over_http import front_end, open_page, post_action

    app = notes_app(backend.url)
    with front_end(app, kind) as (host, port):
        assert app.db.is_open
        page, seed, cookie = open_page(host, port)
        assert page.status == 200 and seed["_count"] == 0
        answer = post_action(host, port, "add", {"via_ctx": seed["via_ctx"], "body": "over http"}, cookie)
        assert answer.status == 200
        assert open_page(host, port)[1]["_count"] == 1
        refused = post_action(host, port, "add", {"via_ctx": seed["via_ctx"], "body": "over http"}, cookie)
        assert refused.status == 500 and refused.body == b"Action failed"  # UNIQUE: no traceback sent
    assert not app.db.is_open


def last_seen_app(url: str) -> App:
    """Writes each tab's leaving to the database from an async disconnect hook (a chat's "last read")."""
    app = App(db_url=url, db_timeout=5)

    @app.db.on_open
    async def schema(db: Database) -> None:
        await db.execute("CREATE TABLE IF NOT EXISTS gone (tab TEXT NOT NULL)")

    @app.page("/")
    def page(c: Context) -> None:
        async def gone() -> None:
            await asyncio.sleep(0.05)  # a hook that awaits before it writes
            await app.db.execute("INSERT INTO gone (tab) VALUES ($1)", c.id)

        c.on_disconnect(gone)
        c.view(lambda: "<p id='p'>open</p>")

    return app


def gone_rows(path: Path) -> int:
    with contextlib.closing(sqlite3.connect(path)) as db:  # a with block alone commits, not closes
        return int(db.execute("SELECT count(*) FROM gone").fetchone()[0])


def test_async_disconnect_hooks_write_to_the_database_at_a_stop(tmp_path: Path) -> None:
    """docs/scopes-and-broadcasting.md "Hooks": the database stays open until what the disconnect
    hooks write at a stop is written (they ran as background tasks after it closed)."""
    app = last_seen_app(f"sqlite:///{tmp_path}/app.db")
    with TestClient(app) as client:
        for _ in range(3):
            client.open("/")
    assert gone_rows(tmp_path / "app.db") == 3


def test_over_http_a_stop_waits_for_the_async_disconnect_hooks_database_writes(tmp_path: Path) -> None:
    from tests.server.test_app_over_http import front_end, open_page, open_stream

    app = last_seen_app(f"sqlite:///{tmp_path}/app.db")
    streams = []
    with front_end(app, "native") as (host, port):
        for _ in range(3):
            _, seed, cookie = open_page(host, port)
            client, head = open_stream(host, port, {"via_ctx": seed["via_ctx"]}, cookie)
            assert head.status == 200
            streams.append(client)
    for client in streams:
        client.close()
    assert gone_rows(tmp_path / "app.db") == 3
