"""Shared zstd frames: many tabs' streams carry one compressed render, and each still decodes to
exactly what it was sent, whatever each tab did in between (private events, keep-alives, joining
late, leaving, releases)."""

from __future__ import annotations

import itertools
import random

import zstandard

from pyvia.compress import ZSTD, StreamEncoder
from pyvia.compress.shared_stream import END_FRAME, SharedStream


def board(rng: random.Random, cells: list[bool]) -> bytes:
    for _ in range(40):
        i = rng.randrange(len(cells))
        cells[i] = not cells[i]
    inner = "".join('<div class="on"></div>' if alive else "<div></div>" for alive in cells)
    return f'event: datastar-patch-elements\ndata: elements <main id="b">{inner}</main>\n\n'.encode()


class Tab:
    def __init__(self) -> None:
        self.encoder = StreamEncoder(ZSTD)
        self.body = bytearray()
        self.sent = bytearray()
        self.decoder = zstandard.ZstdDecompressor().decompressobj(read_across_frames=True)

    def write(self, data: bytes, out: bytes) -> None:
        self.sent += data
        self.body += out
        # every write decodes at once to exactly what it carried
        assert self.decoder.decompress(out) == data


def decoded(body: bytes) -> bytes:
    return zstandard.ZstdDecompressor().decompressobj(read_across_frames=True).decompress(bytes(body))


def test_every_tab_decodes_what_it_was_sent_while_sharing_one_compressor() -> None:
    rng = random.Random(3)
    cells = [False] * 900
    shared = SharedStream(itertools.count(1), per_frame=8, max_age=1e9)
    tabs = [Tab() for _ in range(6)]
    late: list[Tab] = []
    now = 0.0
    for step in range(40):
        now += 0.2
        data = board(rng, cells)
        for i, tab in enumerate(tabs + late):
            if (step + i) % 7 == 0:  # a private event of this tab between two shared writes
                private = f"event: datastar-patch-signals\ndata: signals {{n: {step}}}\n\n".encode()
                tab.write(private, tab.encoder.encode(private))
            if (step + i) % 11 == 0:
                ping = b": keep-alive\n\n"
                tab.write(ping, tab.encoder.encode_keepalive(ping))
            tab.write(data, tab.encoder.encode_shared(shared, data, now))
        if step == 5:
            late.append(Tab())  # connects mid-frame: its own compressor until the next frame opens
    for tab in tabs + late:
        tab.body += tab.encoder.finish()
        assert decoded(tab.body) == bytes(tab.sent)


def test_a_tab_in_the_frame_holds_no_compressor_and_the_shared_bytes_are_the_same_object() -> None:
    rng = random.Random(5)
    cells = [False] * 900
    shared = SharedStream(itertools.count(1), per_frame=100, max_age=1e9)
    a, b = StreamEncoder(ZSTD), StreamEncoder(ZSTD)
    for step in range(5):
        data = board(rng, cells)
        out_a = a.encode_shared(shared, data, float(step))
        out_b = b.encode_shared(shared, bytes(data), float(step))  # equal bytes, another object
        if step:
            assert out_a is out_b  # compressed once, written to both
        assert not a.is_active and not b.is_active
        assert a.in_shared_frame and b.in_shared_frame


def test_a_tab_that_joins_ends_its_own_frame_and_frees_its_compressor() -> None:
    rng = random.Random(7)
    cells = [False] * 900
    shared = SharedStream(itertools.count(1), per_frame=3, max_age=1e9)
    first, late = Tab(), Tab()
    for step in range(3):
        data = board(rng, cells)
        first.write(data, first.encoder.encode_shared(shared, data, 0.0))
        if step:  # late came after the frame opened: it cannot enter it
            late.write(data, late.encoder.encode_shared(shared, data, 0.0))
            assert late.encoder.is_active and not late.encoder.in_shared_frame
    data = board(rng, cells)  # the fourth write opens a new frame: both take it
    first.write(data, first.encoder.encode_shared(shared, data, 0.0))
    late.write(data, late.encoder.encode_shared(shared, data, 0.0))
    assert not late.encoder.is_active and late.encoder.in_shared_frame
    assert first.body.endswith(shared.take(data, 0, 0.0).data)  # type: ignore[union-attr]
    for tab in (first, late):
        tab.body += tab.encoder.finish()
        assert decoded(tab.body) == bytes(tab.sent)


def test_a_tab_whose_write_differs_leaves_and_the_others_stay() -> None:
    rng = random.Random(9)
    cells = [False] * 900
    shared = SharedStream(itertools.count(1), per_frame=100, max_age=1e9)
    tabs = [Tab() for _ in range(3)]
    for step in range(6):
        data = board(rng, cells)
        for i, tab in enumerate(tabs):
            mine = data + b"event: x\ndata: own\n\n" if (i == 2 and step == 3) else data
            tab.write(mine, tab.encoder.encode_shared(shared, mine, 0.0))
    assert tabs[0].encoder.in_shared_frame and tabs[1].encoder.in_shared_frame
    assert not tabs[2].encoder.in_shared_frame  # it left at step 3 and cannot come back mid-frame
    for tab in tabs:
        tab.body += tab.encoder.finish()
        assert decoded(tab.body) == bytes(tab.sent)


def test_the_same_render_twice_is_two_writes_not_one() -> None:
    shared = SharedStream(itertools.count(1), per_frame=100, max_age=1e9)
    tab = Tab()
    data = b"event: datastar-patch-elements\ndata: elements <p id=x>same</p>\n\n"
    for _ in range(3):
        tab.write(data, tab.encoder.encode_shared(shared, data, 0.0))
    assert tab.encoder.in_shared_frame
    tab.body += tab.encoder.finish()
    assert decoded(tab.body) == data * 3


def test_a_quiet_stream_is_dropped_and_a_tab_still_in_its_frame_ends_it() -> None:
    shared = SharedStream(itertools.count(1), per_frame=100, max_age=1e9)
    tab = Tab()
    data = b"event: datastar-patch-elements\ndata: elements <p id=x>one</p>\n\n"
    tab.write(data, tab.encoder.encode_shared(shared, data, 0.0))
    shared.close()
    assert not shared.is_open and shared.memory() == 0
    again = data.replace(b"one", b"two")
    out = tab.encoder.encode_shared(shared, again, 1.0)
    assert out.startswith(END_FRAME)  # the old frame is ended before the new one opens
    tab.write(again, out)
    release = tab.encoder.release()
    assert release.data == END_FRAME
    tab.body += release.data
    assert decoded(tab.body) == data + again
