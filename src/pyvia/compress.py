"""Content codings for pages and streams: negotiation, one-shot page compression, per-tab stream
encoders and the per-process budget on their memory.

Rules this module keeps (DESIGN.md, hot-path rules; ``machine-limits.md`` §3):

1. No I/O and no asyncio. Everything takes values and returns bytes or decisions; the stream layer
   writes the bytes and closes sinks. (Reading how much memory is left for the budget's default,
   and giving a dropped encoder's memory back to the OS, are :mod:`pyvia.memory`'s.)
2. A stream encoder exists only while it is needed: it is created on the first event after the
   stream's opening (zstd and gzip write the opening without it, so an idle tab holds none; brotli
   cannot), sized from that event (window ≈ log2(1.5 x frame), 16…22), flushed after every
   event so the browser can decode each one at once, and dropped when the stream ends or the
   budget asks for its memory back.
3. Never a library default. ``brotli.Compressor()`` alone is quality 11 with a 4 MB window: far
   too slow per frame and too large per stream (``machine-limits.md`` §3c). Every compressor here is
   built with an explicit level and window.

Releasing an encoder's memory differs per coding (:class:`Release`):

* ``zstd``: the frame is ended (``COMPRESSOBJ_FLUSH_FINISH``) and the next event starts a new
  frame with a new compressor. A body made of several complete frames is valid zstd and Chromium
  decodes it (DESIGN.md), so the stream goes on: :attr:`Release.CONTINUE`.
* ``gzip``: pyvia writes the gzip wrapper itself around raw deflate blocks, and every event ends on
  a byte boundary (a sync flush), so the compressor can be dropped between two events and a new one
  started later; the body stays one gzip member: :attr:`Release.CONTINUE`.
* ``br``: the coded stream can only be ended (brotli's distance cache and the meaning of its
  dictionary references depend on everything before). The caller writes the tail, ends the
  response, and the browser reconnects (Datastar does so on its own): :attr:`Release.RECONNECT`.
"""

from __future__ import annotations

import enum
import math
import struct
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import brotli
import zstandard

from pyvia.http import Request, Response
from pyvia.memory import available_memory, default_budget

__all__ = [
    "BR",
    "CODINGS",
    "DEFAULT_PREFERENCE",
    "GZIP",
    "IDENTITY",
    "PAGE_LEVELS",
    "STATIC_LEVELS",
    "STREAM_LEVELS",
    "STREAM_ZSTD_SEARCH",
    "ZSTD",
    "Compression",
    "EncoderBudget",
    "Levels",
    "Negotiator",
    "Release",
    "Released",
    "SharedFrames",
    "StreamEncoder",
    "ZstdSearch",
    "add_vary",
    "available_memory",
    "compress",
    "default_budget",
    "estimate_memory",
    "is_compressible",
    "negotiate",
    "parse_accept_encoding",
    "window_for",
]

ZSTD = "zstd"
BR = "br"
GZIP = "gzip"
IDENTITY = "identity"
#: The codings this module can produce.
CODINGS = (ZSTD, BR, GZIP)
#: Server preference when the client rates codings equally. zstd first: much less CPU than
#: brotli q4 at the same memory, for nearly the same bytes per patch (``machine-limits.md`` §3a and
#: ``bench/compression.py``); brotli next; gzip only for clients offering nothing better.
DEFAULT_PREFERENCE = (ZSTD, BR, GZIP)

MIN_WINDOW = 16
MAX_WINDOW = 22
_GZIP_WBITS = 31  # 16 + 15: a gzip wrapper around a 32 KB deflate window
#: A stream's own gzip member header (RFC 1952): deflate, no name, no time, no extra flags, OS unknown.
_GZIP_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"
_DEFLATE_LAST_EMPTY = b"\x01\x00\x00\xff\xff"  # a final empty stored block (at a byte boundary)
_STORED_MAX = 65535
_STORED_OPENING = 1024  # openings up to this many bytes go as stored blocks; larger ones are deflated once
_MAX_ELEMENTS = 64  # Accept-Encoding elements looked at; more is an abuse, not a browser


