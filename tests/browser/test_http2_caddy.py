"""Ten tabs through Caddy (Debian's) speaking HTTP/2 in front of ``pyvia run --workers 2``.

Over HTTP/1.1 a browser opens at most six connections to one host, and every tab's stream holds
one, so a seventh tab would hang; over HTTP/2 they all share one connection. Caddy spreads its
upstream connections over both workers, so a tab's actions often land on the worker that does not
hold it and are forwarded; the shared counter's clicks reach tabs held by both workers.
"""

from __future__ import annotations

import os
import shutil
import socket
import ssl
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, expect

from tests.cluster.test_worker_ports import free_ports
from tests.helpers import RawClient, get
from tests.processes import ROOT, ServerProcess, free_port, wait_for_port


def start_caddy(app: str, tmp_path: Path, worker_ports: int | None = None) -> Iterator[tuple[int, ServerProcess]]:
    """Caddy in front of ``pyvia run --workers 2``: through the shared port, or through each
    worker's own port (``--worker-ports``), a browser kept on one by Caddy's cookie."""
    if shutil.which("caddy") is None:
        pytest.fail("caddy is missing: scripts/install test installs Debian's caddy")
    extra: tuple[str, ...] = ("--workers", "2")
    if worker_ports is not None:
        extra += ("--worker-ports", str(worker_ports))
    # Caddy terminates TLS: trusted, its X-Forwarded-Proto tells the Origin check the page was https
    server = ServerProcess(app, free_port(), extra=extra, env={"PYVIA_APP__TRUSTED_PROXIES": '["127.0.0.1"]'})
    server.start()
    port = free_port()
    upstream = (
        f"127.0.0.1:{worker_ports} 127.0.0.1:{worker_ports + 1}"
        if worker_ports is not None
        else f"127.0.0.1:{server.port}"
    )
    env = {
        **os.environ,
        "HOME": str(tmp_path),
        "XDG_DATA_HOME": str(tmp_path / "data"),
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
        "PYVIA_SITE": f"https://127.0.0.1:{port}",
        "PYVIA_UPSTREAM": upstream,
    }
    proc = subprocess.Popen(
        ["caddy", "run", "--config", str(ROOT / "deploy" / "Caddyfile"), "--adapter", "caddyfile"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        wait_for_port(port, timeout=20)
        wait_for_tls(port, timeout=20)
        yield port, server
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()
        server.stop()


def wait_for_tls(port: int, timeout: float) -> None:
    """Caddy listens before its own CA has issued the site's certificate: until then a handshake
    fails (a browser's page gets ERR_SSL_PROTOCOL_ERROR). Wait for one that completes, as Chromium
    makes it (no SNI for an address)."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    context.set_alpn_protocols(["h2", "http/1.1"])
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=2) as raw, context.wrap_socket(raw):
                return
        except (OSError, ssl.SSLError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


@pytest.fixture
def caddy(tmp_path: Path) -> Iterator[tuple[int, ServerProcess]]:
    yield from start_caddy("examples.counter:app", tmp_path)


@pytest.fixture
def caddy_shared(tmp_path: Path) -> Iterator[tuple[int, ServerProcess]]:
    yield from start_caddy("examples.shared_counter:app", tmp_path)


@pytest.fixture
def caddy_sticky(tmp_path: Path) -> Iterator[tuple[int, int]]:
    base = free_ports(2)
    for port, _ in start_caddy("examples.counter:app", tmp_path, worker_ports=base):
        yield port, base


def _metric(port: int, name: str) -> float:
    """A metric of the worker behind ``port`` (its own port), summed over its labels."""
    with RawClient("127.0.0.1", port) as client:
        client.send(get("/metrics"))
        text = client.read_response().body.decode()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(name) and line[len(name)] in " {,"
    )


def open_tabs(context: BrowserContext, port: int, count: int, errors: list[str]) -> list[Page]:
    """``count`` tabs of the counter page through Caddy, each showing its first count."""
    pages = []
    for _ in range(count):
        page = context.new_page()
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.goto(f"https://127.0.0.1:{port}/")
        expect(page.locator("#count")).to_have_text("0")
        pages.append(page)
    return pages


def test_ten_tabs_stay_live_over_http2(browser: Browser, caddy: tuple[int, ServerProcess]) -> None:
    port, _ = caddy
    context = browser.new_context(ignore_https_errors=True)
    errors: list[str] = []
    try:
        pages = open_tabs(context, port, 10, errors)
        assert pages[0].evaluate("performance.getEntriesByType('navigation')[0].nextHopProtocol") == "h2"
        for i, page in enumerate(pages):
            page.bring_to_front()  # Playwright waits for frames, which a background page draws late
            for _ in range(i % 3 + 1):
                page.click("#inc")
        for i, page in enumerate(pages):  # every tab's own stream delivered its own count
            expect(page.locator("#count")).to_have_text(str(i % 3 + 1))
        assert errors == []
    finally:
        context.close()


def test_a_shared_counter_on_two_workers_behind_caddy(
    browser: Browser, caddy_shared: tuple[int, ServerProcess]
) -> None:
    port, _ = caddy_shared
    context = browser.new_context(ignore_https_errors=True)
    errors: list[str] = []
    try:
        pages = open_tabs(context, port, 10, errors)
        for page in pages:
            page.bring_to_front()
            page.click("#inc")
        for page in pages:  # every click counted once, on every tab, whichever worker holds it
            expect(page.locator("#count")).to_have_text("10")
        assert errors == []
    finally:
        context.close()


def test_caddy_keeps_a_browser_on_one_worker_through_their_own_ports(
    browser: Browser, caddy_sticky: tuple[int, int]
) -> None:
    port, base = caddy_sticky
    context = browser.new_context(ignore_https_errors=True)
    errors: list[str] = []
    try:
        pages = open_tabs(context, port, 4, errors)
        for page in pages:
            page.bring_to_front()
            page.click("#inc")
            page.click("#inc")
        for page in pages:
            expect(page.locator("#count")).to_have_text("2")
        streams = sorted([_metric(base, "pyvia_streams_open"), _metric(base + 1, "pyvia_streams_open")])
        assert streams == [0, 4], "the browser's four tabs live on one worker"
        actions = sorted(
            [
                _metric(base, 'pyvia_requests_total{kind="action"'),
                _metric(base + 1, 'pyvia_requests_total{kind="action"'),
            ]
        )
        assert actions == [0, 8], "and every action reached that worker directly (none forwarded, none passed)"
    finally:
        context.close()
