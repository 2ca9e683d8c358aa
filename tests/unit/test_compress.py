"""Negotiation, page compression, stream encoders and the encoder budget: every byte sent is decoded back."""

from __future__ import annotations

import gzip
import io
import random
import zlib
from pathlib import Path

import brotli
import pytest
import zstandard

import pyvia.compress.encoder_memory as encoder_memory
import pyvia.memory as memory_module
from pyvia.compress import (
    BR,
    CODINGS,
    GZIP,
    IDENTITY,
    PAGE_LEVELS,
    STREAM_LEVELS,
    ZSTD,
    Compression,
    EncoderBudget,
    Levels,
    Negotiator,
    Release,
    SharedFrames,
    StreamEncoder,
    add_vary,
    available_memory,
    compress,
    default_budget,
    estimate_memory,
    is_compressible,
    negotiate,
    parse_accept_encoding,
    window_for,
)
from pyvia.http import Headers, Request, Response

# --- frames, and a decoder per coding that reads a stream incrementally ---------------------------


def board_frame(cells: list[bool]) -> bytes:
    board = "".join(f'<div id="c{i}" class="cell {"on" if alive else "off"}"></div>' for i, alive in enumerate(cells))
    return f'event: datastar-patch-elements\ndata: elements <div id="board">{board}</div>\n\n'.encode()


def board_frames(n: int, side: int = 50, seed: int = 1) -> list[bytes]:
    """Whole-board frames (~96 KB at 50x50) with about 15% of the cells flipping per frame."""
    rng = random.Random(seed)
    cells = [rng.random() < 0.3 for _ in range(side * side)]
    frames = []
    for _ in range(n):
        frames.append(board_frame(cells))
        cells = [not c if rng.random() < 0.15 else c for c in cells]
    return frames


def patch_frames(n: int, seed: int = 2) -> list[bytes]:
    rng = random.Random(seed)
    values = [rng.randrange(1000, 99999) for _ in range(16)]
    frames = []
    for t in range(n):
        values[rng.randrange(16)] = rng.randrange(1000, 99999)
        rows = "".join(f"<tr><td>node-{i}</td><td>{v}</td></tr>" for i, v in enumerate(values))
        frames.append(
            f"event: datastar-patch-elements\ndata: elements <table id=s>{rows}</table><p>{t}</p>\n\n".encode()
        )
    return frames


class Decoder:
    """What a browser does with a coded SSE body: decode each chunk as it arrives.

    zstd bodies may hold several frames; a new decompressobj starts after each ended one.
    """

    def __init__(self, coding: str) -> None:
        self.coding = coding
        self.frames_ended = 0
        self._at_frame_end = False
        self._new()

    def _new(self) -> None:
        if self.coding == BR:
            self._d = brotli.Decompressor()
        elif self.coding == ZSTD:
            self._d = zstandard.ZstdDecompressor().decompressobj()
        else:
            self._d = zlib.decompressobj(wbits=31)

    def feed(self, data: bytes) -> bytes:
        if self.coding == BR:
            # brotli 1.2's Decompressor hands its output out in pieces of at most ~32 KB: drain it
            # with empty input (no new bytes from the server are involved).
            out = self._d.process(data)
            while more := self._d.process(b""):
                out += more
            return out
        if self.coding == GZIP:
            return self._d.decompress(data)
        out = b""
        while data:
            self._at_frame_end = False
            out += self._d.decompress(data)
            if not self._d.eof:
                break
            self.frames_ended += 1
            self._at_frame_end = True
            data = self._d.unused_data
            self._new()
        return out

    @property
    def is_finished(self) -> bool:
        """The body so far ends cleanly (zstd: on a frame end)."""
        if self.coding == BR:
            return self._d.is_finished()
        if self.coding == ZSTD:
            return self._at_frame_end
        return self._d.eof


