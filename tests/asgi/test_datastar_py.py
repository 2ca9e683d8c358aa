"""Events made by the official Datastar SDK (``datastar-py``) next to pyvia's own.

There is no core method yet to send an SDK event through a tab (``c.send_raw(event)``); these
tests pin down what such a method receives: a ``str`` subclass holding whole SSE events, the
same bytes pyvia writes for the common cases, and no check against line breaks in selectors.
"""

from __future__ import annotations

from datastar_py import ServerSentEventGenerator as SSE
from datastar_py.sse import DatastarEvent

from pyvia import App, Request, protocol
from pyvia.asgi import asgi
from pyvia.datastar import DatastarResponse
from tests.asgi.servers import serving
from tests.helpers import RawClient


def parse(stream: str) -> list[tuple[str, list[str]]]:
    """Split an SSE text into (event type, data and other field lines), as a browser reads it."""
    events = []
    for block in stream.split("\n\n"):
        if not block:
            continue
        lines = block.split("\n")
        kind = next((line[len("event: ") :] for line in lines if line.startswith("event: ")), "message")
        events.append((kind, [line for line in lines if not line.startswith("event: ")]))
    return events


def test_common_events_are_byte_identical_to_pyvia_s() -> None:
    assert SSE.patch_signals({"count": 1}).encode() == protocol.patch_signals({"count": 1})
    html = '<p id="x">a\nb</p>'
    assert SSE.patch_elements(html).encode() == protocol.patch_elements(html)


def test_selector_and_mode_come_in_another_order_with_the_same_meaning() -> None:
    ours = parse(protocol.patch_elements("<p>a</p>", "#v", "inner").decode())
    theirs = parse(SSE.patch_elements("<p>a</p>", selector="#v", mode="inner"))
    assert [(k, sorted(lines)) for k, lines in ours] == [(k, sorted(lines)) for k, lines in theirs]
    ours = parse(protocol.execute_script("alert(1)").decode())
    theirs = parse(SSE.execute_script("alert(1)"))
    assert [(k, sorted(lines)) for k, lines in ours] == [(k, sorted(lines)) for k, lines in theirs]


def test_an_sdk_event_is_a_str_with_whole_events_and_optional_id_and_retry_lines() -> None:
    event = SSE.patch_signals({"n": 1}, event_id="7", retry_duration=5000, only_if_missing=True)
    assert isinstance(event, DatastarEvent) and isinstance(event, str) and event.endswith("\n\n")
    assert parse(event) == [
        ("datastar-patch-signals", ["id: 7", "retry: 5000", "data: onlyIfMissing true", 'data: signals {"n":1}'])
    ]


def test_the_sdk_lets_a_line_break_in_a_selector_forge_a_second_event() -> None:
    # pyvia's protocol.patch_elements refuses such a selector; a core send_raw must parse what it
    # is given and refuse anything but whole datastar-* events made of field lines.
    forged = SSE.patch_elements("<p>", selector='a\n\nevent: datastar-patch-signals\ndata: signals {"admin":true}')
    assert [kind for kind, _ in parse(forged)] == ["datastar-patch-elements", "datastar-patch-signals"]


def test_sdk_events_cross_the_asgi_stream_unchanged() -> None:
    events = [
        SSE.patch_elements('<div id="a">1</div>'),
        SSE.patch_signals({"x": [1, 2]}),
        SSE.remove_elements("#old"),
        SSE.execute_script("console.log('hi')"),
    ]
    app = App()

    @app.route("GET", "/sdk")
    def sdk(request: Request) -> DatastarResponse:
        return DatastarResponse(events)  # the public response type of pyvia.datastar

    with serving(asgi(app)) as server, RawClient(server.host, server.port) as client:
        client.send(b"GET /sdk HTTP/1.1\r\nHost: x\r\n\r\n")
        response = client.read_response()
    assert response.header("content-type") == "text/event-stream"
    assert response.body == "".join(events).encode()
