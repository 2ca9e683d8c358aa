"""The ``pyvia`` command: ``pyvia run MODULE:ATTR [--host H] [--port P] [--cert F --key F]``,
``pyvia reload``, ``pyvia config [--file pyvia.toml]``.

A wrong ``MODULE:ATTR`` gets one line saying what is wrong, without a traceback; an error raised
by the user's own module while it is imported keeps its traceback, since that is where the fix is.

``pyvia run APP [--workers N|auto] [--engine URL]``: a supervisor (:mod:`pyvia.server.supervisor`)
binds the socket and starts the workers (one by default), which serve; with several they share
state and broadcasts through ``--engine`` (``nats://…``, ``redis://…``) or through a
``nats-server`` the supervisor starts when none is given; with ``--cluster-address HOST[:PORT]``
they also serve the direct channel to nodes on other machines there (:mod:`pyvia.cluster.direct`).
``pyvia reload`` (or SIGHUP to the supervisor) replaces the workers one by one with new ones
running the code on disk; ``pyvia run --dev`` does so on each change of the app's files.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import logging
import os
import signal
import sys
from typing import TYPE_CHECKING, Any

from pyvia.errors import ConfigError

if TYPE_CHECKING:
    from pyvia.ops.settings import Settings

__all__ = ["AppNotFound", "load_app", "main"]


class AppNotFound(Exception):
    """``MODULE:ATTR`` does not name a pyvia App; the message says why."""


def load_app(spec: str) -> Any:
    """Import ``MODULE`` (the current directory first on ``sys.path``) and return its App ``ATTR``.

    ``ATTR`` may be dotted (``module:holder.app``). Raises :class:`AppNotFound`.
    """
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise AppNotFound(f"expected MODULE:ATTR, such as 'myapp:app', got {spec!r}")
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if module_name == missing or module_name.startswith(missing + "."):
            raise AppNotFound(f"no module named {missing!r} (looked in {cwd} and on sys.path)") from None
        raise  # the module exists but imports something missing: its traceback says where
    target: Any = module
    for part in attr.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise AppNotFound(f"module {module_name!r} has no attribute {attr!r}") from None
    from pyvia.app import App

    if not isinstance(target, App):
        raise AppNotFound(f"{spec!r} is {type(target).__name__!r}, not a pyvia App (create one with app = App())")
    return target


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pyvia", description="Real-time, server-rendered web apps.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    run = commands.add_parser(
        "run",
        help="serve an app on the native server",
        description="Serve an app on the native server until SIGTERM or Ctrl-C. A supervisor process holds "
        "the socket and runs the workers; SIGHUP to it, or pyvia reload, is a deploy: new workers "
        "start with the code on disk, and once each is ready the old one stops gracefully while "
        "its tabs reconnect to the new code and revive with their signals.",
    )
    run.add_argument("app", metavar="MODULE:ATTR", help="where the App is, such as myapp:app")
    run.add_argument(
        "--host", default=None, help="address to listen on (default: [server] host in pyvia.toml, else 127.0.0.1)"
    )
    run.add_argument(
        "--port", type=int, default=None, help="port to listen on (default: [server] port in pyvia.toml, else 3000)"
    )
    run.add_argument("--cert", dest="certfile", metavar="FILE", help="TLS certificate chain (PEM); needs --key")
    run.add_argument("--key", dest="keyfile", metavar="FILE", help="TLS private key (PEM); needs --cert")
    run.add_argument(
        "--workers",
        default=None,
        metavar="N|auto",
        help="worker processes sharing the socket; auto = the cgroup CPU quota (default: 1)",
    )
    run.add_argument(
        "--engine",
        metavar="URL",
        default=None,
        help="where workers and nodes share state: nats://HOST:PORT or redis://HOST:PORT/DB "
        "(default: $PYVIA_ENGINE_URL, else a local nats-server with --workers > 1)",
    )
    run.add_argument(
        "--cluster-address",
        metavar="HOST[:PORT]",
        default=None,
        help="nodes on other machines forward actions to this node's workers over TCP at HOST (this "
        "machine's private address), port PORT + worker id or any free one; needs --engine, the "
        "same secret on every node, and a private network: not encrypted (docs/deployment.md)",
    )
    run.add_argument(
        "--worker-ports",
        type=int,
        default=None,
        metavar="PORT",
        help="each worker also serves its own port, PORT + its id (0, 1, ...), for a proxy that keeps "
        "a browser on one worker, such as Caddy's lb_policy cookie (docs/deployment.md)",
    )
    run.add_argument(
        "--graceful-timeout",
        type=float,
        default=None,
        metavar="SECONDS",
        help="how long a stop waits for streams and requests to end (default: 3)",
    )
    run.add_argument(
        "--set",
        dest="settings",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a [server] or [log] setting over pyvia.toml and PYVIA_* (repeatable), such as "
        "--set max_streams_per_ip=64 or --set allowed_hosts='[\"example.com\"]'",
    )
    run.add_argument(
        "--reload-spread",
        type=float,
        default=2.0,
        metavar="SECONDS",
        help="in a reload, an old worker ends its streams over this many seconds in random order, "
        "so its tabs reconnect staggered rather than all at once (default: 2)",
    )
    run.add_argument(
        "--pid-file",
        default=None,
        metavar="FILE",
        help="write the supervisor's process id here, for pyvia reload "
        "(default: [server] pid_file in pyvia.toml, else none)",
    )
    run.add_argument(
        "--dev",
        action="store_true",
        help="development: reload on each change of the app's files (watchfiles), App(dev=True) "
        "by default, errors shown in the page. Never in production",
    )
    reload = commands.add_parser(
        "reload",
        help="deploy: replace the workers of a running pyvia run with the code on disk",
        description="Send SIGHUP to the supervisor of a running pyvia run: worker by worker, a new one "
        "starts, and once it is ready the old one stops gracefully; its tabs reconnect "
        "staggered and revive on the new code. The supervisor logs 'reload done'.",
    )
    target = reload.add_mutually_exclusive_group()
    target.add_argument(
        "--pid-file",
        metavar="FILE",
        help="the file pyvia run --pid-file wrote (default: [server] pid_file in pyvia.toml)",
    )
    target.add_argument("--pid", type=int, metavar="PID", help="the supervisor's process id")
    config = commands.add_parser(
        "config",
        help="print the effective configuration and where each value comes from",
        description="Print the effective configuration (pyvia.toml < PYVIA_* < keywords) "
        "with each value's source, secrets redacted.",
    )
    config.add_argument("--file", metavar="FILE", help="the configuration file (default: ./pyvia.toml if present)")
    commands.add_parser(
        "bench",
        help="the benchmark harness, from a checkout of the repository: pyvia bench "
        "pages|actions|tabs|hammer|storm|calibrate (the same as python -m bench)",
        add_help=False,
    )
    return parser


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``pyvia`` script and of ``python -m pyvia``.

    Always ends with SystemExit carrying the exit status (0 after a clean stop, 1 when the
    server cannot start, 2 for a usage error, 130 for Ctrl-C during start), as argparse does.
    """
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["bench"]:  # every further argument is the harness's own
        raise SystemExit(_bench(argv[1:]))
    args = _parser().parse_args(argv)
    if args.command == "config":
        from pyvia.ops.settings import config_command

        raise SystemExit(config_command(args.file))
    if args.command == "reload":
        raise SystemExit(_reload(args))
    raise SystemExit(_run(args))


