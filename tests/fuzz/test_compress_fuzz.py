"""Negotiation answers any header, encoders round-trip any events, static serving never leaves its root."""

from __future__ import annotations

import itertools
import random
import zlib
from collections.abc import Callable
from pathlib import Path

import brotli
import pytest
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pyvia.compress import (
    BR,
    CODINGS,
    GZIP,
    IDENTITY,
    ZSTD,
    Negotiator,
    Release,
    StreamEncoder,
    negotiate,
    parse_accept_encoding,
)
from pyvia.compress.shared_stream import SharedStream
from pyvia.http import Headers, Request
from pyvia.static import StaticFiles

FUZZ = settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)

_TOKENS = st.sampled_from(
    [
        "br",
        "BR",
        "zstd",
        "gzip",
        "x-gzip",
        "identity",
        "*",
        "deflate",
        ";",
        ",",
        "q=",
        "q=0",
        "q=1",
        "q=0.5",
        "q=1.5",
        "q=-1",
        "q=nan",
        "q=inf",
        " ",
        "\t",
        "=",
        "\x00",
        "é",
    ]
)
accept_encoding = st.lists(st.one_of(_TOKENS, st.text(max_size=6)), max_size=16).map("".join)


@FUZZ
@given(
    header=accept_encoding,
    preference=st.permutations(list(CODINGS)).flatmap(lambda p: st.integers(1, 3).map(lambda n: tuple(p[:n]))),
)
def test_negotiation_always_answers_a_coding_it_can_make(header: str, preference: tuple[str, ...]) -> None:
    coding = negotiate(header, preference)
    assert coding in (*preference, IDENTITY)
    assert Negotiator(preference).choose(header) == coding
    rated = parse_accept_encoding(header)
    star = rated.get("*")
    q = {c: rated.get(c, star if star is not None else 0.0) for c in preference}
    if coding != IDENTITY:  # never a coding the client refused, and the best it rated
        assert q[coding] > 0 and q[coding] == max(q.values())
    elif header:
        best = max(q.values())
        identity = rated.get(IDENTITY, star if star is not None else 0.0)
        assert best == 0 or identity > best


def _decoder(coding: str) -> Callable[[bytes], bytes]:
    if coding == BR:
        d = brotli.Decompressor()

        def feed(data: bytes) -> bytes:
            out = d.process(data)
            while more := d.process(b""):
                out += more
            return out

        return feed
    if coding == GZIP:
        return zlib.decompressobj(wbits=31).decompress
    state = {"d": zstandard.ZstdDecompressor().decompressobj()}

    def feed_zstd(data: bytes) -> bytes:
        out = b""
        while data:
            out += state["d"].decompress(data)
            if not state["d"].eof:
                break
            data = state["d"].unused_data
            state["d"] = zstandard.ZstdDecompressor().decompressobj()
        return out

    return feed_zstd


@FUZZ
@given(
    coding=st.sampled_from(CODINGS),
    events=st.lists(st.binary(max_size=3000) | st.text(max_size=500).map(str.encode), max_size=20),
    releases=st.sets(st.integers(0, 19)),
    window=st.none() | st.integers(10, 20),
)
def test_every_event_decodes_at_once_whatever_it_holds(
    coding: str, events: list[bytes], releases: set[int], window: int | None
) -> None:
    encoder = StreamEncoder(coding, window=window)
    feed = _decoder(coding)
    for i, event in enumerate(events):
        assert feed(encoder.encode(event)) == event
        if coding == ZSTD and i in releases:
            data, action = encoder.release()
            assert action is Release.CONTINUE
            assert feed(data) == b""
    assert feed(encoder.finish()) == b""


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("fuzz")
    root = base / "root"
    (root / "a" / "b").mkdir(parents=True)
    (root / "a" / "b" / "c.txt").write_bytes(b"public")
    (root / "ok.css").write_bytes(b"public")
    (root / ".env").write_bytes(b"SECRET")
    (base / "secret.txt").write_bytes(b"SECRET")
    (root / "link").symlink_to(base / "secret.txt")
    return root


_PATH_PARTS = st.sampled_from(
    [
        "/",
        "..",
        ".",
        "%2e",
        "%2E",
        "%2f",
        "%5c",
        "\\",
        "\x00",
        "a",
        "b",
        "c.txt",
        "ok.css",
        ".env",
        "env",
        "secret.txt",
        "link",
        "%",
        "%00",
        ".well-known",
        "//",
    ]
)


@FUZZ
@given(parts=st.lists(_PATH_PARTS, max_size=10))
def test_static_never_serves_what_is_outside_its_root_or_hidden(site: Path, parts: list[str]) -> None:
    static = StaticFiles(site, executor=None, check_interval=0)
    path = "/" + "".join(parts)
    response = static.get(path, Request("GET", path, headers=Headers()))
    assert response is None or response.status == 404 or response.body == b"public", path
    assert response is None or b"SECRET" not in response.body
    static.close()


_SHARED_OPS = st.lists(
    st.tuples(st.sampled_from(["render", "odd render", "private", "ping", "release", "quiet"]), st.integers(0, 3)),
    max_size=50,
)


@FUZZ
@given(ops=_SHARED_OPS, per_frame=st.integers(1, 6), seed=st.integers(0, 2**16))
def test_tabs_sharing_zstd_frames_decode_what_each_was_sent_in_any_order_of_events(
    ops: list[tuple[str, int]], per_frame: int, seed: int
) -> None:
    rng = random.Random(seed)
    shared = SharedStream(itertools.count(1), per_frame=per_frame, max_age=1e9)
    encoders = [StreamEncoder(ZSTD) for _ in range(4)]
    decoders = [zstandard.ZstdDecompressor().decompressobj(read_across_frames=True) for _ in range(4)]
    sent = [bytearray() for _ in range(4)]
    bodies = [bytearray() for _ in range(4)]

    def write(i: int, data: bytes, out: bytes) -> None:
        sent[i] += data
        bodies[i] += out
        assert decoders[i].decompress(out) == data  # each write decodes at once, whole

    for kind, who in ops:
        if kind in ("render", "odd render"):
            board = bytes(rng.choice(b"ab") for _ in range(rng.randrange(1, 3000)))
            data = b"event: datastar-patch-elements\ndata: elements " + board + b"\n\n"
            for k in range(4):  # every tab, the rotation says who comes first
                i = (who + k) % 4
                mine = data + b"event: own\ndata: x\n\n" if kind == "odd render" and i == who else data
                write(i, mine, encoders[i].encode_shared(shared, mine, 0.0))
        elif kind == "private":
            data = f"event: datastar-patch-signals\ndata: signals {{n: {rng.random()}}}\n\n".encode()
            write(who, data, encoders[who].encode(data))
        elif kind == "ping":
            write(who, b": ping\n\n", encoders[who].encode_keepalive(b": ping\n\n"))
        elif kind == "release":
            write(who, b"", encoders[who].release().data)
        else:
            shared.close()
    for i in range(4):
        bodies[i] += encoders[i].finish()
        decoded = zstandard.ZstdDecompressor().decompressobj(read_across_frames=True).decompress(bytes(bodies[i]))
        assert decoded == bytes(sent[i])
