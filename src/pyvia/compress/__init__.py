"""Content codings for pages and streams: negotiation, one-shot page compression, per-tab stream
encoders and the per-process budget on their memory.

Rules this package keeps (DESIGN.md, hot-path rules; ``machine-limits.md`` §3):

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
4. What every tab is sent alike is compressed once: a shared render's re-render goes out as the
   bytes of one zstd frame that all its zstd tabs take (:mod:`pyvia.compress.shared_stream`), and
   a tab inside that frame holds no encoder.

Its modules, one concept each; the names below are re-exported here, so importers say
``from pyvia.compress import X``:

=====================================  ===========================================================
``pyvia.compress.codings``             coding names, levels, windows, zstd search; one-shot :func:`compress`
``pyvia.compress.negotiation``         ``Accept-Encoding``: which coding to send, which types compress
``pyvia.compress.encoder_memory``      the measured memory of an encoder and the estimate built on it
``pyvia.compress.budget``              the per-process budget on encoder memory; what a release means
``pyvia.compress.stream_encoder``      one tab's stream encoder, and the shared zstd frame compressor
``pyvia.compress.shared_stream``       a shared render's zstd frames, compressed once for many tabs
``pyvia.compress.compression``         an app's settings and the objects built from them (pages, streams)
=====================================  ===========================================================
"""

from __future__ import annotations

from pyvia.compress.budget import EncoderBudget, Release, Released
from pyvia.compress.codings import (
    BR,
    CODINGS,
    DEFAULT_PREFERENCE,
    GZIP,
    IDENTITY,
    PAGE_LEVELS,
    STATIC_LEVELS,
    STREAM_LEVELS,
    STREAM_ZSTD_SEARCH,
    ZSTD,
    Levels,
    ZstdSearch,
    compress,
    window_for,
)
from pyvia.compress.compression import Compression, add_vary
from pyvia.compress.encoder_memory import estimate_memory
from pyvia.compress.negotiation import Negotiator, is_compressible, negotiate, parse_accept_encoding
from pyvia.compress.stream_encoder import SharedFrames, StreamEncoder
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
