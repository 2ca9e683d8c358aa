"""pyvia's native HTTP/1.1 server: httptools on uvloop, one ``write`` per response and per event.

The server knows the application only through :class:`ServedApp`; it never imports the core
(``pyvia.app``), and the core never imports it (DESIGN.md, "Architecture").
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, runtime_checkable

from pyvia.http import HandleResult, Request

__all__ = ["ServedApp"]


@runtime_checkable
class ServedApp(Protocol):
    """What the native server needs from an application (``pyvia.App`` implements it)."""

    def handle(self, request: Request) -> HandleResult:
        """Answer one request: a Response, a StreamResponse, or an awaitable of either.

        Return the response itself when no I/O is needed: only an awaitable costs a task.
        """
        ...

    async def startup(self) -> None:
        """Called once, before the socket accepts connections."""
        ...

    async def shutdown(self, budget: float, *, spread: float = 0.0, saved: Callable[[], object] | None = None) -> None:
        """Called once on stop: end the streams (asking browsers to reconnect) within ``budget`` s.

        A stop with a :class:`pyvia.server.runner.StopPlan` (a worker's) also passes ``spread``
        (seconds over which to end the streams) and ``saved`` (to call once what the app persists
        is saved, before the streams end); a stop without one passes ``budget`` alone.
        """
        ...