# --- negotiation ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        (None, IDENTITY),
        ("", IDENTITY),
        ("gzip, deflate, br, zstd", ZSTD),  # Chromium: all rated 1, the server's order decides
        ("gzip, deflate, br", BR),
        ("gzip, deflate", GZIP),
        ("deflate, compress, exi, pack200-gzip", IDENTITY),  # unknown codings are ignored
        ("gzip;q=1, br;q=0.5", GZIP),  # the client's q-values rank first
        ("zstd;q=0.2, br;q=0.8, gzip;q=0.5", BR),
        ("zstd;q=0, br", BR),  # q=0 refuses
        ("zstd;q=0, br;q=0, gzip;q=0", IDENTITY),
        ("*", ZSTD),
        ("*;q=0.5, br", BR),
        ("*, zstd;q=0", BR),
        ("*;q=0", IDENTITY),  # nothing acceptable, identity refused too: plain is still sent
        ("*;q=0, identity", IDENTITY),
        ("identity;q=0, gzip", GZIP),  # identity refused and something else acceptable: honoured
        ("identity;q=0", IDENTITY),  # ... but not possible: plain bytes rather than a 406
        ("br;q=0.5, identity", IDENTITY),  # the client prefers plain
        ("br;q=0.5, identity;q=0.5", BR),  # a tie goes to compression
        ("identity", IDENTITY),
        ("  BR ; Q=0.8 ,GZip;q=0.9 ", GZIP),  # whitespace and case
        ("Zstd,BR", ZSTD),
        ("x-gzip", GZIP),
        ("br;q=abc, gzip", GZIP),  # an invalid q drops the element
        ("br;q=2, gzip;q=0.1", GZIP),
        ("br;q=nan, gzip;q=0.1", GZIP),
        ("br;q=-1, gzip;q=0.1", GZIP),
        ("br;level=5, gzip;q=0.5", BR),  # other parameters are ignored
        ("br, br;q=0", BR),  # the first rating of a repeated coding counts
        (",,, ;, br", BR),
        ("br;q=0.001", BR),
    ],
)
def test_negotiation(header: str | None, expected: str) -> None:
    assert negotiate(header) == expected
    assert Negotiator().choose(header) == expected


def test_server_preference_decides_among_equal_ratings() -> None:
    assert negotiate("gzip, br, zstd", (BR, ZSTD, GZIP)) == BR
    assert negotiate("gzip, br, zstd", (GZIP,)) == GZIP
    assert negotiate("br", (ZSTD, GZIP)) == IDENTITY  # br not offered by this server
    assert Negotiator(["GZIP", " br "]).preference == (GZIP, BR)


def test_parse_accept_encoding_keeps_the_q_values() -> None:
    assert parse_accept_encoding("gzip;q=0.5, BR, *;q=0, identity;q=1.000") == {
        "gzip": 0.5,
        "br": 1.0,
        "*": 0.0,
        "identity": 1.0,
    }
    assert parse_accept_encoding("br;q=") == {}
    assert parse_accept_encoding("br" + ", x" * 1000)["br"] == 1.0  # long values are cut, not refused


def test_negotiator_rejects_unknown_or_repeated_codings() -> None:
    with pytest.raises(ValueError, match="unknown coding 'deflate'"):
        Negotiator(["br", "deflate"])
    with pytest.raises(ValueError, match="names a coding twice"):
        Negotiator(["br", "br"])


def test_negotiator_reads_every_accept_encoding_header_and_caches() -> None:
    negotiator = Negotiator()
    two = Request("GET", "/", headers=Headers([("accept-encoding", "gzip"), ("Accept-Encoding", "zstd")]))
    assert negotiator.for_request(two) == ZSTD
    assert negotiator.for_request(Request("GET", "/")) == IDENTITY
    for i in range(600):
        negotiator.choose(f"br;q=0.{i % 10}, x{i}")
    assert len(negotiator._cache) <= 256


# --- levels, windows, one-shot compression --------------------------------------------------------


def test_levels_are_checked_per_coding() -> None:
    assert Levels().of(BR) == 4
    assert (STREAM_LEVELS.zstd, STREAM_LEVELS.br, STREAM_LEVELS.gzip) == (3, 4, 1)
    assert PAGE_LEVELS.br == 5
    with pytest.raises(ValueError, match=r"br level 12 must be an integer in 0\.\.11"):
        Levels(br=12)
    with pytest.raises(ValueError, match="gzip level 0"):
        Levels(gzip=0)
    with pytest.raises(ValueError, match="zstd level 23"):
        Levels(zstd=23)


@pytest.mark.parametrize(
    ("size", "window"),
    [
        (0, 16),
        (1, 16),
        (2_000, 16),
        (33_025, 16),
        (43_690, 16),
        (43_691, 17),
        (95_731, 18),
        (126_698, 18),
        (174_762, 18),
        (174_763, 19),
        (1 << 20, 21),
        (10 << 20, 22),
    ],
)
def test_window_is_log2_of_one_and_a_half_frames_clamped(size: int, window: int) -> None:
    assert window_for(size) == window


