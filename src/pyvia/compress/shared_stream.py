"""One zstd frame that the streams of many tabs carry: a shared render compressed once.

With ``share_render`` every tab of a scope and route is sent the same bytes when the scope is
re-rendered. On zstd streams each tab used to compress them again with its own compressor, and
hold its own window and tables (~170 KB for a busy 33 KB board). A :class:`SharedStream` compresses
each such write once, into a zstd frame that every tab which took all of the frame's earlier writes
can take too, byte for byte: the tab holds no compressor while it is in the frame, and the
compression costs once per render instead of once per tab (bench/RESULTS-2.md §8).

A tab can enter only where a frame starts (the decoder needs the frame from its header on), so the
shared stream starts a new frame every ``per_frame`` writes or ``max_age`` seconds; a tab that came
in between, or whose write differs from the others' (a signal of its own in the same flush, a held
view), uses its own compressor meanwhile. A tab leaves a shared frame at any point by ending it
itself (:data:`END_FRAME`: the frame is written without a checksum or a content size, so an empty
last block is a valid end), which is what :class:`~pyvia.compress.stream_encoder.StreamEncoder`
does before it writes anything else.
"""

from __future__ import annotations

import itertools
from typing import Any

import zstandard

from pyvia.compress.codings import ZstdSearch, window_for, zstd_compressor

__all__ = ["END_FRAME", "SHARED_ZSTD_SEARCH", "SharedStream", "Taken"]

#: An empty raw block marked last: it ends a zstd frame that has no checksum (RFC 8878 §3.1.1.2).
END_FRAME = b"\x01\x00\x00"
_FLUSH_BLOCK = zstandard.COMPRESSOBJ_FLUSH_BLOCK

#: The search of a shared frame. Its memory is paid once per scope and route, not per tab, so it
#: can afford what a tab's cannot: binary-tree matching over tables the size of the window
#: (bench/RESULTS-2.md §8 for what it compresses to and costs, against the tabs' own search).
SHARED_ZSTD_SEARCH = ZstdSearch(strategy=zstandard.STRATEGY_BTLAZY2, search_log=4, min_match=4, table_slack=1)


class Taken:
    """What a tab writes for one shared write: ``data``; ``opens`` when it starts a frame (the
    tab ends whatever frame it has open first); ``serial`` names the write, for the next one."""

    __slots__ = ("data", "opens", "serial")

    def __init__(self, serial: int, data: bytes, opens: bool) -> None:
        self.serial = serial
        self.data = data
        self.opens = opens


class SharedStream:
    """The zstd frames of one shared render (one scope and route), written to every tab that can.

    :meth:`take` answers a tab's write: the shared bytes for it, or None when the tab must use its
    own compressor (it is not at the frame's last write, or its bytes differ from the others').
    ``serials`` numbers writes across every shared stream of the process, so a tab needs to keep
    only the number of the last shared write it took (0: none open). Event loop only.
    """

    __slots__ = (
        "_c",
        "_compressor",
        "_input",
        "_taken",
        "last_use",
        "level",
        "max_age",
        "per_frame",
        "prev",
        "search",
        "serials",
        "started",
        "writes",
    )

    def __init__(
        self,
        serials: itertools.count[int],
        *,
        level: int = 3,
        search: ZstdSearch | None = SHARED_ZSTD_SEARCH,
        per_frame: int = 64,
        max_age: float = 10.0,
    ) -> None:
        self.serials = serials
        self.level = level
        self.search = search
        self.per_frame = per_frame
        self.max_age = max_age
        self._c: Any = None  # the open frame's compressing object (None: no frame open)
        self._compressor: zstandard.ZstdCompressor | None = None
        self._input = b""
        self._taken: Taken | None = None  # the frame's latest write, as every tab takes it
        self.prev = 0  # serial of the write before it in the same frame (0: it opened the frame)
        self.writes = 0  # writes in the open frame
        self.started = 0.0
        self.last_use = 0.0

    @property
    def is_open(self) -> bool:
        return self._c is not None

    def take(self, data: bytes, at: int, now: float) -> Taken | None:
        """The shared bytes of ``data`` for a tab whose last shared write was serial ``at``."""
        taken = self._taken
        if taken is not None and at != taken.serial and (data is self._input or data == self._input):
            return taken if taken.opens or at == self.prev else None
        # a new write (a tab that has the latest write sends the next, even if the bytes are the
        # same): from a tab at the latest write, or from anyone when a new frame is due
        due = self._c is None or self.writes >= self.per_frame or now - self.started >= self.max_age
        if not due and (taken is None or at != taken.serial):
            return None
        c = self._c
        if due:
            window = window_for(len(data)) + 1
            compressor = self._compressor = zstd_compressor(self.level, window, self.search)
            c = self._c = compressor.compressobj()
            self.writes = 0
            self.started = now
            self.prev = 0
        elif taken is not None:  # always, when not due: a frame is open, so a write was taken
            self.prev = taken.serial
        out = c.compress(data) + c.flush(_FLUSH_BLOCK)
        self.writes += 1
        self.last_use = now
        self._input = data
        taken = self._taken = Taken(next(self.serials), out, due)
        return taken

    def close(self) -> None:
        """Drop the compressor (the render went quiet): the next write opens a new frame."""
        self._c = self._compressor = None
        self._taken = None
        self._input = b""
        self.prev = 0

    def memory(self) -> int:
        """Bytes zstd holds for the open frame (0 when none is)."""
        return 0 if self._compressor is None else int(self._compressor.memory_size())
