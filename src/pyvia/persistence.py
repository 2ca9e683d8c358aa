"""Shared state that survives a graceful restart: global state, shared signals, session data, tabs.

On a graceful stop the App writes them to one SQLite file (``persist_path``), or, when the app has
a database (``[db] url``) and no ``persist_path``, to its table ``pyvia_state`` through
:mod:`pyvia.db`; on start it reads them back. With several workers neither is used: the engine
holds that state. Shared signals come back lazily: the first declaration of a (scope, name) after the
restart takes the saved value instead of its initial one. Values must be JSON-serializable
(orjson); others are skipped with a warning rather than losing the rest.

Tabs are kept as what revives them (their tab state and the snapshot of their server-owned
signals), so an action that reaches the restarted process before its tab's stream does finds
the tab there.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Iterable
from contextlib import closing
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

if TYPE_CHECKING:
    from pyvia.db import Database

log = logging.getLogger("pyvia")

__all__ = ["load_state", "load_state_from_db", "save_state", "save_state_to_db"]

#: (global state, shared signals by (scope, name), session data by id, tab records by context id)
State = tuple[dict[str, Any], dict[tuple[str, str], Any], dict[str, dict[str, Any]], dict[str, dict[str, Any]]]

_SCHEMA = "CREATE TABLE IF NOT EXISTS state (kind TEXT, key TEXT, value BLOB, PRIMARY KEY (kind, key))"


def _encode(kind: str, key: str, value: Any) -> tuple[str, str, bytes] | None:
    try:
        return kind, key, orjson.dumps(value)
    except TypeError as exc:
        log.warning("not persisting %s %r: %s", kind, key, exc)
        return None


def _rows(
    global_state: dict[str, Any],
    signals: Iterable[tuple[str, str, Any]],
    sessions: Iterable[tuple[str, dict[str, Any]]],
    tabs: Iterable[tuple[str, dict[str, Any]]],
) -> list[tuple[str, str, bytes]]:
    rows = [r for r in (_encode("global", k, v) for k, v in global_state.items()) if r]
    rows += [r for r in (_encode("signal", f"{scope}\0{name}", v) for scope, name, v in signals) if r]
    rows += [r for r in (_encode("session", sid, data) for sid, data in sessions) if r]
    rows += [r for r in (_encode("tab", ctx_id, record) for ctx_id, record in tabs) if r]
    return rows


def save_state(
    path: str | Path,
    *,
    global_state: dict[str, Any],
    signals: Iterable[tuple[str, str, Any]],
    sessions: Iterable[tuple[str, dict[str, Any]]],
    tabs: Iterable[tuple[str, dict[str, Any]]] = (),
) -> int:
    """Replace the file's contents with this state in one transaction; return the rows written."""
    rows = _rows(global_state, signals, sessions, tabs)
    with closing(sqlite3.connect(path)) as db, db:  # closing() closes; the inner block commits
        db.execute(_SCHEMA)
        db.execute("DELETE FROM state")
        db.executemany("INSERT INTO state VALUES (?, ?, ?)", rows)
    return len(rows)


def load_state(path: str | Path) -> State:
    """(global state, shared signal values by (scope, name), session data, tabs) saved at the last stop."""
    if not Path(path).exists():
        return {}, {}, {}, {}
    with closing(sqlite3.connect(path)) as db, db:  # closing() closes; the inner block commits
        db.execute(_SCHEMA)
        return _decode_rows(db.execute("SELECT kind, key, value FROM state"), "\0")


def _decode_rows(rows: Iterable[tuple[str, str, Any]], separator: str) -> State:
    """Saved rows back into (global state, signals by (scope, name), sessions, tabs); ``separator``
    joins a signal's scope and name in its key."""
    global_state: dict[str, Any] = {}
    signals: dict[tuple[str, str], Any] = {}
    sessions: dict[str, dict[str, Any]] = {}
    tabs: dict[str, dict[str, Any]] = {}
    for kind, key, value in rows:
        decoded = orjson.loads(value)
        if kind == "global":
            global_state[key] = decoded
        elif kind == "signal":
            scope, _, name = key.partition(separator)
            signals[(scope, name)] = decoded
        elif kind == "session" and isinstance(decoded, dict):
            sessions[key] = decoded
        elif kind == "tab" and isinstance(decoded, dict):
            tabs[key] = decoded
    return global_state, signals, sessions, tabs


_DB_SCHEMA = "CREATE TABLE IF NOT EXISTS pyvia_state (kind TEXT, key TEXT, value TEXT, PRIMARY KEY (kind, key))"


async def save_state_to_db(
    db: Database,
    *,
    global_state: dict[str, Any],
    signals: Iterable[tuple[str, str, Any]],
    sessions: Iterable[tuple[str, dict[str, Any]]],
    tabs: Iterable[tuple[str, dict[str, Any]]] = (),
) -> int:
    """``save_state`` into the app's database (SQLite or PostgreSQL), in one transaction."""
    rows = _rows(global_state, signals, sessions, tabs)
    async with db.transaction() as tx:
        await tx.execute(_DB_SCHEMA)
        await tx.execute("DELETE FROM pyvia_state")
        if rows:
            await tx.executemany(
                "INSERT INTO pyvia_state (kind, key, value) VALUES ($1, $2, $3)",
                [(kind, key.replace("\0", "\n"), value.decode()) for kind, key, value in rows],
            )
    return len(rows)


async def load_state_from_db(db: Database) -> State:
    """What :func:`save_state_to_db` wrote at the last graceful stop."""
    await db.execute(_DB_SCHEMA)
    return _decode_rows(await db.fetch("SELECT kind, key, value FROM pyvia_state"), "\n")
