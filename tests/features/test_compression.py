"""Compressed pages and streams as a browser receives them: every event decodes when it arrives."""

from __future__ import annotations

import brotli
import pytest
import zstandard

from pyvia import App, Context, Scope
from pyvia.testing import TestClient

BROWSER = "gzip, deflate, br, zstd"


def make_app(**options: object) -> App:
    app = App(**options)

    @app.page("/")
    def page(c: Context) -> None:
        c.scope(Scope.ROUTE)
        n = c.signal(0, "n", scope=Scope.ROUTE)

        @c.action
        def inc() -> None:
            n.increment()

        c.view(
            lambda: (
                "<ul id='cells'>"
                + "".join(f"<li class='{'on' if (i * n.value) % 3 else 'off'}'>{i}</li>" for i in range(300))
                + "</ul>"
            ),
            share_render=True,
        )

    return app


@pytest.mark.parametrize(
    ("accept", "coding"),
    [
        (BROWSER, "zstd"),
        ("br, gzip", "br"),
        ("gzip", "gzip"),
        ("zstd;q=0, br;q=0.5, gzip;q=0.4", "br"),
        (None, "identity"),
    ],
)
def test_streams_are_negotiated_and_decode_event_by_event(accept: str | None, coding: str) -> None:
    app = make_app()
    with TestClient(app, accept_encoding=accept) as client:
        a, b = client.open("/"), client.open("/")
        assert b.stream_coding == coding
        for _ in range(20):
            a.action("inc")
            app.flush_broadcasts()
        assert b.signals["_route__n"] == 20
        assert "<li class='on'>1</li>" in b.html
        if coding != "identity":
            plain = sum(len(e.elements) for e in b.events)
            assert b.wire_bytes * 5 < plain  # the frames repeat: compression pays


def test_pages_are_compressed_with_vary() -> None:
    with TestClient(make_app(), accept_encoding="br") as client:
        page = client.get("/")
        headers = dict(page.headers)
        assert headers["content-encoding"] == "br"
        assert "Accept-Encoding" in headers["vary"]
        assert b"via-boot" in brotli.decompress(page.body)


@pytest.mark.parametrize("coding", ["zstd", "gzip"])
def test_a_connected_tab_holds_no_encoder_until_a_later_event(coding: str) -> None:
    app = make_app()
    with TestClient(app, accept_encoding=coding) as client:
        a, b = client.open("/"), client.open("/")
        encoder = b.context.stream.encoder
        assert encoder is not None and not encoder.is_active
        assert b.signals["_disconnected"] is False  # the connect event arrived, as a frame of its own
        assert app.compression.budget.stats()["created"] == 0
        before = len(b.events)
        b.reconnect(resume=False)  # a reconnect that needs a full view: it goes the same way
        assert any("<li class='off'>1</li>" in e.elements for e in b.events[before:])
        assert not b.context.stream.encoder.is_active
        assert app.compression.budget.stats()["created"] == 0
        a.action("inc")
        app.flush_broadcasts()
        assert b.signals["_route__n"] == 1
        assert b.context.stream.encoder.is_active
        assert app.compression.budget.count == 2  # a and b: built by the first real event


def test_a_connected_brotli_tab_starts_its_encoder_with_the_connect_event() -> None:
    app = make_app()
    with TestClient(app, accept_encoding="br") as client:
        tab = client.open("/")
        assert tab.signals["_disconnected"] is False
        assert tab.context.stream.encoder.is_active  # one coded body: see docs/compression.md


@pytest.mark.parametrize("coding", ["zstd", "gzip"])
def test_idle_stream_releases_its_encoder_and_keeps_working(coding: str) -> None:
    app = make_app(encoder_idle_release=30, keep_alive=15)
    with TestClient(app, accept_encoding=coding) as client:
        a, b = client.open("/"), client.open("/")
        a.action("inc")
        app.flush_broadcasts()
        encoder = b.context.stream.encoder
        assert encoder is not None and encoder.is_active and encoder.memory > 0
        client.clock.advance(40)
        assert not encoder.is_active  # frame ended, memory given back
        assert app.compression.budget.stats()["releases"] >= 1
        a.action("inc")
        app.flush_broadcasts()
        assert b.signals["_route__n"] == 2  # a new frame started on the same stream
        assert encoder.is_active