_LEVEL_RANGES = {ZSTD: (1, 22), BR: (0, 11), GZIP: (1, 9)}


def _check_level(coding: str, level: object) -> None:
    low, high = _LEVEL_RANGES[coding]
    if not isinstance(level, int) or not low <= level <= high:
        raise ValueError(f"{coding} level {level!r} must be an integer in {low}..{high}")


@dataclass(frozen=True, slots=True)
class Levels:
    """A compression level per coding, for one kind of body (pages, streams, static files)."""

    zstd: int = 3
    br: int = 4
    gzip: int = 6

    def __post_init__(self) -> None:
        for coding in CODINGS:
            _check_level(coding, getattr(self, coding))

    def of(self, coding: str) -> int:
        return int(getattr(self, coding))


#: Streams (``bench/compression.py``, sessions of large board frames and small patches): zstd 3
#: is the cheapest in CPU for its bytes and memory (level 1 is a tie: bytes go either way
#: depending on the patch shape). brotli 4: not q1 (it cannot refer to earlier events,
#: ``machine-limits.md`` §3c), not q5 (much more CPU for a few fewer bytes); q2 if CPU is short.
#: gzip 1: level 6 saves some bytes for more CPU, and gzip only serves clients offering neither
#: zstd nor br (Chromium 156 offers both, even over plain HTTP to localhost; checked here), so
#: it is kept cheap.
STREAM_LEVELS = Levels(zstd=3, br=4, gzip=1)
#: Pages are compressed whole and the compressor is dropped at once, so only CPU counts: each of
#: these costs a small part of rendering the page (brotli 5 is a little smaller than q4 for a
#: little more CPU; q9 costs about as much as the render) (``machine-limits.md`` §4).
PAGE_LEVELS = Levels(zstd=3, br=5, gzip=6)
#: Static files are compressed once, off the event loop: the best each coding offers.
STATIC_LEVELS = Levels(zstd=19, br=11, gzip=9)

_COMPRESSIBLE_TYPES = frozenset(
    {
        "application/javascript",
        "application/json",
        "application/manifest+json",
        "application/wasm",
        "application/xml",
        "application/xhtml+xml",
        "application/rss+xml",
        "application/atom+xml",
        "application/ld+json",
        "application/geo+json",
        "application/x-javascript",
        "image/svg+xml",
        "image/x-icon",
        "image/vnd.microsoft.icon",
        "font/ttf",
        "font/otf",
        "application/vnd.ms-fontobject",
    }
)


def is_compressible(content_type: str) -> bool:
    """Whether a body of this media type gains from compression (text, JSON, JS, SVG, wasm...)."""
    mime = content_type.split(";", 1)[0].strip().lower()
    return mime.startswith("text/") or mime in _COMPRESSIBLE_TYPES or mime.endswith(("+json", "+xml"))


# --- negotiation --------------------------------------------------------------------------------


def parse_accept_encoding(header: str) -> dict[str, float]:
    """The codings of an ``Accept-Encoding`` value with their q-values (RFC 9110 §12.5.3).

    Names are lower-cased and ``x-gzip`` counts as ``gzip``. An element whose q-value is not a
    number in 0..1 is dropped (it is invalid, so it says nothing); when a coding is named twice
    the first rating counts. Never raises.
    """
    out: dict[str, float] = {}
    for element in header.split(",", _MAX_ELEMENTS)[:_MAX_ELEMENTS]:
        name, _, params = element.partition(";")
        name = name.strip().lower()
        if not name:
            continue
        q = 1.0
        if params:
            for param in params.split(";"):
                key, _, value = param.partition("=")
                if key.strip().lower() == "q":
                    try:
                        q = float(value.strip())
                    except ValueError:
                        q = -1.0
                    break
            if not 0.0 <= q <= 1.0:  # also false for NaN
                continue
        if name == "x-gzip":
            name = GZIP
        out.setdefault(name, q)
    return out


