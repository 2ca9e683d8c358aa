"""The supervisor's side of its worker processes: start one, hear its reports, stop it, restart it.

Each worker is a fresh interpreter (``python -m pyvia.server.supervisor``, not a fork), so a
reload runs the code on disk now and no state leaks between workers by accident. It inherits the
sockets of :mod:`pyvia.server.listeners`, a report pipe and the supervisor's lifeline (the
descriptors :mod:`pyvia.server.worker_process` describes). A worker that dies is logged and started
again after 0.5 s, doubling to 10 s while it keeps dying young. Separate from the supervisor, which
decides when to start and stop them (its loop, signals and reloads); this is how.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from pyvia.cluster import CLUSTER_ADDRESS_ENV, ENGINE_URL_ENV, WORKER_ID_ENV, WORKERS_ENV
from pyvia.server.balance import BALANCE_FD_ENV, BALANCE_SLOT_ENV
from pyvia.server.worker_process import (
    GO_FD_ENV,
    LIFELINE_FD_ENV,
    LISTEN_FD_ENV,
    OWN_FD_ENV,
    READY_FD_ENV,
    WORKER_MODULE,
)

if TYPE_CHECKING:
    from pyvia.server.listeners import Listeners
    from pyvia.server.supervisor import SupervisorConfig

__all__ = ["Worker", "Workers", "describe_exit"]

log = logging.getLogger("pyvia.supervisor")

_RESTART_FIRST = 0.5
_RESTART_CAP = 10.0
_YOUNG = 10.0  # a worker that dies sooner than this after start backs off further


class Worker:
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


def describe_exit(code: int) -> str:
    """How a child process ended, for the log (a returncode: negative for a signal)."""
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with status {code}"


class Workers:
    """The live worker processes of one supervisor (iterable), and when a dead one starts again."""

    __slots__ = (
        "_all",
        "_config",
        "_delay",
        "_failures",
        "_life_r",
        "_life_w",
        "_listeners",
        "_secret",
        "engine_url",
        "restart_at",
    )

    def __init__(self, config: SupervisorConfig, listeners: Listeners, secret: Callable[[], bytes]) -> None:
        self._config = config
        self._listeners = listeners
        self._secret = secret  # PYVIA_SECRET for each worker: one for all
        self.engine_url: str | None = None  # PYVIA_ENGINE_URL for each worker
        self._all: list[Worker] = []
        self.restart_at: dict[int, float] = {}  # slot -> when to start its worker again
        self._delay: dict[int, float] = {}
        self._failures: dict[int, int] = {}
        self._life_r = -1
        self._life_w = -1

    def __iter__(self) -> Iterator[Worker]:
        return iter(self._all)

    def __len__(self) -> int:
        return len(self._all)

    def __contains__(self, worker: object) -> bool:
        return worker in self._all

    def open_lifeline(self) -> None:
        """The pipe whose read end every worker inherits: EOF there means the supervisor is gone."""
        self._life_r, self._life_w = os.pipe()
        os.set_blocking(self._life_w, False)

    def close_lifeline(self) -> None:
        for fd in (self._life_r, self._life_w):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)

    def serving(self) -> bool:
        """Whether some worker accepts connections."""
        return any(w.ready for w in self._all)

    def has_live(self, slot: int) -> bool:
        return any(w.slot == slot and not w.retiring for w in self._all)

    # --- start -----------------------------------------------------------------------------------

    def spawn(self, slot: int, *, held: bool = False) -> Worker:
        cfg = self._config
        sock = self._listeners.sock
        assert sock is not None
        ready_r, ready_w = os.pipe()
        os.set_blocking(ready_r, False)
        pass_fds = [sock.fileno(), ready_w, self._life_r]
        env = dict(os.environ)
        env.update(
            {
                LISTEN_FD_ENV: str(sock.fileno()),
                READY_FD_ENV: str(ready_w),
                LIFELINE_FD_ENV: str(self._life_r),
                WORKER_ID_ENV: str(slot),
                WORKERS_ENV: str(cfg.workers),
            }
        )
        env.pop(GO_FD_ENV, None)
        env.pop(OWN_FD_ENV, None)
        if self._listeners.own_socks:
            own = self._listeners.own_socks[slot]
            pass_fds.append(own.fileno())
            env[OWN_FD_ENV] = str(own.fileno())
        env.pop(BALANCE_FD_ENV, None)
        env.pop(BALANCE_SLOT_ENV, None)
        balance_slot = self._free_balance_slot()
        if balance_slot is not None:
            balance = self._listeners.balance
            assert balance is not None
            balance.clear(balance_slot)
            pass_fds += balance.fds()
            env[BALANCE_FD_ENV] = balance.describe()
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
            WORKER_MODULE,
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
        worker = Worker(slot, proc, ready_r, go_w, balance_slot)
        self._all.append(worker)
        log.info(
            "worker %d started (pid %d)%s", slot, proc.pid, ", held until the old one saved its state" if held else ""
        )
        return worker

    def _free_balance_slot(self) -> int | None:
        """A slot of the balance table that no worker process holds (None: no table, or all taken,
        when that worker accepts without looking at the others)."""
        balance = self._listeners.balance
        if balance is None:
            return None
        taken = {w.balance_slot for w in self._all}
        return next((i for i in range(balance.slots) if i not in taken), None)

    def read_reports(self, worker: Worker) -> bool:
        """Take the worker's reports (L, R, S); False when there were none. EOF means it exited
        (or closed the pipe)."""
        if worker.ready_fd is None:
            return False
        try:
            data = os.read(worker.ready_fd, 16)
        except BlockingIOError:
            return False
        except OSError:
            data = b""
        if not data:
            with contextlib.suppress(OSError):
                os.close(worker.ready_fd)
            worker.ready_fd = None
            return False
        if b"L" in data:
            worker.loaded = True
        if b"R" in data:
            worker.loaded = worker.ready = True
            self._failures.pop(worker.slot, None)
        if b"S" in data:
            worker.saved = True
        return True

    # --- stop ------------------------------------------------------------------------------------

    def terminate(self, worker: Worker, deadline: float, sig: int = signal.SIGTERM) -> None:
        worker.retiring = True
        worker.term_deadline = deadline
        with contextlib.suppress(ProcessLookupError):
            os.kill(worker.pid, sig)

    def retire(self, old: Worker, now: float) -> None:
        """SIGUSR1: a graceful stop that spreads the end of its streams over ``reload_spread``."""
        budget = self._config.graceful_timeout + self._config.reload_spread + 1.0
        self.terminate(old, now + budget, signal.SIGUSR1)

    def kill(self, worker: Worker) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(worker.pid, signal.SIGKILL)
        worker.term_deadline = None

    def kill_overdue(self, now: float) -> None:
        for worker in self._all:
            if worker.term_deadline is not None and now >= worker.term_deadline and worker.proc.poll() is None:
                log.warning(
                    "worker %d (pid %d) still running after %.1f s: SIGKILL",
                    worker.slot,
                    worker.pid,
                    self._config.graceful_timeout,
                )
                self.kill(worker)

    def kill_all(self) -> None:
        """After an error in the supervisor's loop (normally none is left)."""
        for worker in self._all:
            with contextlib.suppress(OSError):
                worker.proc.kill()
            with contextlib.suppress(Exception):
                worker.proc.wait(5)
            worker.close_pipe()
        self._all.clear()

    # --- exit and restart ------------------------------------------------------------------------

    def exited(self, worker: Worker) -> None:
        """Forget a worker whose process exited."""
        self._all.remove(worker)
        worker.close_pipe()
        balance = self._listeners.balance
        if balance is not None and worker.balance_slot is not None:
            balance.clear(worker.balance_slot)  # nobody waits for a dead worker

    def failed_to_start(self, slot: int) -> int:
        """Count one more failure before accepting connections; how many in a row."""
        self._failures[slot] = self._failures.get(slot, 0) + 1
        return self._failures[slot]

    def restart_later(self, worker: Worker, code: int) -> None:
        """Start the slot of a worker that died again after the backoff, unless it has a live one."""
        slot = worker.slot
        lived = time.monotonic() - worker.started
        delay = self._delay.get(slot, _RESTART_FIRST)
        delay = min(_RESTART_CAP, delay * 2) if lived < _YOUNG and slot in self._delay else _RESTART_FIRST
        self._delay[slot] = delay
        if not self.has_live(slot):
            self.restart_at[slot] = time.monotonic() + delay
            log.warning(
                "worker %d (pid %d) %s after %.1f s; restarting in %.1f s",
                slot,
                worker.pid,
                describe_exit(code),
                lived,
                delay,
            )

    def restart_soon(self, slot: int, now: float) -> None:
        self.restart_at[slot] = now + _RESTART_FIRST

    def restart_due(self, now: float) -> None:
        for slot, at in list(self.restart_at.items()):
            if at <= now:
                del self.restart_at[slot]
                if not self.has_live(slot):
                    self.spawn(slot)