def test_over_budget_brotli_tabs_are_asked_to_reconnect_and_zstd_and_gzip_tabs_keep_their_stream() -> None:
    app = make_app(encoder_budget=1)
    with (
        TestClient(app, accept_encoding="br") as client,
        TestClient(app, accept_encoding="zstd") as zclient,
        TestClient(app, accept_encoding="gzip") as gclient,
    ):
        br_tab, z_tab, g_tab = client.open("/"), zclient.open("/"), gclient.open("/")
        br_tab.action("inc")
        app.flush_broadcasts()
        client.clock.advance(1.1)  # the sweep sees the budget exceeded
        assert not br_tab.is_connected
        assert z_tab.is_connected and g_tab.is_connected
        assert not z_tab.context.stream.encoder.is_active and not g_tab.context.stream.encoder.is_active
        g_tab.action("inc")
        app.flush_broadcasts()
        assert z_tab.signals["_route__n"] == g_tab.signals["_route__n"] == 2
        br_tab.reconnect()
        assert br_tab.signals["_route__n"] == 2


def test_bundle_is_served_precompressed_once_ready() -> None:
    app = make_app()
    with TestClient(app, accept_encoding="zstd") as client:
        url = client.get("/").body  # page (compressed)
        assert app.runtime.assets.bundle_asset is not None and app.runtime.assets.bundle_asset.wait(10)
        response = client.get(app.runtime.assets.bundle_url)
        headers = dict(response.headers)
        assert headers["content-encoding"] == "zstd"
        assert headers["cache-control"] == "public, max-age=31536000, immutable"
        assert zstandard.ZstdDecompressor().decompress(response.body, max_output_size=1 << 20) == app.bundle.body
        assert url


def test_tabs_of_a_shared_render_take_one_compressed_frame_and_each_decodes_every_render() -> None:
    """docs/compression.md "Shared frames": with enough tabs, a shared render is compressed once
    and its zstd tabs hold no compressor, while a tab that also gets events of its own, a tab that
    comes late and a gzip tab all still see every render."""
    app = make_app(shared_frames_min_tabs=4)
    with TestClient(app, accept_encoding="zstd") as client, TestClient(app, accept_encoding="gzip") as gclient:
        tabs = [client.open("/") for _ in range(6)]
        plain = gclient.open("/")
        for round_ in range(1, 13):
            if round_ == 5:
                tabs.append(client.open("/"))  # comes in mid-frame: its own compressor until a frame opens
            tabs[round_ % 3].action("inc")  # the clicker also gets its action's answer on its stream
            app.flush_broadcasts()
            client.clock.advance(1.0)
            expected = "".join(f"<li class='{'on' if (i * round_) % 3 else 'off'}'>{i}</li>" for i in range(300))
            for tab in [*tabs, plain]:
                assert tab.signals["_route__n"] == round_
                assert expected in tab.html
        shared = app.compression.shared_streams
        assert len(shared) == 1 and next(iter(shared.values())).is_open
        in_frame = [tab for tab in tabs if tab.context.stream.encoder.in_shared_frame]
        assert len(in_frame) >= 5
        assert not any(tab.context.stream.encoder.is_active for tab in in_frame)
        # each zstd tab would have built a compressor of its own; the late one (and at most one
        # more that had to leave a frame) did
        assert app.compression.budget.stats()["created"] <= 2


def test_a_shared_render_below_the_threshold_keeps_each_tab_s_own_compressor() -> None:
    app = make_app(shared_frames_min_tabs=8)
    with TestClient(app, accept_encoding="zstd") as client:
        tabs = [client.open("/") for _ in range(3)]
        tabs[0].action("inc")
        app.flush_broadcasts()
        assert not app.compression.shared_streams
        assert all(tab.context.stream.encoder.is_active for tab in tabs)
