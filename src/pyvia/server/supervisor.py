"""``pyvia run APP [--workers N]``: one listening socket, N worker processes, restarts, reloads, stop.

The supervisor binds the socket once (SO_REUSEADDR, backlog 4096, :mod:`pyvia.server.listeners`)
and starts N workers with ``python -m pyvia.server.supervisor`` (:mod:`pyvia.server.workers`);
each inherits the socket's file descriptor and serves the app on the native server
(:mod:`pyvia.server.worker_process`). With several workers, each accepts only while it holds the
fewest open connections, so new tabs spread evenly (:mod:`pyvia.server.balance`: a
least-connections accept over a table the workers share). A fresh interpreter per worker (not a
fork) means a reload runs the new code, and no state leaks between workers by accident: what they
share goes through the engine (DESIGN.md, "Multi-worker and multi-node").

``pyvia run`` always runs one, also for one worker: the worker is the process that serves (a page
view costs what it costs on ``app.run()``), the supervisor only restarts and replaces it, so a
deploy is an event (SIGHUP, or ``pyvia reload``) rather than a restart that refuses connections.

Each worker gets, besides its descriptors (listed in :mod:`pyvia.server.worker_process`),
``PYVIA_ENGINE_URL`` (with N > 1 and no ``--engine``, a ``nats-server`` started here:
:mod:`pyvia.server.embedded_engine`), ``PYVIA_SECRET`` (one secret for all, so a context id made
by one worker verifies on another), ``PYVIA_CLUSTER_ADDRESS`` (``--cluster-address``),
``PYVIA_WORKER_ID`` and ``PYVIA_WORKERS``.

Signals (:mod:`pyvia.server.signal_queue`): SIGTERM or SIGINT stop everything (SIGTERM to each
worker, SIGKILL by PID to those still running after the graceful budget; a second signal kills at
once). SIGHUP is a rolling reload (:mod:`pyvia.server.rolling_reload`): worker by worker, a new
one starts and the old one retires once it is ready, or, without an engine, hands its saved state
to the new one. In dev mode (``pyvia run --dev``) a change in the app's files sends the SIGHUP
(:mod:`pyvia.server.dev_watch`).

A worker that dies is logged (exit code or signal) and restarted after 0.5 s, doubling to 10 s
while it keeps dying young. When a worker has failed 3 times in a row before
accepting connections and no worker is serving, the supervisor stops with status 1: the app
cannot start, and a restart loop would only hide that. (While other workers serve, it keeps
restarting the failing one with the backoff.) A worker whose app refuses its configuration at
start (a ``ConfigError``, such as a ``[db]`` url that cannot be opened) prints one line and
exits with status 2; with no worker serving, the supervisor stops at once, with status 2.
"""

from __future__ import annotations

import logging
import os
import select
import signal
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pyvia.cluster.base import redact_url
from pyvia.ops.logs import configure_logging
from pyvia.server.listeners import Listeners
from pyvia.server.pid_file import read_pid_file, remove_pid_file, write_pid_file
from pyvia.server.rolling_reload import RollingReload
from pyvia.server.signal_queue import SignalQueue
from pyvia.server.worker_process import CONFIG_REFUSED, exit_fast, worker_main
from pyvia.server.workers import Worker, Workers, describe_exit

if TYPE_CHECKING:
    import threading

    from pyvia.server.embedded_engine import EmbeddedEngine

__all__ = ["Supervisor", "SupervisorConfig", "read_pid_file", "resolve_workers", "worker_main"]

log = logging.getLogger("pyvia.supervisor")

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


