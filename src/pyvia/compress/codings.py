"""The codings pyvia produces, their levels and windows, and how their compressors are built.

Every other part of :mod:`pyvia.compress` names codings and builds compressors through here, so
the rule "never a library default" (an explicit level and window for every compressor) is kept
in one place. :func:`compress` is the one-shot use of them (pages, static files).
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass

import brotli
import zstandard

__all__ = [
    "BR",
    "CODINGS",
    "DEFAULT_PREFERENCE",
    "GZIP",
    "IDENTITY",
    "MAX_WINDOW",
    "MIN_WINDOW",
    "PAGE_LEVELS",
    "STATIC_LEVELS",
    "STREAM_LEVELS",
    "STREAM_ZSTD_SEARCH",
    "ZSTD",
    "Levels",
    "ZstdSearch",
    "check_level",
    "compress",
    "window_for",
    "zstd_compressor",
]

ZSTD = "zstd"
BR = "br"
GZIP = "gzip"
IDENTITY = "identity"
#: The codings pyvia can produce.
CODINGS = (ZSTD, BR, GZIP)
#: Server preference when the client rates codings equally. zstd first: much less CPU than
#: brotli q4 at the same memory, for nearly the same bytes per patch (``machine-limits.md`` §3a and
#: ``bench/compression.py``); brotli next; gzip only for clients offering nothing better.
DEFAULT_PREFERENCE = (ZSTD, BR, GZIP)

MIN_WINDOW = 16
MAX_WINDOW = 22
_GZIP_WBITS = 31  # 16 + 15: a gzip wrapper around a 32 KB deflate window

_LEVEL_RANGES = {ZSTD: (1, 22), BR: (0, 11), GZIP: (1, 9)}


def check_level(coding: str, level: object) -> None:
    """Raise ValueError unless ``level`` is one ``coding`` accepts (before a compressor refuses it)."""
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
            check_level(coding, getattr(self, coding))

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


def zstd_compressor(level: int, window: int | None, search: ZstdSearch | None = None) -> zstandard.ZstdCompressor:
    """A zstd compressor at ``level``; with ``window``, the stream parameters for it (built once per configuration)."""
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
        return bytes(zstd_compressor(level, window).compress(data))
    if coding == GZIP:
        gz = zlib.compressobj(level, zlib.DEFLATED, _GZIP_WBITS)
        return gz.compress(data) + gz.flush()
    if coding == IDENTITY:
        return data
    raise ValueError(f"unknown coding {coding!r}; expected one of {(*CODINGS, IDENTITY)}")
