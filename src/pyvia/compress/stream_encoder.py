"""The content coding of one tab's event stream, and the shared compressor of standalone zstd frames.

Separate from the budget and the app's settings because this is the per-event hot path: one
encoder per tab, created lazily and dropped early (rule 2 of :mod:`pyvia.compress`); what a
release does per coding is :mod:`pyvia.compress.budget`'s.
"""

from __future__ import annotations

import struct
import zlib
from typing import TYPE_CHECKING, Any

import brotli
import zstandard

from pyvia.compress.budget import Release, Released
from pyvia.compress.codings import (
    BR,
    CODINGS,
    GZIP,
    STREAM_LEVELS,
    STREAM_ZSTD_SEARCH,
    ZSTD,
    ZstdSearch,
    check_level,
    window_for,
    zstd_compressor,
)
from pyvia.compress.encoder_memory import interpolate, memory_row, saturation_point
from pyvia.compress.shared_stream import END_FRAME

if TYPE_CHECKING:
    from pyvia.compress.budget import EncoderBudget
    from pyvia.compress.shared_stream import SharedStream

__all__ = ["SharedFrames", "StreamEncoder"]

#: A stream's own gzip member header (RFC 1952): deflate, no name, no time, no extra flags, OS unknown.
_GZIP_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"
_DEFLATE_LAST_EMPTY = b"\x01\x00\x00\xff\xff"  # a final empty stored block (at a byte boundary)
_STORED_MAX = 65535
_STORED_OPENING = 1024  # openings up to this many bytes go as stored blocks; larger ones are deflated once
_ZSTD_FLUSH_BLOCK = zstandard.COMPRESSOBJ_FLUSH_BLOCK


class SharedFrames:
    """One zstd compressor for the whole process, making complete standalone frames.

    What a stream sends when it opens (the connect event, a reconnect's full view) and keep-alive
    comments on a stream without a compressor go out as one complete zstd frame each, made here, so
    a tab holds no compression context of its own until a later event (a body of several complete
    frames is valid zstd; Chromium decodes it). The compressor keeps its context between calls
    (``ZstdCompressor.compress`` reuses it), so the memory is paid once per process, not per tab.
    Short inputs that repeat (keep-alive comments) are kept, a few. Single-threaded: event loop only.
    """

    __slots__ = ("_c", "_cache", "level")

    def __init__(self, level: int = STREAM_LEVELS.zstd) -> None:
        check_level(ZSTD, level)
        self.level = level
        self._c: zstandard.ZstdCompressor | None = None
        self._cache: dict[bytes, bytes] = {}

    def frame(self, data: bytes) -> bytes:
        """``data`` as one complete zstd frame."""
        cached = self._cache.get(data)
        if cached is not None:
            return cached
        c = self._c
        if c is None:
            c = self._c = zstandard.ZstdCompressor(level=self.level)
        out = bytes(c.compress(data))
        if len(data) <= 256 and len(self._cache) < 64:
            self._cache[data] = out
        return out

    def memory(self) -> int:
        """Bytes zstd holds for the shared context (0 before the first frame)."""
        return self._c.memory_size() if self._c is not None else 0


