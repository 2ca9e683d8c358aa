"""The outbound side of one tab: where its events go, and what happens when they can't.

Policy (pure decisions, no I/O of its own; the sink is the front end's):

* connected and the socket keeps up → write each batch at once, in one ``write``;
* connected but more than ``max_buffer`` bytes wait in the socket → view frames are held
  (only the latest is kept) and sent with the next batch that fits; signal and script
  events are always written;
* no stream (between page view and connect, or during a reconnect) → events wait in the
  outbox, view frames coalesced to the latest, and are written on the next connect;
* a reader too far behind (more than four times ``max_buffer`` waiting) → its stream is
  aborted: what it has not read is dropped at once (never kept for the send deadline), and the
  tab reconnects to a full render. A stream replaced by a newer one of the same tab is aborted:
  what its peer has not read is obsolete;
* all tabs together over the process cap (:meth:`Outflow.measure`) → view frames are held
  everywhere, what closed streams still hold is dropped, and the streams furthest behind are
  aborted until the total is under the cap again.

Compression happens at the moment of writing, never while queuing, so held and coalesced frames
stay plain; each HTTP response has its own encoder. What a stream opens with (the backlog, the
connect event) is written with :meth:`StreamEncoder.encode_opening`, so for zstd a tab builds its
compressor only with the first event after that: a tab that connects and stays idle holds none.

Frames: every write of events is one frame, ended by its id (``protocol.frame_id``: the
stream's epoch, made once per tab and never reused by another, and a counter), and kept in the
tab's replay buffer (:mod:`pyvia.replay`). A reconnect that names the last id its page got is
given the frames after it (:meth:`Stream.frames_after`), written again through the new
response's encoder, before anything new.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from itertools import count
from typing import TYPE_CHECKING

from pyvia.compress import StreamEncoder
from pyvia.http import StreamSink
from pyvia.protocol import frame_id, parse_frame_id
from pyvia.replay import Replays, TabReplay, process_epoch

if TYPE_CHECKING:
    from pyvia.compress.shared_stream import SharedStream
    from pyvia.ops.metrics import PyviaMetrics
    from pyvia.view_frame import ViewFrame

log = logging.getLogger("pyvia")

#: A reader with this many times ``max_buffer`` unsent is aborted (it only grows memory).
_BEHIND = 4
#: Closed streams whose peer still had bytes to read, kept to count what they hold: at most this
#: many (the oldest are dropped from the count, never from memory: the server's send deadline ends them).
_DRAINING_MAX = 4096


def _abort(sink: StreamSink) -> None:
    """Drop what ``sink`` holds and end its connection; a front end without ``abort`` closes."""
    abort = getattr(sink, "abort", None)
    if abort is not None:
        abort()
    elif not sink.is_closed:
        sink.close()


_streams = count(1)  # numbers each stream's epoch within the process


class Outflow:
    """What every stream of a process consults: the metrics to count into, and whether all the
    tab sockets together hold more than the process-wide cap (then every view frame is held).

    It also keeps the streams that were closed while their peer still had bytes to read
    (``draining``): the process holds those bytes until the peer reads them, so they count
    against the cap, and they are the first dropped when the total is over it.
    """

    __slots__ = ("aborted", "cap_hits", "congested", "draining", "ended", "meter", "over", "unsent", "watch", "written")

    def __init__(self, meter: PyviaMetrics | None = None) -> None:
        self.meter = meter
        self.congested = False
        #: Bytes the tab sockets held at the last :meth:`measure`, closed streams' included.
        self.unsent = 0
        #: Times the unsent bytes went over the cap (``max_unsent_bytes``), for /metrics.
        self.cap_hits = 0
        #: Streams aborted because their peer stopped reading (behind, or over the cap).
        self.aborted = 0
        #: Streams the server ended since the app last looked (their tabs are now without one).
        self.ended = 0
        self.draining: list[StreamSink] = []
        #: Streams written since the last :meth:`measure_written`: the only ones whose socket can
        #: have taken more bytes since (an idle tab is in neither set, so a measure never visits it).
        self.written: set[Stream] = set()
        #: Streams that held unsent bytes at the last measure, or were written just before it
        #: (a front end may hand a write to its socket a loop turn later: asgi).
        self.watch: set[Stream] = set()
        #: Streams whose socket went over their ``max_buffer`` (``over_since`` set): the only
        #: ones the stall check looks at.
        self.over: set[Stream] = set()

    def closed_with_bytes(self, sink: StreamSink) -> None:
        """``sink`` was closed while its peer still had bytes to read: count them until it reads."""
        draining = self.draining
        if len(draining) >= _DRAINING_MAX:
            del draining[: _DRAINING_MAX // 4]
        draining.append(sink)

    def measure_written(self, cap: int) -> int:
        """:meth:`measure` over the streams that can hold unsent bytes: those written since the
        last call and those that held some then. A stream neither written nor holding anything
        since (an idle tab) holds nothing now: a socket's buffer only grows by a write."""
        written, self.written = self.written, set()
        streams = self.watch | written  # a new set: ``written`` becomes the next watch
        measured = self.measure(streams, cap, written)
        self.watch = written
        return measured

    def measure(self, streams: Iterable[Stream], cap: int, holding: set[Stream] | None = None) -> int:
        """Add up what every tab socket holds (and what closed streams still hold); past ``cap``,
        hold view frames everywhere, drop what closed streams hold, then abort the streams
        furthest behind (over their own ``max_buffer``) until the total is under ``cap``.

        Returns the total before anything was dropped; ``unsent`` keeps what is left.
        ``holding``, if given, gets every stream that held bytes.
        """
        total = 0
        behind: list[tuple[int, Stream]] = []
        for stream in streams:
            sink = stream.sink
            if sink is None:
                continue
            held = sink.buffered
            if not held:
                continue
            total += held
            if holding is not None:
                holding.add(stream)
            if held > stream.max_buffer:
                behind.append((held, stream))
        draining = []
        orphaned = 0
        for sink in self.draining:
            held = sink.buffered
            if held:
                draining.append(sink)
                orphaned += held
        measured = total + orphaned
        was, self.congested = self.congested, measured > cap
        if self.congested:
            if not was:
                self.cap_hits += 1
                log.warning(
                    "tab sockets hold %d bytes (cap max_unsent_bytes=%d, %d of them for closed streams): "
                    "holding view frames, dropping what readers too far behind hold",
                    measured,
                    cap,
                    orphaned,
                )
            for sink in draining:
                _abort(sink)
            draining = []
            behind.sort(key=lambda pair: pair[0], reverse=True)
            for held, stream in behind:
                if total <= cap:
                    break
                stream.close(abort=True)
                total -= held
            orphaned = 0
        self.draining = draining
        self.unsent = total + orphaned
        return measured