def negotiate(header: str | None, preference: Sequence[str] = DEFAULT_PREFERENCE) -> str:
    """Choose the coding to send: one of ``preference`` or ``"identity"``.

    The client's q-values rank first; among codings it rates equally the server's
    ``preference`` order decides. ``q=0`` refuses a coding, ``*`` rates every coding not named,
    unknown codings are ignored. ``identity`` is chosen when the client rates it above every
    coding we can produce, when the header is missing (RFC 9110 allows anything then, but tools
    such as curl send no header and expect plain bytes) or empty, or when nothing else is
    acceptable — even if the client said ``identity;q=0``, since a 406 would leave the tab blank:
    that refusal is honoured whenever another coding is acceptable.
    """
    if not header:
        return IDENTITY
    rated = parse_accept_encoding(header)
    star = rated.get("*")
    best, best_q = IDENTITY, 0.0
    for coding in preference:
        q = rated.get(coding, star if star is not None else 0.0)
        if q > best_q:
            best, best_q = coding, q
    if best == IDENTITY:
        return IDENTITY
    identity_q = rated.get(IDENTITY)
    if identity_q is None:
        identity_q = star if star is not None else 0.0  # unnamed identity: the last resort
    return IDENTITY if identity_q > best_q else best


class Negotiator:
    """:func:`negotiate` with a configured preference and a small cache.

    Browsers send a handful of distinct ``Accept-Encoding`` values, so the answer for each is
    kept (at most 256 entries; the cache is emptied when full, which only costs a re-parse).
    """

    __slots__ = ("_cache", "preference")

    def __init__(self, preference: Iterable[str] = DEFAULT_PREFERENCE) -> None:
        order = tuple(c.strip().lower() for c in preference)
        for coding in order:
            if coding not in CODINGS:
                raise ValueError(f"unknown coding {coding!r} in the preference {order!r}; use some of {CODINGS}")
        if len(set(order)) != len(order):
            raise ValueError(f"the coding preference {order!r} names a coding twice")
        self.preference = order
        self._cache: dict[str | None, str] = {}

    def choose(self, header: str | None) -> str:
        try:
            return self._cache[header]
        except KeyError:
            pass
        coding = negotiate(header, self.preference)
        if len(self._cache) >= 256:
            self._cache.clear()
        self._cache[header] = coding
        return coding

    def for_request(self, request: Request) -> str:
        """The coding for ``request``, reading every ``Accept-Encoding`` header it carries."""
        headers = request.headers
        if "accept-encoding" not in headers:
            return IDENTITY
        values = headers.get_all("accept-encoding")
        return self.choose(values[0] if len(values) == 1 else ", ".join(values))


# --- one-shot compression -----------------------------------------------------------------------


def window_for(size: int, low: int = MIN_WINDOW, high: int = MAX_WINDOW) -> int:
    """Window log2 for frames of ``size`` bytes: ⌈log2(1.5 x size)⌉, clamped to ``low..high``.

    A window smaller than a frame cannot reach back to the previous frame: brotli q4 with a
    window half the frame loses much of its ratio and costs more CPU (``machine-limits.md`` §3c).
    A re-rendered view finds its match one frame back, so a window of 1.5 frames holds the
    previous one whole with room for the next to grow by half. (Twice the frame, the earlier rule,
    doubled the window of a 33 KB Game-of-Life board to 2^17 for nothing: a zstd stream's buffers
    are window + block, so 128 KB more per tab.)
    """
    if size <= 0:
        return low
    return max(low, min(high, math.ceil(math.log2(1.5 * size))))


