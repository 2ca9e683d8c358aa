"""Database URLs: which back end, where, and the pool options; checked when the App is made.

Accepted forms (anything else is refused with a message naming the URL and the forms)::

    sqlite:///app.db             a file relative to the working folder
    sqlite:////srv/data/app.db   an absolute path (four slashes)
    app.db, /srv/data/app.db     a bare path is SQLite too
    postgresql://user:password@host:5432/name   (also postgres://; query options go to asyncpg)

An in-memory SQLite database is refused: the writer and the readers are separate connections,
and each would see its own empty database.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import unquote, urlsplit, urlunsplit

__all__ = ["DatabaseConfig", "parse_url", "redact_url"]

_SQLITE = "sqlite"
_POSTGRES = ("postgresql", "postgres")
_FORMS = "sqlite:///app.db, sqlite:////abs/path.db, a plain file path, or postgresql://user@host:5432/name"


@dataclass(frozen=True, slots=True)
class DatabaseConfig:
    """The ``[db]`` settings: back end and location from ``url``, plus pool sizes and timeouts."""

    url: str
    #: ``"sqlite"`` or ``"postgresql"``.
    kind: str
    #: The SQLite file (empty for PostgreSQL).
    path: str = ""
    #: SQLite: read connections beside the one writer. PostgreSQL: the pool's maximum size.
    pool_size: int = 4
    #: Seconds to wait for a free connection or SQLite's write permit before PoolTimeout.
    timeout: float = 30.0
    #: SQLite's own wait on a lock held by another process (several workers on one file).
    busy_timeout: float = 5.0

    @property
    def display_url(self) -> str:
        """The URL without its password, for logs and ``pyvia config``."""
        return redact_url(self.url)


def parse_url(url: str, *, pool_size: int = 4, timeout: float = 30.0, busy_timeout: float = 5.0) -> DatabaseConfig:
    """Check ``url`` and return its :class:`DatabaseConfig`; ValueError names what is wrong."""
    if not isinstance(url, str) or not url.strip():
        raise ValueError(f"{url!r} is not a database URL; use {_FORMS}")
    text = url.strip()
    scheme, sep, _ = text.partition("://")
    if not sep:
        if ":" in text.split("/", 1)[0] and not text.startswith("/"):  # "sqlite:app.db", "postgres:x"
            raise ValueError(f"{url!r} is not a database URL (no '://'); use {_FORMS}")
        return _sqlite(url, text, pool_size, timeout, busy_timeout)
    scheme = scheme.lower()
    if scheme == _SQLITE:
        parts = urlsplit(text)
        if parts.netloc not in ("", "localhost"):
            raise ValueError(
                f"{url!r}: a SQLite URL names a file, not a host ({parts.netloc!r}); "
                "use sqlite:///relative.db or sqlite:////absolute/path.db"
            )
        if parts.query or parts.fragment:
            raise ValueError(f"{url!r}: a SQLite URL takes no options; set [db] pool_size, timeout, busy_timeout")
        path = unquote(parts.path)
        path = path[1:] if path.startswith("/") else path  # sqlite:///app.db -> app.db; //// -> /abs
        return _sqlite(url, path, pool_size, timeout, busy_timeout)
    if scheme in _POSTGRES:
        parts = urlsplit(text)
        try:
            port = parts.port
        except ValueError:
            raise ValueError(f"{redact_url(url)!r}: the port is not a number 0..65535") from None
        if not parts.hostname and "host=" not in parts.query:
            raise ValueError(f"{redact_url(url)!r}: no host; use postgresql://user@host:5432/name")
        if port == 0:
            raise ValueError(f"{redact_url(url)!r}: port 0 is not a PostgreSQL port")
        return DatabaseConfig(url, "postgresql", "", pool_size, timeout, busy_timeout)
    raise ValueError(f"{redact_url(url)!r}: unknown database scheme {scheme!r}; use {_FORMS}")


def _sqlite(url: str, path: str, pool_size: int, timeout: float, busy_timeout: float) -> DatabaseConfig:
    if not path:
        raise ValueError(f"{url!r}: no file named; use sqlite:///app.db")
    if path == ":memory:" or path.startswith("file:") or "mode=memory" in path:
        raise ValueError(
            f"{url!r}: an in-memory SQLite database cannot be shared by the writer and the readers; "
            "use a file (a temporary folder will do)"
        )
    return DatabaseConfig(url, "sqlite", path, pool_size, timeout, busy_timeout)


def redact_url(url: str) -> str:
    """``url`` with any password replaced by ``***``."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return url
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{user}:***@{host}"
    try:
        if parts.port is not None:
            netloc += f":{parts.port}"
    except ValueError:
        pass
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
