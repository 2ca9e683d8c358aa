"""``pyvia run APP --workers N``: one listening socket, N worker processes, restarts, reloads, stop.

The supervisor binds the socket once (SO_REUSEADDR, backlog 4096) and starts N workers with
``python -m pyvia.server.supervisor``; each inherits the socket's file descriptor and serves the
app on the native server (``pyvia.server.runner.serve(app, sock=...)``). The kernel hands each new
connection to one of the workers blocked in ``accept``. A fresh interpreter per worker (not a
fork) means a reload runs the new code, and no state leaks between workers by accident: what
they share goes through the engine (DESIGN.md, "Multi-worker and multi-node").

Each worker gets three descriptors besides the socket, named in its environment:

* ``PYVIA_LISTEN_FD`` — the listening socket;
* ``PYVIA_READY_FD`` — the write end of a pipe; the worker writes one byte once it accepts
  connections (a reload waits for it before retiring an old worker);
* ``PYVIA_LIFELINE_FD`` — the read end of a pipe whose write end only the supervisor holds: when
  the supervisor dies, even by SIGKILL, the worker reads EOF and stops (no orphans).

and ``PYVIA_ENGINE_URL`` (with N > 1 and no ``--engine``, a ``nats-server`` started here),
``PYVIA_SECRET`` (one secret for all, so a context id made by one worker verifies on another),
``PYVIA_WORKER_ID`` and ``PYVIA_WORKERS``.

Signals: SIGTERM or SIGINT stop everything (SIGTERM to each worker, SIGKILL by PID to those still
running after the graceful budget; a second signal kills at once). SIGHUP is a rolling reload:
for each worker in turn a new one starts, and once it is ready the old one gets SIGTERM and is
waited for. A worker that dies is logged (exit code or signal) and restarted after 0.5 s,
doubling to 10 s while it keeps dying young. When a worker has failed 3 times in a row before
accepting connections and no worker is serving, the supervisor stops with status 1: the app
cannot start, and a restart loop would only hide that. (While other workers serve, it keeps
restarting the failing one with the backoff.)
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import logging
import os
import select
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass

__all__ = ["Supervisor", "SupervisorConfig", "resolve_workers", "worker_main"]

log = logging.getLogger("pyvia.supervisor")

LISTEN_FD_ENV = "PYVIA_LISTEN_FD"
READY_FD_ENV = "PYVIA_READY_FD"
LIFELINE_FD_ENV = "PYVIA_LIFELINE_FD"
WORKER_ID_ENV = "PYVIA_WORKER_ID"
WORKERS_ENV = "PYVIA_WORKERS"

_RESTART_FIRST = 0.5
_RESTART_CAP = 10.0
_YOUNG = 10.0  # a worker that dies sooner than this after start backs off further
_GIVE_UP = 3  # failures in a row before accepting connections, with no worker serving


# --- how many workers --------------------------------------------------------------------------------


def resolve_workers(spec: str | int) -> tuple[int, str]:
    """``"auto"`` → :mod:`pyvia.ops.autotune`'s count; a positive int (or its text) → itself.

    Auto is the cgroup v2 CPU quota rounded up, else the v1 quota, else the host's CPUs (at most
    32), and never more workers than the memory limit holds at 128 MiB each. Returns the count
    and where it came from, for the start-up line. Raises ValueError for anything else.
    """
    if isinstance(spec, str) and spec.strip().lower() == "auto":
        from pyvia.ops.autotune import derive_profile, read_limits

        limits = read_limits()
        profile = derive_profile(limits)
        return profile.workers, f"auto: {profile.sources['workers']}, cpu {limits.cpus:g} ({limits.cpu_source})"
    try:
        count = int(spec)
    except (TypeError, ValueError):
        raise ValueError(f"--workers takes a positive number or 'auto', got {spec!r}") from None
    if count < 1:
        raise ValueError(f"--workers takes a positive number or 'auto', got {spec!r}")
    return count, "given"


# --- the supervisor ------------------------------------------------------------------------------------


@dataclass(slots=True)
class SupervisorConfig:
    """What ``pyvia run`` was asked for; ``engine_url`` None with workers > 1 starts a nats-server."""

    app: str
    host: str = "127.0.0.1"
    port: int = 3000
    workers: int = 2
    engine_url: str | None = None
    certfile: str | None = None
    keyfile: str | None = None
    graceful_timeout: float = 3.0
    ready_timeout: float = 60.0
    worker_source: str = "given"
    #: ``pyvia run --set KEY=VALUE`` texts, passed on to every worker (which reads the rest of
    #: the configuration itself, so a restarted worker sees an edited pyvia.toml).
    settings: tuple[str, ...] = ()


class _Worker:
    """One worker process and its readiness pipe."""

    __slots__ = ("proc", "ready", "ready_fd", "retiring", "slot", "started", "term_deadline")

    def __init__(self, slot: int, proc: subprocess.Popen[bytes], ready_fd: int) -> None:
        self.slot = slot
        self.proc = proc
        self.ready_fd: int | None = ready_fd
        self.ready = False
        self.retiring = False  # replaced by a reload or stopping: its exit is expected
        self.started = time.monotonic()
        self.term_deadline: float | None = None

    @property
    def pid(self) -> int:
        return self.proc.pid

    def close_pipe(self) -> None:
        if self.ready_fd is not None:
            with contextlib.suppress(OSError):
                os.close(self.ready_fd)
            self.ready_fd = None


def _describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with status {code}"


class Supervisor:
    """Runs the workers of one ``pyvia run --workers N`` until SIGTERM/SIGINT (see the module doc)."""

    def __init__(self, config: SupervisorConfig) -> None:
        self.config = config
        self.workers: list[_Worker] = []
        self.sock: socket.socket | None = None
        self.nats: object | None = None  # LocalNats, imported only when needed
        self.engine_url = config.engine_url
        self._wake_r = -1
        self._wake_w = -1
        self._life_r = -1
        self._life_w = -1
        self._signals: list[int] = []
        self._stopping = False
        self._stop_deadline: float | None = None
        self._restart_at: dict[int, float] = {}
        self._delay: dict[int, float] = {}
        self._failures: dict[int, int] = {}
        self._reload: list[int] | None = None  # slots still to replace
        self._reload_new: _Worker | None = None
        self._reload_old: _Worker | None = None
        self._reload_deadline = 0.0
        self._announced = False
        self.exit_status = 0

    # --- life cycle ------------------------------------------------------------------------------

    def run(self) -> int:
        """Start, supervise until told to stop, stop; return the exit status."""
        if not logging.getLogger().handlers:
            logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        self._install_signals()
        try:
            self._start()
            self._loop()
        finally:
            self._cleanup()
        return self.exit_status

    def _start(self) -> None:
        from pyvia.server.runner import bind_socket

        cfg = self.config
        if cfg.workers > 1 and self.engine_url is None:
            from pyvia.cluster.nats_server import LocalNats

            nats = LocalNats(die_with_parent=True)
            self.engine_url = nats.start()
            self.nats = nats
            log.info("started nats-server (pid %s) for the workers at %s", nats.pid, self.engine_url)
        sock = bind_socket(cfg.host, cfg.port)
        sock.listen(4096)  # machine-limits.md: somaxconn is 4096 here; bursts of reconnecting tabs queue
        self.sock = sock
        self._life_r, self._life_w = os.pipe()
        os.set_blocking(self._life_w, False)
        host, port = sock.getsockname()[:2]
        scheme = "https" if cfg.certfile else "http"
        shown = f"[{host}]" if ":" in str(host) else host
        self._url = f"{scheme}://{shown}:{port}"
        log.info("pyvia supervisor (pid %d): %d worker(s) (%s) on %s, engine %s",
                 os.getpid(), cfg.workers, cfg.worker_source, self._url, self._engine_label())
        for slot in range(cfg.workers):
            self._spawn(slot)

    def _engine_label(self) -> str:
        if self.engine_url is None:
            return "memory (one worker)"
        from pyvia.cluster.base import redact_url

        return redact_url(self.engine_url)

    def _install_signals(self) -> None:
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        signal.set_wakeup_fd(self._wake_w, warn_on_full_buffer=False)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGCHLD):
            signal.signal(sig, self._on_signal)

    def _on_signal(self, signum: int, frame: object) -> None:
        self._signals.append(signum)

    def _cleanup(self) -> None:
        for worker in self.workers:  # only after an error in the loop: normally none is left
            with contextlib.suppress(OSError):
                worker.proc.kill()
            with contextlib.suppress(Exception):
                worker.proc.wait(5)
            worker.close_pipe()
        self.workers.clear()
        if self.nats is not None:
            self.nats.close()  # type: ignore[attr-defined]  # a LocalNats
            self.nats = None
        if self.sock is not None:
            self.sock.close()
        signal.set_wakeup_fd(-1)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGCHLD):
            signal.signal(sig, signal.SIG_DFL)
        for fd in (self._wake_r, self._wake_w, self._life_r, self._life_w):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)

    # --- workers ---------------------------------------------------------------------------------

    def _spawn(self, slot: int) -> _Worker:
        cfg = self.config
        assert self.sock is not None
        ready_r, ready_w = os.pipe()
        os.set_blocking(ready_r, False)
        env = dict(os.environ)
        env.update({
            LISTEN_FD_ENV: str(self.sock.fileno()),
            READY_FD_ENV: str(ready_w),
            LIFELINE_FD_ENV: str(self._life_r),
            WORKER_ID_ENV: str(slot),
            WORKERS_ENV: str(cfg.workers),
        })
        if self.engine_url is not None:
            env["PYVIA_ENGINE_URL"] = self.engine_url
        if not env.get("PYVIA_SECRET"):
            from pyvia.session import load_secret

            env["PYVIA_SECRET"] = load_secret(None).decode()  # the persisted one, or one for this run
        args = [sys.executable, "-m", "pyvia.server.supervisor", cfg.app,
                "--graceful-timeout", str(cfg.graceful_timeout)]
        if cfg.certfile:
            args += ["--cert", cfg.certfile]
        if cfg.keyfile:
            args += ["--key", cfg.keyfile]
        for pair in cfg.settings:
            args += ["--set", pair]
        try:
            # a session of its own: Ctrl-C reaches the supervisor only, and each worker gets exactly
            # one SIGTERM (the native server restores the default action once it starts stopping,
            # so a second signal from the terminal would cut its graceful stop short)
            proc = subprocess.Popen(args, env=env, pass_fds=(self.sock.fileno(), ready_w, self._life_r),
                                    start_new_session=True)
        finally:
            os.close(ready_w)
        worker = _Worker(slot, proc, ready_r)
        self.workers.append(worker)
        log.info("worker %d started (pid %d)", slot, proc.pid)
        return worker

    def _slot_has_live(self, slot: int) -> bool:
        return any(w.slot == slot and not w.retiring for w in self.workers)

    def _on_exit(self, worker: _Worker) -> None:
        code = worker.proc.returncode
        self.workers.remove(worker)
        worker.close_pipe()
        if worker.retiring or self._stopping:
            log.info("worker %d (pid %d) %s", worker.slot, worker.pid, _describe_exit(code))
            return
        slot = worker.slot
        if worker is self._reload_new:
            return  # the reload step sees it and gives up
        lived = time.monotonic() - worker.started
        if not worker.ready:
            self._failures[slot] = self._failures.get(slot, 0) + 1
            if self._failures[slot] >= _GIVE_UP and not any(w.ready for w in self.workers):
                log.error("worker %d %s before accepting connections, %d times in a row, and no worker "
                          "serves: stopping", slot, _describe_exit(code), _GIVE_UP)
                self.exit_status = 1
                self._begin_stop()
                return
        delay = self._delay.get(slot, _RESTART_FIRST)
        delay = min(_RESTART_CAP, delay * 2) if lived < _YOUNG and slot in self._delay else _RESTART_FIRST
        self._delay[slot] = delay
        if not self._slot_has_live(slot):
            self._restart_at[slot] = time.monotonic() + delay
            log.warning("worker %d (pid %d) %s after %.1f s; restarting in %.1f s",
                        slot, worker.pid, _describe_exit(code), lived, delay)

    def _read_ready(self, worker: _Worker) -> None:
        if worker.ready_fd is None:
            return
        try:
            data = os.read(worker.ready_fd, 16)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if data:
            worker.ready = True
            self._failures.pop(worker.slot, None)
        worker.close_pipe()  # one byte says ready; EOF alone means it died first
        if worker.ready and not self._announced and all(w.ready for w in self.workers):
            self._announced = True
            log.info("pyvia listening on %s with %d workers", self._url, self.config.workers)

    # --- the loop --------------------------------------------------------------------------------

    def _loop(self) -> None:
        while True:
            timeout = self._next_timeout()
            fds = [self._wake_r] + [w.ready_fd for w in self.workers if w.ready_fd is not None]
            try:
                readable, _, _ = select.select(fds, [], [], timeout)
            except InterruptedError:
                readable = []
            if self._wake_r in readable:
                with contextlib.suppress(BlockingIOError):
                    while os.read(self._wake_r, 512):
                        pass
            self._handle_signals()
            for worker in list(self.workers):
                if worker.ready_fd is not None and worker.ready_fd in readable:
                    self._read_ready(worker)
            for worker in list(self.workers):
                if worker.proc.poll() is not None:
                    if worker.ready_fd is not None:
                        self._read_ready(worker)
                    self._on_exit(worker)
            now = time.monotonic()
            self._kill_overdue(now)
            if self._stopping:
                if not self.workers:
                    return
                continue
            self._step_reload(now)
            for slot, at in list(self._restart_at.items()):
                if at <= now:
                    del self._restart_at[slot]
                    if not self._slot_has_live(slot):
                        self._spawn(slot)

    def _next_timeout(self) -> float:
        now = time.monotonic()
        moments = [now + 1.0, *self._restart_at.values()]
        moments += [w.term_deadline for w in self.workers if w.term_deadline is not None]
        if self._stop_deadline is not None:
            moments.append(self._stop_deadline)
        return max(0.0, min(moments) - now)

    def _handle_signals(self) -> None:
        signals, self._signals = self._signals, []
        for signum in signals:
            if signum in (signal.SIGTERM, signal.SIGINT):
                if self._stopping:
                    log.warning("second stop signal: killing the workers now")
                    for worker in self.workers:
                        self._kill(worker)
                else:
                    log.info("%s: stopping %d worker(s)", signal.Signals(signum).name, len(self.workers))
                    self._begin_stop()
            elif signum == signal.SIGHUP and not self._stopping:
                self._begin_reload()

    def _begin_stop(self) -> None:
        self._stopping = True
        self._restart_at.clear()
        self._reload = None
        deadline = time.monotonic() + self.config.graceful_timeout + 1.0
        self._stop_deadline = deadline
        for worker in self.workers:
            self._terminate(worker, deadline)

    def _terminate(self, worker: _Worker, deadline: float) -> None:
        worker.retiring = True
        worker.term_deadline = deadline
        with contextlib.suppress(ProcessLookupError):
            os.kill(worker.pid, signal.SIGTERM)

    def _kill(self, worker: _Worker) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(worker.pid, signal.SIGKILL)
        worker.term_deadline = None

    def _kill_overdue(self, now: float) -> None:
        for worker in self.workers:
            if worker.term_deadline is not None and now >= worker.term_deadline and worker.proc.poll() is None:
                log.warning("worker %d (pid %d) still running after %.1f s: SIGKILL",
                            worker.slot, worker.pid, self.config.graceful_timeout)
                self._kill(worker)

    # --- rolling reload --------------------------------------------------------------------------

    def _begin_reload(self) -> None:
        if self._reload is not None:
            log.warning("SIGHUP during a reload: ignored")
            return
        slots = sorted({w.slot for w in self.workers if not w.retiring} | set(self._restart_at))
        log.info("SIGHUP: reloading %d worker(s) one by one", len(slots))
        self._reload = slots

    def _step_reload(self, now: float) -> None:
        if self._reload is None:
            return
        new, old = self._reload_new, self._reload_old
        if new is None and old is None:
            if not self._reload:
                self._reload = None
                log.info("reload done")
                return
            slot = self._reload.pop(0)
            self._restart_at.pop(slot, None)
            self._reload_old = next((w for w in self.workers if w.slot == slot and not w.retiring), None)
            self._reload_new = self._spawn(slot)
            self._reload_deadline = now + self.config.ready_timeout
            return
        if new is not None:
            if new.ready:
                self._reload_new = None
                if old is not None:
                    self._terminate(old, now + self.config.graceful_timeout + 1.0)
                return
            if new not in self.workers or now >= self._reload_deadline:
                log.error("reload stopped: the new worker %d (pid %d) did not become ready; the others keep "
                          "their old code", new.slot, new.pid)
                if new in self.workers:
                    new.retiring = True
                    self._kill(new)
                if old is None or old not in self.workers:
                    self._restart_at[new.slot] = now + _RESTART_FIRST
                self._reload = None
                self._reload_new = None
                self._reload_old = None
            return
        if old is not None and old not in self.workers:
            self._reload_old = None  # retired; next slot


# --- the worker process ----------------------------------------------------------------------------


def _worker_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m pyvia.server.supervisor",
                                     description="One pyvia worker; started by the supervisor, not by hand.")
    parser.add_argument("app", metavar="MODULE:ATTR")
    parser.add_argument("--graceful-timeout", type=float, default=3.0)
    parser.add_argument("--cert", dest="certfile")
    parser.add_argument("--key", dest="keyfile")
    parser.add_argument("--set", dest="settings", action="append", default=[])
    return parser


def worker_main(argv: list[str] | None = None) -> int:
    """Serve the app on the inherited socket until SIGTERM, SIGINT or the supervisor's death."""
    args = _worker_parser().parse_args(argv)
    try:
        listen_fd = int(os.environ[LISTEN_FD_ENV])
        ready_fd = int(os.environ[READY_FD_ENV])
        life_fd = int(os.environ[LIFELINE_FD_ENV])
    except (KeyError, ValueError):
        print("this is a pyvia worker: start it with pyvia run --workers N", file=sys.stderr)
        return 2
    worker_id = os.environ.get(WORKER_ID_ENV, "?")
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO,
                            format=f"%(asctime)s %(levelname)s %(name)s [worker {worker_id} pid %(process)d]: "
                                   "%(message)s")
    import asyncio

    import uvloop

    from pyvia.cli import load_app
    from pyvia.ops.settings import load_settings
    from pyvia.server.options import limits_for
    from pyvia.server.runner import serve

    app = load_app(args.app)
    limits = limits_for(load_settings(command_line=args.settings), trusted_proxies=app.config.trusted_proxies)
    sock = socket.socket(fileno=listen_fd)
    sock.setblocking(False)

    def ready(host: str, port: int) -> None:
        with contextlib.suppress(OSError):
            os.write(ready_fd, b"R")
        with contextlib.suppress(OSError):
            os.close(ready_fd)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()

        def supervisor_gone() -> None:
            loop.remove_reader(life_fd)
            if not stop.is_set():
                logging.getLogger("pyvia.supervisor").warning("the supervisor is gone: stopping")
                stop.set()

        loop.add_reader(life_fd, supervisor_gone)
        await serve(app, sock=sock, ready=ready, stop=stop, backlog=4096, limits=limits,
                    certfile=args.certfile, keyfile=args.keyfile, graceful_timeout=args.graceful_timeout)

    try:
        uvloop.run(main())
    except OSError as exc:
        if exc.errno == errno.EBADF:
            print(f"pyvia worker: the inherited socket (fd {listen_fd}) is not open", file=sys.stderr)
            return 1
        raise
    return 0


if __name__ == "__main__":
    raise SystemExit(worker_main())
