"""Deploys in Debian's Chromium: tabs across ``pyvia reload``, and ``pyvia run --dev`` errors in the page."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.cluster.test_reload import Project


@pytest.fixture
def started(tmp_path: Path) -> Iterator[list[Project]]:
    projects: list[Project] = []
    yield projects
    for project in projects:
        project.stop()


def open_tab(browser: Browser, project: Project, errors: list[str]) -> Page:
    page = browser.new_page()
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(f"http://127.0.0.1:{project.port}/")
    expect(page.locator("#text")).to_contain_text("v1 count=0")
    page.wait_for_function("() => document.querySelector('#via-boot') !== null")
    return page


def test_tabs_keep_their_counts_across_a_reload_and_show_the_new_code(
    browser: Browser, tmp_path: Path, started: list[Project]
) -> None:
    project = Project(tmp_path, "--pid-file", "pyvia.pid", "--reload-spread", "1")
    started.append(project)
    errors: list[str] = []
    pages = [open_tab(browser, project, errors) for _ in range(3)]
    for i, page in enumerate(pages):
        for n in range(i + 1):
            page.click("#inc")
            expect(page.locator("#text")).to_contain_text(f"count={n + 1} ")
    project.write("v2")
    reload = subprocess.run(
        [sys.executable, "-m", "pyvia", "reload"],
        cwd=tmp_path,
        capture_output=True,
        timeout=30,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "PYVIA_SERVER__PID_FILE": "pyvia.pid"},
    )
    assert reload.returncode == 0, reload.stderr
    project.wait_for_log("reload done")
    for i, page in enumerate(pages):  # each tab revived on the new code, its count and the shared total intact
        expect(page.locator("#text")).to_have_text(f"v2 count={i + 1} total=6", timeout=10_000)
    pages[0].click("#inc")
    expect(pages[0].locator("#text")).to_have_text("v2 count=2 total=7")
    expect(pages[2].locator("#text")).to_have_text("v2 count=3 total=7")  # the broadcast reaches the others
    assert errors == []


def test_dev_mode_shows_a_failing_action_and_a_broken_import_over_the_page(
    browser: Browser, tmp_path: Path, started: list[Project]
) -> None:
    project = Project(tmp_path, "--dev")
    started.append(project)
    project.wait_for_log("dev mode: watching")
    errors: list[str] = []
    page = open_tab(browser, project, errors)
    page.click("#fail")
    overlay = page.locator("#via-dev-error")
    expect(overlay).to_contain_text("ValueError in action")
    expect(overlay).to_contain_text("the action failed in v1")
    overlay.get_by_text("close it").click()
    expect(overlay).to_have_count(0)

    project.write("v2", extra="\nraise RuntimeError('half-edited')\n")
    expect(overlay).to_contain_text("RuntimeError in loading reload_app:app", timeout=15_000)
    expect(overlay).to_contain_text("half-edited")

    project.write("v3")
    expect(page.locator("#text")).to_have_text("v3 count=0 total=0", timeout=15_000)
    expect(overlay).to_have_count(0)
    page.click("#inc")
    expect(page.locator("#text")).to_have_text("v3 count=1 total=1")
    assert errors == []