def _bench(argv: list[str]) -> int:
    """``python -m bench ARGV`` of the repository in the working directory (bench/ is not installed)."""
    sys.path.insert(0, os.getcwd())
    try:
        from bench.__main__ import main as bench_main
    except ImportError:
        print(
            "pyvia bench: run it in a checkout of the pyvia repository (the harness is its bench/ folder)",
            file=sys.stderr,
        )
        return 2
    return int(bench_main(argv))


def _reload(args: argparse.Namespace) -> int:
    """``pyvia reload``: SIGHUP to the supervisor named by ``--pid`` or by the pid file."""
    from pyvia.server.supervisor import read_pid_file

    pid = args.pid
    if pid is None:
        path = args.pid_file
        if path is None:
            from pyvia.ops.settings import load_settings

            try:
                path = load_settings()["server.pid_file"]
            except ConfigError as exc:
                print(f"pyvia reload: error: {exc}", file=sys.stderr)
                return 2
        if path is None:
            print(
                "pyvia reload: error: which server? give --pid-file FILE (the one pyvia run --pid-file "
                "wrote), --pid PID, or [server] pid_file in pyvia.toml",
                file=sys.stderr,
            )
            return 2
        try:
            pid = read_pid_file(path)
        except (OSError, ValueError) as exc:
            print(f"pyvia reload: error: cannot read the pid file {path}: {exc}", file=sys.stderr)
            return 1
    if not _is_pyvia(pid):
        print(f"pyvia reload: error: process {pid} is not a running pyvia (a stale pid file?)", file=sys.stderr)
        return 1
    try:
        os.kill(pid, signal.SIGHUP)
    except OSError as exc:
        print(f"pyvia reload: error: cannot signal process {pid}: {exc}", file=sys.stderr)
        return 1
    print(f"pyvia reload: sent SIGHUP to the supervisor (pid {pid}); it logs 'reload done' when done")
    return 0


