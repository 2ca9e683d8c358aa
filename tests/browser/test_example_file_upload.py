"""The file upload example in Chromium: several files in one post, the in-flight state, the size
limit checked before sending, a refused request, the list in a second tab, and a download."""

from __future__ import annotations

from pathlib import Path

from playwright.sync_api import Browser, Route, expect

from tests.processes import ServerProcess, free_port


def test_upload_list_and_download(browser: Browser) -> None:
    server = ServerProcess("examples.file_upload:app", free_port())
    server.start()
    context = browser.new_context(accept_downloads=True)
    errors: list[str] = []
    posts: list[str] = []
    try:
        page = context.new_page()
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.on("request", lambda r: posts.append(r.url) if r.method == "POST" and "/_action/" in r.url else None)
        page.goto(f"http://127.0.0.1:{server.port}/")
        expect(page.locator("#files")).to_have_text("No files yet.")
        expect(page.locator("#progress")).to_be_hidden()

        # two files in one post; the request is held so the in-flight state can be seen
        held: list[Route] = []
        page.route("**/_action/upload", lambda route: held.append(route))
        page.set_input_files(
            "#picker",
            [
                {"name": "hello.txt", "mimeType": "text/plain", "buffer": b"hello world"},
                {"name": "data.bin", "mimeType": "application/octet-stream", "buffer": bytes(range(256)) * 40},
            ],
        )
        page.click("#send")
        expect(page.locator("#progress")).to_be_visible()
        expect(page.locator("#progress span")).to_have_text("Uploading 2 file(s), 10.0 KiB…")
        expect(page.locator("#send")).to_be_disabled()
        while not held:
            page.wait_for_timeout(20)  # until Playwright hands the request over
        held[0].continue_()
        page.unroute("**/_action/upload")
        expect(page.locator("#status")).to_have_text("Uploaded 2 files (10.0 KiB).")
        expect(page.locator("#status")).to_have_class("ok")
        expect(page.locator("#progress")).to_be_hidden()
        expect(page.locator("#files td.name")).to_have_text(["hello.txt", "data.bin"])
        expect(page.locator("#files tr", has_text="hello.txt")).to_contain_text("11 B")
        expect(page.locator("#files tr", has_text="data.bin")).to_contain_text("application/octet-stream")
        assert page.locator("#picker").evaluate("el => el.files.length") == 0  # the form was reset

        # too large: refused in the browser, nothing is sent
        sent = len(posts)
        page.set_input_files(
            "#picker",
            {"name": "big.bin", "mimeType": "application/octet-stream", "buffer": b"x" * (2 * 1024 * 1024 + 1)},
        )
        page.click("#send")
        expect(page.locator("#status")).to_have_text("Over the 2.0 MiB limit per file: big.bin. Nothing was sent.")
        expect(page.locator("#status")).to_have_class("error")
        assert len(posts) == sent

        # a request the server refuses (as past its body limit) shows as an error
        page.route("**/_action/upload", lambda route: route.fulfill(status=413, body="Payload Too Large"))
        page.set_input_files("#picker", {"name": "c.txt", "mimeType": "text/plain", "buffer": b"c"})
        page.click("#send")
        expect(page.locator("#status")).to_have_text("The server refused the upload (HTTP 413).")
        page.unroute("**/_action/upload")

        # the list belongs to the browser session: a second tab shows it
        other = context.new_page()
        other.on("pageerror", lambda exc: errors.append(str(exc)))
        other.goto(f"http://127.0.0.1:{server.port}/")
        expect(other.locator("#files td.name")).to_have_text(["hello.txt", "data.bin"])

        with page.expect_download() as download:
            page.locator("#files tr", has_text="data.bin").locator(".download").click()
        assert download.value.suggested_filename == "data.bin"
        assert Path(download.value.path()).read_bytes() == bytes(range(256)) * 40

        other.locator("#files tr", has_text="hello.txt").locator(".remove").click()
        expect(page.locator("#files td.name")).to_have_text(["data.bin"])
        assert errors == []
    finally:
        context.close()
        server.stop()
