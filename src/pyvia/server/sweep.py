"""The one periodic sweep that times out the native server's connections.

No timer per connection (DESIGN.md: nothing per connection while idle): each records a
``deadline`` and this one ``call_later`` chain, every ``interval`` seconds on the shared grid
(:func:`pyvia.clock.until_tick`), times out those whose deadline has passed. Separate from the
registry, which counts what the connections hold; this only walks them.

It walks only the connections that can have a deadline: an open stream has none (the core
watches its buffer), so the registry takes a connection out of :attr:`DeadlineSweep.watched`
when its stream starts and puts it back when the stream ends, and an idle tab costs the sweep
nothing. Those are most connections of a live server, one per tab.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from pyvia.clock import until_tick

if TYPE_CHECKING:
    from pyvia.server.connection import HttpProtocol

__all__ = ["DeadlineSweep"]

logger = logging.getLogger("pyvia.server")


class DeadlineSweep:
    """The sweep over one registry's open connections, those streaming left out."""

    __slots__ = ("_handle", "_interval", "_loop", "watched")

    def __init__(self, loop: asyncio.AbstractEventLoop, interval: float) -> None:
        self._loop = loop
        #: The open connections not streaming: the only ones whose deadline can pass.
        self.watched: set[HttpProtocol] = set()
        self._interval = interval
        self._handle: asyncio.TimerHandle | None = None

    def start(self, now: float) -> None:
        if self._handle is None:
            self._handle = self._loop.call_later(until_tick(now, self._interval), self._sweep)

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def sweep(self, now: float) -> None:
        """Time out every connection whose deadline is at or before ``now``."""
        expired = [c for c in self.watched if 0.0 < c.deadline <= now]
        for conn in expired:
            try:
                conn.timeout()
            except Exception:  # a bug in one connection must not stop the sweep for the others
                logger.exception("error while timing out a connection")

    def _sweep(self) -> None:
        now = self._loop.time()
        self.sweep(now)
        self._handle = self._loop.call_later(until_tick(now, self._interval), self._sweep)
