"""The per-process budget on stream-encoder memory, and what giving an encoder's memory back means.

Separate from the encoder because it is the account of them all: every encoder reports its
estimated memory here, and under pressure the budget names the least recently used ones to
release. The default cap comes from :func:`pyvia.memory.default_budget` (the only I/O, done once).

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
from typing import TYPE_CHECKING, NamedTuple

from pyvia.memory import default_budget

if TYPE_CHECKING:
    from pyvia.compress.stream_encoder import StreamEncoder

__all__ = ["EncoderBudget", "Release", "Released"]


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

    __slots__ = ("_active", "count", "created", "dropped", "limit", "low_water", "peak", "releases", "tick", "total")

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
        self.tick = 0  # bumped by every encode: the encoders' least-recently-used clock
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

    # The three calls below are the encoders' (StreamEncoder), as they start, grow and drop a compressor.

    def add(self, encoder: StreamEncoder) -> None:
        self._active.add(encoder)
        self.count += 1
        self.created += 1
        self.grow(encoder.memory)

    def grow(self, delta: int) -> None:
        self.total += delta
        if self.total > self.peak:
            self.peak = self.total

    def remove(self, encoder: StreamEncoder, *, released: bool) -> None:
        self._active.discard(encoder)
        self.count -= 1
        self.dropped += 1
        self.total -= encoder.memory
        if released:
            self.releases += 1

    def __repr__(self) -> str:
        return f"EncoderBudget(total={self.total}, count={self.count}, limit={self.limit}, releases={self.releases})"


def _last_use(encoder: StreamEncoder) -> int:
    return encoder.last_use