class Supervisor:
    """Runs the workers of one ``pyvia run --workers N`` until SIGTERM/SIGINT (see the module doc)."""

    def __init__(self, config: SupervisorConfig) -> None:
        self.config = config
        self.listeners = Listeners()
        self.workers = Workers(config, self.listeners, self._secret)
        self.reload = RollingReload(config, self.workers)
        self.signals = SignalQueue()
        self.engine: EmbeddedEngine | None = None  # the nats-server started here, if any
        self.engine_url = config.engine_url
        self._stopping = False
        self._stop_deadline: float | None = None
        self._announced = False
        self._url = ""
        self._pid_written = False
        self._watcher: threading.Event | None = None  # stops the dev-mode watcher
        self._secret_value: bytes | None = None
        self.exit_status = 0

    # --- life cycle ------------------------------------------------------------------------------

    def run(self) -> int:
        """Start, supervise until told to stop, stop; return the exit status."""
        if not logging.getLogger().handlers:
            configure_logging("INFO", "text")  # the format and redaction of `pyvia run`
        self.signals.install()
        try:
            self._start()
            self._loop()
        finally:
            self._cleanup()
        return self.exit_status

    def _start(self) -> None:
        cfg = self.config
        if cfg.workers > 1 and self.engine_url is None:
            from pyvia.server.embedded_engine import EmbeddedEngine

            engine = EmbeddedEngine(self._secret())
            self.engine_url = engine.start()
            self.engine = engine
        self.workers.engine_url = self.engine_url
        # no engine, or one that lives in the worker: the worker process owns the state
        self.reload.handoff = self.engine_url is None or self.engine_url.startswith("memory:")
        self.listeners.open(cfg.host, cfg.port, workers=cfg.workers, worker_ports=cfg.worker_ports)
        if cfg.pid_file is not None:
            write_pid_file(cfg.pid_file)
            self._pid_written = True
        self.workers.open_lifeline()
        self._url = self.listeners.url("https" if cfg.certfile else "http")
        log.info(
            "pyvia supervisor (pid %d): %d worker(s) (%s) on %s, engine %s",
            os.getpid(),
            cfg.workers,
            cfg.worker_source,
            self._url,
            self._engine_label(),
        )
        if self.listeners.own_socks:
            log.info(
                "each worker also on its own port: %s",
                ", ".join(f"{i}: {own.getsockname()[1]}" for i, own in enumerate(self.listeners.own_socks)),
            )
        for slot in range(cfg.workers):
            self.workers.spawn(slot)
        if cfg.dev:
            from pyvia.server.dev_watch import start_watching

            self._watcher = start_watching(cfg.watch or (os.getcwd(),))

    def _engine_label(self) -> str:
        if self.engine_url is None:
            return "memory (one worker)"
        return redact_url(self.engine_url)

    def _secret(self) -> bytes:
        """``PYVIA_SECRET``, else the persisted one, else one for this run: the same for every worker."""
        if self._secret_value is None:
            from pyvia.session import load_secret

            self._secret_value = load_secret(os.environ.get("PYVIA_SECRET") or None)
        return self._secret_value

    def _cleanup(self) -> None:
        self.workers.kill_all()  # only after an error in the loop: normally none is left
        if self._watcher is not None:
            self._watcher.set()
        if self.engine is not None:
            self.engine.close()
            self.engine = None
        if self.config.pid_file is not None and self._pid_written:
            self._pid_written = False
            remove_pid_file(self.config.pid_file)
        self.listeners.close()
        self.signals.restore()
        self.signals.close()
        self.workers.close_lifeline()

    # --- the loop --------------------------------------------------------------------------------

    def _loop(self) -> None:
        workers = self.workers
        while True:
            timeout = self._next_timeout()
            fds = [self.signals.wake_fd] + [w.ready_fd for w in workers if w.ready_fd is not None]
            try:
                readable, _, _ = select.select(fds, [], [], timeout)
            except InterruptedError:
                readable = []
            if self.signals.wake_fd in readable:
                self.signals.drain()
            self._handle_signals()
            for worker in list(workers):
                if worker.ready_fd is not None and worker.ready_fd in readable:
                    self._read_ready(worker)
            for worker in list(workers):
                if worker.proc.poll() is not None:
                    if worker.ready_fd is not None:
                        self._read_ready(worker)
                    self._on_exit(worker)
            now = time.monotonic()
            workers.kill_overdue(now)
            if self._stopping:
                if not workers:
                    return
                continue
            if self.engine is not None:
                self.engine.check(now)
            self.reload.step(now)
            workers.restart_due(now)

    def _next_timeout(self) -> float:
        now = time.monotonic()
        moments = [now + 1.0, *self.workers.restart_at.values()]
        if self.engine is not None and self.engine.restart_at is not None:
            moments.append(self.engine.restart_at)
        moments += [w.term_deadline for w in self.workers if w.term_deadline is not None]
        if self._stop_deadline is not None:
            moments.append(self._stop_deadline)
        return max(0.0, min(moments) - now)

    def _read_ready(self, worker: Worker) -> None:
        if not self.workers.read_reports(worker):
            return
        if worker.ready and not self._announced and all(w.ready for w in self.workers):
            self._announced = True
            log.info(
                "pyvia listening on %s with %d worker%s",
                self._url,
                self.config.workers,
                "s" if self.config.workers > 1 else "",
            )

    def _on_exit(self, worker: Worker) -> None:
        code = worker.proc.returncode
        self.workers.exited(worker)
        if worker.retiring or self._stopping:
            log.info("worker %d (pid %d) %s", worker.slot, worker.pid, describe_exit(code))
            return
        slot = worker.slot
        if worker is self.reload.new:
            return  # the reload step sees it and gives up
        if not worker.ready and code == CONFIG_REFUSED and not self.workers.serving():
            log.error("worker %d refused the configuration (the line above); stopping", slot)
            self.exit_status = CONFIG_REFUSED
            self._begin_stop()
            return
        if not worker.ready and self.workers.failed_to_start(slot) >= _GIVE_UP and not self.workers.serving():
            log.error(
                "worker %d %s before accepting connections, %d times in a row, and no worker serves: stopping",
                slot,
                describe_exit(code),
                _GIVE_UP,
            )
            self.exit_status = 1
            self._begin_stop()
            return
        self.workers.restart_later(worker, code)

    # --- signals ---------------------------------------------------------------------------------

    def _handle_signals(self) -> None:
        for signum in self.signals.take():
            if signum in (signal.SIGTERM, signal.SIGINT):
                if self._stopping:
                    log.warning("second stop signal: killing the workers now")
                    for worker in self.workers:
                        self.workers.kill(worker)
                else:
                    log.info("%s: stopping %d worker(s)", signal.Signals(signum).name, len(self.workers))
                    self._begin_stop()
            elif signum == signal.SIGHUP and not self._stopping:
                self.reload.begin()

    def _begin_stop(self) -> None:
        self._stopping = True
        self.workers.restart_at.clear()
        self.reload.cancel()
        deadline = time.monotonic() + self.config.graceful_timeout + 1.0
        self._stop_deadline = deadline
        for worker in self.workers:
            self.workers.terminate(worker, deadline)


if __name__ == "__main__":  # a worker: the supervisor starts them as ``python -m pyvia.server.supervisor``
    exit_fast(worker_main())
