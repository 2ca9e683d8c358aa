"""Static path traversal over raw sockets (ephpm-lessons §0.11, §8.3 #3): HTTP clients normalise
``../`` away before sending, so every attack here is a request line written byte by byte to a real
server serving a real ``pyvia.App(static_dir=...)``. Nothing outside the root, and no dot-file, is
ever served; a file inside is (the control), through the same server, in the same test run."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

import pyvia
from tests.helpers import RawClient, RawResponse, running_server

INSIDE = b"INSIDE-THE-ROOT"
OUTSIDE = b"OUTSIDE-SECRET"
DOTENV = b"DOTENV-SECRET"
HIDDEN = b"HIDDEN-DIR-SECRET"
SIBLING = b"SIBLING-SECRET"
#: What /etc/passwd starts with on every Linux box this runs on.
PASSWD = b"root:"
LEAKS = (OUTSIDE, DOTENV, HIDDEN, SIBLING, PASSWD)


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("traversal")
    root = base / "public"
    (root / "css").mkdir(parents=True)
    (root / "index.html").write_bytes(b"<p>" + INSIDE + b"</p>")
    (root / "css" / "site.css").write_bytes(b"p{}/*" + INSIDE + b"*/")
    (root / "a b.txt").write_bytes(INSIDE)
    (root / ".env").write_bytes(DOTENV)
    (root / ".hidden").mkdir()
    (root / ".hidden" / "file.txt").write_bytes(HIDDEN)
    (base / "outside").mkdir()
    (base / "outside" / "secret.txt").write_bytes(OUTSIDE)
    (base / "publicx").mkdir()  # a sibling whose name starts with the root's: prefix checks must not match it
    (base / "publicx" / "secret.txt").write_bytes(SIBLING)
    os.symlink(base / "outside" / "secret.txt", root / "link.txt")  # a file symlinked out of the root
    os.symlink(base / "outside", root / "linkdir")  # a directory symlinked out of the root
    os.symlink(root / "index.html", root / "inner-link.html")  # a symlink that stays inside: served
    return root


@pytest.fixture(scope="module")
def address(tree: Path) -> Iterator[tuple[str, int]]:
    mp = pytest.MonkeyPatch()
    mp.setenv("PYVIA_SECRET", "traversal-test-secret")
    try:
        app = pyvia.App(title="traversal", static_dir=str(tree))
        with running_server(app, graceful_timeout=1.0) as bound:
            yield bound
    finally:
        mp.undo()


def raw_get(address: tuple[str, int], target: bytes, method: bytes = b"GET") -> RawResponse:
    with RawClient(*address) as c:
        c.send(method + b" " + target + b" HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        response = c.read_response(method=method.decode())
        rest = c.read_all()
    response.body += rest
    return response


@pytest.mark.parametrize(
    "target",
    [
        b"/index.html",
        b"/css/site.css",
        b"/%69ndex.html",
        b"/a%20b.txt",
        b"/inner-link.html",
        b"http://localhost/index.html",
    ],
)
def test_files_inside_the_root_are_served(address: tuple[str, int], target: bytes) -> None:
    response = raw_get(address, target)
    assert response.status == 200, (target, response.status, response.body[:80])
    assert INSIDE in response.body


ATTACKS = [
    # dot segments are refused even when they would stay inside (static.py, rule 2)
    b"/css/../index.html",
    b"/./index.html",
    # plain and encoded dot-dot
    b"/../outside/secret.txt",
    b"/../../../../../../../../etc/passwd",
    b"/css/../../outside/secret.txt",
    b"/./../outside/secret.txt",
    b"/%2e%2e/outside/secret.txt",
    b"/%2E%2E/outside/secret.txt",
    b"/.%2e/outside/secret.txt",
    b"/%2e./outside/secret.txt",
    b"/..%2foutside%2fsecret.txt",
    b"/..%2Foutside/secret.txt",
    b"/%2e%2e%2foutside%2fsecret.txt",
    b"/%2e%2e/%2e%2e/%2e%2e/%2e%2e/%2e%2e/%2e%2e/etc/passwd",
    b"/css/%2e%2e/%2e%2e/outside/secret.txt",
    # double encoding, overlong UTF-8, Tomcat-style path parameters
    b"/%252e%252e/outside/secret.txt",
    b"/%252e%252e%252foutside%252fsecret.txt",
    b"/%c0%ae%c0%ae/outside/secret.txt",
    b"/%c0%ae%c0%ae%c0%afoutside%c0%afsecret.txt",
    b"/..;/outside/secret.txt",
    # backslashes
    b"/..\\outside\\secret.txt",
    b"/..%5coutside%5csecret.txt",
    b"/%2e%2e%5coutside%5csecret.txt",
    b"/css\\..\\..\\outside\\secret.txt",
    # absolute paths
    b"//etc/passwd",
    b"///etc/passwd",
    b"/%2fetc%2fpasswd",
    b"/etc/passwd",
    b"//" + b"..//outside/secret.txt",
    b"http://localhost/../outside/secret.txt",
    b"http://localhost/%2e%2e/outside/secret.txt",
    # a sibling directory sharing the root's name as a prefix
    b"/../publicx/secret.txt",
    b"/%2e%2e/publicx/secret.txt",
    # NUL
    b"/index.html%00.css",
    b"/../outside/secret.txt%00.html",
    b"/%00/../outside/secret.txt",
    b"/%00.env",
    # dot-files and dot-directories
    b"/.env",
    b"/%2eenv",
    b"/css/../.env",
    b"/css/%2e%2e/.env",
    b"/.hidden/file.txt",
    b"/%2ehidden/file.txt",
    b"/.env/",
    # symlinks out of the root
    b"/link.txt",
    b"/linkdir/secret.txt",
    b"/linkdir/../linkdir/secret.txt",
]


@pytest.mark.parametrize("method", [b"GET", b"HEAD"])
@pytest.mark.parametrize("target", ATTACKS)
def test_nothing_outside_the_root_is_served(address: tuple[str, int], target: bytes, method: bytes) -> None:
    response = raw_get(address, target, method)
    assert response.status in (400, 404), (target, response.status, response.body[:120])
    for secret in LEAKS:
        assert secret not in response.body, (target, secret)
    assert response.header("content-type") != "text/plain; charset=utf-8" or response.status != 200


def test_the_controls_and_attacks_share_one_server(address: tuple[str, int]) -> None:
    """Interleaved: an attack never breaks the server for the next real request."""
    for target in ATTACKS[:10]:
        assert raw_get(address, target).status in (400, 404)
        assert raw_get(address, b"/index.html").status == 200
