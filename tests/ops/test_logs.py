"""pyvia.ops.logs: JSON and text lines with the request id, and redaction before anything is written."""

from __future__ import annotations

import asyncio
import io
import logging
from collections.abc import Iterator

import orjson
import pytest

from pyvia import ConfigError
from pyvia.ops.logs import REDACTED, configure_logging, redact, request_id, request_scope


@pytest.fixture
def logger() -> Iterator[logging.Logger]:
    log = logging.getLogger("pyvia.test_ops_logs")
    log.propagate = False
    yield log
    for handler in list(log.handlers):
        log.removeHandler(handler)
    log.propagate = True
    log.setLevel(logging.NOTSET)


def lines(stream: io.StringIO) -> list[dict[str, object]]:
    return [orjson.loads(line) for line in stream.getvalue().splitlines()]


def test_json_lines_carry_time_level_logger_message_and_request_id(logger: logging.Logger) -> None:
    out = io.StringIO()
    configure_logging("INFO", "json", stream=out, logger=logger)
    logger.debug("not shown")
    logger.info("page %s served", "/counter")
    with request_scope("req-42"):
        logger.warning("slow action", extra={"route": "/counter", "ms": 120})
    first, second = lines(out)
    assert set(first) == {"time", "level", "logger", "message"}
    assert first["level"] == "INFO" and first["logger"] == "pyvia.test_ops_logs"
    assert first["message"] == "page /counter served"
    assert str(first["time"]).endswith("Z") and str(first["time"])[10] == "T"
    assert second["request_id"] == "req-42" and second["route"] == "/counter" and second["ms"] == 120
    assert request_id.get() is None


def test_secrets_and_cookies_are_redacted(logger: logging.Logger, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYVIA_SECRET", "s3cret-signing-key")
    out = io.StringIO()
    configure_logging("DEBUG", "json", stream=out, logger=logger)
    logger.info("loaded key %s", "s3cret-signing-key")
    logger.info("headers: Cookie: via_session_id=abc123; theme=dark")
    logger.info("answer Set-Cookie: via_session_id=xyz789; Path=/; HttpOnly; SameSite=Lax")
    logger.info("options secret=hunter22 title=Shop")
    logger.info('options {"secret": "hunter22", "title": "Shop"}')
    try:
        raise ValueError("bad secret s3cret-signing-key")
    except ValueError:
        logger.exception("failed")
    text = out.getvalue()
    for leaked in ("s3cret-signing-key", "abc123", "dark", "xyz789", "hunter22"):
        assert leaked not in text
    got = [line["message"] for line in lines(out)]
    assert got[0] == f"loaded key {REDACTED}"
    assert got[1] == f"headers: Cookie: via_session_id={REDACTED}; theme={REDACTED}"
    assert got[2] == f"answer Set-Cookie: via_session_id={REDACTED}; Path=/; HttpOnly; SameSite=Lax"
    assert got[3] == f"options secret={REDACTED} title=Shop"
    assert got[4] == f'options {{"secret": "{REDACTED}", "title": "Shop"}}'
    exc = str(lines(out)[5]["exc"])
    assert "ValueError: bad secret" in exc and REDACTED in exc


def test_text_lines(logger: logging.Logger) -> None:
    out = io.StringIO()
    configure_logging("info", "text", stream=out, logger=logger)

    async def handler() -> None:
        logger.info("in a task")

    async def main() -> None:
        with request_scope("r-1"):
            await asyncio.create_task(handler())  # the id follows the request into its tasks

    asyncio.run(main())
    logger.error("plain")
    first, second = out.getvalue().splitlines()
    assert first.endswith(" INFO pyvia.test_ops_logs: in a task [request_id=r-1]")
    assert second.endswith(" ERROR pyvia.test_ops_logs: plain")


def test_configuring_again_replaces_the_handler(logger: logging.Logger) -> None:
    first, second = io.StringIO(), io.StringIO()
    configure_logging("INFO", "text", stream=first, logger=logger)
    configure_logging("INFO", "json", stream=second, logger=logger)
    logger.info("once")
    assert first.getvalue() == "" and len(lines(second)) == 1
    assert len([h for h in logger.handlers if isinstance(h, logging.StreamHandler) and h.stream is second]) == 1
    assert not [h for h in logger.handlers if getattr(h, "stream", None) is first]


@pytest.mark.parametrize(
    ("level", "fmt", "message"),
    [
        ("LOUD", "text", "log level 'LOUD'"),
        ("INFO", "xml", "log format 'xml'"),
    ],
)
def test_bad_options_are_refused(logger: logging.Logger, level: str, fmt: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        configure_logging(level, fmt, logger=logger)


def test_redact_leaves_ordinary_text_alone() -> None:
    assert redact("a secretary's token-ring notes") == "a secretary's token-ring notes"
    assert redact("x", ["ab"]) == "x"  # secrets shorter than 4 characters are not searched for
