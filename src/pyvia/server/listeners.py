"""The sockets ``pyvia run`` binds once and hands to every worker it starts.

The supervisor, not a worker, holds them for the whole run, so a worker that restarts or is
replaced by a reload finds the same sockets, and what queued in their backlog meanwhile is served
then: no connection is refused. With them goes the balance table through which several workers
sharing the socket take turns to accept (:mod:`pyvia.server.balance`). Separate from the
supervisor because it is what a worker inherits, not how the supervisor runs it.
"""

from __future__ import annotations

import socket

from pyvia.server.balance import BalanceTable

__all__ = ["BACKLOG", "Listeners"]

#: machine-limits.md: somaxconn is 4096 here; bursts of reconnecting tabs queue.
BACKLOG = 4096


class Listeners:
    """The shared listening socket, one per worker id with ``--worker-ports``, and the balance table."""

    __slots__ = ("balance", "own_socks", "sock")

    def __init__(self) -> None:
        self.sock: socket.socket | None = None
        self.own_socks: list[socket.socket] = []  # one per worker id (--worker-ports)
        self.balance: BalanceTable | None = None  # several workers: who holds how many connections

    def open(self, host: str, port: int, *, workers: int, worker_ports: int | None) -> None:
        """Bind and listen; what is open so far is in place, so :meth:`close` closes it after an error."""
        from pyvia.server.runner import bind_socket

        sock = bind_socket(host, port)
        sock.listen(BACKLOG)
        self.sock = sock
        if worker_ports is not None:
            # held here like the shared one: a worker's replacement serves the same port, and what
            # queued while it restarted is served then
            for slot in range(workers):
                own = bind_socket(host, worker_ports + slot)
                own.listen(BACKLOG)
                self.own_socks.append(own)
        if workers > 1:
            # a slot per worker process: during a reload an old and a new one of each id may live,
            # and a slot is only reused once its process exited
            self.balance = BalanceTable.create(2 * workers + 2)

    def url(self, scheme: str) -> str:
        """Where the shared socket listens, for the log."""
        assert self.sock is not None
        host, port = self.sock.getsockname()[:2]
        shown = f"[{host}]" if ":" in str(host) else host
        return f"{scheme}://{shown}:{port}"

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
        for own in self.own_socks:
            own.close()
        self.own_socks.clear()
        if self.balance is not None:
            self.balance.close()
            self.balance = None
