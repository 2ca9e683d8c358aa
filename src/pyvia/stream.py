"""The outbound side of one tab: where its events go, and what happens when they can't.

Policy (pure decisions, no I/O of its own; the sink is the front end's):

* connected and the socket keeps up → write each batch at once, in one ``write``;
* connected but more than ``max_buffer`` bytes wait in the socket → view frames are held
  (only the latest is kept) and sent with the next batch that fits; signal and script
  events are always written;
* no stream (between page view and connect, or during a reconnect) → events wait in the
  outbox, view frames coalesced to the latest, and are written on the next connect.
"""

from __future__ import annotations

from pyvia.http import StreamSink


class Stream:
    """Outbound frames for one tab."""

    __slots__ = ("held_view", "last_write", "max_buffer", "over_since", "pending", "sink")

    def __init__(self, max_buffer: int) -> None:
        self.sink: StreamSink | None = None
        self.pending: list[bytes] = []
        self.held_view: bytes | None = None
        self.last_write = 0.0
        self.max_buffer = max_buffer
        #: When the socket's unsent bytes went over ``max_buffer`` (0 = not over).
        self.over_since = 0.0

    @property
    def is_connected(self) -> bool:
        return self.sink is not None

    def attach(self, sink: StreamSink, now: float) -> None:
        """Take a new sink (a newer stream of the same tab replaces an older one)."""
        old = self.sink
        self.sink = sink
        if old is not None and old is not sink and not old.is_closed:
            old.close()
        self.last_write = now
        self.over_since = 0.0
        backlog = self._take_backlog()
        if backlog:
            sink.write(backlog)

    def detach(self, sink: StreamSink) -> bool:
        """Forget ``sink`` if it is the current one; return whether the tab is now without a stream."""
        if self.sink is sink:
            self.sink = None
            return True
        return False

    def send(self, data: bytes, view: bytes | None, now: float) -> None:
        """Send always-delivered events ``data`` and an optional view frame ``view``."""
        sink = self.sink
        if sink is None or sink.is_closed:
            if view is not None:
                self.held_view = view
            if data:
                self.pending.append(data)
            return
        if view is not None:
            if sink.buffered > self.max_buffer:
                self.held_view = view
                view = None
            else:
                self.held_view = None
        elif self.held_view is not None and sink.buffered <= self.max_buffer:
            view, self.held_view = self.held_view, None
        if view is not None:
            data = view + data if data else view
        if data:
            sink.write(data)
            self.last_write = now
            buffered = sink.buffered
            if buffered <= self.max_buffer:
                self.over_since = 0.0
            elif not self.over_since:
                self.over_since = now
            if buffered > 4 * self.max_buffer:
                self.close()  # a reader this far behind only grows memory: it reconnects to a full render

    def is_stalled(self, now: float, patience: float) -> bool:
        """Whether the socket has stayed over the limit for longer than ``patience`` seconds."""
        if not self.over_since or self.sink is None:
            return False
        if self.sink.buffered <= self.max_buffer:
            self.over_since = 0.0
            return False
        return now - self.over_since > patience

    def _take_backlog(self) -> bytes:
        parts = self.pending
        if self.held_view is not None:
            parts = [self.held_view, *parts]
            self.held_view = None
        self.pending = []
        return b"".join(parts)

    def close(self) -> None:
        sink, self.sink = self.sink, None
        if sink is not None and not sink.is_closed:
            sink.close()
