"""Static files from memory: encodings, validators, 304s, HEAD, refusals, and files that come and change."""

from __future__ import annotations

import concurrent.futures
import email.utils
import multiprocessing
import os
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import brotli
import pytest
import zstandard

from pyvia.compress import BR, CODINGS, GZIP, IDENTITY, ZSTD
from pyvia.http import Headers, Request, Response
from pyvia.server.http import encode_response, split_target
from pyvia.static import IMMUTABLE, Asset, StaticFiles, mime_type

CSS = b"".join(b".c%d { color: #%06x; margin: %dpx; }\n" % (i, i * 7919 % 0xFFFFFF, i % 13) for i in range(800))
SECRET = b"TOP-SECRET"
MTIME = 1_700_000_000  # 2023-11-14T22:13:20Z


class ManualExecutor(concurrent.futures.Executor):
    """Runs submitted jobs only when the test says so: the precompression is observable."""

    def __init__(self) -> None:
        self.jobs: list[tuple[concurrent.futures.Future[Any], Callable[..., Any], tuple[Any, ...]]] = []
        self.is_shut_down = False

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> concurrent.futures.Future[Any]:
        if self.is_shut_down:
            raise RuntimeError("cannot schedule new futures after shutdown")
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self.jobs.append((future, fn, args))
        return future

    def run_all(self) -> int:
        jobs, self.jobs = self.jobs, []
        for future, fn, args in jobs:
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(fn(*args))
                except Exception as exc:
                    future.set_exception(exc)
        return len(jobs)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        self.is_shut_down = True


def decode(coding: str | None, body: bytes) -> bytes:
    if coding == BR:
        return brotli.decompress(body)
    if coding == ZSTD:
        return zstandard.ZstdDecompressor().decompress(body)
    if coding == GZIP:
        return zlib.decompress(body, wbits=31)
    return body


def req(path: str = "/css/app.css", method: str = "GET", **headers: str) -> Request:
    return Request(method, path, headers=Headers([(k.replace("_", "-"), v) for k, v in headers.items()]))


def hdrs(response: Response | None) -> dict[str, str]:
    return dict(ok(response).headers)


def ok(response: Response | None) -> Response:
    assert response is not None, "expected a response, got None (not a static file)"
    return response


@pytest.fixture
def site(tmp_path: Path) -> Path:
    """A site root with the usual things, and a secret next to it."""
    root = tmp_path / "site"
    (root / "css").mkdir(parents=True)
    (root / "css" / "app.css").write_bytes(CSS)
    (root / "logo.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 8)
    (root / "tiny.txt").write_bytes(b"hi")
    (root / ".env").write_bytes(SECRET)
    (root / ".git").mkdir()
    (root / ".git" / "config").write_bytes(SECRET)
    (root / "css" / ".hidden.css").write_bytes(SECRET)
    (root / ".well-known").mkdir()
    (root / ".well-known" / "security.txt").write_bytes(b"Contact: mailto:security@example.com\n")
    (root / "docs").mkdir()
    (tmp_path / "secret.txt").write_bytes(SECRET)
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "x.css").write_bytes(SECRET)
    for path in root.rglob("*"):
        os.utime(path, (MTIME, MTIME))
    return root


@pytest.fixture
def executor() -> ManualExecutor:
    return ManualExecutor()


@pytest.fixture
def static(site: Path, executor: ManualExecutor) -> Iterator[StaticFiles]:
    files = StaticFiles(site, executor=executor)
    yield files
    files.close()


def ready(static: StaticFiles, executor: ManualExecutor) -> StaticFiles:
    static.start()
    executor.run_all()
    assert static.wait(1)
    return static


# --- encodings and validators ---------------------------------------------------------------------