@pytest.mark.parametrize("coding", [*CODINGS, IDENTITY])
def test_one_shot_compress_round_trips(coding: str) -> None:
    data = b"".join(patch_frames(20))
    out = compress(data, coding, {ZSTD: 3, BR: 5, GZIP: 6, IDENTITY: 0}[coding])
    decoded = {
        BR: brotli.decompress,
        ZSTD: lambda b: zstandard.ZstdDecompressor().decompress(b),
        GZIP: lambda b: zlib.decompress(b, wbits=31),
        IDENTITY: bytes,
    }[coding](out)
    assert decoded == data
    if coding != IDENTITY:
        assert len(out) < len(data) / 5
    with pytest.raises(ValueError, match="unknown coding 'lz4'"):
        compress(data, "lz4", 1)


@pytest.mark.parametrize(
    ("content_type", "expected"),
    [
        ("text/html; charset=utf-8", True),
        ("TEXT/CSS", True),
        ("application/json", True),
        ("application/javascript", True),
        ("image/svg+xml", True),
        ("application/wasm", True),
        ("application/vnd.api+json", True),
        ("image/png", False),
        ("font/woff2", False),
        ("", False),
        ("application/octet-stream", False),
    ],
)
def test_is_compressible(content_type: str, expected: bool) -> None:
    assert is_compressible(content_type) is expected


# --- stream encoders: every event decodes at once ----------------------------------------------


@pytest.mark.parametrize("coding", CODINGS)
@pytest.mark.parametrize("kind", ["board", "patches"])
def test_each_event_decodes_as_soon_as_it_is_sent(coding: str, kind: str) -> None:
    frames = board_frames(12) if kind == "board" else patch_frames(60)
    encoder = StreamEncoder(coding)
    decoder = Decoder(coding)
    sent = 0
    for frame in frames:
        out = encoder.encode(frame)
        sent += len(out)
        assert decoder.feed(out) == frame
    assert sent < sum(map(len, frames)) / 8
    tail = encoder.finish()
    assert decoder.feed(tail) == b""
    assert decoder.is_finished
    assert encoder.finish() == b""  # idempotent


@pytest.mark.parametrize("coding", CODINGS)
def test_encoder_is_created_lazily_and_sized_from_the_first_frame(coding: str) -> None:
    budget = EncoderBudget(1 << 30)
    encoder = StreamEncoder(coding, budget=budget)
    assert not encoder.is_active
    assert (encoder.memory, encoder.window, budget.count, budget.total) == (0, 0, 0, 0)
    encoder.encode(board_frames(1)[0])
    assert encoder.is_active
    assert encoder.window == (15 if coding == GZIP else 18)
    assert budget.count == 1
    assert budget.total == encoder.memory > 0
    small = StreamEncoder(coding)
    small.encode(patch_frames(1)[0])
    assert small.window == (15 if coding == GZIP else 16)


def test_zstd_frames_carry_the_chosen_window() -> None:
    for frame, window in ((board_frames(1)[0], 18), (patch_frames(1)[0], 16)):
        out = StreamEncoder(ZSTD).encode(frame)
        assert zstandard.get_frame_parameters(out).window_size == 1 << window
    fixed = StreamEncoder(ZSTD, window=20)
    out = fixed.encode(patch_frames(1)[0])
    assert fixed.window == 20
    assert zstandard.get_frame_parameters(out).window_size == 1 << 20


def test_explicit_window_and_level_are_kept() -> None:
    encoder = StreamEncoder(BR, level=2, window=20)
    encoder.encode(board_frames(1)[0])
    assert (encoder.level, encoder.window) == (2, 20)
    assert StreamEncoder(BR).level == 4
    with pytest.raises(ValueError, match=r"window log2 9 must be in 10\.\.24"):
        StreamEncoder(BR, window=9)
    with pytest.raises(ValueError, match="br level 12"):
        StreamEncoder(BR, level=12)
    with pytest.raises(ValueError, match="one of"):
        StreamEncoder(IDENTITY)


