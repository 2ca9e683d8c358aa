"""A pyvia App mounted under ``/live`` in Starlette and in FastAPI, served by uvicorn.

Mounted apps get no lifespan from Starlette, so these also cover the start on the first request.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from examples.counter import counter
from fastapi import FastAPI
from starlette.applications import Starlette
from starlette.requests import Request as StarletteRequest
from starlette.responses import PlainTextResponse
from starlette.routing import Mount, Route

from pyvia import App
from pyvia.asgi import asgi
from tests.asgi.servers import ServerThread, open_page, open_stream, post_action, request, serving
from tests.helpers import OPENING, frame_body, signals_event

TEMPLATES = Path(__file__).resolve().parents[2] / "examples" / "templates"
FIRST = OPENING


def counter_app(**options: Any) -> App:
    """The counter example's page on a new App."""
    app = App(title="Counter", template_dir=TEMPLATES, **options)
    app.page("/")(counter)
    return app


def starlette_site(pyvia_app: App) -> Starlette:
    async def home(request: StarletteRequest) -> PlainTextResponse:
        return PlainTextResponse("starlette home")

    return Starlette(routes=[Route("/", home), Mount("/live", app=asgi(pyvia_app))])


def fastapi_site(pyvia_app: App) -> FastAPI:
    site = FastAPI()

    @site.get("/")
    def home() -> PlainTextResponse:
        return PlainTextResponse("fastapi home")

    site.mount("/live", asgi(pyvia_app))
    return site


@pytest.fixture(params=["starlette", "fastapi"])
def mounted(request: pytest.FixtureRequest) -> Iterator[tuple[ServerThread, str]]:
    site = starlette_site if request.param == "starlette" else fastapi_site
    with serving(site(counter_app(base_path="/live"))) as server:
        yield server, request.param


def test_the_site_keeps_its_own_routes(mounted: tuple[ServerThread, str]) -> None:
    server, kind = mounted
    home = request(server.host, server.port, "GET", "/")
    assert (home.status, home.body) == (200, f"{kind} home".encode())
    assert request(server.host, server.port, "GET", "/nowhere").status == 404


def test_the_mounted_counter_works_end_to_end(mounted: tuple[ServerThread, str]) -> None:
    server, _ = mounted
    host, port = server.host, server.port
    page, seed, cookie = open_page(host, port, "/live/")
    text = page.body.decode()
    assert "@get('/live/_sse'" in text
    assert "sendBeacon('/live/_session/close'" in text
    assert "@post(&#39;/live/_action/increment&#39;" in text
    bundle_url = re.search(r'src="(/live/datastar.js\?v=[0-9a-f]+)"', text).group(1)  # type: ignore[union-attr]
    assert request(host, port, "GET", bundle_url).body.startswith(b"// Datastar v1.0")
    signals = {"via_ctx": seed["via_ctx"], "step": 1}
    stream, head = open_stream(host, port, signals, cookie, path="/live/_sse")
    with stream:
        assert head.status == 200 and head.header("content-type") == "text/event-stream"
        assert frame_body(stream.read_chunk()) == FIRST
        response = post_action(host, port, "increment", signals, cookie, prefix="/live/_action/")
        assert (response.status, response.body) == (200, b"")
        assert signals_event(stream.read_chunk())["_count"] == 1
    assert request(host, port, "GET", "/live/nope").status == 404  # pyvia's own 404


def test_without_base_path_the_app_routes_under_the_mount_but_its_urls_miss_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Routing needs nothing from the app: the adapter strips the mount prefix. The URLs the app
    # writes into its pages are another matter: they come from App(base_path=...), and without
    # it they point at the site's root, where nothing serves them.
    with caplog.at_level(logging.WARNING, logger="pyvia.asgi"), serving(starlette_site(counter_app())) as server:
        host, port = server.host, server.port
        page, seed, cookie = open_page(host, port, "/live/")
        text = page.body.decode()
        assert "@get('/_sse'" in text and 'src="/datastar.js?v=' in text
        signals = {"via_ctx": seed["via_ctx"], "step": 1}
        stream, head = open_stream(host, port, signals, cookie)  # where the page points the browser
        stream.close()
        assert head.status == 404
        stream, head = open_stream(host, port, signals, cookie, path="/live/_sse")
        with stream:
            assert head.status == 200 and frame_body(stream.read_chunk()) == FIRST
    assert "create it with App(base_path='/live')" in caplog.text


def test_the_site_s_lifespan_can_start_and_stop_the_mounted_app() -> None:
    app = counter_app(base_path="/live")
    seen: list[str] = []
    app.on_start(lambda: seen.append("start"))
    app.on_stop(lambda: seen.append("stop"))
    live = asgi(app)

    @contextlib.asynccontextmanager
    async def lifespan(site: Starlette) -> AsyncIterator[None]:
        await live.startup()
        yield
        await live.shutdown()

    site = Starlette(routes=[Mount("/live", app=live)], lifespan=lifespan)
    server = ServerThread(site).start()
    try:
        assert server.call(lambda: list(seen)) == ["start"]  # before any request
        open_page(server.host, server.port, "/live/")
        assert server.call(lambda: list(seen)) == ["start"]  # the first request starts nothing more
    finally:
        server.stop()
    assert seen == ["start", "stop"]
