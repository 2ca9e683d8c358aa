"""One routing under every front end: the native server, the ASGI adapter on uvicorn and the test
client give the core the same request (path percent-decoded, query, cookies) and answer alike.

Each scenario is a raw request target with headers; under the servers it is sent byte for byte
over a socket, under the test client through ``client.request``.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator

import pytest

from pyvia import App, Context, Request, Response, html
from pyvia.asgi import asgi
from pyvia.testing import TestClient
from tests.asgi.servers import serving
from tests.helpers import RawClient, running_server


def parity_app() -> App:
    app = App(title="Parity")

    @app.route("GET", "/echo/{rest}")
    def echo(request: Request, rest: str) -> Response:
        return Response.json({"rest": rest, "path": request.path, "query": request.query, "cookies": request.cookies})

    @app.page("/room/{name}")
    def room(c: Context, name: str) -> None:
        c.view(lambda: html('<h1 id="name">{}</h1>', name))

    @app.route(["GET", "POST"], "/methods")
    def methods(request: Request) -> str:
        return request.method

    return app


#: (name, request target, extra header lines)
SCENARIOS = [
    ("plain", "/echo/abc", ""),
    ("utf-8 escapes", "/echo/caf%C3%A9", ""),
    ("an escaped slash (decoded, so it separates segments)", "/echo/a%2Fb", ""),
    ("space and plus", "/echo/a%20b+c", ""),
    ("emoji", "/echo/%F0%9F%90%8D", ""),
    ("bad utf-8", "/echo/%FF%FE", ""),
    ("query", "/echo/q?a=1&b=2&a=3&empty=&flag", ""),
    ("query escapes", "/echo/q?name=caf%C3%A9&plus=a+b", ""),
    ("cookies", "/echo/c", 'Cookie: a=1; b="quoted"; broken; c=3\r\n'),
    ("page with an escaped name", "/room/caf%C3%A9", ""),
    ("page with a dash and an underscore", "/room/my-room_2", ""),
    ("unknown path", "/nowhere", ""),
    ("a trailing slash", "/room/x/", ""),
    ("a doubled slash", "//room/x", ""),
    ("escaped dots", "/echo/%2e%2e", ""),
    ("an escaped NUL", "/echo/a%00b", ""),
    ("method not allowed", "/methods", ""),
]


def _status_and_body(raw: bytes) -> tuple[int, dict[str, object] | str]:
    head, _, body = raw.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    text = body.decode(errors="replace")
    with contextlib.suppress(ValueError):
        return status, json.loads(text)
    return status, text


def _essence(status: int, body: object) -> tuple[int, object]:
    """What must agree: the status and, for a JSON echo, its fields; for a page, its heading."""
    if isinstance(body, str) and '<h1 id="name">' in body:
        return status, body.split('<h1 id="name">', 1)[1].split("</h1>", 1)[0]
    if isinstance(body, dict):
        return status, body
    return status, None


@pytest.fixture(scope="module")
def front_ends() -> Iterator[dict[str, object]]:
    native_app, uvicorn_app = parity_app(), parity_app()
    with running_server(native_app) as native, serving(asgi(uvicorn_app)) as uvicorn:
        yield {"native": native, "uvicorn": (uvicorn.host, uvicorn.port)}


def _over_socket(address: tuple[str, int], target: str, extra: str, method: str) -> tuple[int, object]:
    with RawClient(*address) as client:
        client.send(
            f"{method} {target} HTTP/1.1\r\nHost: {address[0]}:{address[1]}\r\n{extra}"
            "Connection: close\r\n\r\n".encode()
        )
        response = client.read_response(method=method)
    body: object = response.body.decode(errors="replace")
    with contextlib.suppress(ValueError):
        body = json.loads(response.body)
    return _essence(response.status, body)


def _in_process(target: str, extra: str, method: str) -> tuple[int, object]:
    headers = dict(line.split(": ", 1) for line in extra.split("\r\n") if line)
    with TestClient(parity_app(), raise_server_exceptions=False) as client:
        response = client.request(method, target, headers=headers, cookies=False)
    body: object = bytes(response.body).decode(errors="replace")  # type: ignore[union-attr]
    with contextlib.suppress(ValueError):
        body = json.loads(bytes(response.body))  # type: ignore[union-attr]
    return _essence(response.status, body)


@pytest.mark.parametrize(("name", "target", "extra"), SCENARIOS, ids=[s[0] for s in SCENARIOS])
def test_every_front_end_gives_the_core_the_same_request(
    front_ends: dict[str, object], name: str, target: str, extra: str
) -> None:
    method = "PUT" if target == "/methods" else "GET"
    answers = {
        "native": _over_socket(front_ends["native"], target, extra, method),  # type: ignore[arg-type]
        "uvicorn": _over_socket(front_ends["uvicorn"], target, extra, method),  # type: ignore[arg-type]
        "test client": _in_process(target, extra, method),
    }
    assert answers["native"] == answers["uvicorn"] == answers["test client"], answers