def _is_pyvia(pid: int) -> bool:
    """Whether ``pid`` runs pyvia, from its command line (a pid file can outlive its process)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as file:
            command = file.read()
    except FileNotFoundError:
        return False
    except OSError:  # no /proc here: trust the pid
        return True
    return b"pyvia" in command


def _apply_settings(args: argparse.Namespace) -> Any:
    """Fill what the command line left out from pyvia.toml and PYVIA_SERVER__* / PYVIA_LOG__*,
    and set up logging; return the settings."""
    from pyvia.ops.logs import configure_logging
    from pyvia.ops.settings import load_settings

    settings = load_settings(command_line=args.settings)
    server = settings.server_options()
    args.host = args.host or server["host"] or "127.0.0.1"
    if args.port is None:  # 0 is a port too: "any free one"
        args.port = server["port"] if server["port"] is not None else 3000
    if args.certfile is None and args.keyfile is None:
        args.certfile, args.keyfile = server["certfile"], server["keyfile"]
    if args.workers is None:
        args.workers = str(settings["server.workers"] or 1)
    if args.pid_file is None:
        args.pid_file = settings["server.pid_file"]
    configure_logging(**settings.log_options())
    return settings


def _run(args: argparse.Namespace) -> int:
    try:
        settings = _apply_settings(args)
    except ConfigError as exc:
        print(f"pyvia run: error: {exc}", file=sys.stderr)
        return 2
    if (args.certfile is None) != (args.keyfile is None):
        print("pyvia run: error: --cert and --key go together", file=sys.stderr)
        return 2
    from pyvia.cluster import ENGINE_URL_ENV, check_engine_url
    from pyvia.config import cluster_host_port
    from pyvia.server.supervisor import resolve_workers

    try:
        workers, source = resolve_workers(args.workers)
        engine = args.engine or os.environ.get(ENGINE_URL_ENV) or None
        if engine is not None:
            check_engine_url(engine, workers=workers)
        if args.cluster_address is not None:
            cluster_host_port(args.cluster_address)  # a ConfigError, a ValueError
            if engine is None:
                raise ValueError(
                    "--cluster-address links nodes on several machines, which share an engine: "
                    "give --engine nats://... or redis://..."
                )
    except ValueError as exc:
        print(f"pyvia run: error: {exc}", file=sys.stderr)
        return 2
    if args.dev and importlib.util.find_spec("watchfiles") is None:
        print(
            "pyvia run: error: --dev watches files with watchfiles, in the dev extra: pip install -e '.[dev]'",
            file=sys.stderr,
        )
        return 2
    if args.reload_spread < 0:
        print("pyvia run: error: --reload-spread must be 0 or more seconds", file=sys.stderr)
        return 2
    if args.worker_ports is not None and not 0 < args.worker_ports <= 65536 - workers:
        print(
            f"pyvia run: error: --worker-ports {args.worker_ports} leaves no room for {workers} ports "
            f"(1-{65536 - workers})",
            file=sys.stderr,
        )
        return 2
    try:
        load_app(args.app)  # a wrong MODULE:ATTR is one line now, not three failed workers later
    except AppNotFound as exc:
        print(f"pyvia run: error: {exc}", file=sys.stderr)
        return 2
    except Exception:
        if not args.dev:
            raise
        logging.getLogger("pyvia").exception(
            "the app does not import; its workers show the error until the next change"
        )
    logging.getLogger("pyvia").info("%s", profile_line(settings, args.workers, workers))  # what was derived
    return _run_workers(args, workers, source, engine)


def profile_line(settings: Settings, spec: str, workers: int) -> str:
    """The autotune start-up line for ``workers`` processes started from ``--workers spec``: a
    count given there pins the profile (``auto`` leaves the count to autotune, as it was derived)."""
    from pyvia.ops.autotune import profile_for

    given = None if str(spec).strip().lower() == "auto" else workers
    return profile_for(settings, workers=given).log_line()


def console_main() -> None:
    """The ``pyvia`` script and ``python -m pyvia``: :func:`main`, then a fast process exit.

    After a graceful stop nothing is left to save, so the process skips freeing a large heap
    object by object (interpreter teardown took seconds with a large heap of page contexts,
    bench/RESULTS.md finding 2). Calling :func:`main` in-process keeps the normal exit.
    """
    try:
        main()
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
        if isinstance(stop.code, str):
            print(stop.code, file=sys.stderr)
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def watched_folder(spec: str) -> str:
    """The folder dev mode watches: the app's top-level package, or the folder of its module
    (found without importing it, since it may not import)."""
    top = spec.partition(":")[0].split(".")[0]
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        found = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        found = None
    if found is None:
        return cwd
    if found.submodule_search_locations:
        return str(next(iter(found.submodule_search_locations)))
    if found.origin and os.path.isfile(found.origin):
        return os.path.dirname(os.path.abspath(found.origin))
    return cwd


def _run_workers(args: argparse.Namespace, workers: int, source: str, engine: str | None) -> int:
    from pyvia.server.supervisor import Supervisor, SupervisorConfig

    config = SupervisorConfig(
        app=args.app,
        host=args.host,
        port=args.port,
        workers=workers,
        engine_url=engine,
        certfile=args.certfile,
        keyfile=args.keyfile,
        worker_source=source,
        graceful_timeout=3.0 if args.graceful_timeout is None else args.graceful_timeout,
        settings=tuple(args.settings),
        reload_spread=args.reload_spread,
        pid_file=args.pid_file,
        dev=args.dev,
        worker_ports=args.worker_ports,
        cluster_address=args.cluster_address,
        watch=(watched_folder(args.app),) if args.dev else (),
    )
    try:
        return Supervisor(config).run()
    except KeyboardInterrupt:
        return 130
    except (OSError, RuntimeError, TimeoutError) as exc:  # the port is taken; nats-server cannot start
        print(f"pyvia run: error: {exc}", file=sys.stderr)
        return 1