@dataclass(frozen=True, slots=True)
class ZstdSearch:
    """How a stream's zstd compressor looks for matches, replacing the level's own choice.

    Fields are ``zstandard.ZstdCompressionParameters``'s; the hash and chain tables are sized from
    the stream's window: ``hash_log = chain_log = window - table_slack`` (at least 6).
    """

    strategy: int = zstandard.STRATEGY_GREEDY
    search_log: int = 4
    min_match: int = 5
    table_slack: int = 5

    def __post_init__(self) -> None:
        for name, low, high in (("strategy", 1, 9), ("search_log", 1, 9), ("min_match", 3, 7), ("table_slack", 0, 10)):
            value = getattr(self, name)
            if not isinstance(value, int) or not low <= value <= high:
                raise ValueError(f"ZstdSearch {name}={value!r} must be an integer in {low}..{high}")


#: The search of stream encoders (``bench/zstd_params.py``, Game-of-Life frames, many encoders in
#: turn, window 2^16; bench/RESULTS-2.md §5): greedy with 16-entry rows and tables of 2^11
#: compresses better at less RSS per encoder than level 3's own double-fast search (tables
#: window - 3/- 4); lazy and lazy2 do a little better at the same memory for more CPU, and dfast
#: with any table or min_match does no better. The price is CPU on large frames (several times
#: the default search's per board and tab); on small broadcast events it is nearly the same.
STREAM_ZSTD_SEARCH = ZstdSearch()
#: Without a :class:`ZstdSearch` the level's own search is used, its tables sized from the window:
#: hash_log = window - 3 and chain_log = window - 4, capped at the level's own (17 and 16 for level
#: 3); ``bench/compression.py``: about the bytes of plain ``from_level(3, window_log=w)`` at a
#: fraction of its RSS per encoder. None turns that sizing off too (the bench's "plain" rows).
_ZSTD_TABLE_SLACK: int | None = 3
_zstd_params: dict[tuple[int, int, ZstdSearch | None], zstandard.ZstdCompressionParameters] = {}


def _zstd_stream_params(
    level: int, window: int, search: ZstdSearch | None = None
) -> zstandard.ZstdCompressionParameters:
    key = (level, window, search)
    params = _zstd_params.get(key)
    if params is None:
        if search is not None:
            tables = max(6, window - search.table_slack)
            params = zstandard.ZstdCompressionParameters.from_level(
                level,
                window_log=window,
                hash_log=tables,
                chain_log=tables,
                search_log=search.search_log,
                min_match=search.min_match,
                strategy=search.strategy,
            )
        else:
            params = zstandard.ZstdCompressionParameters.from_level(level, window_log=window)
            slack = _ZSTD_TABLE_SLACK
            if slack is not None:
                params = zstandard.ZstdCompressionParameters.from_level(
                    level,
                    window_log=window,
                    hash_log=max(6, min(params.hash_log, window - slack)),
                    chain_log=max(6, min(params.chain_log, window - slack - 1)),
                )
        _zstd_params[key] = params
    return params


def _zstd_compressor(level: int, window: int | None, search: ZstdSearch | None = None) -> zstandard.ZstdCompressor:
    if window is None:
        return zstandard.ZstdCompressor(level=level)
    return zstandard.ZstdCompressor(compression_params=_zstd_stream_params(level, window, search))


def compress(data: bytes, coding: str, level: int, *, window: int | None = None) -> bytes:
    """``data`` compressed whole in ``coding`` (a fresh compressor; safe from any thread).

    ``window`` (log2) defaults to one sized from ``data``, capped at 24 for brotli (its maximum);
    zstd picks its own from the known size. ``identity`` returns ``data`` unchanged.
    """
    if coding == BR:
        lgwin = window if window is not None else window_for(len(data), MIN_WINDOW, 24)
        return bytes(brotli.compress(data, mode=brotli.MODE_TEXT, quality=level, lgwin=lgwin))
    if coding == ZSTD:
        return bytes(_zstd_compressor(level, window).compress(data))
    if coding == GZIP:
        gz = zlib.compressobj(level, zlib.DEFLATED, _GZIP_WBITS)
        return gz.compress(data) + gz.flush()
    if coding == IDENTITY:
        return data
    raise ValueError(f"unknown coding {coding!r}; expected one of {(*CODINGS, IDENTITY)}")


