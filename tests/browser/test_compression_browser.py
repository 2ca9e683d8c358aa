"""Compressed streams in Chromium over HTTPS (browsers offer br and zstd only there)."""

from __future__ import annotations

import subprocess
import time

import pytest
from playwright.sync_api import Browser, expect

from tests.processes import ServerProcess, free_port


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
    )
    return str(cert), str(key)


def serve(
    coding: str, certificate: tuple[str, str], idle_release: float = 60, shared_min_tabs: int = 16
) -> ServerProcess:
    server = ServerProcess(
        "tests.browser.apps:compressed",
        free_port(),
        tls=certificate,
        env={
            "TEST_COMPRESSION": coding,
            "TEST_IDLE_RELEASE": str(idle_release),
            "TEST_SHARED_MIN_TABS": str(shared_min_tabs),
        },
    )
    server.start()
    return server


@pytest.mark.parametrize("coding", ["zstd", "br", "gzip"])
def test_board_works_over_a_compressed_stream(browser: Browser, certificate: tuple[str, str], coding: str) -> None:
    server = serve(coding, certificate)
    context = browser.new_context(ignore_https_errors=True)
    page = context.new_page()
    seen: dict[str, str] = {}

    def on_response(response) -> None:
        if "/_sse" in response.url:
            seen["accept"] = response.request.all_headers().get("accept-encoding", "")
            seen["encoding"] = response.all_headers().get("content-encoding", "")

    page.on("response", on_response)
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        page.goto(f"https://127.0.0.1:{server.port}/")
        expect(page.locator("#n")).to_have_text("0")
        for expected in ("1", "2", "3"):
            page.click("#inc")
            expect(page.locator("#n")).to_have_text(expected)
        assert "zstd" in seen["accept"] and "br" in seen["accept"]
        assert seen["encoding"] == coding
        assert errors == []
    finally:
        context.close()
        server.stop()


@pytest.mark.parametrize("coding", ["zstd", "gzip"])
def test_released_encoder_then_a_new_one_decode_in_chromium(
    browser: Browser, certificate: tuple[str, str], coding: str
) -> None:
    server = serve(coding, certificate, idle_release=0.5)
    context = browser.new_context(ignore_https_errors=True)
    page = context.new_page()
    try:
        page.goto(f"https://127.0.0.1:{server.port}/")
        expect(page.locator("#n")).to_have_text("0")
        page.click("#inc")
        expect(page.locator("#n")).to_have_text("1")
        time.sleep(1.5)  # idle: zstd ends its frame, gzip drops its compressor (keep-alives go without one)
        stats = page.request.get(f"https://127.0.0.1:{server.port}/encoders").json()
        assert stats["releases"] >= 1
        page.click("#inc")
        expect(page.locator("#n")).to_have_text("2")  # from a second compressor's output, the same body
        page.click("#inc")
        expect(page.locator("#n")).to_have_text("3")
    finally:
        context.close()
        server.stop()


@pytest.mark.parametrize("coding", ["zstd", "gzip"])
def test_connect_frame_then_the_tabs_own_frames_decode_in_chromium(
    browser: Browser, certificate: tuple[str, str], coding: str
) -> None:
    server = serve(coding, certificate)
    context = browser.new_context(ignore_https_errors=True)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    stats_url = f"https://127.0.0.1:{server.port}/encoders"
    try:
        with page.expect_response(lambda r: "/_sse" in r.url) as sse:
            page.goto(f"https://127.0.0.1:{server.port}/")
        assert sse.value.all_headers().get("content-encoding") == coding
        expect(page.locator("#n")).to_have_text("0")
        time.sleep(0.3)  # the connect event is written: a shared compressor's frame (zstd), stored blocks (gzip)
        assert page.request.get(stats_url).json()["created"] == 0  # the idle tab holds no encoder
        for expected in ("1", "2", "3"):  # later events: the tab's own compressor, a second frame
            page.click("#inc")
            expect(page.locator("#n")).to_have_text(expected)
        assert page.request.get(stats_url).json()["created"] == 1
        assert errors == []
    finally:
        context.close()
        server.stop()


def test_tabs_sharing_one_compressed_frame_each_decode_every_render_in_chromium(
    browser: Browser, certificate: tuple[str, str]
) -> None:
    """docs/compression.md "Shared frames": three tabs take one zstd frame compressed once; a tab
    that opens mid-frame, then joins at the next one, and clicks from every tab all decode."""
    server = serve("zstd", certificate, shared_min_tabs=2)
    contexts = [browser.new_context(ignore_https_errors=True) for _ in range(4)]  # a connection pool each
    pages = [context.new_page() for context in contexts]
    errors: list[str] = []
    for page in pages:
        page.on("pageerror", lambda exc: errors.append(str(exc)))
    url = f"https://127.0.0.1:{server.port}/"
    try:
        for page in pages[:3]:
            page.goto(url)
            expect(page.locator("#n")).to_have_text("0")
        for round_ in range(80):  # a new shared frame opens every 64 writes: the late tab joins one
            if round_ == 3:
                pages[3].goto(url)
            page = pages[round_ % 4] if round_ > 3 else pages[round_ % 3]
            page.click("#inc")
            if round_ % 10 == 9:
                for each in pages:
                    expect(each.locator("#n")).to_have_text(str(round_ + 1))
        stats = pages[0].request.get(f"{url}encoders").json()
        assert stats["shared_streams"] == 1
        assert stats["created"] <= 2  # only the late tab (and at most one other) compressed on its own
        assert errors == []
    finally:
        for context in contexts:
            context.close()
        server.stop()
