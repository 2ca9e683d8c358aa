"""What a statement is (a read, a write, transaction control) and its SQLite spelling.

Pure functions on SQL text, cached per distinct statement (statements are constants in code;
values are always bound parameters, so the cache stays small).

* :func:`classify` decides where a statement runs on SQLite: a read goes to a reader
  connection without a permit; anything else (a write, DDL, a ``PRAGMA``, ``WITH … INSERT``,
  ``SELECT … FOR UPDATE``) to the one writer under the write permit. When in doubt it says
  "write", the safe side (ephpm-lessons.md §4.4). The same label sorts the query statistics.
* Transaction control (``BEGIN``, ``COMMIT``, ``END``, ``ROLLBACK``, ``SAVEPOINT``,
  ``RELEASE``, ``START TRANSACTION``) is refused outside :meth:`Database.transaction`, which
  is the only place a transaction begins or ends: a stray ``BEGIN`` would hold the writer.
* :func:`sqlite_params` turns PostgreSQL's numbered parameters ``$1, $2`` into SQLite's
  ``?1, ?2`` (outside string literals, quoted names and comments), so one statement text runs
  on both back ends.
"""

from __future__ import annotations

import functools
import re

__all__ = ["READ", "TRANSACTION", "WRITE", "classify", "sqlite_params"]

READ = "read"
WRITE = "write"
TRANSACTION = "transaction"

_READ_WORDS = frozenset({"SELECT", "VALUES", "WITH", "EXPLAIN", "TABLE", "SHOW"})
_TX_WORDS = frozenset({"BEGIN", "COMMIT", "END", "ROLLBACK", "SAVEPOINT", "RELEASE", "START", "ABORT"})
_WRITING = re.compile(
    r"\b(INSERT|UPDATE|DELETE|REPLACE|MERGE|CREATE|DROP|ALTER|INTO|TRUNCATE|COPY|VACUUM)\b", re.IGNORECASE
)
_FIRST_WORD = re.compile(r"[\s(;]*([A-Za-z]+)")
_PARAM = re.compile(r"\$(\d+)")


def _segments(sql: str) -> list[tuple[bool, str]]:
    """Split ``sql`` into (is_code, text) pieces; literals, quoted names and comments are not code."""
    out: list[tuple[bool, str]] = []
    i = start = 0
    n = len(sql)
    while i < n:
        ch = sql[i]
        end = -1
        if ch in "'\"`[":
            close = "]" if ch == "[" else ch
            end = i + 1
            while end < n:
                if sql[end] == close:
                    if close != "]" and end + 1 < n and sql[end + 1] == close:  # '' inside a literal
                        end += 2
                        continue
                    break
                end += 1
            end = min(end + 1, n)
        elif sql.startswith("--", i):
            nl = sql.find("\n", i)
            end = n if nl < 0 else nl + 1
        elif sql.startswith("/*", i):
            close_at = sql.find("*/", i + 2)
            end = n if close_at < 0 else close_at + 2
        if end < 0:
            i += 1
            continue
        if i > start:
            out.append((True, sql[start:i]))
        out.append((False, sql[i:end]))
        i = start = end
    if start < n:
        out.append((True, sql[start:]))
    return out


def _code(sql: str) -> str:
    return " ".join(text for is_code, text in _segments(sql) if is_code)


@functools.lru_cache(maxsize=1024)
def classify(sql: str) -> str:
    """``"read"``, ``"write"`` or ``"transaction"`` (see the module docstring)."""
    code = _code(sql)
    m = _FIRST_WORD.match(code)
    word = m.group(1).upper() if m else ""
    if word in _TX_WORDS:
        return TRANSACTION
    if word in _READ_WORDS and not _WRITING.search(code) and not re.search(r"\bFOR\s+(UPDATE|SHARE)\b", code, re.I):
        return READ
    return WRITE


@functools.lru_cache(maxsize=1024)
def sqlite_params(sql: str) -> str:
    """``$1`` → ``?1`` in code (SQLite's numbered parameters); literals and comments are kept."""
    if "$" not in sql:
        return sql
    return "".join(_PARAM.sub(r"?\1", text) if is_code else text for is_code, text in _segments(sql))