# --- memory estimates ---------------------------------------------------------------------------

#: Resident memory (KiB) of one streaming encoder, measured by ``python -m bench.compression
#: --memory-grid`` in a fresh process per row (RSS growth over K encoders / K, the method of
#: ``machine-limits.md`` §3b): (coding, level) → window log2 → (after 64 KB of 2 KB patches: the
#: hash tables, touched at once; after the window has filled with 96 KB frames). zstd rows are
#: for ``STREAM_ZSTD_SEARCH`` (the level then hardly matters; the level's own search with tables of
#: window - 3, the default before, measured more).
#: gzip's window is always 15.
_MEMORY_KIB: dict[tuple[str, int], dict[int, tuple[int, int]]] = {
    ("zstd", 1): {16: (129, 207), 18: (161, 433), 20: (281, 1301), 22: (761, 4910)},
    ("zstd", 3): {16: (128, 203), 18: (161, 434), 20: (281, 1303), 22: (761, 4918)},
    ("zstd", 6): {16: (130, 203), 18: (161, 435), 20: (281, 1302), 22: (761, 4905)},
    ("br", 1): {16: (24, 287), 18: (24, 554), 20: (24, 554), 22: (24, 600)},
    ("br", 2): {16: (371, 484), 18: (373, 869), 20: (373, 2408), 22: (373, 8574)},
    ("br", 4): {16: (676, 786), 18: (678, 1174), 20: (678, 2713), 22: (678, 8874)},
    ("br", 5): {16: (677, 788), 18: (1464, 1967), 20: (1465, 3502), 22: (1465, 9681)},
    ("gzip", 1): {15: (207, 230)},
    ("gzip", 6): {15: (207, 228)},
    ("gzip", 9): {15: (207, 229)},
}
_SMALL_FEED = 64 * 1024
_ZSTD_FLUSH_BLOCK = zstandard.COMPRESSOBJ_FLUSH_BLOCK


def _memory_row(coding: str, level: int, window: int) -> tuple[int, int]:
    """(small, saturated) bytes for a configuration, from the nearest measured row.

    An unmeasured level takes the nearest measured one of the same coding (the higher on a tie;
    levels above the table, which no stream should use, are underestimated); an unmeasured
    window takes the next larger measured one (an overestimate), and beyond the table the ring
    buffer is counted as growing by 2 bytes per window byte.
    """
    levels = [lv for (c, lv) in _MEMORY_KIB if c == coding]
    if not levels:
        raise ValueError(f"no memory figures for coding {coding!r}")
    windows = _MEMORY_KIB[(coding, min(levels, key=lambda lv: (abs(lv - level), -lv)))]
    if coding == GZIP:
        window = 15
    above = [w for w in sorted(windows) if w >= window]
    if above:
        small, saturated = windows[above[0]]
    else:
        top = max(windows)
        small, saturated = windows[top]
        saturated += 2 * ((1 << window) - (1 << top)) // 1024
    return small * 1024, saturated * 1024


def estimate_memory(coding: str, level: int, window: int, fed: int) -> int:
    """Estimated resident bytes of a streaming encoder that has compressed ``fed`` bytes.

    The model follows the measurements: the hash tables are touched by the first events (the
    "small" figure, reached at once), then the window's buffers fill as input flows until
    ``2**window`` more bytes have gone through (the "saturated" figure); in between the
    estimate grows linearly. An encoder's memory never shrinks until it is dropped.
    """
    small, saturated = _memory_row(coding, level, window)
    return _interpolate(small, saturated, _saturation_point(coding, window), fed)


def _saturation_point(coding: str, window: int) -> int:
    return _SMALL_FEED + (1 << (15 if coding == GZIP else window))


def _interpolate(small: int, saturated: int, full_at: int, fed: int) -> int:
    if fed <= _SMALL_FEED:
        return small
    if fed >= full_at:
        return saturated
    return small + (saturated - small) * (fed - _SMALL_FEED) // (full_at - _SMALL_FEED)


