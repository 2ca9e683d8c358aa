"""Statement classification, parameter spelling and URL parsing: pure functions."""

from __future__ import annotations

import pytest

from pyvia.db.sql import READ, TRANSACTION, WRITE, classify, sqlite_params
from pyvia.db.url import parse_url, redact_url


@pytest.mark.parametrize(
    ("sql", "kind"),
    [
        ("SELECT * FROM t", READ),
        ("  -- a comment\n  select 1", READ),
        ("/* INSERT */ SELECT 'DELETE' FROM t", READ),
        ("(SELECT 1) UNION (SELECT 2)", READ),
        ("WITH x AS (SELECT 1) SELECT * FROM x", READ),
        ("VALUES (1), (2)", READ),
        ("WITH x AS (SELECT 1) INSERT INTO t SELECT * FROM x", WRITE),
        ("SELECT * FROM t FOR UPDATE", WRITE),
        ("SELECT * INTO copy FROM t", WRITE),
        ("INSERT INTO t VALUES (1)", WRITE),
        ("UPDATE t SET x = 1", WRITE),
        ("CREATE TABLE t (x INTEGER)", WRITE),
        ("PRAGMA user_version = 2", WRITE),
        ("PRAGMA user_version", WRITE),  # when in doubt: the writer
        ("", WRITE),
        ("BEGIN", TRANSACTION),
        ("begin immediate", TRANSACTION),
        ("END", TRANSACTION),
        ("COMMIT", TRANSACTION),
        ("ROLLBACK TO SAVEPOINT a", TRANSACTION),
        ("RELEASE a", TRANSACTION),
        ("START TRANSACTION", TRANSACTION),
    ],
)
def test_classify(sql: str, kind: str) -> None:
    assert classify(sql) == kind


def test_sqlite_params_rewrite_only_code() -> None:
    assert sqlite_params("SELECT $1, $2, $1") == "SELECT ?1, ?2, ?1"
    assert sqlite_params("SELECT '$1', \"$2\", $3 -- $4\n/* $5 */") == "SELECT '$1', \"$2\", ?3 -- $4\n/* $5 */"
    assert sqlite_params("SELECT 'it''s $1', $1") == "SELECT 'it''s $1', ?1"
    assert sqlite_params("SELECT ?") == "SELECT ?"


@pytest.mark.parametrize(
    ("url", "kind", "path"),
    [
        ("sqlite:///app.db", "sqlite", "app.db"),
        ("sqlite:////srv/data/app.db", "sqlite", "/srv/data/app.db"),
        ("app.db", "sqlite", "app.db"),
        ("/srv/app.db", "sqlite", "/srv/app.db"),
        ("postgresql://u:p@db:5432/app", "postgresql", ""),
        ("postgres://db/app?sslmode=disable", "postgresql", ""),
    ],
)
def test_parse_url(url: str, kind: str, path: str) -> None:
    config = parse_url(url)
    assert (config.kind, config.path) == (kind, path)


def test_redact_url_hides_only_the_password() -> None:
    assert redact_url("postgresql://app:s3cret@db:5432/x?a=1") == "postgresql://app:***@db:5432/x?a=1"
    assert redact_url("postgresql://app@db/x") == "postgresql://app@db/x"
    assert redact_url("sqlite:///app.db") == "sqlite:///app.db"