def test_zstd_release_ends_the_frame_and_the_stream_goes_on() -> None:
    budget = EncoderBudget(1 << 30)
    encoder = StreamEncoder(ZSTD, budget=budget)
    decoder = Decoder(ZSTD)
    frames = board_frames(8)
    body = []
    for i, frame in enumerate(frames):
        out = encoder.encode(frame)
        body.append(out)
        assert decoder.feed(out) == frame
        if i in (2, 5):
            released = encoder.release()
            assert released.action is Release.CONTINUE
            assert not encoder.is_active
            assert (budget.count, budget.total) == (0, 0)
            body.append(released.data)
            assert decoder.feed(released.data) == b""
            assert decoder.frames_ended == (1 if i == 2 else 2)
    body.append(encoder.finish())
    assert decoder.feed(body[-1]) == b""
    assert decoder.frames_ended == 3
    assert budget.releases == 2 and budget.created == 3 and budget.count == 0
    # The whole body, as one zstd stream of three frames:
    whole = b"".join(body)
    reader = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(whole), read_across_frames=True)
    assert reader.read() == b"".join(frames)
    assert zstandard.ZstdDecompressor().decompressobj(read_across_frames=True).decompress(whole) == b"".join(frames)


def test_releasing_an_idle_zstd_encoder_sends_nothing() -> None:
    encoder = StreamEncoder(ZSTD)
    assert encoder.release() == (b"", Release.CONTINUE)
    assert encoder.finish() == b""


CONNECT = b'event: datastar-patch-signals\ndata: signals {"_disconnected":false}\n\n'


def test_zstd_opening_is_a_standalone_frame_and_builds_no_compressor() -> None:
    budget, frames = EncoderBudget(1 << 30), SharedFrames()
    encoder = StreamEncoder(ZSTD, budget=budget, frames=frames)
    decoder = Decoder(ZSTD)
    body = [encoder.encode_opening(CONNECT)]
    assert decoder.feed(body[0]) == CONNECT
    assert decoder.frames_ended == 1 and decoder.is_finished  # a complete frame of its own
    assert not encoder.is_active and (budget.count, budget.created, budget.total) == (0, 0, 0)
    assert frames.memory() > 0  # the one shared context holds the memory, not the tab
    other = StreamEncoder(ZSTD, budget=budget, frames=frames)
    assert other.encode_opening(CONNECT) == body[0] and not other.is_active
    events = patch_frames(6)
    for event in events:  # the first later event starts the tab's own compressor, in a new frame
        body.append(encoder.encode(event))
        assert decoder.feed(body[-1]) == event
    assert encoder.is_active and budget.count == 1
    body.append(encoder.finish())
    assert decoder.feed(body[-1]) == b"" and decoder.frames_ended == 2
    whole = b"".join(body)
    assert zstandard.ZstdDecompressor().decompressobj(read_across_frames=True).decompress(whole) == CONNECT + b"".join(
        events
    )


def test_a_big_zstd_opening_sizes_the_window_of_the_later_frames() -> None:
    encoder = StreamEncoder(ZSTD, frames=SharedFrames())
    board = board_frames(2)
    opening = encoder.encode_opening(board[0])  # a reconnect's full view
    assert zstandard.ZstdDecompressor().decompress(opening) == board[0]
    assert encoder.window == 18 and not encoder.is_active
    later = encoder.encode(patch_frames(1)[0])
    assert zstandard.get_frame_parameters(later).window_size == 1 << 18
    fixed = StreamEncoder(ZSTD, window=17)
    fixed.encode_opening(board[0])
    assert fixed.window == 17


def test_a_zstd_opening_after_the_compressor_started_continues_its_frame() -> None:
    encoder = StreamEncoder(ZSTD, frames=SharedFrames())
    decoder = Decoder(ZSTD)
    assert decoder.feed(encoder.encode(b"data: 1\n\n")) == b"data: 1\n\n"
    assert decoder.feed(encoder.encode_opening(CONNECT)) == CONNECT
    assert decoder.frames_ended == 0 and encoder.is_active


def test_a_brotli_opening_starts_the_compressor() -> None:
    budget = EncoderBudget(1 << 30)
    encoder = StreamEncoder(BR, budget=budget, frames=SharedFrames())
    decoder = Decoder(BR)
    assert decoder.feed(encoder.encode_opening(CONNECT)) == CONNECT
    assert encoder.is_active and budget.count == 1  # one coded body: nothing can go detached
    for event in patch_frames(3):
        assert decoder.feed(encoder.encode(event)) == event


