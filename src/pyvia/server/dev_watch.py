"""``pyvia run --dev``: a thread that watches the app's files and reloads the workers on a change.

It sends the supervisor a SIGHUP per batch of changes, the same rolling reload as ``pyvia
reload``; a worker whose app then fails to import serves the error instead (:mod:`pyvia.devtools`),
and the next change reloads again. Separate from the supervisor because only dev mode needs it
(and ``watchfiles``).
"""

from __future__ import annotations

import logging
import os
import signal
import threading

__all__ = ["start_watching"]

log = logging.getLogger("pyvia.supervisor")


def start_watching(paths: tuple[str, ...]) -> threading.Event:
    """A SIGHUP to this process for each batch of changes under ``paths``; set the event to stop."""
    from watchfiles import PythonFilter, watch

    stop = threading.Event()
    watch_filter = PythonFilter(extra_extensions=(".html", ".jinja", ".jinja2", ".j2", ".toml"))

    def run() -> None:
        for changes in watch(*paths, watch_filter=watch_filter, stop_event=stop, debounce=200, raise_interrupt=False):
            names = sorted({os.path.relpath(path) for _, path in changes})
            log.info("changed: %s: reloading", ", ".join(names[:5]) + (" …" if len(names) > 5 else ""))
            os.kill(os.getpid(), signal.SIGHUP)

    threading.Thread(target=run, name="pyvia-watch", daemon=True).start()
    log.info("dev mode: watching %s for changes", ", ".join(paths))
    return stop
