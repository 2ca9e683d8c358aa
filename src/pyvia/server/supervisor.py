"""``pyvia run APP [--workers N]``: one listening socket, N worker processes, restarts, reloads, stop.

The supervisor binds the socket once (SO_REUSEADDR, backlog 4096) and starts N workers with
``python -m pyvia.server.supervisor``; each inherits the socket's file descriptor and serves the
app on the native server (``pyvia.server.runner.serve(app, sock=...)``). With several workers,
each accepts only while it holds the fewest open connections, so new tabs spread evenly
(:mod:`pyvia.server.balance`: a least-connections accept over a table the workers share). A
fresh interpreter per worker (not a fork) means a reload runs the new code, and no state leaks
between workers by accident: what they share goes through the engine (DESIGN.md, "Multi-worker
and multi-node").

``pyvia run`` always runs one, also for one worker: the worker is the process that serves (a page
view costs what it costs on ``app.run()``), the supervisor only restarts and replaces it, so a
deploy is an event (SIGHUP, or ``pyvia reload``) rather than a restart that refuses connections.

Each worker gets these descriptors besides the socket, named in its environment:

* ``PYVIA_LISTEN_FD`` — the listening socket;
* ``PYVIA_READY_FD`` — the write end of a pipe on which the worker reports, one byte each:
  ``L`` the app is imported, ``R`` it accepts connections, ``S`` it stopped taking requests and
  saved what it persists (the first step of its graceful stop);
* ``PYVIA_LIFELINE_FD`` — the read end of a pipe whose write end only the supervisor holds: when
  the supervisor dies, even by SIGKILL, the worker reads EOF and stops (no orphans);
* ``PYVIA_GO_FD`` (a held worker only, below) — the worker imports the app, reports ``L``, then
  waits for a byte on this pipe before it starts the app and accepts;
* ``PYVIA_BALANCE_FD`` and ``PYVIA_BALANCE_SLOT`` (several workers) — the shared table of open
  connections with a doorbell per slot (descriptors, comma-separated), and this process's slot
  in it, cleared here when the process exits.

and ``PYVIA_ENGINE_URL`` (with N > 1 and no ``--engine``, a ``nats-server`` started here),
``PYVIA_SECRET`` (one secret for all, so a context id made by one worker verifies on another),
``PYVIA_CLUSTER_ADDRESS`` (``--cluster-address``), ``PYVIA_WORKER_ID`` and ``PYVIA_WORKERS``.

Signals: SIGTERM or SIGINT stop everything (SIGTERM to each worker, SIGKILL by PID to those still
running after the graceful budget; a second signal kills at once). SIGHUP is a rolling reload:
for each worker in turn a new one starts (a fresh interpreter: the code on disk now), and once it
is ready the old one gets SIGUSR1, its cue to retire: a graceful stop that ends its streams over
``reload_spread`` seconds in random order, so its tabs reconnect staggered, to the workers that
accept, and revive there from their signed ids. The supervisor waits for it to exit before the
next slot.

With an engine (several workers), state lives in the engine and the new worker accepts while the
old one drains. Without one (one worker, no ``--engine``) the worker process owns the state, and
two owners at once would split it: the new worker is *held*. It imports the app (the slow part)
while the old one serves; then the old one retires, stops taking requests and saves its state
(``persist_path``) and says ``S``; only then the new one gets its go, restores that state and
accepts. Connections arriving in between wait in the listen backlog (milliseconds); none is
refused, since the supervisor holds the socket throughout.

In dev mode (``pyvia run --dev``) a thread watches the app's files with ``watchfiles`` and sends
the supervisor a SIGHUP on each change; a worker whose app fails to import serves the error
instead (:mod:`pyvia.devtools`), and the next change reloads again.

A worker that dies is logged (exit code or signal) and restarted after 0.5 s, doubling to 10 s
while it keeps dying young. When a worker has failed 3 times in a row before
accepting connections and no worker is serving, the supervisor stops with status 1: the app
cannot start, and a restart loop would only hide that. (While other workers serve, it keeps
restarting the failing one with the backoff.) A worker whose app refuses its configuration at
start (a ``ConfigError``, such as a ``[db]`` url that cannot be opened) prints one line and
exits with status 2; with no worker serving, the supervisor stops at once, with status 2.
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
from typing import TYPE_CHECKING

from pyvia.cluster import CLUSTER_ADDRESS_ENV, ENGINE_URL_ENV, WORKER_ID_ENV, WORKERS_ENV
from pyvia.cluster.base import redact_url
from pyvia.server.balance import BALANCE_FD_ENV, BALANCE_SLOT_ENV, BalanceTable

if TYPE_CHECKING:
    from pyvia.cluster.nats_server import LocalNats

__all__ = ["Supervisor", "SupervisorConfig", "read_pid_file", "resolve_workers", "worker_main"]

log = logging.getLogger("pyvia.supervisor")

LISTEN_FD_ENV = "PYVIA_LISTEN_FD"
OWN_FD_ENV = "PYVIA_OWN_FD"
READY_FD_ENV = "PYVIA_READY_FD"
LIFELINE_FD_ENV = "PYVIA_LIFELINE_FD"
GO_FD_ENV = "PYVIA_GO_FD"

_RESTART_FIRST = 0.5
_RESTART_CAP = 10.0
_YOUNG = 10.0  # a worker that dies sooner than this after start backs off further
_GIVE_UP = 3  # failures in a row before accepting connections, with no worker serving
#: A worker's exit status for a configuration its app refused at start (printed in one line).
CONFIG_REFUSED = 2


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
    #: Seconds over which a worker replaced by a reload ends its streams (tabs reconnect staggered).
    reload_spread: float = 2.0
    #: Where to write the supervisor's pid (``pyvia reload`` reads it); None for nowhere.
    pid_file: str | None = None
    #: Dev mode: the workers run ``App(dev=True)`` defaults, and a change under ``watch`` reloads.
    dev: bool = False
    watch: tuple[str, ...] = ()
    #: Each worker also serves its own port, ``worker_ports + worker id`` (on ``host``): a proxy
    #: that keeps a browser on one of them (Caddy's ``lb_policy cookie``) never has its requests
    #: forwarded between workers. None: only the shared port.
    worker_ports: int | None = None
    #: ``HOST[:PORT]`` where the workers serve the direct channel to other machines (``PYVIA_CLUSTER_ADDRESS``).
    cluster_address: str | None = None


class _Worker:
    """One worker process, its report pipe and, while it is held, its go pipe."""

    __slots__ = (
        "balance_slot",
        "go_fd",
        "loaded",
        "proc",
        "ready",
        "ready_fd",
        "retiring",
        "saved",
        "slot",
        "started",
        "term_deadline",
    )

    def __init__(
        self,
        slot: int,
        proc: subprocess.Popen[bytes],
        ready_fd: int,
        go_fd: int | None,
        balance_slot: int | None = None,
    ) -> None:
        self.slot = slot
        self.balance_slot = balance_slot  # this process's slot in the balance table (several workers)
        self.proc = proc
        self.ready_fd: int | None = ready_fd
        self.go_fd = go_fd
        self.loaded = False  # reported L: the app is imported
        self.ready = False  # reported R: it accepts connections
        self.saved = False  # reported S: it stopped taking requests and saved its state
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
        self.release()

    def release(self) -> None:
        """Give a held worker its go (or, once it is gone, just close the pipe)."""
        if self.go_fd is not None:
            with contextlib.suppress(OSError):
                os.write(self.go_fd, b"G")
            with contextlib.suppress(OSError):
                os.close(self.go_fd)
            self.go_fd = None


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
        self.own_socks: list[socket.socket] = []  # one per worker id (--worker-ports)
        self.balance: BalanceTable | None = None  # several workers: who holds how many connections
        self.nats: LocalNats | None = None  # imported only when needed
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
        self._reload_again = False
        self._handoff = False  # no engine: a new worker waits for the old one's state (module doc)
        self._pid_written = False
        self._watcher: object | None = None  # a threading.Event that stops the dev-mode watcher
        self._secret_value: bytes | None = None
        self._engine_restart_at: float | None = None  # the nats-server started here died: start it then
        self._engine_delay = 0.25
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
            from pyvia.cluster.nats_server import LocalNats, nats_password

            nats = LocalNats(die_with_parent=True, password=nats_password(self._secret()))
            self.engine_url = nats.start()
            self.nats = nats
            log.info("started nats-server (pid %s) for the workers at %s", nats.pid, redact_url(self.engine_url))
        # no engine, or one that lives in the worker: the worker process owns the state
        self._handoff = self.engine_url is None or self.engine_url.startswith("memory:")
        sock = bind_socket(cfg.host, cfg.port)
        sock.listen(4096)  # machine-limits.md: somaxconn is 4096 here; bursts of reconnecting tabs queue
        self.sock = sock
        if cfg.worker_ports is not None:
            # held here like the shared one: a worker's replacement serves the same port, and what
            # queued while it restarted is served then
            for slot in range(cfg.workers):
                own = bind_socket(cfg.host, cfg.worker_ports + slot)
                own.listen(4096)
                self.own_socks.append(own)
        if cfg.workers > 1:
            # a slot per worker process: during a reload an old and a new one of each id may live,
            # and a slot is only reused once its process exited
            self.balance = BalanceTable.create(2 * cfg.workers + 2)
        self._write_pid_file()
        self._life_r, self._life_w = os.pipe()
        os.set_blocking(self._life_w, False)
        host, port = sock.getsockname()[:2]
        scheme = "https" if cfg.certfile else "http"
        shown = f"[{host}]" if ":" in str(host) else host
        self._url = f"{scheme}://{shown}:{port}"
        log.info(
            "pyvia supervisor (pid %d): %d worker(s) (%s) on %s, engine %s",
            os.getpid(),
            cfg.workers,
            cfg.worker_source,
            self._url,
            self._engine_label(),
        )
        if self.own_socks:
            log.info(
                "each worker also on its own port: %s",
                ", ".join(f"{i}: {own.getsockname()[1]}" for i, own in enumerate(self.own_socks)),
            )
        for slot in range(cfg.workers):
            self._spawn(slot)
        if cfg.dev:
            self._start_watcher()

    def _write_pid_file(self) -> None:
        path = self.config.pid_file
        if path is None:
            return
        temporary = f"{path}.{os.getpid()}.tmp"
        with open(temporary, "w") as file:
            file.write(f"{os.getpid()}\n")
        os.replace(temporary, path)  # a reader never sees half a number
        self._pid_written = True

    def _remove_pid_file(self) -> None:
        path = self.config.pid_file
        if path is None or not self._pid_written:
            return
        self._pid_written = False
        with contextlib.suppress(OSError):
            if read_pid_file(path) == os.getpid():  # a newer supervisor may have taken the name
                os.unlink(path)

    def _start_watcher(self) -> None:
        """Dev mode: a SIGHUP to this process for each batch of changes in the app's files."""
        import threading

        from watchfiles import PythonFilter, watch

        stop = threading.Event()
        paths = self.config.watch or (os.getcwd(),)
        watch_filter = PythonFilter(extra_extensions=(".html", ".jinja", ".jinja2", ".j2", ".toml"))

        def run() -> None:
            for changes in watch(
                *paths, watch_filter=watch_filter, stop_event=stop, debounce=200, raise_interrupt=False
            ):
                names = sorted({os.path.relpath(path) for _, path in changes})
                log.info("changed: %s: reloading", ", ".join(names[:5]) + (" …" if len(names) > 5 else ""))
                os.kill(os.getpid(), signal.SIGHUP)

        threading.Thread(target=run, name="pyvia-watch", daemon=True).start()
        self._watcher = stop
        log.info("dev mode: watching %s for changes", ", ".join(paths))

    def _engine_label(self) -> str:
        if self.engine_url is None:
            return "memory (one worker)"
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
        if self._watcher is not None:
            self._watcher.set()  # type: ignore[attr-defined]  # a threading.Event
        if self.nats is not None:
            self.nats.close()
            self.nats = None
        self._remove_pid_file()
        if self.sock is not None:
            self.sock.close()
        for own in self.own_socks:
            own.close()
        self.own_socks.clear()
        if self.balance is not None:
            self.balance.close()
            self.balance = None
        signal.set_wakeup_fd(-1)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGCHLD):
            signal.signal(sig, signal.SIG_DFL)
        for fd in (self._wake_r, self._wake_w, self._life_r, self._life_w):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)

    # --- workers ---------------------------------------------------------------------------------

    def _spawn(self, slot: int, *, held: bool = False) -> _Worker:
        cfg = self.config
        assert self.sock is not None
        ready_r, ready_w = os.pipe()
        os.set_blocking(ready_r, False)
        pass_fds = [self.sock.fileno(), ready_w, self._life_r]
        env = dict(os.environ)
        env.update(
            {
                LISTEN_FD_ENV: str(self.sock.fileno()),
                READY_FD_ENV: str(ready_w),
                LIFELINE_FD_ENV: str(self._life_r),
                WORKER_ID_ENV: str(slot),
                WORKERS_ENV: str(cfg.workers),
            }
        )
        env.pop(GO_FD_ENV, None)
        env.pop(OWN_FD_ENV, None)
        if self.own_socks:
            own = self.own_socks[slot]
            pass_fds.append(own.fileno())
            env[OWN_FD_ENV] = str(own.fileno())
        env.pop(BALANCE_FD_ENV, None)
        env.pop(BALANCE_SLOT_ENV, None)
        balance_slot = self._free_balance_slot()
        if balance_slot is not None:
            assert self.balance is not None
            self.balance.clear(balance_slot)
            pass_fds += self.balance.fds()
            env[BALANCE_FD_ENV] = self.balance.describe()
            env[BALANCE_SLOT_ENV] = str(balance_slot)
        go_r = go_w = None
        if held:
            go_r, go_w = os.pipe()
            env[GO_FD_ENV] = str(go_r)
            pass_fds.append(go_r)
        if cfg.dev:
            env["PYVIA_APP__DEV"] = "true"  # App's default; a keyword in the code still wins
        if self.engine_url is not None:
            env[ENGINE_URL_ENV] = self.engine_url
        if cfg.cluster_address is not None:
            env[CLUSTER_ADDRESS_ENV] = cfg.cluster_address
        env["PYVIA_SECRET"] = self._secret().decode()
        args = [
            sys.executable,
            "-m",
            "pyvia.server.supervisor",
            cfg.app,
            "--graceful-timeout",
            str(cfg.graceful_timeout),
            "--reload-spread",
            str(cfg.reload_spread),
        ]
        if cfg.dev:
            args.append("--dev")
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
            proc = subprocess.Popen(args, env=env, pass_fds=pass_fds, start_new_session=True)
        except BaseException:
            for fd in (ready_r, go_w):
                if fd is not None:
                    os.close(fd)
            raise
        finally:
            os.close(ready_w)
            if go_r is not None:
                os.close(go_r)
        worker = _Worker(slot, proc, ready_r, go_w, balance_slot)
        self.workers.append(worker)
        log.info(
            "worker %d started (pid %d)%s", slot, proc.pid, ", held until the old one saved its state" if held else ""
        )
        return worker

    def _secret(self) -> bytes:
        """``PYVIA_SECRET``, else the persisted one, else one for this run: the same for every worker."""
        if self._secret_value is None:
            from pyvia.session import load_secret

            self._secret_value = load_secret(os.environ.get("PYVIA_SECRET") or None)
        return self._secret_value

    def _check_engine(self, now: float) -> None:
        """The nats-server started here died: start it again on its port, with its JetStream data
        (what the workers wrote is there again), and its password; the workers reconnect by
        themselves. A server that will not start is tried again, waiting 0.5 s, 1 s … 5 s."""
        nats = self.nats
        if nats is None:
            return
        if self._engine_restart_at is None:
            status = nats.exit_status
            if status is None:
                return
            log.warning(
                "nats-server (pid %s) %s: starting it again on the same port, with its data",
                nats.pid,
                _describe_exit(status),
            )
            self._engine_restart_at = now
        if now < self._engine_restart_at:
            return
        try:
            nats.start()
        except (OSError, RuntimeError, TimeoutError) as exc:
            self._engine_delay = min(5.0, max(0.5, self._engine_delay * 2))
            self._engine_restart_at = time.monotonic() + self._engine_delay
            log.error("nats-server did not start again (%s); next try in %.1f s", exc, self._engine_delay)
            return
        self._engine_restart_at = None
        self._engine_delay = 0.25
        log.info("nats-server started again (pid %s)", nats.pid)

    def _free_balance_slot(self) -> int | None:
        """A slot of the balance table that no worker process holds (None: no table, or all taken,
        when that worker accepts without looking at the others)."""
        if self.balance is None:
            return None
        taken = {w.balance_slot for w in self.workers}
        return next((i for i in range(self.balance.slots) if i not in taken), None)

    def _slot_has_live(self, slot: int) -> bool:
        return any(w.slot == slot and not w.retiring for w in self.workers)

    def _on_exit(self, worker: _Worker) -> None:
        code = worker.proc.returncode
        self.workers.remove(worker)
        worker.close_pipe()
        if self.balance is not None and worker.balance_slot is not None:
            self.balance.clear(worker.balance_slot)  # nobody waits for a dead worker
        if worker.retiring or self._stopping:
            log.info("worker %d (pid %d) %s", worker.slot, worker.pid, _describe_exit(code))
            return
        slot = worker.slot
        if worker is self._reload_new:
            return  # the reload step sees it and gives up
        lived = time.monotonic() - worker.started
        if not worker.ready and code == CONFIG_REFUSED and not any(w.ready for w in self.workers):
            log.error("worker %d refused the configuration (the line above); stopping", slot)
            self.exit_status = CONFIG_REFUSED
            self._begin_stop()
            return
        if not worker.ready:
            self._failures[slot] = self._failures.get(slot, 0) + 1
            if self._failures[slot] >= _GIVE_UP and not any(w.ready for w in self.workers):
                log.error(
                    "worker %d %s before accepting connections, %d times in a row, and no worker serves: stopping",
                    slot,
                    _describe_exit(code),
                    _GIVE_UP,
                )
                self.exit_status = 1
                self._begin_stop()
                return
        delay = self._delay.get(slot, _RESTART_FIRST)
        delay = min(_RESTART_CAP, delay * 2) if lived < _YOUNG and slot in self._delay else _RESTART_FIRST
        self._delay[slot] = delay
        if not self._slot_has_live(slot):
            self._restart_at[slot] = time.monotonic() + delay
            log.warning(
                "worker %d (pid %d) %s after %.1f s; restarting in %.1f s",
                slot,
                worker.pid,
                _describe_exit(code),
                lived,
                delay,
            )

    def _read_ready(self, worker: _Worker) -> None:
        """Take the worker's reports (L, R, S); EOF means it exited (or closed the pipe)."""
        if worker.ready_fd is None:
            return
        try:
            data = os.read(worker.ready_fd, 16)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            with contextlib.suppress(OSError):
                os.close(worker.ready_fd)
            worker.ready_fd = None
            return
        if b"L" in data:
            worker.loaded = True
        if b"R" in data:
            worker.loaded = worker.ready = True
            self._failures.pop(worker.slot, None)
        if b"S" in data:
            worker.saved = True
        if worker.ready and not self._announced and all(w.ready for w in self.workers):
            self._announced = True
            log.info(
                "pyvia listening on %s with %d worker%s",
                self._url,
                self.config.workers,
                "s" if self.config.workers > 1 else "",
            )

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
            self._check_engine(now)
            self._step_reload(now)
            for slot, at in list(self._restart_at.items()):
                if at <= now:
                    del self._restart_at[slot]
                    if not self._slot_has_live(slot):
                        self._spawn(slot)

    def _next_timeout(self) -> float:
        now = time.monotonic()
        moments = [now + 1.0, *self._restart_at.values()]
        if self._engine_restart_at is not None:
            moments.append(self._engine_restart_at)
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

    def _terminate(self, worker: _Worker, deadline: float, sig: int = signal.SIGTERM) -> None:
        worker.retiring = True
        worker.term_deadline = deadline
        with contextlib.suppress(ProcessLookupError):
            os.kill(worker.pid, sig)

    def _kill(self, worker: _Worker) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(worker.pid, signal.SIGKILL)
        worker.term_deadline = None

    def _kill_overdue(self, now: float) -> None:
        for worker in self.workers:
            if worker.term_deadline is not None and now >= worker.term_deadline and worker.proc.poll() is None:
                log.warning(
                    "worker %d (pid %d) still running after %.1f s: SIGKILL",
                    worker.slot,
                    worker.pid,
                    self.config.graceful_timeout,
                )
                self._kill(worker)

    # --- rolling reload --------------------------------------------------------------------------

    def _begin_reload(self) -> None:
        if self._reload is not None:
            if self.config.dev:  # a change during a reload: reload again once this one is done
                self._reload_again = True
                return
            log.warning("SIGHUP during a reload: ignored")
            return
        slots = sorted({w.slot for w in self.workers if not w.retiring} | set(self._restart_at))
        log.info("SIGHUP: reloading %d worker(s) one by one", len(slots))
        self._reload = slots

    def _retire(self, old: _Worker, now: float) -> None:
        """SIGUSR1: a graceful stop that spreads the end of its streams over ``reload_spread``."""
        budget = self.config.graceful_timeout + self.config.reload_spread + 1.0
        self._terminate(old, now + budget, signal.SIGUSR1)

    def _step_reload(self, now: float) -> None:
        """Advance the reload as far as it can go now (several steps at once: the loop may not
        wake again for a second)."""
        for _ in range(8):
            if not self._reload_step(now):
                return

    def _reload_step(self, now: float) -> bool:
        """One transition of the reload; True when something changed."""
        if self._reload is None:
            return False
        new, old = self._reload_new, self._reload_old
        if new is None and old is None:
            if not self._reload:
                self._reload = None
                log.info("reload done")
                if self._reload_again:
                    self._reload_again = False
                    self._begin_reload()
                return True
            slot = self._reload.pop(0)
            self._restart_at.pop(slot, None)
            self._reload_old = old = next((w for w in self.workers if w.slot == slot and not w.retiring), None)
            self._reload_new = self._spawn(slot, held=self._handoff and old is not None)
            self._reload_deadline = now + self.config.ready_timeout
            return True
        if new is not None:
            if new.ready:
                self._reload_new = None
                if old is not None and not old.retiring:
                    self._retire(old, now)
                return True
            if new not in self.workers or now >= self._reload_deadline:
                self._reload_failed(new, old, now)
                return True
            if new.go_fd is not None and new.loaded:  # held: the old one saves, then the new one goes
                if old is None or old not in self.workers or old.saved:
                    new.release()
                    self._reload_deadline = now + self.config.ready_timeout
                    return True
                if not old.retiring:
                    self._retire(old, now)
                    return True
            return False
        if old is not None and old not in self.workers:
            self._reload_old = None  # retired; next slot
            return True
        return False

    def _reload_failed(self, new: _Worker, old: _Worker | None, now: float) -> None:
        log.error(
            "reload stopped: the new worker %d (pid %d) did not become ready; the others keep their old code",
            new.slot,
            new.pid,
        )
        if new in self.workers:
            new.retiring = True
            self._kill(new)
        new.close_pipe()
        if old is None or old not in self.workers or old.retiring:
            self._restart_at[new.slot] = now + _RESTART_FIRST
        self._reload = None
        self._reload_new = None
        self._reload_old = None


# --- the worker process ----------------------------------------------------------------------------


def _worker_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m pyvia.server.supervisor",
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
    if fmt == "json":
        from pyvia.ops.logs import configure_logging

        configure_logging(level, fmt)
        return
    logging.basicConfig(
        level=level, format=f"%(asctime)s %(levelname)s %(name)s [worker {worker_id} pid %(process)d]: %(message)s"
    )


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


def read_pid_file(path: str) -> int:
    """The pid a supervisor wrote to ``path``; OSError if unreadable, ValueError if not a pid."""
    with open(path) as file:
        text = file.read().strip()
    pid = int(text)
    if pid <= 0:
        raise ValueError(f"{path} holds {text!r}, not a process id")
    return pid


def _exit_fast(code: int) -> None:
    """After a graceful stop nothing is left to save: skip freeing the heap object by object
    (seconds with a large heap, bench/RESULTS.md finding 2), as ``pyvia run`` does."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    _exit_fast(worker_main())
