"""``pyvia.asgi`` driven by hand-written ASGI messages: what the core is given, what is sent back."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from types import SimpleNamespace
from typing import Any

import pytest

from pyvia import App, Request, Response
from pyvia.asgi import MAX_BODY, ASGIApp, asgi
from pyvia.http import StreamResponse, StreamSink
from pyvia.protocol import SSE_HEADERS


class Peer:
    """The server side of one ASGI call: queues what ``receive`` gives, records what is sent.

    ``hold`` makes every ``http.response.body`` send wait until :meth:`release`, as a server's
    flow control does when the client stops reading.
    """

    def __init__(self, *messages: dict[str, Any], hold: bool = False) -> None:
        self.inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        for message in messages:
            self.inbox.put_nowait(message)
        self.sent: list[dict[str, Any]] = []
        self.gate = asyncio.Event()
        if not hold:
            self.gate.set()
        self.fail_with: BaseException | None = None

    async def receive(self) -> dict[str, Any]:
        return await self.inbox.get()

    async def send(self, message: dict[str, Any]) -> None:
        if self.fail_with is not None:
            raise self.fail_with
        if message["type"] == "http.response.body":
            await self.gate.wait()
        self.sent.append(message)

    def release(self) -> None:
        self.gate.set()

    def disconnect(self) -> None:
        self.inbox.put_nowait({"type": "http.disconnect"})

    @property
    def status(self) -> int:
        return int(self.sent[0]["status"])

    @property
    def headers(self) -> dict[bytes, bytes]:
        return dict(self.sent[0]["headers"])

    @property
    def body(self) -> bytes:
        return b"".join(m.get("body", b"") for m in self.sent[1:])


def http_scope(
    path: str = "/",
    method: str = "GET",
    *,
    headers: list[tuple[bytes, bytes]] | None = None,
    query: bytes = b"",
    root_path: str = "",
    **extra: Any,
) -> dict[str, Any]:
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": query,
        "root_path": root_path,
        "headers": headers if headers is not None else [(b"host", b"testserver")],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 80),
        **extra,
    }


def body(data: bytes = b"", more: bool = False) -> dict[str, Any]:
    return {"type": "http.request", "body": data, "more_body": more}


def call(adapter: ASGIApp, scope: dict[str, Any], peer: Peer) -> Awaitable[None]:
    return adapter(scope, peer.receive, peer.send)  # type: ignore[arg-type]


def run(adapter: ASGIApp, scope: dict[str, Any], *messages: dict[str, Any]) -> Peer:
    """One exchange, start to end, on a fresh event loop."""

    async def main() -> Peer:
        peer = Peer(*messages)
        await call(adapter, scope, peer)
        return peer

    return asyncio.run(main())


def echo_app(**options: Any) -> App:
    """Answers every request with what the core was given (through the 404 handler)."""
    app = App(**options)

    @app.not_found
    def seen(request: Request) -> Response:
        return Response.json(
            {
                "method": request.method,
                "path": request.path,
                "query": request.query_string,
                "headers": list(request.headers),
                "body": request.body.decode("latin-1"),
                "client": request.client,
                "scheme": request.scheme,
            }
        )

    return app


def echoed(peer: Peer) -> dict[str, Any]:
    import orjson

    return orjson.loads(peer.body)  # type: ignore[no-any-return]


# --- requests ------------------------------------------------------------------------------------


def test_the_core_gets_the_request_as_the_native_server_builds_it() -> None:
    scope = http_scope(
        "/caf\u00e9 au lait",
        "POST",
        query=b"q=%C3%A9t%C3%A9&x",
        headers=[(b"Host", b"example.org"), (b"X-Name", b"caf\xe9"), (b"cookie", b"a=1"), (b"cookie", b"b=2")],
        scheme="https",
        client=("192.0.2.7", 4444),
    )
    peer = run(asgi(echo_app()), scope, body(b"one,", more=True), body(b"", more=True), body(b"two"))
    assert echoed(peer) == {
        "method": "POST",
        "path": "/caf\u00e9 au lait",
        "query": "q=%C3%A9t%C3%A9&x",
        "headers": [["host", "example.org"], ["x-name", "caf\u00e9"], ["cookie", "a=1"], ["cookie", "b=2"]],
        "body": "one,two",
        "client": "192.0.2.7",
        "scheme": "https",
    }


def test_a_request_without_client_or_scheme_gets_defaults() -> None:
    scope = http_scope("/x")
    del scope["scheme"], scope["client"]
    seen = echoed(run(asgi(echo_app()), scope, body()))
    assert (seen["client"], seen["scheme"]) == ("", "http")


@pytest.mark.parametrize(
    ("path", "root_path", "expected"),
    [
        ("/live/x", "/live", "/x"),  # Starlette >= 0.33, uvicorn --root-path: the prefix stays in path
        ("/x", "/live", "/x"),  # older Starlette: the prefix was taken off path
        ("/live", "/live", "/"),
        ("/live/", "/live", "/"),
        ("/live/x", "/live/", "/x"),
        ("/lively", "/live", "/lively"),  # not a path segment: kept
        ("/a/live/x", "/a/live", "/x"),  # nested mounts
    ],
)
def test_the_mount_prefix_is_stripped_in_both_conventions(path: str, root_path: str, expected: str) -> None:
    adapter = asgi(echo_app(base_path=root_path.rstrip("/") or "/"))
    assert echoed(run(adapter, http_scope(path, root_path=root_path), body()))["path"] == expected


@pytest.mark.parametrize(
    ("root_path", "base_path", "path", "expected"),
    [
        (None, "/live", "/live/x", "/x"),  # default: the app's base_path, for proxies that keep the prefix
        (None, "/live", "/x", "/x"),  # a proxy that strips it
        ("", "/live", "/live/x", "/live/x"),  # turned off
        ("/api", "/", "/api/x", "/x"),
    ],
)
def test_without_a_scope_root_path_the_adapter_strips_its_own(
    root_path: str | None, base_path: str, path: str, expected: str
) -> None:
    adapter = ASGIApp(echo_app(base_path=base_path), root_path=root_path)
    assert echoed(run(adapter, http_scope(path), body()))["path"] == expected


def test_a_mount_prefix_the_app_does_not_know_is_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    adapter = asgi(echo_app())
    with caplog.at_level(logging.WARNING, logger="pyvia.asgi"):
        run(adapter, http_scope("/live/x", root_path="/live"), body())
        run(adapter, http_scope("/live/y", root_path="/live"), body())
    warnings = [r.getMessage() for r in caplog.records if r.name == "pyvia.asgi"]
    assert warnings == [
        "pyvia app mounted at '/live' but its base_path is '/': the URLs it gives the browser "
        "(stream, actions, bundle) miss the prefix; create it with App(base_path='/live')"
    ]


def test_bad_options_are_refused() -> None:
    app = echo_app()
    with pytest.raises(ValueError, match="root_path='live'"):
        ASGIApp(app, root_path="live")
    with pytest.raises(ValueError, match="max_body=-1"):
        ASGIApp(app, max_body=-1)
    with pytest.raises(ValueError, match="shutdown_budget=0"):
        ASGIApp(app, shutdown_budget=0)
    assert repr(ASGIApp(app, root_path="/live/")).endswith("root_path='/live')")


# --- body limit ----------------------------------------------------------------------------------


def test_a_declared_length_over_the_limit_is_answered_413_without_reading() -> None:
    scope = http_scope("/x", "POST", headers=[(b"host", b"h"), (b"content-length", b"%d" % (MAX_BODY + 1))])
    peer = run(asgi(echo_app()), scope)  # nothing to receive: reading would hang
    assert peer.status == 413 and peer.body == b"Content Too Large"
    assert peer.headers[b"connection"] == b"close"
    assert peer.headers[b"content-length"] == b"17"


@pytest.mark.parametrize("length", [b"0" * 4400 + b"5", "\u00b2".encode(), b"9" * 30])
def test_a_content_length_of_any_text_is_never_a_500(length: bytes) -> None:
    scope = http_scope("/x", "POST", headers=[(b"host", b"h"), (b"content-length", length)])
    peer = run(asgi(echo_app()), scope, body(b"12345"))
    assert peer.status in (200, 413)  # thousands of leading zeros, a superscript digit, 30 nines


def test_a_streamed_body_over_the_limit_is_cut_off() -> None:
    peer = run(ASGIApp(echo_app(), max_body=10), http_scope("/x", "POST"), body(b"123456", True), body(b"78901"))
    assert peer.status == 413
    peer = run(ASGIApp(echo_app(), max_body=11), http_scope("/x", "POST"), body(b"123456", True), body(b"78901"))
    assert echoed(peer)["body"] == "12345678901"


def test_over_http2_the_413_carries_no_connection_header() -> None:
    scope = http_scope("/x", "POST", headers=[(b"content-length", b"20")], http_version="2")
    peer = run(ASGIApp(echo_app(), max_body=10), scope)
    assert peer.status == 413 and b"connection" not in peer.headers


def test_a_client_gone_before_its_body_ends_gets_nothing() -> None:
    peer = run(asgi(echo_app()), http_scope("/x", "POST"), body(b"12", True), {"type": "http.disconnect"})
    assert peer.sent == []


# --- responses -----------------------------------------------------------------------------------


def routes_app() -> App:
    app = App()

    @app.route("GET", "/text")
    def text() -> Response:
        return Response.text(
            "hello",
            headers=[
                ("Content-Length", "999"),
                ("Connection", "keep-alive"),
                ("Transfer-Encoding", "chunked"),
                ("X-Thing", "1"),
            ],
        )

    @app.route("GET", "/empty")
    def empty() -> Response:
        return Response(204, [("x-a", "b")])

    @app.route("GET", "/split")
    def split() -> Response:
        return Response.text("x", headers=[("x-evil", "a\r\nset-cookie: b=c")])

    @app.route("GET", "/badname")
    def badname() -> Response:
        return Response.text("x", headers=[("x evil", "a")])

    @app.route("GET", "/nonlatin")
    def nonlatin() -> Response:
        return Response.text("x", headers=[("x-a", "\u20ac")])

    return app


def test_the_app_s_framing_headers_are_replaced_by_the_real_length() -> None:
    peer = run(asgi(routes_app()), http_scope("/text"), body())
    assert peer.sent[0]["headers"] == [
        (b"content-type", b"text/plain; charset=utf-8"),
        (b"x-thing", b"1"),
        (b"content-length", b"5"),
    ]
    assert peer.body == b"hello"


def test_head_keeps_the_length_and_drops_the_body() -> None:
    peer = run(asgi(routes_app()), http_scope("/text", "HEAD"), body())
    assert peer.headers[b"content-length"] == b"5" and peer.body == b""


def test_no_content_has_no_length() -> None:
    peer = run(asgi(routes_app()), http_scope("/empty"), body())
    assert peer.status == 204 and peer.sent[0]["headers"] == [(b"x-a", b"b")] and peer.body == b""


@pytest.mark.parametrize("path", ["/split", "/badname", "/nonlatin"])
def test_a_header_that_could_split_the_response_becomes_a_500(path: str, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR, logger="pyvia.asgi"):
        peer = run(asgi(routes_app()), http_scope(path), body())
    assert peer.status == 500 and peer.body == b"Internal Server Error"
    assert b"x-evil" not in peer.headers and b"set-cookie" not in peer.headers
    assert any("invalid response" in r.getMessage() for r in caplog.records)


class Stub:
    """The least an App offers the adapter: config.base_path, handle, startup and shutdown."""

    def __init__(self, handle: Callable[[Request], Any]) -> None:
        self.config = SimpleNamespace(base_path="/")
        self.handle = handle
        self.started = 0
        self.stopped: list[float] = []

    async def startup(self) -> None:
        await asyncio.sleep(0)  # let a concurrent request reach the start too
        self.started += 1

    async def shutdown(self, budget: float) -> None:
        self.stopped.append(budget)


def test_an_answer_that_is_not_a_response_becomes_a_500(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR, logger="pyvia.asgi"):
        peer = run(asgi(Stub(lambda request: 42)), http_scope("/"), body())  # type: ignore[arg-type]
    assert peer.status == 500
    assert "handle() for GET / gave 42, not a response" in caplog.text


def test_an_awaitable_answer_is_awaited() -> None:
    async def later(request: Request) -> Response:
        await asyncio.sleep(0)
        return Response.text("later")

    peer = run(asgi(Stub(later)), http_scope("/"), body())  # type: ignore[arg-type]
    assert peer.body == b"later"


def test_a_failing_handle_becomes_a_500(caplog: pytest.LogCaptureFixture) -> None:
    def boom(request: Request) -> Response:
        raise RuntimeError("boom")

    with caplog.at_level(logging.ERROR, logger="pyvia.asgi"):
        peer = run(asgi(Stub(boom)), http_scope("/"), body())  # type: ignore[arg-type]
    assert peer.status == 500 and "error handling GET /" in caplog.text


def test_concurrent_first_requests_start_the_app_once() -> None:
    stub = Stub(lambda request: Response.text("ok"))
    adapter = asgi(stub)  # type: ignore[arg-type]

    async def main() -> list[Peer]:
        peers = [Peer(body()) for _ in range(5)]
        await asyncio.gather(*(call(adapter, http_scope("/"), p) for p in peers))
        return peers

    peers = asyncio.run(main())
    assert [p.body for p in peers] == [b"ok"] * 5
    assert stub.started == 1
    asyncio.run(call(adapter, http_scope("/"), Peer(body())))  # type: ignore[arg-type]
    assert stub.started == 2  # a new event loop: the app's timers must run on it


# --- lifespan and other scopes -------------------------------------------------------------------


def test_lifespan_starts_and_stops_the_app() -> None:
    stub = Stub(lambda request: Response.text("ok"))
    adapter = ASGIApp(stub, shutdown_budget=0.5)  # type: ignore[arg-type]
    peer = run(
        adapter,
        {"type": "lifespan", "asgi": {"version": "3.0"}},
        {"type": "lifespan.startup"},
        {"type": "lifespan.shutdown"},
    )
    assert [m["type"] for m in peer.sent] == ["lifespan.startup.complete", "lifespan.shutdown.complete"]
    assert (stub.started, stub.stopped) == (1, [0.5])


def test_a_failed_start_is_reported_to_the_server(tmp_path: Any) -> None:
    app = App(datastar_js=str(tmp_path / "missing.js"))
    peer = run(asgi(app), {"type": "lifespan"}, {"type": "lifespan.startup"})
    assert len(peer.sent) == 1 and peer.sent[0]["type"] == "lifespan.startup.failed"
    assert peer.sent[0]["message"].startswith("ConfigError: ")


def test_a_shutdown_over_its_budget_is_cut_short(caplog: pytest.LogCaptureFixture) -> None:
    stub = Stub(lambda request: Response.text("ok"))

    async def slow(budget: float) -> None:
        await asyncio.sleep(10)

    stub.shutdown = slow  # type: ignore[method-assign]
    with caplog.at_level(logging.WARNING, logger="pyvia.asgi"):
        peer = run(
            ASGIApp(stub, shutdown_budget=0.05),
            {"type": "lifespan"},  # type: ignore[arg-type]
            {"type": "lifespan.startup"},
            {"type": "lifespan.shutdown"},
        )
    assert peer.sent[-1]["type"] == "lifespan.shutdown.complete"
    assert "app.shutdown() did not finish within 0.05 s" in caplog.text


def test_websockets_are_refused() -> None:
    peer = run(asgi(echo_app()), {"type": "websocket", "path": "/"}, {"type": "websocket.connect"})
    assert peer.sent == [{"type": "websocket.close", "code": 1008, "reason": "pyvia serves no websockets"}]


def test_an_unknown_scope_type_is_an_error() -> None:
    with pytest.raises(ValueError, match="not 'telepathy'"):
        run(asgi(echo_app()), {"type": "telepathy"})


# --- streams -------------------------------------------------------------------------------------


class Tab:
    """A StreamResponse whose sink and close calls the test can see."""

    def __init__(self, first: bytes = b"", *, fail_open: bool = False) -> None:
        self.sink: StreamSink | None = None
        self.closed = 0
        self.first = first
        self.fail_open = fail_open

    def response(self, request: Request) -> StreamResponse:
        return StreamResponse(list(SSE_HEADERS), on_open=self._open, on_close=self._close)

    def _open(self, sink: StreamSink) -> None:
        if self.fail_open:
            raise RuntimeError("open failed")
        self.sink = sink
        if self.first:
            sink.write(self.first)

    def _close(self) -> None:
        self.closed += 1


async def turns(n: int = 5) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


def test_events_written_while_a_send_is_held_are_counted_then_sent_as_one_message() -> None:
    tab = Tab(b"first\n\n")

    async def main() -> Peer:
        peer = Peer(body(), hold=True)
        task = asyncio.ensure_future(call(asgi(Stub(tab.response)), http_scope("/_sse"), peer))  # type: ignore[arg-type]
        await turns()
        sink = tab.sink
        assert sink is not None
        assert sink.buffered == 7  # "first" is being sent: the server has not taken it yet
        sink.write(b"a\n\n")
        sink.write(b"")  # ignored
        sink.write(b"bb\n\n")
        assert sink.buffered == 7 + 3 + 4
        peer.release()
        await turns()
        assert sink.buffered == 0
        sink.write(b"c\n\n")
        assert sink.buffered == 0  # nothing holds the task: it sends this on the next turn
        await turns()
        sink.close()
        assert sink.is_closed and sink.buffered == 0
        sink.write(b"after close\n\n")  # ignored
        await task
        return peer

    peer = asyncio.run(main())
    assert peer.status == 200 and peer.headers[b"content-type"] == b"text/event-stream"
    assert [(m["body"], m["more_body"]) for m in peer.sent[1:]] == [
        (b"first\n\n", True),
        (b"a\n\nbb\n\n", True),
        (b"c\n\n", True),
        (b"", False),
    ]
    assert tab.closed == 0  # the core closed it: nothing to tell the core


def test_what_is_queued_when_the_core_closes_goes_out_with_the_end() -> None:
    class Reload(Tab):
        def _open(self, sink: StreamSink) -> None:
            sink.write(b"reload\n\n")
            sink.close()

    tab = Reload()
    peer = run(asgi(Stub(tab.response)), http_scope("/_sse"), body())  # type: ignore[arg-type]
    assert [(m["body"], m["more_body"]) for m in peer.sent[1:]] == [(b"reload\n\n", False)]
    assert tab.closed == 0


def test_a_disconnect_tells_the_core_once_and_ends_the_call() -> None:
    tab = Tab(b"first\n\n")

    async def main() -> None:
        peer = Peer(body())
        task = asyncio.ensure_future(call(asgi(Stub(tab.response)), http_scope("/_sse"), peer))  # type: ignore[arg-type]
        await turns()
        peer.disconnect()
        await asyncio.wait_for(task, 1)
        assert tab.sink is not None and tab.sink.is_closed and tab.sink.buffered == 0
        tab.sink.write(b"late\n\n")
        tab.sink.close()
        assert [m.get("body") for m in peer.sent[1:]] == [b"first\n\n"]

    asyncio.run(main())
    assert tab.closed == 1


def test_a_disconnect_while_a_send_is_held_drops_the_queue() -> None:
    tab = Tab(b"first\n\n")

    async def main() -> None:
        peer = Peer(body(), hold=True)
        task = asyncio.ensure_future(call(asgi(Stub(tab.response)), http_scope("/_sse"), peer))  # type: ignore[arg-type]
        await turns()
        assert tab.sink is not None
        tab.sink.write(b"x" * 1000)
        peer.disconnect()
        await turns()
        assert tab.sink.is_closed and tab.sink.buffered == 0
        peer.release()  # the held send returns, as uvicorn's does once the connection is lost
        await asyncio.wait_for(task, 1)
        assert [m.get("body") for m in peer.sent[1:]] == [b"first\n\n"]

    asyncio.run(main())
    assert tab.closed == 1


def test_a_send_that_raises_oserror_is_a_disconnect() -> None:
    tab = Tab(b"first\n\n")

    async def main() -> None:
        peer = Peer(body())
        task = asyncio.ensure_future(call(asgi(Stub(tab.response)), http_scope("/_sse"), peer))  # type: ignore[arg-type]
        await turns()
        peer.fail_with = ConnectionResetError("gone")
        assert tab.sink is not None
        tab.sink.write(b"x\n\n")
        await asyncio.wait_for(task, 1)

    asyncio.run(main())
    assert tab.closed == 1


def test_a_cancelled_stream_tells_the_core_and_stays_cancelled() -> None:
    tab = Tab(b"first\n\n")

    async def main() -> None:
        peer = Peer(body())
        task = asyncio.ensure_future(call(asgi(Stub(tab.response)), http_scope("/_sse"), peer))  # type: ignore[arg-type]
        await turns()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert tab.closed == 1


def test_a_stream_that_fails_to_open_is_a_500_and_closed(caplog: pytest.LogCaptureFixture) -> None:
    tab = Tab(fail_open=True)
    with caplog.at_level(logging.ERROR, logger="pyvia.asgi"):
        peer = run(asgi(Stub(tab.response)), http_scope("/_sse"), body())  # type: ignore[arg-type]
    assert peer.status == 500 and tab.closed == 1
    assert "error opening a stream" in caplog.text


def test_a_stream_with_a_bad_header_is_a_500_and_closed() -> None:
    tab = Tab()

    def bad(request: Request) -> StreamResponse:
        return StreamResponse([("x-a", "1\n2")], on_open=tab._open, on_close=tab._close)

    peer = run(asgi(Stub(bad)), http_scope("/_sse"), body())  # type: ignore[arg-type]
    assert peer.status == 500 and tab.closed == 1 and tab.sink is None
