"""What a browser tab does, minus the browser: page view, stream connect, action POSTs.

A :class:`Browser` is one keep-alive connection with one session cookie (the cookie the first
page view sets is sent back on every later request, as a browser would). A :class:`Tab` is a
page view's context id plus its own stream connection, opened with the same cookie.
"""

from __future__ import annotations

from typing import Any

import orjson

from bench.client import (
    Connection,
    Response,
    Stream,
    boot_signals,
    build_request,
    event_signals,
    posted,
    stream_target,
)

__all__ = ["SESSION_COOKIE", "Browser", "Tab", "TabError"]

SESSION_COOKIE = "via_session_id"
_BACKLOG = 8  # events a stream may send before its connect event
_STREAM_HEADERS = [("Accept", "text/event-stream, text/html, application/json"), ("Datastar-Request", "true")]


class TabError(Exception):
    """A tab could not be opened or did not behave (bad status, missing seed, missing first event)."""


class Browser:
    """One keep-alive connection carrying page views and actions for one session."""

    def __init__(self, conn: Connection, host: str, encoding: str = "identity") -> None:
        self.conn = conn
        self.host = host
        self.cookie: str | None = None
        self._page = build_request("GET", "/", host)
        #: What the tab's streams accept (``Accept-Encoding``); identity sends no such header.
        self.encoding = encoding

    @classmethod
    async def open(cls, host: str, port: int, encoding: str = "identity") -> Browser:
        return cls(await Connection.open("127.0.0.1", port), host, encoding)

    def _cookie_headers(self) -> list[tuple[str, str]]:
        return [("Cookie", f"{SESSION_COOKIE}={self.cookie}")] if self.cookie else []

    async def reconnect(self, port: int) -> None:
        self.conn.close()
        self.conn = await Connection.open("127.0.0.1", port)

    async def page(self, timeout: float = 5.0) -> Response:
        """``GET /``; keeps the session cookie it sets."""
        response = await self.conn.request(self._page, timeout)
        if self.cookie is None:
            cookie = response.cookie(SESSION_COOKIE)
            if cookie:
                self.cookie = cookie
                self._page = build_request("GET", "/", self.host, self._cookie_headers())
        return response

    def action_request(self, name: str, signals: dict[str, Any]) -> bytes:
        """The POST Datastar sends for ``@post('/_action/<name>')``: the tab's signals as JSON, less
        the server-owned ones (``_``-prefixed ids), which Datastar never sends."""
        headers = [
            ("Origin", f"http://{self.host}"),
            ("Content-Type", "application/json"),
            ("Datastar-Request", "true"),
            *self._cookie_headers(),
        ]
        return build_request("POST", f"/_action/{name}", self.host, headers, orjson.dumps(posted(signals)))

    async def open_tab(self, port: int, timeout: float = 5.0) -> Tab:
        """Page view, then the tab's stream; returns once the stream's first event arrived."""
        response = await self.page(timeout)
        if response.status != 200:
            raise TabError(f"page view answered {response.status}")
        seed = boot_signals(response.body)
        ctx_id = seed.get("via_ctx")
        if not isinstance(ctx_id, str):
            raise TabError("page without a via_ctx seed")
        signals = dict(seed)  # what the browser's store holds; an action posts its writable part
        conn = await Connection.open("127.0.0.1", port, timeout)
        accept = [] if self.encoding == "identity" else [("Accept-Encoding", self.encoding)]
        request = build_request(
            "GET", stream_target(signals), self.host, [*_STREAM_HEADERS, *accept, *self._cookie_headers()]
        )
        opened = await conn.open_stream(request, timeout)
        if not isinstance(opened, Stream):
            conn.close()
            raise TabError(f"stream answered {opened.status} {opened.body[:120]!r}")
        tab = Tab(ctx_id, signals, opened)
        # What the tab missed between its page view and now (a view rendered for a broadcast, shared
        # signals) is written just before the connect event, so a few other events may come first.
        for _ in range(_BACKLOG):
            _, event = await opened.next_event(timeout)
            patch = event_signals(event)
            if patch is not None:
                signals.update(patch)  # the connect event also sets what the page's actions leave out
                if patch.get("_disconnected") is False:
                    return tab
            elif not event.startswith(b"event: datastar-patch-elements\n"):
                break
        opened.close()
        raise TabError(f"no connect event after the backlog; last event {event[:120]!r}")


class Tab:
    """An open tab: its context id, the signals its browser store holds (server-owned ones under
    their ``_`` ids), and its stream."""

    __slots__ = ("ctx_id", "signals", "stream")

    def __init__(self, ctx_id: str, signals: dict[str, Any], stream: Stream) -> None:
        self.ctx_id = ctx_id
        self.signals = signals
        self.stream = stream

    def close(self) -> None:
        self.stream.close()