def test_gzip_opening_keepalives_and_releases_need_no_compressor_and_make_one_valid_member() -> None:
    budget = EncoderBudget(1 << 30)
    encoder = StreamEncoder(GZIP, budget=budget)
    decoder = Decoder(GZIP)
    board = board_frames(3)
    sent, body = [], []

    def feed(out: bytes, plain: bytes) -> None:
        body.append(out)
        sent.append(plain)
        assert decoder.feed(out) == plain

    feed(encoder.encode_opening(CONNECT), CONNECT)  # stored blocks after the member header
    feed(encoder.encode_opening(board[0]), board[0])  # a reconnect's full view: deflated once
    assert len(body[-1]) < len(board[0]) / 4
    feed(encoder.encode_keepalive(b": ka\n\n"), b": ka\n\n")
    assert not encoder.is_active and budget.created == 0
    for frame in board[1:]:  # the tab's own compressor, from the first later event
        feed(encoder.encode(frame), frame)
    assert encoder.is_active and budget.count == 1
    released = encoder.release()
    assert released == (b"", Release.CONTINUE)  # every event already ends on a byte boundary
    assert not encoder.is_active and (budget.count, budget.releases) == (0, 1)
    feed(encoder.encode_keepalive(b": ka\n\n"), b": ka\n\n")
    assert not encoder.is_active
    for event in patch_frames(3):  # a new compressor, the same member
        feed(encoder.encode(event), event)
    assert budget.created == 2
    body.append(encoder.finish())
    assert decoder.feed(body[-1]) == b"" and decoder.is_finished
    whole = b"".join(body)
    assert whole.count(b"\x1f\x8b\x08") >= 1 and whole.startswith(b"\x1f\x8b\x08")
    assert gzip.decompress(whole) == b"".join(sent)  # checks the trailer's CRC-32 and length too


def test_stored_gzip_blocks_split_past_64_kb() -> None:
    encoder = StreamEncoder(GZIP)
    noise = random.Random(5).randbytes(70_000)  # over one stored block's 65,535 bytes
    out = encoder.encode_keepalive(noise) + encoder.finish()
    assert gzip.decompress(out) == noise


def test_brotli_release_ends_the_body_and_asks_for_a_reconnect() -> None:
    budget = EncoderBudget(1 << 30)
    encoder = StreamEncoder(BR, budget=budget)
    decoder = Decoder(BR)
    for frame in patch_frames(5):
        assert decoder.feed(encoder.encode(frame)) == frame
    released = encoder.release()
    assert released.action is Release.RECONNECT
    assert decoder.feed(released.data) == b""
    assert decoder.is_finished
    assert encoder.is_finished and not encoder.is_active
    assert (budget.count, budget.total, budget.releases) == (0, 0, 1)
    with pytest.raises(RuntimeError, match="must reconnect"):
        encoder.encode(b"more")
    with pytest.raises(RuntimeError, match="nothing to release"):
        encoder.release()
    assert encoder.finish() == b""


@pytest.mark.parametrize("coding", [BR, GZIP])
def test_a_body_that_never_carried_an_event_still_ends_validly(coding: str) -> None:
    ends = [lambda e: e.finish()]
    if coding == BR:
        ends.append(lambda e: e.release().data)
    else:
        ends.append(lambda e: e.release().data + e.finish())
    for end in ends:
        decoder = Decoder(coding)
        assert decoder.feed(end(StreamEncoder(coding))) == b""
        assert decoder.is_finished


@pytest.mark.parametrize("coding", CODINGS)
def test_discard_drops_the_encoder_without_bytes(coding: str) -> None:
    budget = EncoderBudget(1 << 30)
    encoder = StreamEncoder(coding, budget=budget)
    encoder.encode(b"data: x\n\n")
    encoder.discard()
    assert (budget.count, budget.total, budget.releases) == (0, 0, 0)
    assert encoder.is_finished
    assert encoder.finish() == b""
    assert "finished" in repr(encoder)


# --- memory estimates and the budget -------------------------------------------------------------


