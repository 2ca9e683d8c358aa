"""Datastar answers from plain routes (``pyvia.datastar``) on the native server, over raw sockets:
event streams from a generator, an iterable or a writer, the one-shot forms with their
``datastar-*`` headers, and the signals a request carries."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Iterator
from urllib.parse import quote

import pytest
from datastar_py import ServerSentEventGenerator as SSE

from pyvia import App, Request, Response
from pyvia.datastar import (
    DatastarResponse,
    EventSink,
    elements_response,
    execute_script,
    is_datastar_request,
    last_event_id,
    patch_elements,
    patch_signals,
    read_signals,
    remove_signals,
    script_response,
    signals_response,
)
from tests.helpers import RawClient, running_server

listeners: set[EventSink] = set()
seen: dict[str, object] = {}


def make_app() -> App:
    app = App()

    @app.route("GET", "/feed")
    async def feed(request: Request) -> DatastarResponse:
        async def events() -> AsyncIterator[bytes]:
            for n in range(3):
                yield patch_elements(f'<li id="n{n}">{n}</li>', "#feed", "append", event_id=str(n))
                await asyncio.sleep(0.01)
            yield patch_signals({"done": True})

        return DatastarResponse(events())

    @app.route("GET", "/forever")
    def forever(request: Request) -> DatastarResponse:
        async def events() -> AsyncIterator[bytes]:
            try:
                n = 0
                while True:
                    yield patch_signals({"n": n})
                    n += 1
                    await asyncio.sleep(0.01)
            finally:
                seen["generator closed"] = True

        return DatastarResponse(events())

    @app.route("GET", "/listen")
    def listen(request: Request) -> DatastarResponse:
        def start(sink: EventSink) -> None:
            listeners.add(sink)
            sink.on_close(lambda: listeners.discard(sink))

        return DatastarResponse(start)

    @app.route("POST", "/say")
    def say(request: Request) -> Response:
        text = str(read_signals(request).get("text", ""))
        for sink in list(listeners):
            sink.patch_elements(f'<p id="said">{text}</p>')
        return Response(204)

    @app.route("GET", "/writer")
    def writer(request: Request) -> DatastarResponse:
        async def write(sink: EventSink) -> None:
            sink.execute_script("console.log(1)", attributes={"type": "module"})
            await asyncio.sleep(0.01)
            sink.remove_signals(["a.b"])

        return DatastarResponse(write)

    @app.route("GET", "/list")
    def as_list(request: Request) -> DatastarResponse:
        sdk = SSE.patch_signals({"sdk": 1}, event_id="7")  # the official SDK's events pass as they are
        return DatastarResponse([patch_elements('<p id="a">1</p>'), sdk, remove_signals("x")])

    @app.route("GET", "/forged")
    def forged(request: Request) -> DatastarResponse:
        bad = SSE.patch_elements("<p>", selector='a\nevent: datastar-patch-signals\ndata: signals {"admin":true}')
        return DatastarResponse([patch_signals({"before": 1}), bad, patch_signals({"after": 1})])

    @app.route(["GET", "POST"], "/echo")
    def echo(request: Request) -> Response:
        return Response.json(
            {"signals": read_signals(request), "datastar": is_datastar_request(request), "last": last_event_id(request)}
        )

    @app.route("GET", "/fragment")
    def fragment(request: Request) -> Response:
        return elements_response(
            '<circle id="c" r="2"/>', selector="#vis", mode="append", namespace="svg", use_view_transition=True
        )

    @app.route("GET", "/plain-fragment")
    def plain_fragment(request: Request) -> Response:
        return elements_response('<p id="p">x</p>')

    @app.route("GET", "/signals")
    def signals(request: Request) -> Response:
        return signals_response({"theme": "dark"}, only_if_missing=True)

    @app.route("GET", "/script")
    def script(request: Request) -> Response:
        return script_response("window.ran = true", attributes={"type": "module", "nonce": 'n"1'})

    return app


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[str, int]]:
    with running_server(make_app()) as address:
        yield address


def get(server: tuple[str, int], path: str, extra: str = "") -> tuple[RawClient, object]:
    host, port = server
    client = RawClient(host, port)
    client.send(f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\n{extra}\r\n".encode())
    return client, client.read_head()


def fetch(server: tuple[str, int], method: str, path: str, body: bytes = b"", extra: str = "") -> object:
    host, port = server
    with RawClient(host, port) as client:
        length = f"Content-Length: {len(body)}\r\n" if method == "POST" else ""
        client.send(f"{method} {path} HTTP/1.1\r\nHost: {host}:{port}\r\n{extra}{length}\r\n".encode() + body)
        return client.read_response()


def test_an_async_generator_streams_its_events_and_the_response_ends(server: tuple[str, int]) -> None:
    response = fetch(server, "GET", "/feed")
    assert response.status == 200 and response.header("content-type") == "text/event-stream"  # type: ignore[attr-defined]
    assert response.header("cache-control") == "no-cache"  # type: ignore[attr-defined]
    expected = [patch_elements(f'<li id="n{n}">{n}</li>', "#feed", "append", event_id=str(n)) for n in range(3)]
    assert response.chunks == [*expected, patch_signals({"done": True})]  # type: ignore[attr-defined]  # one write each


def test_a_generator_is_closed_when_the_client_leaves(server: tuple[str, int]) -> None:
    seen.clear()
    client, _ = get(server, "/forever")
    assert json.loads(client.read_chunk().decode().split("data: signals ")[1]) == {"n": 0}
    client.close()
    deadline = time.monotonic() + 5
    while "generator closed" not in seen:
        assert time.monotonic() < deadline, "the generator was never closed"
        time.sleep(0.02)


def test_a_writer_keeps_the_stream_for_whoever_holds_the_sink(server: tuple[str, int]) -> None:
    client, _ = get(server, "/listen")
    deadline = time.monotonic() + 5
    while not listeners:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    body = json.dumps({"text": "hello"}).encode()
    assert fetch(server, "POST", "/say", body, "Content-Type: application/json\r\n").status == 204  # type: ignore[attr-defined]
    assert client.read_chunk() == patch_elements('<p id="said">hello</p>')
    client.close()
    while listeners:  # on_close ran when the client left
        assert time.monotonic() < deadline
        time.sleep(0.01)


def test_an_async_writer_ends_the_response_when_it_returns(server: tuple[str, int]) -> None:
    response = fetch(server, "GET", "/writer")
    assert response.chunks == [  # type: ignore[attr-defined]
        execute_script("console.log(1)", attributes={"type": "module"}),
        remove_signals(["a.b"]),
    ]


def test_an_iterable_of_events_including_the_sdk_s(server: tuple[str, int]) -> None:
    response = fetch(server, "GET", "/list")
    assert response.body == (
        patch_elements('<p id="a">1</p>')  # type: ignore[attr-defined]
        + b'event: datastar-patch-signals\nid: 7\ndata: signals {"sdk":1}\n\n'
        + b'event: datastar-patch-signals\ndata: signals {"x":null}\n\n'
    )


def test_a_forged_event_ends_the_stream_and_is_never_sent(server: tuple[str, int]) -> None:
    response = fetch(server, "GET", "/forged")
    assert response.body == patch_signals({"before": 1})  # type: ignore[attr-defined]


def test_read_signals_from_a_get_a_json_body_and_the_datastar_headers(server: tuple[str, int]) -> None:
    query = quote(json.dumps({"q": "x", "n": 2}))
    got = json.loads(
        fetch(server, "GET", f"/echo?datastar={query}", extra="Datastar-Request: true\r\nlast-event-id: 41\r\n").body
    )  # type: ignore[attr-defined]
    assert got == {"signals": {"q": "x", "n": 2}, "datastar": True, "last": "41"}
    got = json.loads(fetch(server, "POST", "/echo", b'{"a":[1]}', "Content-Type: application/json\r\n").body)  # type: ignore[attr-defined]
    assert got == {"signals": {"a": [1]}, "datastar": False, "last": None}


def test_malformed_signals_are_a_400_not_a_500(server: tuple[str, int]) -> None:
    assert fetch(server, "POST", "/echo", b"{nope", "Content-Type: application/json\r\n").status == 400  # type: ignore[attr-defined]
    assert fetch(server, "GET", "/echo?datastar=%5B1%5D").status == 400  # type: ignore[attr-defined]


def test_an_elements_answer_carries_its_options_in_datastar_headers(server: tuple[str, int]) -> None:
    response = fetch(server, "GET", "/fragment")
    assert response.header("content-type") == "text/html; charset=utf-8"  # type: ignore[attr-defined]
    assert [
        (n, response.header(n))
        for n in (
            "datastar-selector",
            "datastar-mode",
            "datastar-namespace",  # type: ignore[attr-defined]
            "datastar-use-view-transition",
        )
    ] == [
        ("datastar-selector", "#vis"),
        ("datastar-mode", "append"),
        ("datastar-namespace", "svg"),
        ("datastar-use-view-transition", "true"),
    ]
    assert response.body == b'<circle id="c" r="2"/>'  # type: ignore[attr-defined]
    plain = fetch(server, "GET", "/plain-fragment")
    assert not [n for n, _ in plain.headers if n.lower().startswith("datastar-")]  # type: ignore[attr-defined]  # defaults left off


def test_a_signals_answer_and_a_script_answer(server: tuple[str, int]) -> None:
    response = fetch(server, "GET", "/signals")
    assert response.header("content-type") == "application/json"  # type: ignore[attr-defined]
    assert response.header("datastar-only-if-missing") == "true" and json.loads(response.body) == {"theme": "dark"}  # type: ignore[attr-defined]
    response = fetch(server, "GET", "/script")
    assert response.header("content-type") == "text/javascript; charset=utf-8"  # type: ignore[attr-defined]
    assert json.loads(response.header("datastar-script-attributes")) == {"type": "module", "nonce": 'n"1'}  # type: ignore[attr-defined]
    assert response.body == b"window.ran = true"  # type: ignore[attr-defined]


def test_bad_options_of_one_shot_answers_are_refused_at_once() -> None:
    with pytest.raises(ValueError, match="selector"):
        elements_response("<p>", selector="a\r\nb")
    with pytest.raises(ValueError, match="mode"):
        elements_response("<p>", selector="#a", mode="sideways")
    with pytest.raises(ValueError, match="latin-1"):
        elements_response("<p>", selector="#été→")
    with pytest.raises(ValueError, match="JSON"):
        signals_response("[1]")
    with pytest.raises(ValueError, match="attribute"):
        script_response("x", attributes={"a b": "1"})