@pytest.mark.parametrize("coding", CODINGS)
def test_each_encoding_is_served_with_its_own_strong_etag(
    static: StaticFiles, executor: ManualExecutor, coding: str
) -> None:
    ready(static, executor)
    response = static.get("/css/app.css", req(accept_encoding=coding))
    headers = hdrs(response)
    assert response is not None and response.status == 200
    assert headers["content-encoding"] == coding
    assert decode(coding, response.body) == CSS
    assert len(response.body) < len(CSS) / 4
    assert headers["content-type"] == "text/css; charset=utf-8"
    assert headers["vary"] == "Accept-Encoding"
    assert headers["last-modified"] == "Tue, 14 Nov 2023 22:13:20 GMT"
    assert headers["cache-control"] == "no-cache"
    assert headers["x-content-type-options"] == "nosniff"
    plain = hdrs(static.get("/css/app.css", req()))
    assert "content-encoding" not in plain
    assert plain["etag"].startswith('"') and not plain["etag"].startswith("W/")
    assert headers["etag"] == plain["etag"][:-1] + f'-{coding}"'


def test_browser_header_gets_the_server_preference(static: StaticFiles, executor: ManualExecutor) -> None:
    ready(static, executor)
    assert hdrs(static.get("/css/app.css", req(accept_encoding="gzip, deflate, br, zstd")))["content-encoding"] == ZSTD
    assert hdrs(static.get("/css/app.css", req(accept_encoding="gzip, deflate, br")))["content-encoding"] == BR
    assert "content-encoding" not in hdrs(static.get("/css/app.css", req(accept_encoding="identity")))


def test_plain_bytes_stand_in_until_the_precompressed_form_exists(
    static: StaticFiles, executor: ManualExecutor
) -> None:
    static.start()
    assert static.stats["pending"] == 3 * 3  # app.css, tiny.txt, security.txt x (zstd, br, gzip)
    stand_in = static.get("/css/app.css", req(accept_encoding="br"))
    assert stand_in is not None and stand_in.body == CSS
    headers = hdrs(stand_in)
    assert "content-encoding" not in headers
    assert headers["cache-control"] == "no-cache"
    assert headers["vary"] == "Accept-Encoding"
    # A revalidation of the stand-in is a 304 while the work is pending ...
    again = static.get("/css/app.css", req(accept_encoding="br", if_none_match=headers["etag"]))
    assert again is not None and again.status == 304
    executor.run_all()
    assert static.stats["pending"] == 0
    # ... and the compressed form once it exists (another representation, another ETag).
    upgraded = static.get("/css/app.css", req(accept_encoding="br", if_none_match=headers["etag"]))
    assert upgraded is not None and upgraded.status == 200
    assert hdrs(upgraded)["content-encoding"] == BR


def test_stand_in_keeps_the_configured_cache_control_for_clients_wanting_plain(
    site: Path, executor: ManualExecutor
) -> None:
    static = StaticFiles(site, executor=executor, cache_control="public, max-age=60")
    static.start()
    assert hdrs(static.get("/css/app.css", req(accept_encoding="br")))["cache-control"] == "no-cache"
    assert hdrs(static.get("/css/app.css", req()))["cache-control"] == "public, max-age=60"


@pytest.mark.parametrize("coding", [*CODINGS, IDENTITY])
def test_if_none_match_gives_a_304_per_encoding(static: StaticFiles, executor: ManualExecutor, coding: str) -> None:
    ready(static, executor)
    first = static.get("/css/app.css", req(accept_encoding=coding))
    etag = hdrs(first)["etag"]
    for value in (etag, f"W/{etag}", f'"nope", {etag}', "*"):
        response = static.get("/css/app.css", req(accept_encoding=coding, if_none_match=value))
        assert response is not None and response.status == 304, value
        assert response.body == b""
        headers = hdrs(response)
        assert headers["etag"] == etag
        assert headers["vary"] == "Accept-Encoding"
        assert "cache-control" in headers and "last-modified" in headers
        assert "content-encoding" not in headers and "content-type" not in headers
    # An ETag of another encoding is another representation: a full answer.
    other = BR if coding != BR else ZSTD
    other_etag = hdrs(static.get("/css/app.css", req(accept_encoding=other)))["etag"]
    full = static.get("/css/app.css", req(accept_encoding=coding, if_none_match=other_etag))
    assert full is not None and full.status == 200 and decode(hdrs(full).get("content-encoding"), full.body) == CSS


