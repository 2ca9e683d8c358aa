"""What each tab's stream sent lately, so a stream that reconnects gets exactly what it missed.

Every frame written to a tab's stream ends with an id (``protocol.frame_id``: the stream's epoch
and a counter). The browser sends the last id it got when it reconnects (``last-event-id``);
the frames after it are written again from the tab's :class:`TabReplay`, and the tab needs a
full render only when they are no longer all there.

Invariants:

1. A :class:`TabReplay` holds consecutive frames: ``frames[i]`` has the id ``first + i`` and
   ends with its id event, so replaying is writing them as they are. A gap is never kept: a
   frame too large for the tab's bound empties the buffer; a buffer past its bound loses its
   oldest frames down to three quarters of it (so a busy tab trims once per many frames).
2. :class:`Replays` holds the process-wide count. The buffers together stay within
   ``budget`` bytes and within what the stream encoders leave of their own budget (replay
   yields first: losing a buffer costs one full render, later, only if the tab reconnects);
   the least recently written tab's buffer goes first.
3. Idle costs nothing: a tab with no buffer holds None, and a buffer no frame was added to for
   ``idle`` seconds is dropped by the sweep.

Values in, decisions out: no I/O, and the clock is the caller's.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from itertools import islice
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from collections.abc import Iterator

#: Default bound of one tab's buffer: a minute of small frames ten times a second, about a second
#: of whole views (which a resume would not replay anyway: one full render is smaller).
TAB_BYTES = 64 << 10
#: A buffer no frame was added to for this long is dropped (seconds).
IDLE = 30.0


class _Budget(Protocol):
    """What the replay reads of the encoders' budget (``compress.EncoderBudget``)."""

    @property
    def limit(self) -> int: ...

    @property
    def total(self) -> int: ...


class _Owner(Protocol):
    """The stream a buffer belongs to (``stream.Stream``)."""

    replay: TabReplay | None
    last_event: float


class TabReplay:
    """The frames one tab's stream wrote lately, in order."""

    __slots__ = ("first", "frames", "size")

    def __init__(self, first: int) -> None:
        self.first = first
        # a list, not a deque: an empty deque is ~600 bytes, a list of one frame ~90
        self.frames: list[bytes] = []
        self.size = 0

    @property
    def last(self) -> int:
        return self.first + len(self.frames) - 1

    def after(self, seq: int) -> list[bytes] | None:
        """The frames after ``seq``, or None when some of them are gone."""
        if seq + 1 < self.first or seq > self.last:
            return None
        return list(islice(self.frames, seq + 1 - self.first, None))


class Replays:
    """Every tab's replay buffer of one process: their bounds, their count and their order of use."""

    __slots__ = (
        "_tabs",
        "dropped",
        "encoders",
        "evicted",
        "full_renders",
        "idle",
        "limit",
        "replayed_frames",
        "resumes",
        "tab_limit",
        "total",
    )

    def __init__(
        self,
        *,
        tab_limit: int = TAB_BYTES,
        limit: int | None = None,
        idle: float = IDLE,
        encoders: _Budget | None = None,
    ) -> None:
        self.tab_limit = tab_limit
        #: The cap on all buffers together: by default a quarter of the encoders' budget.
        self.limit = limit if limit is not None else (encoders.limit // 4 if encoders is not None else 64 << 20)
        self.idle = idle
        self.encoders = encoders
        self.total = 0
        #: Buffers by how recently a frame was added to them, the least recent first.
        self._tabs: OrderedDict[_Owner, None] = OrderedDict()
        # counts for /metrics
        self.resumes = 0  # reconnects given exactly the frames they missed
        self.replayed_frames = 0
        self.full_renders = 0  # reconnects that needed a full render
        self.evicted = 0  # buffers dropped to stay within a bound
        self.dropped = 0  # buffers dropped after a quiet period

    @property
    def is_enabled(self) -> bool:
        return self.tab_limit > 0 and self.limit > 0

    def keep(self, owner: _Owner, seq: int, frame: bytes) -> None:
        """Add frame ``seq`` (the one after the buffer's last, or the first of a new buffer)."""
        size = len(frame)
        replay = owner.replay
        if size > self.tab_limit or self.tab_limit <= 0 or self.limit <= 0:  # too big, or not is_enabled
            if replay is not None:
                self.forget(owner)  # a gap would make the buffer lie: start after this frame
            return
        tabs = self._tabs
        if replay is None:
            replay = owner.replay = TabReplay(seq)
            tabs[owner] = None
        else:
            tabs.move_to_end(owner)
        replay.frames.append(frame)
        replay.size += size
        self.total += size
        if replay.size > self.tab_limit:
            # down to three quarters of the bound: a busy tab trims once per many frames, not each time
            keep = self.tab_limit - (self.tab_limit >> 2)
            frames = replay.frames
            gone = 0
            dropped = 0
            while replay.size - dropped > keep:
                dropped += len(frames[gone])
                gone += 1
            del frames[:gone]  # the oldest, in one move
            replay.size -= dropped
            replay.first += gone
            self.total -= dropped
        total = self.total
        encoders = self.encoders
        # total > _room(), without its call (total > 0 here): over the cap, or over what the encoders leave
        if total > self.limit or (encoders is not None and total > encoders.limit - encoders.total):
            self._shrink()

    def forget(self, owner: _Owner) -> None:
        """Drop ``owner``'s buffer (its tab is gone, or its frames no longer matter)."""
        replay = owner.replay
        if replay is not None:
            owner.replay = None
            self.total -= replay.size
            self._tabs.pop(owner, None)

    def sweep(self, now: float) -> None:
        """Drop the buffers of tabs quiet for ``idle`` seconds, and shrink to what the budget allows now."""
        tabs = self._tabs
        horizon = now - self.idle
        while tabs:
            owner = next(iter(tabs))
            if owner.last_event > horizon:
                break
            self.forget(owner)
            self.dropped += 1
        if self.total > self._room():
            self._shrink()

    def _room(self) -> int:
        encoders = self.encoders
        if encoders is None:
            return self.limit
        room = encoders.limit - encoders.total  # comparisons, not min() and max(): asked once a frame
        if room >= self.limit:
            return self.limit
        return room if room > 0 else 0

    def _shrink(self) -> None:
        room = self._room()
        tabs = self._tabs
        while tabs and self.total > room:
            self.forget(next(iter(tabs)))
            self.evicted += 1

    def __len__(self) -> int:
        return len(self._tabs)

    def __iter__(self) -> Iterator[_Owner]:
        return iter(self._tabs)

    def stats(self) -> dict[str, int]:
        """Figures for ``/metrics``."""
        return {
            "replay_bytes": self.total,
            "replay_buffers": len(self._tabs),
            "replay_limit_bytes": self.limit,
            "resumes": self.resumes,
            "replayed_frames": self.replayed_frames,
            "full_renders": self.full_renders,
            "replay_evicted": self.evicted,
            "replay_dropped": self.dropped,
        }


_epoch: tuple[int, str] = (0, "")


def process_epoch() -> str:
    """A random name for this process (made again after a fork), the first part of its streams' epochs."""
    global _epoch
    pid = os.getpid()
    if _epoch[0] != pid:
        _epoch = (pid, os.urandom(6).hex())
    return _epoch[1]
