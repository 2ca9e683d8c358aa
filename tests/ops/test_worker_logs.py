"""What ``pyvia run --workers 2`` writes to its log: one time format on every line, each worker's
lines named, and the same redaction in the workers as in the supervisor."""

from __future__ import annotations

import re
import time
from pathlib import Path

from tests.processes import ServerProcess, free_port

SECRET = "worker-log-secret-value"
LINE = re.compile(
    r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z (DEBUG|INFO|WARNING|ERROR|CRITICAL) [\w.]+( \[worker \d+ pid \d+\])?: "
)


def test_every_line_has_one_format_and_the_workers_redact(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    server = ServerProcess("tests.ops.log_app:app", free_port(), SECRET, extra=("--workers", "2"), log=log)
    server.start()
    try:
        deadline = time.monotonic() + 20
        while log.read_text().count("pyvia listening on") < 3 and time.monotonic() < deadline:
            time.sleep(0.1)  # the supervisor's line, then each worker's
    finally:
        server.stop()
    lines = [line for line in log.read_text().splitlines() if line.strip()]
    assert lines
    odd = [line for line in lines if not LINE.match(line)]
    assert odd == [], f"lines in another format: {odd[:3]}"
    for worker in ("0", "1"):
        assert any(f"[worker {worker} pid " in line for line in lines), f"no line names worker {worker}"
    started = [line for line in lines if "logapp" in line]
    assert len(started) == 2, started  # one a worker
    assert all("secret=<redacted>" in line and "via_session_id=<redacted>" in line for line in started)
    assert SECRET not in log.read_text() and "abc123" not in log.read_text()
