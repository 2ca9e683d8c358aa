"""An app that logs, at start in each worker, a line holding the secret and a session cookie."""

from __future__ import annotations

import logging
import os

from pyvia import App, Context

app = App(title="Logs")
log = logging.getLogger("logapp")


@app.on_start
def started() -> None:
    log.info("started with secret=%s and Cookie: via_session_id=abc123", os.environ["PYVIA_SECRET"])


@app.page("/")
def page(c: Context) -> None:
    c.view(lambda: "<p>hi</p>")
