"""How much resident memory a stream encoder holds: the measured table and the model built on it.

Separate from the encoders so the figures (and the rule for levels and windows not measured)
can be read and checked without building one; :class:`~pyvia.compress.stream_encoder.StreamEncoder`
reports these estimates to its :class:`~pyvia.compress.budget.EncoderBudget`.
"""

from __future__ import annotations

from pyvia.compress.codings import GZIP

__all__ = ["estimate_memory", "interpolate", "memory_row", "saturation_point"]

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


def memory_row(coding: str, level: int, window: int) -> tuple[int, int]:
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
    small, saturated = memory_row(coding, level, window)
    return interpolate(small, saturated, saturation_point(coding, window), fed)


def saturation_point(coding: str, window: int) -> int:
    """Bytes fed after which the estimate stops growing: the first events, then a whole window."""
    return _SMALL_FEED + (1 << (15 if coding == GZIP else window))


def interpolate(small: int, saturated: int, full_at: int, fed: int) -> int:
    """The estimate after ``fed`` bytes: ``small`` at first, growing linearly to ``saturated``."""
    if fed <= _SMALL_FEED:
        return small
    if fed >= full_at:
        return saturated
    return small + (saturated - small) * (fed - _SMALL_FEED) // (full_at - _SMALL_FEED)