# --- stream encoders and their budget -----------------------------------------------------------


class Release(enum.Enum):
    """What the stream must do after an encoder gave its memory back."""

    #: zstd, gzip: keep the stream (zstd: the tail ended a frame), the next event starts a new compressor.
    CONTINUE = "continue"
    #: brotli: the tail ends the coded body; end the response so the tab reconnects.
    RECONNECT = "reconnect"


class Released(NamedTuple):
    """The result of :meth:`StreamEncoder.release`: bytes to write, then what to do."""

    data: bytes
    action: Release


class EncoderBudget:
    """The per-process account of stream-encoder memory, and the cap on it.

    Every :class:`StreamEncoder` given this budget reports its estimated memory here
    (:func:`estimate_memory`). When :attr:`is_over` turns true, the stream layer asks
    :meth:`victims` for the least recently used encoders whose release brings the total back
    under ``low_water`` and releases each (:meth:`StreamEncoder.release`). Single-threaded: use
    it from the event loop only.
    """

    __slots__ = ("_active", "_tick", "count", "created", "dropped", "limit", "low_water", "peak", "releases", "total")

    def __init__(self, limit: int | None = None, *, low_water: float = 0.9) -> None:
        self.limit = default_budget() if limit is None else int(limit)
        if self.limit <= 0:
            raise ValueError(f"the encoder budget must be positive, not {limit!r}")
        if not 0 < low_water <= 1:
            raise ValueError(f"low_water {low_water!r} must be in (0, 1]")
        #: After a reclaim the total is at most ``limit * low_water``, so the next one waits.
        self.low_water = int(self.limit * low_water)
        self.total = 0  # estimated bytes held by live encoders
        self.count = 0  # live encoders (created, not yet released)
        self.created = 0  # encoders ever created (a zstd stream creates one per frame)
        self.releases = 0  # encoders released to free memory (not counting streams that ended)
        self.dropped = 0  # encoders gone for any reason (released, finished, discarded)
        self.peak = 0
        self._tick = 0
        self._active: set[StreamEncoder] = set()

    @property
    def is_over(self) -> bool:
        return self.total > self.limit

    def victims(self) -> list[StreamEncoder]:
        """Live encoders to release, least recently used first, to get back under ``low_water``.

        Returns an empty list when the total is within the limit. Sorting happens only here,
        under pressure; the hot path only stamps a counter.
        """
        if self.total <= self.limit:
            return []
        out: list[StreamEncoder] = []
        excess = self.total - self.low_water
        for encoder in sorted(self._active, key=_last_use):
            if excess <= 0:
                break
            out.append(encoder)
            excess -= encoder.memory
        return out

    def live(self) -> list[StreamEncoder]:
        """The encoders holding a compressor now (a copy: releasing one changes the set)."""
        return list(self._active)

    def stats(self) -> dict[str, int]:
        """Figures for ``/metrics``: bytes held (estimated), live encoders, releases, limit."""
        return {
            "bytes": self.total,
            "encoders": self.count,
            "created": self.created,
            "releases": self.releases,
            "peak_bytes": self.peak,
            "limit_bytes": self.limit,
        }

    def _add(self, encoder: StreamEncoder) -> None:
        self._active.add(encoder)
        self.count += 1
        self.created += 1
        self._grow(encoder.memory)

    def _grow(self, delta: int) -> None:
        self.total += delta
        if self.total > self.peak:
            self.peak = self.total

    def _remove(self, encoder: StreamEncoder, *, released: bool) -> None:
        self._active.discard(encoder)
        self.count -= 1
        self.dropped += 1
        self.total -= encoder.memory
        if released:
            self.releases += 1

    def __repr__(self) -> str:
        return f"EncoderBudget(total={self.total}, count={self.count}, limit={self.limit}, releases={self.releases})"


