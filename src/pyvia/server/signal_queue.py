"""The supervisor's signals: queued by the handler, taken by its loop.

A Python signal handler runs between two bytecodes of whatever the main thread does, so it only
notes the signal; the loop acts on it. The handler alone would not wake a ``select`` already
waiting, so the signal also writes a byte to a pipe the loop watches (``signal.set_wakeup_fd``).
SIGCHLD is among them only to wake the loop when a worker exits. Separate from the supervisor
because what a signal means (stop, reload) is the supervisor's; how it arrives is this.
"""

from __future__ import annotations

import contextlib
import os
import signal

__all__ = ["SIGNALS", "SignalQueue"]

#: Stop, stop, reload, and a child exited.
SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGCHLD)


class SignalQueue:
    """The signals received since the loop last took them, and the pipe that wakes the loop."""

    __slots__ = ("_signals", "_wake_w", "wake_fd")

    def __init__(self) -> None:
        self.wake_fd = -1  # readable when a signal arrived
        self._wake_w = -1
        self._signals: list[int] = []

    def install(self) -> None:
        self.wake_fd, self._wake_w = os.pipe()
        os.set_blocking(self.wake_fd, False)
        os.set_blocking(self._wake_w, False)
        signal.set_wakeup_fd(self._wake_w, warn_on_full_buffer=False)
        for sig in SIGNALS:
            signal.signal(sig, self._on_signal)

    def _on_signal(self, signum: int, frame: object) -> None:
        self._signals.append(signum)

    def drain(self) -> None:
        """Empty the wake pipe (the signals themselves are in the queue)."""
        with contextlib.suppress(BlockingIOError):
            while os.read(self.wake_fd, 512):
                pass

    def take(self) -> list[int]:
        signals, self._signals = self._signals, []
        return signals

    def restore(self) -> None:
        """The default actions again; the pipe stays open until :meth:`close`."""
        signal.set_wakeup_fd(-1)
        for sig in SIGNALS:
            signal.signal(sig, signal.SIG_DFL)

    def close(self) -> None:
        for fd in (self.wake_fd, self._wake_w):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
