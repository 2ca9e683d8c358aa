"""The outbound side of one tab: where its events go, and what happens when they can't.

Policy (pure decisions, no I/O of its own; the sink is the front end's):

* connected and the socket keeps up → write each batch at once, in one ``write``;
* connected but more than ``max_buffer`` bytes wait in the socket → view frames are held
  (only the latest is kept) and sent with the next batch that fits; signal and script
  events are always written;
* no stream (between page view and connect, or during a reconnect) → events wait in the
  outbox, view frames coalesced to the latest, and are written on the next connect.

Compression happens at the moment of writing, never while queuing, so held and coalesced frames
stay plain; each HTTP response has its own encoder. What a stream opens with (the backlog, the
connect event) is written with :meth:`StreamEncoder.encode_opening`, so for zstd a tab builds its
compressor only with the first event after that: a tab that connects and stays idle holds none.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyvia.compress import StreamEncoder
from pyvia.http import StreamSink

if TYPE_CHECKING:
    from pyvia.ops.metrics import PyviaMetrics


class Outflow:
    """What every stream of a process consults: the metrics to count into, and whether all the
    tab sockets together hold more than the process-wide cap (then every view frame is held)."""

    __slots__ = ("cap_hits", "congested", "ended", "meter", "unsent")

    def __init__(self, meter: PyviaMetrics | None = None) -> None:
        self.meter = meter
        self.congested = False
        self.unsent = 0
        #: Times the unsent bytes went over the cap (``max_unsent_bytes``), for /metrics.
        self.cap_hits = 0
        #: Streams the server ended since the app last looked (their tabs are now without one).
        self.ended = 0


class Stream:
    """Outbound frames for one tab."""

    __slots__ = ("encoder", "held_view", "last_event", "last_write", "max_buffer", "outflow", "over_since",
                 "pending", "sink")

    def __init__(self, max_buffer: int, outflow: Outflow | None = None) -> None:
        self.outflow = outflow if outflow is not None else Outflow()
        self.sink: StreamSink | None = None
        self.encoder: StreamEncoder | None = None
        self.pending: list[bytes] = []
        self.held_view: bytes | None = None
        self.last_write = 0.0  # any bytes, keep-alive comments included
        self.last_event = 0.0  # real events only: what "idle" means for releasing an encoder
        self.max_buffer = max_buffer
        #: When the socket's unsent bytes went over ``max_buffer`` (0 = not over).
        self.over_since = 0.0

    @property
    def is_connected(self) -> bool:
        return self.sink is not None

    def attach(self, sink: StreamSink, now: float, encoder: StreamEncoder | None = None) -> None:
        """Take a new sink (a newer stream of the same tab replaces an older one)."""
        if self.sink is not None and self.sink is not sink:
            self.close()
        self.sink = sink
        self.encoder = encoder
        self.last_write = self.last_event = now
        self.over_since = 0.0
        backlog = self._take_backlog()
        if backlog:
            self._write(sink, backlog, opening=True)

    def _write(self, sink: StreamSink, data: bytes, opening: bool = False) -> None:
        encoder = self.encoder
        if encoder is not None:
            data = encoder.encode_opening(data) if opening else encoder.encode(data)
        sink.write(data)
        meter = self.outflow.meter
        if meter is not None:
            meter.frame_sent(len(data), encoder.coding if encoder is not None else "identity")

    def keep_alive(self, ping: bytes, now: float) -> None:
        """Write a comment so proxies keep the idle stream open (a released zstd encoder stays released)."""
        sink = self.sink
        if sink is not None:
            encoder = self.encoder
            sink.write(encoder.encode_keepalive(ping) if encoder is not None else ping)
            self.last_write = now

    def detach(self, sink: StreamSink) -> bool:
        """Forget ``sink`` if it is the current one; return whether the tab is now without a stream."""
        if self.sink is sink:
            self.sink = None
            if self.encoder is not None:
                self.encoder.discard()  # the peer is gone: nothing more to finish
                self.encoder = None
            return True
        return False

    def send(self, data: bytes, view: bytes | None, now: float, *, opening: bool = False) -> None:
        """Send always-delivered events ``data`` and an optional view frame ``view``.

        ``opening``: these are the events the stream opens with (the connect event), written
        without building the tab's compressor where the coding allows it (zstd).
        """
        sink = self.sink
        if sink is None or sink.is_closed:
            if view is not None:
                self.held_view = view
            if data:
                self.pending.append(data)
            return
        if view is not None:
            buffered = sink.buffered
            if buffered > self.max_buffer or (buffered and self.outflow.congested):
                self.held_view = view
                view = None
                if self.outflow.meter is not None:
                    self.outflow.meter.frame_held()
            else:
                self.held_view = None
        elif self.held_view is not None and sink.buffered <= self.max_buffer and not self.outflow.congested:
            view, self.held_view = self.held_view, None
        if view is not None:
            data = view + data if data else view
        if data:
            self._write(sink, data, opening)
            self.last_write = self.last_event = now
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
        """End the current response (its encoder's last block first); the tab may reconnect."""
        sink, self.sink = self.sink, None
        encoder, self.encoder = self.encoder, None
        if sink is not None:
            self.outflow.ended += 1
        if sink is not None and not sink.is_closed:
            if encoder is not None:
                tail = encoder.finish()
                if tail:
                    sink.write(tail)
            sink.close()
        elif encoder is not None:
            encoder.discard()