def _last_use(encoder: StreamEncoder) -> int:
    return encoder._used


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
        _check_level(ZSTD, level)
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
        "_memory",
        "_saturated",
        "_size",
        "_small",
        "_used",
        "coding",
        "is_finished",
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
        _check_level(coding, self.level)
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
        self._used = 0  # budget tick of the last encode: the LRU order of EncoderBudget.victims
        self._head = coding == GZIP  # gzip: the member header is still to be written
        self._crc = 0  # gzip: CRC-32 and length of everything encoded, for the member trailer
        self._size = 0
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
            budget._tick += 1
            self._used = budget._tick
        if self._fed < self._full_at:
            self._fed += len(data)
            memory = _interpolate(self._small, self._saturated, self._full_at, self._fed)
            if memory != self._memory:
                if budget is not None:
                    budget._grow(memory - self._memory)
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
        if self._c is None and self.coding != BR and not self.is_finished:
            if self.coding == GZIP:
                return self._gzip_detached(data, deflate=False)
            return self._frame(data)
        used = self._used
        out = self.encode(data)
        self._used = used
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
            return Released(self._end(released=True), Release.CONTINUE)
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
        tail = self._end(released=False)
        self.is_finished = True
        # A brotli body needs at least its header and end; an empty zstd body is valid.
        return _EMPTY_BROTLI if never_started else tail

    def discard(self) -> None:
        """Drop the compressor without producing bytes (the peer is gone)."""
        if self._c is not None:
            self._c = None
            self._drop(released=False)
        self.is_finished = True

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
            c: Any = _zstd_compressor(self.level, self.window, self.search).compressobj()
        elif coding == BR:
            c = brotli.Compressor(mode=brotli.MODE_TEXT, quality=self.level, lgwin=self.window)
        else:
            c = zlib.compressobj(self.level, zlib.DEFLATED, -15)  # raw deflate: pyvia writes the gzip wrapper
        self._c = c
        self._small, self._saturated = _memory_row(coding, self.level, self.window)
        self._full_at = _saturation_point(coding, self.window)
        self._fed = 0
        self._memory = self._small
        if self._budget is not None:
            self._budget._add(self)
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
            self._budget._remove(self, released=released)
        self._memory = 0
        self._fed = 0
        self._full_at = 0

    def __repr__(self) -> str:
        state = "finished" if self.is_finished else "active" if self._c is not None else "idle"
        return (
            f"StreamEncoder({self.coding!r}, level={self.level}, window={self.window}, {state}, memory={self._memory})"
        )


_EMPTY_BROTLI = bytes(brotli.Compressor(quality=0, lgwin=10).finish())


# --- the per-app settings -----------------------------------------------------------------------


