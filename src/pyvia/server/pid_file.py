"""The file where ``pyvia run`` writes its supervisor's pid, and ``pyvia reload`` reads it.

Separate from the supervisor because ``pyvia reload`` reads it without starting one.
"""

from __future__ import annotations

import contextlib
import os

__all__ = ["read_pid_file", "remove_pid_file", "write_pid_file"]


def write_pid_file(path: str) -> None:
    """This process's pid in ``path``, replaced at once so a reader never sees half a number."""
    temporary = f"{path}.{os.getpid()}.tmp"
    with open(temporary, "w") as file:
        file.write(f"{os.getpid()}\n")
    os.replace(temporary, path)


def remove_pid_file(path: str) -> None:
    """Remove ``path`` if it still names this process (a newer supervisor may have taken the name)."""
    with contextlib.suppress(OSError):
        if read_pid_file(path) == os.getpid():
            os.unlink(path)


def read_pid_file(path: str) -> int:
    """The pid a supervisor wrote to ``path``; OSError if unreadable, ValueError if not a pid."""
    with open(path) as file:
        text = file.read().strip()
    pid = int(text)
    if pid <= 0:
        raise ValueError(f"{path} holds {text!r}, not a process id")
    return pid