class StreamEncoder:
    """The content coding of one tab's event stream.

    :meth:`encode` compresses one event (or one batch, written together) and flushes, so the
    returned bytes decode to exactly that input at once. The compressor is created by the first
    :meth:`encode` — never before, so an idle tab holds no compressor — with a window sized from
    that first frame unless ``window`` was given (zstd sizes the window of each new frame again
    and keeps the larger). :meth:`release` gives the memory back mid-stream (see
    :class:`Release`); :meth:`finish` ends the body when the stream closes; :meth:`discard`
    forgets everything when the peer is already gone. gzip ignores ``window`` (always 15).

    ``owner`` is for the caller (e.g. the tab's stream), so it can act on
    :meth:`EncoderBudget.victims`. Not thread-safe: one event loop drives it.
    """

    __slots__ = (
        "_budget",
        "_c",
        "_crc",
        "_fed",
        "_fixed_window",
        "_frames",
        "_full_at",
        "_head",
        "_joined",
        "_memory",
        "_saturated",
        "_size",
        "_small",
        "coding",
        "is_finished",
        "last_use",
        "level",
        "owner",
        "search",
        "window",
    )

    def __init__(
        self,
        coding: str,
        *,
        level: int | None = None,
        window: int | None = None,
        budget: EncoderBudget | None = None,
        owner: object = None,
        frames: SharedFrames | None = None,
        search: ZstdSearch | None = STREAM_ZSTD_SEARCH,
    ) -> None:
        if coding not in CODINGS:
            raise ValueError(f"a stream encoder needs one of {CODINGS}, not {coding!r}")
        if window is not None and not 10 <= window <= 24:
            raise ValueError(f"window log2 {window!r} must be in 10..24")
        self.coding = coding
        self.level = STREAM_LEVELS.of(coding) if level is None else level
        check_level(coding, self.level)
        self._fixed_window = window
        #: Window log2; 0 until the first event sizes it.
        self.window = window or 0
        self._budget = budget
        self._frames = frames
        #: zstd only: how matches are searched (None: the level's own way).
        self.search = search
        self.owner = owner
        self._c: Any = None  # the live compressor (None: idle or released)
        self._fed = 0  # bytes fed to the live compressor, counted until its estimate stops growing
        self._small = 0
        self._saturated = 0
        self._full_at = 0
        self._memory = 0
        self.last_use = 0  # budget tick of the last encode: the LRU order of EncoderBudget.victims
        self._head = coding == GZIP  # gzip: the member header is still to be written
        self._crc = 0  # gzip: CRC-32 and length of everything encoded, for the member trailer
        self._size = 0
        self._joined = 0  # zstd: serial of the shared frame's write taken last (0: not in a shared frame)
        self.is_finished = False

    @property
    def releases_in_place(self) -> bool:
        """Whether :meth:`release` keeps the stream going (zstd, gzip) rather than ending it (brotli)."""
        return self.coding != BR

    @property
    def is_active(self) -> bool:
        """Whether a compressor (and its memory) is held right now."""
        return self._c is not None

    @property
    def memory(self) -> int:
        """Estimated resident bytes held now (0 when idle or released)."""
        return self._memory

    def encode(self, data: bytes) -> bytes:
        """Compress and flush ``data``; the result decodes to ``data`` with no further bytes.

        Raises RuntimeError after :meth:`finish`, or after a brotli/gzip :meth:`release`.
        """
        if self._joined:
            return self._leave() + self.encode(data)
        c = self._c
        if c is None:
            c = self._start(len(data))
        coding = self.coding
        out: bytes
        if coding == ZSTD:
            out = c.compress(data) + c.flush(_ZSTD_FLUSH_BLOCK)
        elif coding == BR:
            out = c.process(data) + c.flush()
        else:
            out = self._gzip_head() + c.compress(data) + c.flush(zlib.Z_SYNC_FLUSH)
            self._crc = zlib.crc32(data, self._crc)
            self._size += len(data)
        budget = self._budget
        if budget is not None:
            budget.tick += 1
            self.last_use = budget.tick
        if self._fed < self._full_at:
            self._fed += len(data)
            memory = interpolate(self._small, self._saturated, self._full_at, self._fed)
            if memory != self._memory:
                if budget is not None:
                    budget.grow(memory - self._memory)
                self._memory = memory
        return out

    def encode_opening(self, data: bytes) -> bytes:
        """Encode the events a stream opens with (what waited, the connect signals, a reconnect's
        full view), holding no compressor afterwards when the coding allows it.

        zstd with no compressor held: ``data`` goes out as one complete frame of the process-wide
        :class:`SharedFrames`, so a tab that connects and stays idle never builds its own context;
        the window is still sized from ``data`` (a reconnect's full view says how big frames are).
        gzip: as stored deflate blocks, or deflated by a compressor dropped at once when over 1 KB.
        A brotli body is one coded stream that cannot hold a detached piece, so it goes through
        :meth:`encode` (its compressor starts here; see ``docs/compression.md``).
        """
        if self._joined:
            return self._leave() + self.encode_opening(data)
        if self._c is None and self.coding != BR and not self.is_finished:
            if self.coding == GZIP:
                return self._gzip_detached(data, deflate=len(data) > _STORED_OPENING)
            if self._fixed_window is None:
                self.window = max(self.window, window_for(len(data)))
            return self._frame(data)
        return self.encode(data)

    def encode_keepalive(self, data: bytes) -> bytes:
        """Encode filler (an SSE comment) without making the encoder look used.

        A zstd or gzip encoder holding no compressor (idle or released) answers with a small
        standalone frame (zstd) or a stored block (gzip) and stays without one, so a keep-alive
        every 15 s does not undo a release. Other cases go through :meth:`encode` (a brotli body
        cannot hold a detached piece), without moving the encoder up the budget's least-recently-used
        order.
        """
        if self._joined:
            return self._leave() + self.encode_keepalive(data)
        if self._c is None and self.coding != BR and not self.is_finished:
            if self.coding == GZIP:
                return self._gzip_detached(data, deflate=False)
            return self._frame(data)
        used = self.last_use
        out = self.encode(data)
        self.last_use = used
        return out

    def release(self) -> Released:
        """Give the compressor's memory back, keeping the stream decodable.

        Returns the tail to write and :attr:`Release.CONTINUE` (zstd: the frame is ended; gzip: no
        bytes, every event already ended on a byte boundary; the next :meth:`encode` starts a new
        compressor) or :attr:`Release.RECONNECT` (brotli: the body is ended, end the response).
        Releasing an idle zstd or gzip encoder returns no bytes.
        Raises RuntimeError when the encoder is finished.
        """
        if self.is_finished:
            raise RuntimeError(f"this {self.coding} stream encoder is finished; there is nothing to release")
        if self.coding == ZSTD:
            return Released(self._leave() + self._end(released=True), Release.CONTINUE)
        if self.coding == GZIP:
            if self._c is not None:
                self._c = None
                self._drop(released=True)
            return Released(b"", Release.CONTINUE)
        never_started = self._c is None  # brotli never goes back to idle once started
        tail = self._end(released=True)
        self.is_finished = True
        return Released(_EMPTY_BROTLI if never_started else tail, Release.RECONNECT)

    def finish(self) -> bytes:
        """End the coded body (the stream is closing): the bytes to write last. Idempotent."""
        if self.is_finished:
            return b""
        never_started = self._c is None and self.coding == BR
        tail = self._leave() + self._end(released=False)
        self.is_finished = True
        # A brotli body needs at least its header and end; an empty zstd body is valid.
        return _EMPTY_BROTLI if never_started else tail

    def discard(self) -> None:
        """Drop the compressor without producing bytes (the peer is gone)."""
        self._joined = 0
        if self._c is not None:
            self._c = None
            self._drop(released=False)
        self.is_finished = True

    def encode_shared(self, shared: SharedStream, data: bytes, now: float) -> bytes:
        """:meth:`encode` for a write that every tab of a shared render is sent: the bytes of
        ``shared``'s frame when this tab can take them, so it holds no compressor of its own
        (zstd only; anything else, or a tab that cannot take them, goes through :meth:`encode`)."""
        if self.coding != ZSTD or self.is_finished:
            return self.encode(data)
        taken = shared.take(data, self._joined, now)
        if taken is None:
            return self.encode(data)
        head = b""
        if taken.opens:  # end the frame this tab has open: the shared one, or its own (freeing it)
            head = self._leave() if self._joined else self._end(released=True)
        self._joined = taken.serial
        return head + taken.data if head else taken.data

    @property
    def in_shared_frame(self) -> bool:
        """Whether the last bytes written were a shared frame's (the tab holds no compressor)."""
        return self._joined != 0

    def _leave(self) -> bytes:
        """End the shared frame this tab is in (the bytes that do), if any."""
        if self._joined:
            self._joined = 0
            return END_FRAME
        return b""

    def _gzip_head(self) -> bytes:
        if self._head:
            self._head = False
            return _GZIP_HEADER
        return b""

    def _gzip_detached(self, data: bytes, *, deflate: bool) -> bytes:
        """``data`` as deflate blocks made without this tab's compressor, ending on a byte boundary."""
        if deflate:
            once = zlib.compressobj(self.level, zlib.DEFLATED, -15)
            body = once.compress(data) + once.flush(zlib.Z_SYNC_FLUSH)
        else:
            body = b"".join(
                struct.pack("<BHH", 0, len(chunk), len(chunk) ^ 0xFFFF) + chunk
                for chunk in (data[i : i + _STORED_MAX] for i in range(0, len(data), _STORED_MAX))
            )
        self._crc = zlib.crc32(data, self._crc)
        self._size += len(data)
        return self._gzip_head() + body

    def _frame(self, data: bytes) -> bytes:
        frames = self._frames
        if frames is not None:
            return frames.frame(data)
        return bytes(zstandard.ZstdCompressor(level=self.level).compress(data))  # no shared one: a one-off

    def _start(self, first: int) -> Any:
        if self.is_finished:
            raise RuntimeError(f"this {self.coding} stream encoder is finished; the stream must reconnect")
        coding = self.coding
        if coding == GZIP:
            self.window = 15
        elif self._fixed_window is None:
            self.window = max(self.window, window_for(first))
        if coding == ZSTD:
            c: Any = zstd_compressor(self.level, self.window, self.search).compressobj()
        elif coding == BR:
            c = brotli.Compressor(mode=brotli.MODE_TEXT, quality=self.level, lgwin=self.window)
        else:
            c = zlib.compressobj(self.level, zlib.DEFLATED, -15)  # raw deflate: pyvia writes the gzip wrapper
        self._c = c
        self._small, self._saturated = memory_row(coding, self.level, self.window)
        self._full_at = saturation_point(coding, self.window)
        self._fed = 0
        self._memory = self._small
        if self._budget is not None:
            self._budget.add(self)
        return c

    def _end(self, *, released: bool) -> bytes:
        c, self._c = self._c, None
        if self.coding == GZIP:  # ends the member, whether or not a compressor is held
            last = c.flush(zlib.Z_FINISH) if c is not None else _DEFLATE_LAST_EMPTY
            if c is not None:
                self._drop(released=released)
            return self._gzip_head() + last + struct.pack("<II", self._crc, self._size & 0xFFFFFFFF)
        if c is None:
            return b""
        tail = c.flush(zstandard.COMPRESSOBJ_FLUSH_FINISH) if self.coding == ZSTD else c.finish()  # brotli
        self._drop(released=released)
        return bytes(tail)

    def _drop(self, *, released: bool) -> None:
        if self._budget is not None:
            self._budget.remove(self, released=released)
        self._memory = 0
        self._fed = 0
        self._full_at = 0

    def __repr__(self) -> str:
        state = "finished" if self.is_finished else "active" if self._c is not None else "idle"
        return (
            f"StreamEncoder({self.coding!r}, level={self.level}, window={self.window}, {state}, memory={self._memory})"
        )


_EMPTY_BROTLI = bytes(brotli.Compressor(quality=0, lgwin=10).finish())
