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


def serve(coding: str, certificate: tuple[str, str], idle_release: float = 60) -> ServerProcess:
    server = ServerProcess(
        "tests.browser.apps:compressed",
        free_port(),
        tls=certificate,
        env={"TEST_COMPRESSION": coding, "TEST_IDLE_RELEASE": str(idle_release)},
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