def test_if_modified_since(static: StaticFiles, executor: ManualExecutor) -> None:
    ready(static, executor)
    at = email.utils.formatdate(MTIME, usegmt=True)
    later = email.utils.formatdate(MTIME + 3600, usegmt=True)
    earlier = email.utils.formatdate(MTIME - 1, usegmt=True)
    for value, status in (
        (at, 304),
        (later, 304),
        (earlier, 200),
        ("not a date", 200),
        ("", 200),
        ("Tue, 14 Nov 2023 22:13:20 -0000", 304),
    ):
        response = static.get("/css/app.css", req(if_modified_since=value))
        assert response is not None and response.status == status, value
    # If-None-Match wins over If-Modified-Since (RFC 9110 §13.2.2).
    response = static.get("/css/app.css", req(if_modified_since=later, if_none_match='"other"'))
    assert response is not None and response.status == 200


def test_head_has_the_get_headers_and_the_front_end_sends_no_body(
    static: StaticFiles, executor: ManualExecutor
) -> None:
    ready(static, executor)
    get = static.get("/css/app.css", req(accept_encoding="br"))
    head = static.get("/css/app.css", req(method="HEAD", accept_encoding="br"))
    assert head is not None and get is not None
    assert head.headers == get.headers and head.status == 200
    wire = encode_response(head.status, head.headers, head.body, head_only=True)
    assert wire.endswith(b"\r\n\r\n")
    assert f"content-length: {len(get.body)}\r\n".encode() in wire
    assert static.get("/css/app.css", req(method="POST")) is None
    assert static.get("/css/app.css", req(method="PUT")) is None


def test_binary_and_tiny_files_are_sent_as_they_are(static: StaticFiles, executor: ManualExecutor) -> None:
    ready(static, executor)
    png = static.get("/logo.png", req(accept_encoding="br, zstd, gzip"))
    headers = hdrs(png)
    assert headers["content-type"] == "image/png"
    assert "vary" not in headers and "content-encoding" not in headers
    tiny = static.get("/tiny.txt", req(accept_encoding="br"))
    assert tiny is not None and tiny.body == b"hi"  # compressing 2 bytes does not pay
    assert "content-encoding" not in hdrs(tiny) and hdrs(tiny)["vary"] == "Accept-Encoding"


def test_cache_control_callable_gets_path_and_type(site: Path, executor: ManualExecutor) -> None:
    seen = []

    def policy(path: str, mime: str) -> str:
        seen.append((path, mime))
        return "public, max-age=31536000, immutable" if path.startswith("css/") else "no-store"

    static = StaticFiles(site, executor=executor, cache_control=policy)
    assert hdrs(static.get("/css/app.css", req()))["cache-control"] == IMMUTABLE
    assert hdrs(static.get("/logo.png", req()))["cache-control"] == "no-store"
    assert seen == [("css/app.css", "text/css; charset=utf-8"), ("logo.png", "image/png")]


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("a.js", "text/javascript; charset=utf-8"),
        ("a.mjs", "text/javascript; charset=utf-8"),
        ("a.css", "text/css; charset=utf-8"),
        ("a.json", "application/json"),
        ("a.js.map", "application/json"),
        ("a.svg", "image/svg+xml"),
        ("a.wasm", "application/wasm"),
        ("a.txt", "text/plain; charset=utf-8"),
        ("a.html", "text/html; charset=utf-8"),
        ("a.HTM", "text/html; charset=utf-8"),
        ("a.xml", "application/xml"),
        ("a.woff2", "font/woff2"),
        ("a.ico", "image/x-icon"),
        ("a.webmanifest", "application/manifest+json"),
        ("a.unknownext", "application/octet-stream"),
        ("noext", "application/octet-stream"),
        ("a.tar", "application/x-tar"),
    ],
)
def test_mime_types(name: str, expected: str) -> None:
    assert mime_type(name) == expected


# --- what is refused, and what is simply not a static file ----------------------------------------