def test_estimate_follows_the_measured_table() -> None:
    small, full = encoder_memory._MEMORY_KIB[(ZSTD, 3)][18]
    assert estimate_memory(ZSTD, 3, 18, 0) == small * 1024
    assert estimate_memory(ZSTD, 3, 18, 64 * 1024) == small * 1024
    middle = estimate_memory(ZSTD, 3, 18, 64 * 1024 + (1 << 17))
    assert small * 1024 < middle < full * 1024
    assert estimate_memory(ZSTD, 3, 18, 10 << 20) == full * 1024
    # An unmeasured window takes the next larger one; an unmeasured level the nearest (higher on a tie).
    assert estimate_memory(BR, 4, 17, 10 << 20) == encoder_memory._MEMORY_KIB[(BR, 4)][18][1] * 1024
    assert estimate_memory(BR, 3, 18, 0) == encoder_memory._MEMORY_KIB[(BR, 4)][18][0] * 1024
    assert estimate_memory(BR, 11, 18, 0) == encoder_memory._MEMORY_KIB[(BR, 5)][18][0] * 1024
    assert estimate_memory(BR, 4, 24, 100 << 20) > estimate_memory(BR, 4, 22, 100 << 20)
    assert estimate_memory(GZIP, 6, 22, 10 << 20) == encoder_memory._MEMORY_KIB[(GZIP, 6)][15][1] * 1024
    with pytest.raises(ValueError, match="no memory figures"):
        estimate_memory("lz4", 1, 16, 0)


def test_encoder_memory_grows_with_what_it_has_seen_and_stops_at_the_table() -> None:
    budget = EncoderBudget(1 << 30)
    encoder = StreamEncoder(BR, budget=budget)
    frames = board_frames(8)
    seen = []
    for frame in frames:
        encoder.encode(frame)
        seen.append(encoder.memory)
        assert budget.total == encoder.memory
    assert seen == sorted(seen)
    assert seen[-1] == encoder_memory._MEMORY_KIB[(BR, 4)][18][1] * 1024
    assert budget.peak == seen[-1]


def test_victims_are_the_least_recently_used_down_to_the_low_water_mark() -> None:
    per = estimate_memory(ZSTD, 3, 16, 0)
    budget = EncoderBudget(int(per * 2.5), low_water=0.9)
    a, b, c = (StreamEncoder(ZSTD, budget=budget, owner=name) for name in "abc")
    assert budget.victims() == []
    for encoder in (a, b):
        encoder.encode(b"data: 1\n\n")
    assert not budget.is_over
    c.encode(b"data: 1\n\n")
    a.encode(b"data: 2\n\n")  # b is now the least recently used
    assert budget.is_over
    assert budget.victims() == [b]
    compression = Compression(budget=budget)
    results = compression.reclaim()
    assert [(e.owner, r.action) for e, r in results] == [("b", Release.CONTINUE)]
    assert not budget.is_over
    assert budget.stats() == {
        "bytes": 2 * per,
        "encoders": 2,
        "created": 3,
        "releases": 1,
        "peak_bytes": 3 * per,
        "limit_bytes": int(per * 2.5),
    }
    # The released stream goes on: its next event starts a new frame (and is counted again).
    assert zstandard.get_frame_parameters(b.encode(b"data: 3\n\n")).window_size == 1 << 16
    assert b.is_active and budget.count == 3 and budget.created == 4
    assert "EncoderBudget(total=" in repr(budget)


def test_victims_free_enough_when_one_is_not_enough() -> None:
    per = estimate_memory(BR, 4, 16, 0)
    budget = EncoderBudget(per * 10, low_water=0.5)
    encoders = [StreamEncoder(BR, budget=budget) for _ in range(11)]
    for encoder in encoders:
        encoder.encode(b"data: hello\n\n")
    victims = budget.victims()
    assert victims == encoders[:6]  # 11 -> 5 held, at most half the limit
    for encoder, result in Compression(budget=budget).reclaim():
        assert result.action is Release.RECONNECT and encoder.is_finished
    assert budget.count == 5 and budget.releases == 6


def test_budget_checks_its_arguments() -> None:
    with pytest.raises(ValueError, match="must be positive"):
        EncoderBudget(0)
    with pytest.raises(ValueError, match="low_water"):
        EncoderBudget(100, low_water=0)
    assert EncoderBudget().limit >= 16 << 20


def _fake_system(
    root: Path,
    *,
    meminfo: str | None,
    v2: tuple[str, str] | None = None,
    v1: tuple[str, str] | None = None,
    own: str = "/app",
) -> tuple[str, str]:
    proc, cgroup = root / "proc", root / "cgroup"
    (proc / "self").mkdir(parents=True)
    (proc / "self" / "cgroup").write_text(f"0::{own}\n" if v2 else f"4:memory:{own}\n")
    if meminfo is not None:
        (proc / "meminfo").write_text(f"MemTotal:       99999999 kB\nMemAvailable:   {meminfo} kB\n")
    if v2:
        (cgroup / own.strip("/")).mkdir(parents=True)
        (cgroup / own.strip("/") / "memory.max").write_text(v2[0] + "\n")
        (cgroup / own.strip("/") / "memory.current").write_text(v2[1] + "\n")
    if v1:
        (cgroup / "memory").mkdir(parents=True)
        (cgroup / "memory" / "memory.limit_in_bytes").write_text(v1[0] + "\n")
        (cgroup / "memory" / "memory.usage_in_bytes").write_text(v1[1] + "\n")
    return str(proc), str(cgroup)


