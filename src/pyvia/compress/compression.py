"""An app's compression: its settings, and the objects built from them once.

The one object the app holds (:class:`Compression`): it compresses page responses whole and
hands each stream its encoder, sharing one negotiator, one budget and one frame compressor.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable

from pyvia.compress.budget import EncoderBudget, Released
from pyvia.compress.codings import (
    DEFAULT_PREFERENCE,
    IDENTITY,
    PAGE_LEVELS,
    STREAM_LEVELS,
    STREAM_ZSTD_SEARCH,
    Levels,
    ZstdSearch,
    compress,
)
from pyvia.compress.negotiation import Negotiator, is_compressible
from pyvia.compress.shared_stream import SharedStream
from pyvia.compress.stream_encoder import SharedFrames, StreamEncoder
from pyvia.http import Request, Response

__all__ = ["MAX_SHARED_STREAMS", "SHARED_MIN_TABS", "Compression", "add_vary"]

#: A shared render gets shared zstd frames from this many tabs in its scope by default: below it,
#: the tabs' own compressors hold less memory than one shared compressor (bench/RESULTS-2.md §8).
SHARED_MIN_TABS = 16
#: At most this many shared renders have shared frames at once; others use the tabs' compressors.
MAX_SHARED_STREAMS = 32


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
        "serials",
        "shared_min_tabs",
        "shared_streams",
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
        shared_min_tabs: int = SHARED_MIN_TABS,
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
        #: zstd tabs of a shared render with this many tabs take one compressed frame instead of
        #: compressing each re-render each (0: never).
        self.shared_min_tabs = shared_min_tabs
        self.shared_streams: dict[tuple[str, str], SharedStream] = {}
        self.serials = itertools.count(1)

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

    def shared_stream(self, key: tuple[str, str]) -> SharedStream | None:
        """The shared zstd frames of one shared render (``key``: scope and route pattern), or None
        when :data:`MAX_SHARED_STREAMS` are open already (each holds a compressor of ~1-2 MB)."""
        stream = self.shared_streams.get(key)
        if stream is None:
            if len(self.shared_streams) >= MAX_SHARED_STREAMS:
                return None
            stream = self.shared_streams[key] = SharedStream(self.serials, level=self.stream_levels.zstd)
        return stream

    def drop_quiet_streams(self, now: float, quiet: float) -> int:
        """Forget the shared streams with no write for ``quiet`` seconds; return how many went.

        A tab still in such a frame ends it before its next write, as when it leaves any frame."""
        quiet_ones = [key for key, stream in self.shared_streams.items() if now - stream.last_use >= quiet]
        for key in quiet_ones:
            self.shared_streams.pop(key).close()
        return len(quiet_ones)

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