TRAVERSALS = [
    "/../secret.txt",
    "/css/../../secret.txt",
    "/..",
    "/../",
    "/./css/app.css",
    "/css/./app.css",
    "/css/../css/app.css",
    "/..%2fsecret.txt",
    "/%2e%2e/secret.txt",  # as it would reach us if a front end forgot to decode
    "/%2E%2E/secret.txt",
    "/css/%2e%2e/%2e%2e/secret.txt",
    "/..\\secret.txt",
    "/css\\..\\..\\secret.txt",
    "/css/app.css\x00.png",
    "/\x00",
    "/.env",
    "/%2eenv",
    "/.git/config",
    "/.git/",
    "/css/.hidden.css",
    "/.well-known",  # the directory itself, as a name, is a dot-name
    "/.well-knownx/a",
    "/css/.well-known/a",
]


@pytest.mark.parametrize("path", TRAVERSALS)
def test_traversal_and_dot_names_are_refused(static: StaticFiles, executor: ManualExecutor, path: str) -> None:
    ready(static, executor)
    response = static.get(path, req(path))
    assert response is not None, path
    assert response.status == 404
    assert SECRET not in response.body


def test_a_literal_name_that_decodes_to_a_dot_name_is_refused_too(static: StaticFiles) -> None:
    # Decoded once by the front end, "%2e%2e" is a literal file name: never decoded again into "..".
    assert static.get("/%2e%2e/secret.txt", req()) is not None  # refused as a would-be traversal
    (static_root := Path(static._root, "%2e%2e")).mkdir()
    (static_root / "secret.txt").write_bytes(b"not the secret")
    response = static.get("/%2e%2e/secret.txt", req())
    assert response is not None and response.status == 404
    path, _ = split_target(b"/%252e%252e/secret.txt")
    assert path == "/%2e%2e/secret.txt"


@pytest.mark.parametrize(
    "raw",
    [
        b"/%2e%2e/secret.txt",
        b"/css/%2E%2E/%2e%2e/secret.txt",
        b"/%2e%2e%2fsecret.txt",
        b"/.%2e/secret.txt",
        b"/%2eenv",
        b"/%5c..%5csecret.txt",
        b"/css/app.css%00",
    ],
)
def test_percent_encoded_traversal_is_refused_after_the_front_end_decodes(static: StaticFiles, raw: bytes) -> None:
    try:
        path, _query = split_target(raw)
    except ValueError:  # a NUL: the native front end refuses it first (400); static refuses it too
        assert b"%00" in raw
        path = unquote(raw.decode())
    response = static.get(path, req(path))
    assert response is not None and response.status == 404


def test_symlinks_out_of_the_root_are_refused(site: Path, executor: ManualExecutor) -> None:
    (site / "passwd").symlink_to(site.parent / "secret.txt")
    (site / "abs.css").symlink_to((site.parent / "outside" / "x.css").resolve())
    (site / "ext").symlink_to(site.parent / "outside", target_is_directory=True)
    (site / "env-link.txt").symlink_to(site / ".env")
    (site / "css-link.css").symlink_to(site / "css" / "app.css")
    static = StaticFiles(site, executor=executor)
    assert static.start() == 5  # app.css, tiny.txt, logo.png, security.txt and css-link.css
    for path in ("/passwd", "/abs.css", "/ext/x.css", "/env-link.txt"):
        response = static.get(path, req(path))
        assert response is not None and response.status == 404, path
        assert SECRET not in response.body
    inside = static.get("/css-link.css", req("/css-link.css"))
    assert inside is not None and inside.status == 200 and inside.body == CSS


def test_well_known_is_served(static: StaticFiles) -> None:
    response = static.get("/.well-known/security.txt", req("/.well-known/security.txt"))
    assert response is not None and response.status == 200
    assert response.body.startswith(b"Contact:")


@pytest.mark.parametrize(
    "path",
    ["/", "/css", "/css/", "/docs/", "/missing.css", "/css/missing.css", "/a//b.css", "/css//app.css", "/logo.png/x"],
)
def test_what_is_not_a_file_is_left_to_routing(static: StaticFiles, path: str) -> None:
    assert static.get(path, req(path)) is None


