"""The website in Chromium: the home page, a guide, and the Game of Life running inside the gallery."""

from __future__ import annotations

import os
from pathlib import Path

from playwright.sync_api import Browser, expect

from tests.processes import ServerProcess, free_port


def test_home_docs_and_game_of_life(browser: Browser, tmp_path: Path) -> None:
    shots = Path(os.environ.get("PYVIA_SCREENSHOTS", tmp_path))
    shots.mkdir(parents=True, exist_ok=True)
    server = ServerProcess("website.app:app", free_port())
    server.start()
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    try:
        base = f"http://127.0.0.1:{server.port}"
        page.goto(base + "/")
        expect(page.locator("#gallery .card").first).to_be_visible()
        assert page.locator("#gallery .card").count() >= 5
        page.screenshot(path=str(shots / "home.png"))
        page.goto(base + "/docs/lifecycle")
        expect(page.locator("#doc h1")).to_be_visible()
        page.goto(base + "/gallery/game_of_life")
        frame = page.frame_locator("#live")
        generation = frame.locator("#gen")
        expect(generation).not_to_have_text("0", timeout=5000)  # the server timer advances the board
        first = int(generation.inner_text())
        expect(generation).not_to_have_text(str(first), timeout=5000)
        cells = frame.locator("#board > div")
        expect(cells).to_have_count(2500)
        # one handler for the board: the browser puts the clicked cell's index in the URL (Action.js)
        with page.expect_response(lambda r: "/_action/toggle?" in r.url) as toggled:
            cells.nth(7).click()
        assert toggled.value.status == 200 and toggled.value.url.endswith("cell=7"), toggled.value.url
        page.screenshot(path=str(shots / "game_of_life.png"))
        assert errors == []
    finally:
        page.close()
        server.stop()