class Compression:
    """Compression settings of an app, and the objects built from them once.

    The app calls :meth:`coding_for` per page or stream request, :meth:`encode_page` on a page
    response, :meth:`stream_headers` for a stream's head, and :meth:`stream_encoder` to get the
    tab's encoder (None for identity). ``enabled=False`` turns everything into identity.
    """

    __slots__ = (
        "budget",
        "enabled",
        "frames",
        "min_size",
        "negotiator",
        "page_levels",
        "stream_levels",
        "stream_window",
        "stream_zstd_search",
    )

    def __init__(
        self,
        *,
        preference: Iterable[str] = DEFAULT_PREFERENCE,
        page_levels: Levels = PAGE_LEVELS,
        stream_levels: Levels = STREAM_LEVELS,
        stream_window: int | None = None,
        stream_zstd_search: ZstdSearch | None = STREAM_ZSTD_SEARCH,
        budget: EncoderBudget | int | None = None,
        min_size: int = 512,
        enabled: bool = True,
    ) -> None:
        if stream_window is not None and not 10 <= stream_window <= 24:
            raise ValueError(f"stream_window {stream_window!r} must be a window log2 in 10..24, or None (per stream)")
        self.negotiator = Negotiator(preference)
        self.page_levels = page_levels
        self.stream_levels = stream_levels
        self.stream_window = stream_window
        self.stream_zstd_search = stream_zstd_search
        self.budget = budget if isinstance(budget, EncoderBudget) else EncoderBudget(budget)
        #: The one compressor for standalone zstd frames (stream openings, keep-alives), shared by all tabs.
        self.frames = SharedFrames(stream_levels.zstd)
        self.min_size = min_size
        self.enabled = enabled

    def coding_for(self, request: Request) -> str:
        return self.negotiator.for_request(request) if self.enabled else IDENTITY

    def encode_page(self, request: Request, response: Response) -> Response:
        """Compress a complete response in place when the client accepts it; returns it.

        Left alone: bodies under ``min_size``, types that do not compress, responses that
        already carry ``content-encoding`` or ``cache-control: no-transform``, and statuses
        without a body. ``Vary: Accept-Encoding`` is added whenever the answer could vary, and a
        strong ``ETag`` gets the coding as a suffix so every variant has its own.
        """
        if not self.enabled or len(response.body) < self.min_size or response.status in (204, 206, 304):
            return response
        content_type = ""
        for name, value in response.headers:
            lname = name.lower()
            if lname == "content-type":
                content_type = value
            elif lname == "content-encoding" or (lname == "cache-control" and "no-transform" in value.lower()):
                return response
        if not is_compressible(content_type):
            return response
        add_vary(response.headers)
        return self._compressed(request, response)

    def encode_html(self, request: Request, response: Response) -> Response:
        """:meth:`encode_page` for a page view's own answer: status 200 and ``text/html`` as its
        only header so far (no ``Vary``, ``ETag``, coding or ``cache-control`` to look for)."""
        if not self.enabled or len(response.body) < self.min_size:
            return response
        response.headers.append(("vary", "Accept-Encoding"))
        return self._compressed(request, response)

    def _compressed(self, request: Request, response: Response) -> Response:
        coding = self.negotiator.for_request(request)
        if coding == IDENTITY:
            return response
        body = compress(response.body, coding, self.page_levels.of(coding))
        if len(body) >= len(response.body):
            return response
        response.body = body
        response.headers.append(("content-encoding", coding))
        for i, (name, value) in enumerate(response.headers):
            if name.lower() == "etag" and value.endswith('"') and not value.startswith("W/"):
                response.headers[i] = (name, f'{value[:-1]}-{coding}"')
        return response

    def stream_headers(self, coding: str) -> list[tuple[str, str]]:
        """Headers to add to a stream's head for ``coding`` (always ``Vary``)."""
        if coding == IDENTITY:
            return [("vary", "Accept-Encoding")]
        return [("content-encoding", coding), ("vary", "Accept-Encoding")]

    def stream_encoder(self, coding: str, *, owner: object = None) -> StreamEncoder | None:
        """A lazy encoder for one stream in ``coding``, or None for identity."""
        if coding == IDENTITY:
            return None
        return StreamEncoder(
            coding,
            level=self.stream_levels.of(coding),
            window=self.stream_window,
            budget=self.budget,
            owner=owner,
            frames=self.frames,
            search=self.stream_zstd_search,
        )

    def reclaim(self) -> list[tuple[StreamEncoder, Released]]:
        """Release the encoders :meth:`EncoderBudget.victims` names; return each with its result.

        The caller writes each ``Released.data`` to the encoder's stream (``encoder.owner``) and,
        for :attr:`Release.RECONNECT`, then ends that stream.
        """
        return [(encoder, encoder.release()) for encoder in self.budget.victims()]


def add_vary(headers: list[tuple[str, str]], field: str = "Accept-Encoding") -> None:
    """Add ``field`` to the ``Vary`` header of ``headers`` (in place), unless already there."""
    for i, (name, value) in enumerate(headers):
        if name.lower() == "vary":
            parts = [p.strip().lower() for p in value.split(",")]
            if field.lower() not in parts and "*" not in parts:
                headers[i] = (name, f"{value}, {field}")
            return
    headers.append(("vary", field))