def test_prefix(site: Path, executor: ManualExecutor) -> None:
    static = StaticFiles(site, executor=executor, prefix="/static")
    assert static.prefix == "/static/"
    response = static.get("/static/css/app.css", req("/static/css/app.css"))
    assert response is not None and response.body == CSS
    assert static.get("/css/app.css", req()) is None
    assert static.get("/staticx/css/app.css", req()) is None
    assert static.get("/static", req()) is None
    refused = static.get("/static/../secret.txt", req())
    assert refused is not None and refused.status == 404
    with pytest.raises(ValueError, match="must start with '/'"):
        StaticFiles(site, prefix="static")
    with pytest.raises(ValueError, match="does not exist"):
        StaticFiles(site / "nope")


def test_files_over_the_size_limit_are_not_served(
    site: Path, executor: ManualExecutor, caplog: pytest.LogCaptureFixture
) -> None:
    static = StaticFiles(site, executor=executor, max_file_size=1000)
    assert static.get("/css/app.css", req()) is None
    assert "over max_file_size" in caplog.text
    assert static.get("/tiny.txt", req("/tiny.txt")) is not None


# --- files that appear, change and go -------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_file_added_after_start_is_found_on_its_first_request(
    static: StaticFiles, site: Path, executor: ManualExecutor
) -> None:
    ready(static, executor)
    assert static.get("/new.js", req("/new.js")) is None
    (site / "new.js").write_bytes(b"export const x = 1;\n" * 100)
    response = static.get("/new.js", req("/new.js", accept_encoding="br"))
    assert response is not None and response.status == 200
    assert hdrs(response)["content-type"] == "text/javascript; charset=utf-8"
    assert response.body == b"export const x = 1;\n" * 100  # plain until its compression ran
    executor.run_all()
    compressed = static.get("/new.js", req("/new.js", accept_encoding="br"))
    assert hdrs(compressed)["content-encoding"] == BR


def test_a_changed_file_is_read_again_after_the_check_interval(site: Path, executor: ManualExecutor) -> None:
    clock = Clock()
    static = StaticFiles(site, executor=executor, check_interval=1.0, clock=clock)
    ready(static, executor)
    old = static.get("/css/app.css", req(accept_encoding="br"))
    old_etag = hdrs(old)["etag"]
    changed = CSS + b".added { color: red; }\n"
    (site / "css" / "app.css").write_bytes(changed)
    os.utime(site / "css" / "app.css", (MTIME + 60, MTIME + 60))
    clock.now += 0.5
    assert decode(BR, static.get("/css/app.css", req(accept_encoding="br")).body) == CSS  # within the interval
    clock.now += 0.6
    fresh = static.get("/css/app.css", req(accept_encoding="br", if_none_match=old_etag))
    assert fresh is not None and fresh.status == 200
    assert fresh.body == changed  # the stand-in, until the new compression ran
    assert hdrs(fresh)["last-modified"] == email.utils.formatdate(MTIME + 60, usegmt=True)
    executor.run_all()
    new = static.get("/css/app.css", req(accept_encoding="br"))
    assert decode(BR, new.body) == changed
    assert hdrs(new)["etag"] != old_etag


def test_same_size_and_mtime_but_a_new_inode_is_a_change(site: Path, executor: ManualExecutor) -> None:
    static = StaticFiles(site, executor=executor, check_interval=0)
    assert ok(static.get("/tiny.txt", req())).body == b"hi"
    (site / "tiny2.txt").write_bytes(b"ho")
    os.utime(site / "tiny2.txt", (MTIME, MTIME))
    os.replace(site / "tiny2.txt", site / "tiny.txt")
    assert ok(static.get("/tiny.txt", req())).body == b"ho"


def test_deleted_and_replaced_files(site: Path, executor: ManualExecutor) -> None:
    static = StaticFiles(site, executor=executor, check_interval=0)
    ready(static, executor)
    (site / "tiny.txt").unlink()
    assert static.get("/tiny.txt", req()) is None
    assert static.stats["files"] == 3
    # A file swapped for a link out of the root is refused on its next check.
    (site / "css" / "app.css").unlink()
    (site / "css" / "app.css").symlink_to(site.parent / "secret.txt")
    response = static.get("/css/app.css", req())
    assert response is not None and response.status == 404
    # A file swapped for a directory is no file any more.
    (site / "logo.png").unlink()
    (site / "logo.png").mkdir()
    assert static.get("/logo.png", req()) is None


