"""``python -m bench pages|actions|tabs|hammer|storm|reconnect|calibrate|peers|overload [options]``: the harness.

Each command pins itself to CPU 0, prints the provenance, starts a fresh server on CPU 1 (gated
on its startup log, its affinity and a real page), warms up, measures, stops the server (SIGTERM,
SIGKILL after 5 s) and writes raw JSON lines to ``bench/results/<command>-<timestamp>.jsonl``.
Everything talks to 127.0.0.1 only and is bounded in time and count. ``calibrate`` starts no
server: it times Brotli on the server's core, to scale figures between machines.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench import actions, calibrate, hammer, overload, pages, peers, reconnect, storm, tabs
from bench.client import run as run_loop
from bench.fanout import wait_quiet
from bench.profile import start_py_spy, summarise
from bench.provenance import print_provenance, provenance
from bench.report import RESULTS, Recorder
from bench.server import CLIENT_CPU, Server, server_command, start_server

COMMANDS = {
    "pages": pages,
    "actions": actions,
    "tabs": tabs,
    "hammer": hammer,
    "storm": storm,
    "reconnect": reconnect,
    "calibrate": calibrate,
    "peers": peers,
    "overload": overload,
}
#: Commands that start no server through the session (``peers`` starts its own, one per contender).
NO_SERVER = {"calibrate", "peers"}


class Session:
    """One command's run: its recorder, the servers it starts and their optional profiles."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.recorder = Recorder(args.command)
        self.profiles: list[Path] = []
        self.env: dict[str, str] = getattr(COMMANDS[args.command], "SERVER_ENV", {})
        self._spies: dict[int, Any] = {}
        self._shown_startup = False

    async def start(self) -> Server:
        server = await start_server(
            self.args.app, self.args.runner, self.args.gc_stats, self.env, pyvia_src=self.args.pyvia_src
        )
        self.recorder.write(
            {
                "type": "server",
                "pid": server.pid,
                "port": server.port,
                "command": server.command,
                "env": self.env,
                "log": str(server.log_path),
                "startup_log": server.log_tail(10),
                "rss_kb_at_start": server.rss_kb(),
            }
        )
        if not self._shown_startup:  # the effective profile, as the server logged it (§6.3 B)
            self._shown_startup = True
            for line in server.log_tail(10).splitlines():
                if "autotune" in line or "capacity" in line:
                    print(f"# server log: {line.split(': ', 1)[-1][:200]}")
        if self.args.profile:
            out = RESULTS / f"{self.recorder.path.stem}-{len(self.profiles) + 1}.pyspy.txt"
            spy = start_py_spy(server.pid, out, native=self.args.native)
            if spy is not None:
                self._spies[server.pid] = spy
                self.profiles.append(out)
                time.sleep(0.5)  # let py-spy attach before the load starts
        return server

    async def stop(self, server: Server) -> None:
        spy = self._spies.pop(server.pid, None)
        if spy is not None:  # stop sampling first: the profile is of the load, not of the shutdown
            spy.send_signal(signal.SIGINT)
            try:
                _, err = spy.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                spy.kill()
                _, err = spy.communicate()
            if spy.returncode:
                print(f"# py-spy exited with {spy.returncode}: {err.decode(errors='replace')[-600:]}")
        rss = server.rss_kb()
        code = await server.stop()
        self.recorder.write(
            {
                "type": "stop",
                "pid": server.pid,
                "exit": code,
                "seconds": server.stop_seconds,
                "killed": server.killed,
                "rss_kb_at_stop": rss,
            }
        )
        print(
            f"# server stopped in {server.stop_seconds:.2f} s (exit {code}"
            f"{', SIGKILL after the 5 s grace' if server.killed else ''}; RSS then {rss / 1024:.0f} MB)"
        )
        if code not in (0, -15) and not server.killed:
            print(f"# server exited with {code}; log {server.log_path}:\n{server.log_tail()}")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name, module in COMMANDS.items():
        p = sub.add_parser(name, help=module.__doc__.split("\n")[0] if module.__doc__ else name)
        module.add_arguments(p)
        p.add_argument(
            "--quiet",
            type=float,
            default=0.0,
            metavar="SECONDS",
            help="first wait up to this long "
            "for both cores to be nearly idle (other processes under 5%%; default 0: start at once)",
        )
        if name in NO_SERVER:
            continue
        default_app = getattr(module, "DEFAULT_APP", "examples.counter:app")
        p.add_argument("--app", default=default_app, help=f"MODULE:ATTR of the app to serve (default {default_app})")
        p.add_argument(
            "--runner",
            choices=("auto", "cli", "python"),
            default="auto",
            help="'pyvia run' (cli), app.run() (python), or cli when it exists (auto)",
        )
        p.add_argument(
            "--profile",
            action="store_true",
            help="record the server with py-spy (CPU figures then "
            "carry the sampler's perturbation: use them for shares, not for the record)",
        )
        p.add_argument("--native", action="store_true", help="with --profile: include C frames (pauses the server)")
        p.add_argument("--gc-stats", action="store_true", help="time the server's garbage collections per window")
        p.add_argument(
            "--pyvia-src",
            metavar="DIR",
            help="serve pyvia from this checkout's src/ (an A/B against "
            "another version; the app still comes from this repository)",
        )
    prof = sub.add_parser("profile", help="summarise a py-spy collapsed-stack file")
    prof.add_argument("file", type=Path)
    prof.add_argument("--top", type=int, default=25)
    return parser


async def _main(args: argparse.Namespace) -> int:
    settings = {k: v for k, v in vars(args).items() if k not in ("command",)}
    settings["server_env"] = getattr(COMMANDS[args.command], "SERVER_ENV", {})
    if args.command in NO_SERVER:
        command: list[str] = []
    else:
        prelude = "<gc-stats prelude>\n" if args.gc_stats else ""
        command = ["taskset", "-c", "1", *server_command(args.app, 0, args.runner, prelude)]
    record = provenance(args.command, settings, command)
    print_provenance(record)
    if args.quiet:
        quiet = await wait_quiet(max_wait=args.quiet)
        record["quiet_wait"] = quiet
        print(
            f"# waited {quiet['waited_s']:.1f} s for quiet cores: server core {quiet['server_core_busy']:.0%} busy, "
            f"others on the client core {quiet['client_core_others']:.0%}",
            flush=True,
        )
    session = Session(args)
    session.recorder.write(record)
    print(f"# raw results: {session.recorder.path}", flush=True)
    summary = await COMMANDS[args.command].main(args, session)
    for path in session.profiles:
        if path.exists():
            print(summarise(path))
    return 1 if summary.get("dirty_reps") or summary.get("failed") or summary.get("dirty") else 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "profile":
        print(summarise(args.file, args.top))
        return 0
    os.sched_setaffinity(0, {CLIENT_CPU})
    try:
        return int(run_loop(_main(args)))
    except RuntimeError as exc:  # a start gate failed: say which, without a traceback
        print(f"python -m bench {args.command}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
