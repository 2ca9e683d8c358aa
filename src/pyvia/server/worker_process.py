"""Inside a worker of ``pyvia run``: serve the app on the socket the supervisor handed over.

Separate from :mod:`pyvia.server.supervisor` because it runs in the other process: the supervisor
starts each worker as ``python -m pyvia.server.supervisor`` (the name ``ps`` shows and the tests
look for), whose ``__main__`` hands over to :func:`worker_main` here. What the two processes agree
on lives here too: the descriptors a worker inherits, named in its environment,

* ``PYVIA_LISTEN_FD`` — the listening socket;
* ``PYVIA_READY_FD`` — the write end of a pipe on which the worker reports, one byte each:
  ``L`` the app is imported, ``R`` it accepts connections, ``S`` it stopped taking requests and
  saved what it persists (the first step of its graceful stop);
* ``PYVIA_LIFELINE_FD`` — the read end of a pipe whose write end only the supervisor holds: when
  the supervisor dies, even by SIGKILL, the worker reads EOF and stops (no orphans);
* ``PYVIA_GO_FD`` (a held worker only) — the worker imports the app, reports ``L``, then waits for
  a byte on this pipe before it starts the app and accepts;
* ``PYVIA_OWN_FD`` (``--worker-ports``) — the port of this worker id alone;
* ``PYVIA_BALANCE_FD`` and ``PYVIA_BALANCE_SLOT`` (several workers) — the shared table of open
  connections with a doorbell per slot (descriptors, comma-separated), and this process's slot
  in it, cleared by the supervisor when the process exits;

and the exit status :data:`CONFIG_REFUSED`, which tells the supervisor not to start it again.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import logging
import os
import signal
import socket
import sys

from pyvia.cluster import WORKER_ID_ENV
from pyvia.ops.logs import configure_logging
from pyvia.server.balance import BALANCE_FD_ENV, BALANCE_SLOT_ENV, BalanceTable

__all__ = [
    "CONFIG_REFUSED",
    "GO_FD_ENV",
    "LIFELINE_FD_ENV",
    "LISTEN_FD_ENV",
    "OWN_FD_ENV",
    "READY_FD_ENV",
    "WORKER_MODULE",
    "exit_fast",
    "worker_main",
]

LISTEN_FD_ENV = "PYVIA_LISTEN_FD"
OWN_FD_ENV = "PYVIA_OWN_FD"
READY_FD_ENV = "PYVIA_READY_FD"
LIFELINE_FD_ENV = "PYVIA_LIFELINE_FD"
GO_FD_ENV = "PYVIA_GO_FD"

#: What a worker runs as (``python -m``): its ``__main__`` calls :func:`worker_main`.
WORKER_MODULE = "pyvia.server.supervisor"

#: A worker's exit status for a configuration its app refused at start (printed in one line).
CONFIG_REFUSED = 2


def _worker_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=f"python -m {WORKER_MODULE}",
        description="One pyvia worker; started by the supervisor, not by hand.",
    )
    parser.add_argument("app", metavar="MODULE:ATTR")
    parser.add_argument("--graceful-timeout", type=float, default=3.0)
    parser.add_argument("--reload-spread", type=float, default=0.0)
    parser.add_argument("--cert", dest="certfile")
    parser.add_argument("--key", dest="keyfile")
    parser.add_argument("--set", dest="settings", action="append", default=[])
    parser.add_argument("--dev", action="store_true")
    return parser


def _configure_logging(worker_id: str) -> None:
    """The level and format of ``[log]`` (pyvia.toml, PYVIA_LOG__*), as the supervisor has them;
    text lines name the worker."""
    if logging.getLogger().handlers:
        return
    level, fmt = "INFO", "text"
    with contextlib.suppress(Exception):  # the supervisor checked the settings already
        from pyvia.ops.settings import load_settings

        options = load_settings().log_options()
        level, fmt = str(options["level"]).upper(), str(options["fmt"])
    configure_logging(level, fmt, tag=f"worker {worker_id} pid {os.getpid()}")


def _report(fd: int, what: bytes) -> None:
    with contextlib.suppress(OSError):
        os.write(fd, what)


def _load(spec: str, dev: bool) -> object:
    """The app; in dev mode an app that shows why it could not be loaded, instead of failing."""
    from pyvia.cli import AppNotFound, load_app

    if not dev:
        return load_app(spec)
    try:
        return load_app(spec)
    except (AppNotFound, Exception) as exc:
        from pyvia.devtools import BrokenApp

        logging.getLogger("pyvia.supervisor").error(
            "the app %s cannot be loaded; serving the error until the next change", spec, exc_info=exc
        )
        return BrokenApp(spec, exc)


def worker_main(argv: list[str] | None = None) -> int:
    """Serve the app on the inherited socket until SIGTERM, SIGINT, SIGUSR1 or the supervisor's death.

    SIGUSR1 is the supervisor retiring this worker in a reload: the same graceful stop as
    SIGTERM, with the streams ended over ``--reload-spread`` seconds.
    """
    args = _worker_parser().parse_args(argv)
    try:
        listen_fd = int(os.environ[LISTEN_FD_ENV])
        ready_fd = int(os.environ[READY_FD_ENV])
        life_fd = int(os.environ[LIFELINE_FD_ENV])
        go_fd = int(os.environ[GO_FD_ENV]) if os.environ.get(GO_FD_ENV) else None
        own_fd = int(os.environ[OWN_FD_ENV]) if os.environ.get(OWN_FD_ENV) else None
        balance = None
        if os.environ.get(BALANCE_FD_ENV):
            balance = (BalanceTable.from_env(os.environ[BALANCE_FD_ENV]), int(os.environ[BALANCE_SLOT_ENV]))
    except (KeyError, ValueError, OSError):
        print("this is a pyvia worker: start it with pyvia run", file=sys.stderr)
        return 2
    _configure_logging(os.environ.get(WORKER_ID_ENV, "?"))
    import asyncio

    import uvloop

    from pyvia.errors import ConfigError
    from pyvia.ops.settings import load_settings
    from pyvia.server.options import limits_for
    from pyvia.server.runner import StopPlan, serve

    try:
        app = _load(args.app, args.dev)
        proxies = getattr(getattr(app, "config", None), "trusted_proxies", ())  # a BrokenApp has none
        limits = limits_for(load_settings(command_line=args.settings), trusted_proxies=proxies)
    except ConfigError as exc:
        return _refused(exc)
    sock = socket.socket(fileno=listen_fd)
    sock.setblocking(False)
    own_sock = socket.socket(fileno=own_fd) if own_fd is not None else None
    _report(ready_fd, b"L")
    if go_fd is not None:  # held: the worker this one replaces is saving its state
        go = os.read(go_fd, 1)
        os.close(go_fd)
        if not go:
            return 0  # the supervisor is gone, or gave up on this reload
    plan = StopPlan(saved=lambda: _report(ready_fd, b"S"))

    def ready(host: str, port: int) -> None:
        _report(ready_fd, b"R")

    async def main() -> None:
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()

        def supervisor_gone() -> None:
            loop.remove_reader(life_fd)
            if not stop.is_set():
                logging.getLogger("pyvia.supervisor").warning("the supervisor is gone: stopping")
                stop.set()

        def retire() -> None:
            if not stop.is_set():
                plan.spread = args.reload_spread
                stop.set()

        loop.add_reader(life_fd, supervisor_gone)
        loop.add_signal_handler(signal.SIGUSR1, retire)
        await serve(
            app,  # type: ignore[arg-type]  # App or BrokenApp
            sock=sock,
            ready=ready,
            stop=stop,
            backlog=4096,
            plan=plan,
            limits=limits,
            balance=balance,
            worker_sock=own_sock,
            certfile=args.certfile,
            keyfile=args.keyfile,
            graceful_timeout=args.graceful_timeout,
        )

    try:
        uvloop.run(main())
    except ConfigError as exc:  # refused at start, such as a [db] url whose SQLite file cannot be opened
        return _refused(exc)
    except OSError as exc:
        if exc.errno == errno.EBADF:
            print(f"pyvia worker: the inherited socket (fd {listen_fd}) is not open", file=sys.stderr)
            return 1
        raise
    return 0


def _refused(exc: Exception) -> int:
    """A configuration the app refuses: one line, and the status that tells the supervisor that
    starting again will not help."""
    print(f"pyvia run: error: {exc}", file=sys.stderr)
    return CONFIG_REFUSED


def exit_fast(code: int) -> None:
    """After a graceful stop nothing is left to save: skip freeing the heap object by object
    (seconds with a large heap, bench/RESULTS.md finding 2), as ``pyvia run`` does."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