def test_fifo_is_not_read(site: Path, executor: ManualExecutor) -> None:
    os.mkfifo(site / "pipe.txt")
    static = StaticFiles(site, executor=executor)
    assert static.get("/pipe.txt", req()) is None
    static.start()  # does not block on the FIFO either


# --- executors --------------------------------------------------------------------------------------


def test_default_executor_is_a_background_thread(site: Path) -> None:
    static = StaticFiles(site)
    assert static.start() == 4
    assert static.wait(30)
    assert hdrs(static.get("/css/app.css", req(accept_encoding="zstd")))["content-encoding"] == ZSTD
    static.close()
    static.close()


def test_a_process_pool_works_too(site: Path) -> None:
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        static = StaticFiles(site, executor=pool)
        static.start()
        assert static.wait(60)
        assert hdrs(static.get("/css/app.css", req(accept_encoding="br")))["content-encoding"] == BR
        static.close()  # a pool passed in is left running for its owner
        assert pool.submit(int, "7").result() == 7


def test_a_failed_or_refused_job_leaves_the_plain_file(
    site: Path, executor: ManualExecutor, caplog: pytest.LogCaptureFixture
) -> None:
    static = StaticFiles(site, executor=executor)
    static.start()
    for future, _fn, _args in executor.jobs:
        future.set_exception(MemoryError("boom"))
    executor.jobs.clear()
    assert "precompressing" in caplog.text
    response = static.get("/css/app.css", req(accept_encoding="br"))
    assert response is not None and response.body == CSS and hdrs(response)["cache-control"] == "no-cache"
    executor.shutdown()
    (site / "late.css").write_bytes(CSS)
    late = static.get("/late.css", req("/late.css", accept_encoding="br"))
    assert late is not None and late.body == CSS
    assert hdrs(late)["cache-control"] == "no-cache"  # nothing pending: the configured policy
    assert static.stats["pending"] == 0


def test_wait_times_out(site: Path, executor: ManualExecutor) -> None:
    static = StaticFiles(site, executor=executor)
    static.start()
    assert static.wait(0.01) is False
    executor.run_all()
    assert static.wait(0.01) is True
    assert "StaticFiles(" in repr(static)


# --- one in-memory asset (the Datastar bundle) ------------------------------------------------------


def test_asset_is_precompressed_and_immutable(executor: ManualExecutor) -> None:
    body = b"/* datastar */ " + CSS
    asset = Asset(body, content_type="text/javascript; charset=utf-8", version="abc123", executor=executor)
    assert asset.version == "abc123"
    first = asset.get(req("/datastar.js", accept_encoding="br"))
    assert first is not None and first.body == body
    assert hdrs(first)["cache-control"] == "no-cache"  # the stand-in is not kept for a year
    executor.run_all()
    assert asset.wait(1)
    assert asset.codings == CODINGS
    for coding in CODINGS:
        response = asset.get(req("/datastar.js", accept_encoding=coding))
        headers = hdrs(response)
        assert headers["cache-control"] == IMMUTABLE
        assert headers["content-encoding"] == coding
        assert decode(coding, ok(response).body) == body
        again = asset.get(req("/datastar.js", accept_encoding=coding, if_none_match=headers["etag"]))
        assert again is not None and again.status == 304
    plain = asset.get(req("/datastar.js"))
    assert hdrs(plain)["cache-control"] == IMMUTABLE and ok(plain).body == body
    assert asset.get(req("/datastar.js", method="POST")) is None
    assert ok(asset.get(req("/datastar.js", method="HEAD"))).headers == ok(plain).headers
    asset.close()


def test_asset_version_defaults_to_a_content_hash() -> None:
    a = Asset(b"x" * 100, content_type="text/plain", executor=ManualExecutor())
    b = Asset(b"y" * 100, content_type="text/plain", executor=ManualExecutor())
    assert len(a.version) == 10 and a.version != b.version