class Stream:
    """Outbound frames for one tab."""

    __slots__ = (
        "encoder",
        "epoch",
        "held_view",
        "keep_alive_due",
        "label",
        "last_event",
        "last_write",
        "lost",
        "max_buffer",
        "outflow",
        "over_since",
        "pending",
        "pending_size",
        "replay",
        "replays",
        "seq",
        "sink",
        "view_root",
        "view_size",
    )

    def __init__(
        self, max_buffer: int, outflow: Outflow | None = None, replays: Replays | None = None, label: str = ""
    ) -> None:
        #: What the logs call the tab (its route's pattern).
        self.label = label
        self.outflow = outflow if outflow is not None else Outflow()
        # frames: the id of the last one written, and what a reconnect may need again
        self.replays = replays
        self.epoch: str | None = None  # made with the first frame
        self.seq = 0
        self.replay: TabReplay | None = None
        #: Bytes of the latest view frame: what a full render costs, about.
        self.view_size = 0
        self.sink: StreamSink | None = None
        self.encoder: StreamEncoder | None = None
        #: Events waiting for a stream (None while there are none: most tabs, most of the time).
        self.pending: list[bytes] | None = None
        self.pending_size = 0
        #: The next connect needs a full render: the outbox overflowed while no stream was open, or
        #: a re-render was skipped for want of one (:meth:`forgo_view`).
        self.lost = False
        self.held_view: ViewFrame | None = None
        #: The id of the root element of the view the page shows, as this stream last wrote it
        #: (None: not known, or not one element): a view with the same root goes without the
        #: wrapper (:class:`~pyvia.view_frame.ViewFrame`).
        self.view_root: str | None = None
        self.last_write = 0.0  # any bytes, keep-alive comments included
        self.last_event = 0.0  # real events only: what "idle" means for releasing an encoder
        self.max_buffer = max_buffer
        #: When the socket's unsent bytes went over ``max_buffer`` (0 = not over).
        self.over_since = 0.0
        #: The keep-alive wheel's slot this stream waits in (None: in none; the registry's).
        self.keep_alive_due: int | None = None

    @property
    def is_connected(self) -> bool:
        return self.sink is not None

    def attach(
        self, sink: StreamSink, now: float, encoder: StreamEncoder | None = None, replay: list[bytes] | None = None
    ) -> None:
        """Take a new sink (a newer stream of the same tab replaces an older one, and is aborted:
        what its peer has not read, in the process or in the kernel, is obsolete).

        ``replay``: frames written before that the page did not get (:meth:`frames_after`); they go
        first, as they were, then what waited for a stream, in one write.
        """
        if self.sink is not None and self.sink is not sink:
            self.close(abort=True)
        self.sink = sink
        self.encoder = encoder
        self.view_root = None  # what the page got of the last stream is not known
        self.lost = False
        self.last_write = self.last_event = now
        self.over_since = 0.0
        backlog = self._take_backlog()
        if replay:
            self._emit(sink, b"".join([*replay, self._frame(backlog)] if backlog else replay), opening=True)
        elif backlog:
            self._emit(sink, self._frame(backlog), opening=True)

    def frames_after(self, last_event_id: str | None) -> list[bytes] | None:
        """The frames a reconnecting page missed, given the last frame id it got (``last-event-id``;
        None: none since the page view), or None when a full render is due: they are not all kept,
        or together they are larger than the tab's latest view frame (a page whose every frame is
        a new view is brought back cheaper by one).

        An id of another stream (another process, worker or incarnation of the tab) is never matched.
        """
        if last_event_id:
            parsed = parse_frame_id(last_event_id)
            if parsed is None or parsed[0] != self.epoch:
                return None
            seq = parsed[1]
        else:
            seq = 0
        if seq == self.seq:
            return []
        replay = self.replay
        missed = replay.after(seq) if replay is not None else None
        if missed and self.view_size and sum(map(len, missed)) > self.view_size:
            return None
        return missed

    def _frame(self, data: bytes, with_view: bool = False, opening: bool = False) -> bytes:
        """End ``data`` with the next frame id and keep it for a reconnect (a stream made without
        :class:`Replays`, outside an app, numbers nothing).

        ``with_view``: the frame carries the whole view. :meth:`frames_after` never replays such a
        frame (with its id it is larger than the view alone), so none before it either: the buffer
        is dropped and the next frame starts a new one. A tab whose every frame is a view (a
        broadcast board, a game) then keeps nothing, and a broadcast allocates nothing per tab
        that outlives its write. Nor does such a frame carry an id (its number is taken): a page
        reconnecting after it names an earlier frame, and a full render is what it would get
        anyway (a broadcast's frame is 20 bytes shorter for it).

        ``opening``: the frame a stream opens with starts no buffer (it extends one that is
        there). A page that lost it reconnects to a full render; every idle tab would otherwise
        keep its connect event for the replay's idle period.
        """
        replays = self.replays
        if replays is None:
            return data
        seq = self.seq = self.seq + 1
        if with_view and not opening:
            if self.replay is not None:
                replays.forget(self)
            return data
        epoch = self.epoch
        if epoch is None:
            epoch = self.epoch = f"{process_epoch()}{next(_streams):x}"
        data += frame_id(epoch, seq)
        if with_view:
            if self.replay is not None:
                replays.forget(self)
        elif not opening or self.replay is not None:
            replays.keep(self, seq, data)
        return data

    def _emit(
        self, sink: StreamSink, data: bytes, opening: bool = False, shared: SharedStream | None = None, now: float = 0.0
    ) -> None:
        encoder = self.encoder
        if encoder is not None:
            if shared is not None:
                data = encoder.encode_shared(shared, data, now)
            else:
                data = encoder.encode_opening(data) if opening else encoder.encode(data)
        sink.write(data)
        outflow = self.outflow
        outflow.written.add(self)
        meter = outflow.meter
        if meter is not None:
            meter.frame_sent(len(data), encoder.coding if encoder is not None else "identity")

    def keep_alive(self, ping: bytes, now: float) -> None:
        """Write a comment so proxies keep the idle stream open (a released zstd encoder stays released)."""
        sink = self.sink
        if sink is not None:
            encoder = self.encoder
            sink.write(encoder.encode_keepalive(ping) if encoder is not None else ping)
            self.outflow.written.add(self)
            self.last_write = now

    def write_raw(self, data: bytes) -> None:
        """Write ``data`` as it is (an encoder's tail of a release) to the open sink, if any."""
        sink = self.sink
        if sink is not None:
            sink.write(data)
            self.outflow.written.add(self)

    def detach(self, sink: StreamSink) -> bool:
        """Forget ``sink`` if it is the current one; return whether the tab is now without a stream."""
        if self.sink is sink:
            self.sink = None
            if self.encoder is not None:
                self.encoder.discard()  # the peer is gone: nothing more to finish
                self.encoder = None
            return True
        return False

    def send(
        self,
        data: bytes,
        view: ViewFrame | None,
        now: float,
        *,
        opening: bool = False,
        shared: SharedStream | None = None,
    ) -> None:
        """Send always-delivered events ``data`` and an optional view frame ``view``.

        ``opening``: these are the events the stream opens with (the connect event), written
        without building the tab's compressor where the coding allows it (zstd). ``shared``: the
        view is a shared render's, whose zstd frames the tab may take compressed once for all.
        """
        if view is not None:
            if view.whole:
                self.view_size = len(view)
            if self.held_view is not None:  # a component's frame goes out after the view held before it
                view = self.held_view.then(view)
        sink = self.sink
        if sink is None or sink.is_closed:
            if view is not None:
                self.held_view = view
            if data:
                if self.pending is None:
                    self.pending = [data]
                else:
                    self.pending.append(data)
                self.pending_size += len(data)
                if self.pending_size > _BEHIND * self.max_buffer:
                    # A tab this long without a stream gets a full render when it connects: what
                    # waited is superseded, and keeping it only grows memory.
                    self.pending = None
                    self.pending_size = 0
                    self.lost = True
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
        with_view = view is not None
        if view is not None:
            frame = self.pick(view)
            data = frame + data if data else frame
        if data:
            self._emit(sink, self._frame(data, with_view, opening), opening, shared if with_view else None, now)
            self.last_write = self.last_event = now
            buffered = sink.buffered
            if buffered <= self.max_buffer:
                self.over_since = 0.0
            elif not self.over_since:
                self.over_since = now
                self.outflow.over.add(self)
            if buffered > _BEHIND * self.max_buffer:
                self.close(abort=True)  # a reader this far behind only grows memory: it reconnects to a full render

    def forgo_view(self) -> None:
        """A re-render this tab would wait for a stream to get is not made: the next stream
        opens with a full render instead (what was written or queued besides stays)."""
        self.held_view = None
        self.lost = True

    def inline(self, view: ViewFrame) -> bytes:
        """The bytes of ``view`` in a write that goes out now whatever the reader's backlog (an
        action's frames, in the order it made them): a view held before it goes first, or not at
        all when ``view`` is a whole view (newer than it); sent after, it would undo ``view``."""
        held = self.held_view
        if held is not None:
            self.held_view = None
            view = held.then(view)
        return self.pick(view)

    def joined(self, parts: list[bytes | ViewFrame]) -> bytes:
        """An action's events and views in one write, each view :meth:`inline` (in order)."""
        return b"".join(part if type(part) is bytes else self.inline(part) for part in parts)  # type: ignore[arg-type]  # a ViewFrame

    def pick(self, view: ViewFrame) -> bytes:
        """The form of ``view`` that this tab's page can take now, written next: the page shows it after."""
        if not view.whole:
            return view.wrapped
        sink = self.sink
        if sink is None or sink.is_closed:  # it waits for a stream: what the page shows then is not known
            self.view_root = None
            return view.wrapped
        frame = view.for_page(self.view_root)
        self.view_root = view.root
        return frame

    def is_stalled(self, now: float, patience: float) -> bool:
        """Whether the socket has stayed over the limit for longer than ``patience`` seconds."""
        if not self.over_since or self.sink is None:
            return False
        if self.sink.buffered <= self.max_buffer:
            self.over_since = 0.0
            return False
        return now - self.over_since > patience

    def _take_backlog(self) -> bytes:
        parts: list[bytes] | tuple[()] = self.pending or ()
        if self.held_view is not None:
            parts = [self.held_view.wrapped, *parts]
            self.held_view = None
        self.pending = None
        self.pending_size = 0
        return b"".join(parts)

    def close(self, *, abort: bool = False) -> None:
        """End the current response (its encoder's last block first); the tab may reconnect.

        ``abort``: the peer stopped reading, so drop what it has not read and end its connection
        now instead of leaving the bytes to the server's send deadline.
        """
        sink, self.sink = self.sink, None
        encoder, self.encoder = self.encoder, None
        if sink is not None:
            self.outflow.ended += 1
        if sink is not None and not sink.is_closed:
            if abort:
                if encoder is not None:
                    encoder.discard()
                self.outflow.aborted += 1
                _abort(sink)
                return
            if encoder is not None:
                tail = encoder.finish()
                if tail:
                    sink.write(tail)
            sink.close()
            if sink.buffered:
                self.outflow.closed_with_bytes(sink)
        elif encoder is not None:
            encoder.discard()
