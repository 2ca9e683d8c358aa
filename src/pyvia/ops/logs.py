"""Structured logs on the standard ``logging`` module: text or one JSON object per line.

Every line carries the time (UTC, milliseconds), the level, the logger, the message, and the
request id when one is set for the current request (:data:`request_id`, a contextvar, so it
follows the request into async handlers). A filter on the handler redacts before anything is
written: cookie values (``Cookie:``/``Set-Cookie:`` headers and ``via_session_id=``), anything
written as ``secret=…`` or ``"secret": "…"``, and the literal value of each known secret
(``PYVIA_SECRET`` by default), in the message and in tracebacks.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import os
import re
import sys
import time
from collections.abc import Iterable, Iterator
from typing import IO, Any

import orjson

from pyvia.errors import ConfigError

__all__ = [
    "REDACTED",
    "JsonFormatter",
    "RedactingFilter",
    "TextFormatter",
    "configure_logging",
    "redact",
    "request_id",
    "request_scope",
]

REDACTED = "<redacted>"

#: The id of the request being handled, or None; set with :func:`request_scope`.
request_id: contextvars.ContextVar[str | None] = contextvars.ContextVar("pyvia_request_id", default=None)

_COOKIE_HEADER = re.compile(r"(?i)\b((?:set-)?cookie\s*[:=]\s*)([^\r\n]*)")
_COOKIE_PAIR = re.compile(r"([!#$%&'*+\-.^_`|~0-9A-Za-z]+)=([^;,\s]*)")
_SESSION = re.compile(r"(?i)\b((?:__Host-)?via_session_id=)([^;,\s&\"']+)")
_SECRET_KV = re.compile(r"""(?i)(["']?\b[\w-]*(?:secret|password|token)["']?\s*[:=]\s*)("[^"]*"|'[^']*'|[^\s,;&}]+)""")
_COOKIE_ATTRIBUTES = frozenset({"path", "domain", "max-age", "expires", "samesite", "secure", "httponly"})


def _redact_cookie_header(match: re.Match[str]) -> str:
    def pair(m: re.Match[str]) -> str:
        return m.group(0) if m.group(1).lower() in _COOKIE_ATTRIBUTES else f"{m.group(1)}={REDACTED}"

    return match.group(1) + _COOKIE_PAIR.sub(pair, match.group(2))


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with cookie values, ``secret=…``-like values and the given secret values replaced."""
    for value in secrets:
        if value and len(value) >= 4:  # a 1-3 character "secret" would redact half the log
            text = text.replace(value, REDACTED)
    text = _COOKIE_HEADER.sub(_redact_cookie_header, text)
    text = _SESSION.sub(lambda m: m.group(1) + REDACTED, text)
    return _SECRET_KV.sub(lambda m: m.group(1) + (f'"{REDACTED}"' if m.group(2)[:1] in "\"'" else REDACTED), text)


class RedactingFilter(logging.Filter):
    """Redacts each record's message (and traceback) in place; never drops a record."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        super().__init__()
        self.secrets = tuple(s for s in secrets if s)

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "_pyvia_redacted", False):
            return True
        try:
            message = record.getMessage()
        except Exception:  # a bad format string: log what there is, as logging itself would
            message = f"{record.msg!r} % {record.args!r}"
        record.msg, record.args = redact(message, self.secrets), None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text, self.secrets)
        if record.stack_info:
            record.stack_info = redact(record.stack_info, self.secrets)
        record._pyvia_redacted = True
        return True


def _iso_time(created: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(created)) + f".{int(created % 1 * 1000):03d}Z"


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, request_id?, exc?, and extras."""

    _STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "_pyvia_redacted"}

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": _iso_time(record.created),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        rid = request_id.get()
        if rid is not None:
            out["request_id"] = rid
        for key, value in record.__dict__.items():  # extra={...} fields
            if key not in self._STANDARD and not key.startswith("_"):
                out[key] = value
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            out["exc"] = record.exc_text
        if record.stack_info:
            out["stack"] = record.stack_info
        return orjson.dumps(out, default=str).decode()


class TextFormatter(logging.Formatter):
    """``2026-11-30T10:00:00.123Z INFO pyvia: message [request_id=ab12]``, traceback below;
    with a ``tag`` (a worker's), ``pyvia [worker 0 pid 41]: message``."""

    def __init__(self, tag: str = "") -> None:
        super().__init__()
        self.tag = f" [{tag}]" if tag else ""

    def format(self, record: logging.LogRecord) -> str:
        line = f"{_iso_time(record.created)} {record.levelname} {record.name}{self.tag}: {record.getMessage()}"
        rid = request_id.get()
        if rid is not None:
            line += f" [request_id={rid}]"
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            line += "\n" + record.exc_text
        if record.stack_info:
            line += "\n" + record.stack_info
        return line


@contextlib.contextmanager
def request_scope(rid: str) -> Iterator[None]:
    """Set :data:`request_id` for the lines logged inside the block (and the tasks it starts)."""
    token = request_id.set(rid)
    try:
        yield
    finally:
        request_id.reset(token)


_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def configure_logging(
    level: str | int = "INFO",
    fmt: str = "text",
    *,
    stream: IO[str] | None = None,
    logger: logging.Logger | None = None,
    secrets: Iterable[str] | None = None,
    tag: str = "",
) -> logging.Handler:
    """Send ``logger``'s records (the root logger's by default) to ``stream`` (stderr) as ``fmt``.

    ``fmt`` is ``"text"`` or ``"json"``. ``secrets`` are values never to print; by default the
    value of ``PYVIA_SECRET``. ``tag`` names the process on each text line (a worker). A handler
    this function added before is replaced, so calling it again reconfigures. Returns the handler.
    Raises :class:`pyvia.errors.ConfigError` for an unknown level or format.
    """
    if isinstance(level, str):
        if level.upper() not in _LEVELS:
            raise ConfigError(f"log level {level!r}: must be one of {', '.join(_LEVELS)}")
        numeric = getattr(logging, level.upper())
    else:
        numeric = level
    if fmt not in ("text", "json"):
        raise ConfigError(f"log format {fmt!r}: must be 'text' or 'json'")
    target = logger if logger is not None else logging.getLogger()
    for old in [h for h in target.handlers if getattr(h, "_pyvia_ops", False)]:
        target.removeHandler(old)
        old.close()
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler._pyvia_ops = True  # type: ignore[attr-defined]  # marks our handler for the next call
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter(tag))
    if secrets is None:
        secrets = [os.environ.get("PYVIA_SECRET", "")]
    handler.addFilter(RedactingFilter(secrets))
    target.addHandler(handler)
    target.setLevel(numeric)
    return handler