def test_available_memory_takes_the_least_of_meminfo_and_the_cgroup(tmp_path: Path) -> None:
    assert available_memory(*_fake_system(tmp_path / "a", meminfo="8000000")) == 8_000_000 * 1024
    assert (
        available_memory(*_fake_system(tmp_path / "b", meminfo="8000000", v2=(str(2 << 30), str(1 << 30)))) == 1 << 30
    )
    assert available_memory(*_fake_system(tmp_path / "c", meminfo="1000", v2=("max", "5"))) == 1000 * 1024
    assert available_memory(*_fake_system(tmp_path / "d", meminfo=None, v1=(str(4 << 30), str(1 << 30)))) == 3 << 30
    assert available_memory(*_fake_system(tmp_path / "e", meminfo=None, v1=("9223372036854771712", "5"))) is None
    assert available_memory(str(tmp_path / "nothing"), str(tmp_path / "nothing")) is None


def test_default_budget_is_a_fraction_of_what_is_available(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(memory_module, "available_memory", lambda: 8 << 30)
    assert default_budget() == 2 << 30
    assert default_budget(0.5, workers=4) == 1 << 30
    assert default_budget(0.0001) == 16 << 20  # a floor
    monkeypatch.setattr(memory_module, "available_memory", lambda: None)
    assert default_budget() == 512 << 20
    with pytest.raises(ValueError, match="fraction"):
        default_budget(0)


# --- the per-app settings: pages and stream heads -----------------------------------------------


def page_request(accept: str | None) -> Request:
    return Request("GET", "/", headers=Headers([("accept-encoding", accept)] if accept is not None else []))


@pytest.mark.parametrize("coding", CODINGS)
def test_pages_are_compressed_whole_and_vary(coding: str) -> None:
    html = "<!doctype html><html><body>" + "".join(f"<p class=row>row {i}</p>" for i in range(300)) + "</body></html>"
    response = Compression().encode_page(page_request(coding), Response.html(html, headers=[("etag", '"v1"')]))
    headers = dict(response.headers)
    assert headers["content-encoding"] == coding
    assert headers["vary"] == "Accept-Encoding"
    assert headers["etag"] == f'"v1-{coding}"'
    assert Decoder(coding).feed(response.body) == html.encode()


def test_pages_left_alone() -> None:
    compression = Compression()
    big = "x" * 5000
    small = compression.encode_page(page_request("br"), Response.html("<p>hi</p>"))
    assert dict(small.headers).keys() == {"content-type"}
    png = compression.encode_page(page_request("br"), Response(200, [("content-type", "image/png")], b"\0" * 5000))
    assert "content-encoding" not in dict(png.headers) and "vary" not in dict(png.headers)
    done = Response.html(big, headers=[("content-encoding", "gzip")])
    assert compression.encode_page(page_request("br"), done).body == big.encode()
    no_transform = Response.html(big, headers=[("Cache-Control", "no-transform")])
    assert compression.encode_page(page_request("br"), no_transform).body == big.encode()
    not_modified = Response(304, [("content-type", "text/html")], b"")
    assert compression.encode_page(page_request("br"), not_modified).headers == [("content-type", "text/html")]
    plain = compression.encode_page(page_request(None), Response.html(big, headers=[("etag", 'W/"x"')]))
    assert dict(plain.headers) == {
        "content-type": "text/html; charset=utf-8",
        "etag": 'W/"x"',
        "vary": "Accept-Encoding",
    }
    weak = compression.encode_page(page_request("br"), Response.html(big, headers=[("etag", 'W/"x"')]))
    assert dict(weak.headers)["etag"] == 'W/"x"'
    off = Compression(enabled=False)
    assert off.encode_page(page_request("br"), Response.html(big)).body == big.encode()
    assert off.coding_for(page_request("br")) == IDENTITY


def test_incompressible_page_body_is_sent_plain() -> None:
    noise = random.Random(7).randbytes(4000)
    response = Compression().encode_page(page_request("gzip"), Response(200, [("content-type", "text/plain")], noise))
    assert response.body == noise
    assert "content-encoding" not in dict(response.headers)


def test_add_vary_merges() -> None:
    headers = [("Vary", "Cookie")]
    add_vary(headers)
    assert headers == [("Vary", "Cookie, Accept-Encoding")]
    add_vary(headers)
    assert headers == [("Vary", "Cookie, Accept-Encoding")]
    star = [("vary", "*")]
    add_vary(star)
    assert star == [("vary", "*")]


def test_stream_heads_and_encoders() -> None:
    compression = Compression(preference=(BR, GZIP), stream_levels=Levels(br=5), stream_window=19)
    request = page_request("gzip, deflate, br, zstd")
    coding = compression.coding_for(request)
    assert coding == BR
    assert compression.stream_headers(coding) == [("content-encoding", "br"), ("vary", "Accept-Encoding")]
    assert compression.stream_headers(IDENTITY) == [("vary", "Accept-Encoding")]
    assert compression.stream_encoder(IDENTITY) is None
    tab = object()
    encoder = compression.stream_encoder(coding, owner=tab)
    assert encoder is not None
    assert (encoder.coding, encoder.level, encoder.owner, encoder.is_active) == (BR, 5, tab, False)
    encoder.encode(b"data: x\n\n")
    assert encoder.window == 19
    assert compression.budget.count == 1
    with pytest.raises(ValueError, match="stream_window 30"):
        Compression(stream_window=30)
    assert Compression(budget=1 << 20).budget.limit == 1 << 20


def test_keepalive_does_not_wake_a_released_zstd_encoder() -> None:
    budget = EncoderBudget(1 << 30)
    encoder = StreamEncoder(ZSTD, budget=budget)
    decoder = Decoder(ZSTD)
    comment = b": keep-alive\n\n"
    assert decoder.feed(encoder.encode_keepalive(comment)) == comment  # idle: a frame of its own
    assert not encoder.is_active and budget.count == 0
    assert decoder.feed(encoder.encode(b"data: 1\n\n")) == b"data: 1\n\n"
    assert decoder.feed(encoder.release().data) == b""
    for _ in range(3):
        assert decoder.feed(encoder.encode_keepalive(comment)) == comment
    assert not encoder.is_active and budget.count == 0 and budget.created == 1
    assert decoder.feed(encoder.encode(b"data: 2\n\n")) == b"data: 2\n\n"
    assert decoder.feed(encoder.finish()) == b"" and decoder.is_finished
    assert decoder.frames_ended == 6  # 4 keep-alive frames and 2 of events


@pytest.mark.parametrize("coding", CODINGS)
def test_keepalive_on_an_active_encoder_does_not_count_as_use(coding: str) -> None:
    budget = EncoderBudget(1 << 30)
    first, second = StreamEncoder(coding, budget=budget), StreamEncoder(coding, budget=budget)
    decoder = Decoder(coding)
    assert decoder.feed(first.encode(b"data: a\n\n")) == b"data: a\n\n"
    second.encode(b"data: b\n\n")
    assert decoder.feed(first.encode_keepalive(b": ka\n\n")) == b": ka\n\n"
    budget.limit = budget.low_water = 1
    assert budget.victims()[0] is first  # still the least recently used


def test_the_budget_counts_every_dropped_encoder() -> None:
    budget = EncoderBudget(1 << 30)
    encoders = [StreamEncoder(ZSTD, budget=budget) for _ in range(3)]
    for encoder in encoders:
        encoder.encode(b"data: x\n\n")
    encoders[0].release()
    encoders[1].finish()
    encoders[2].discard()
    assert (budget.dropped, budget.releases, budget.count) == (3, 1, 0)


@pytest.mark.parametrize("coding", ["br", "gzip", "zstd", None])
@pytest.mark.parametrize("size", [10, 5000])
@pytest.mark.parametrize("enabled", [True, False])
def test_encode_html_answers_a_page_view_as_encode_page_does(coding: str | None, size: int, enabled: bool) -> None:
    body = ("<p>page</p>" * size)[:size].encode()
    compression = Compression(enabled=enabled)

    def page() -> Response:
        return Response(200, [("content-type", "text/html; charset=utf-8")], body)

    expected = compression.encode_page(page_request(coding), page())
    got = compression.encode_html(page_request(coding), page())
    assert (got.status, got.headers, got.body) == (expected.status, expected.headers, expected.body)
