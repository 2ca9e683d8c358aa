"""A tab over raw sockets on the native server: page, stream, actions, and SSE parsed as a browser reads it."""

from __future__ import annotations

import html
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from urllib.parse import quote

from tests.helpers import RawClient

SEED = re.compile(r'data-signals="([^"]*)"')


@dataclass
class SseEvent:
    """One SSE block: its type ("" for an id-only block), id, retry and data lines, in order."""

    type: str
    id: str | None = None
    retry: str | None = None
    data: list[str] = field(default_factory=list)

    def canonical(self) -> tuple[str, str | None, str | None, list[str], list[str]]:
        """What the client reads, whatever the order of the option lines: the order of the
        ``elements``/``signals`` lines is kept (they are joined), the others are sorted."""
        joined = [line for line in self.data if line.startswith(("elements ", "signals "))]
        options = sorted(line for line in self.data if not line.startswith(("elements ", "signals ")))
        return self.type, self.id, self.retry, options, joined


def parse_sse(text: bytes | str) -> list[SseEvent]:
    """Every complete block of ``text`` (comments skipped), as Datastar's parser splits them."""
    raw = text.decode() if isinstance(text, bytes) else text
    out = []
    for block in raw.split("\n\n")[:-1]:
        event = SseEvent("")
        for line in block.split("\n"):
            if not line or line.startswith(":"):
                continue
            name, _, value = line.partition(": ")
            if name == "event":
                event.type = value
            elif name == "id":
                event.id = value
            elif name == "retry":
                event.retry = value
            elif name == "data":
                event.data.append(value)
        if event.type or event.id is not None:
            out.append(event)
    return out


class WireTab:
    """A page of a running server, its stream read chunk by chunk, its actions posted."""

    def __init__(self, host: str, port: int, path: str = "/") -> None:
        self.host, self.port = host, port
        with RawClient(host, port) as client:
            client.send(f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode())
            page = client.read_response()
        assert page.status == 200, page
        self.page = page.body.decode()
        self.seed = json.loads(html.unescape(SEED.search(self.page).group(1)))  # type: ignore[union-attr]
        self.ctx = self.seed["via_ctx"]
        self.cookie = (page.header("set-cookie") or "").split(";", 1)[0]
        self.stream: RawClient | None = None
        self.last_event_id: str | None = None
        #: Every event received on any of this tab's streams (id-only blocks included), in order.
        self.received: list[SseEvent] = []
        self._pending = b""

    def open_stream(self, *, last_event_id: str | None = None) -> int:
        """Open the stream (with ``last-event-id`` as Datastar's retries send it); return the status."""
        client = RawClient(self.host, self.port)
        query = quote(json.dumps({"via_ctx": self.ctx}))
        resume = f"last-event-id: {last_event_id}\r\n" if last_event_id else ""
        client.send(
            f"GET /_sse?datastar={query} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
            f"Cookie: {self.cookie}\r\n{resume}\r\n".encode()
        )
        head = client.read_head()
        self.stream = client
        self._pending = b""
        return head.status

    def read_frame(self) -> list[SseEvent]:
        """The events of the next chunk, which must hold whole events (one frame), ids noted."""
        assert self.stream is not None
        chunk = self._pending + self.stream.read_chunk()
        events = parse_sse(chunk)
        self._pending = chunk[chunk.rfind(b"\n\n") + 2 :] if b"\n\n" in chunk else chunk
        assert self._pending == b"", f"a frame split across writes: {chunk!r}"
        for event in events:
            if event.id is not None:
                self.last_event_id = event.id
        self.received.extend(events)
        return events

    def frames(self) -> Iterator[list[SseEvent]]:
        while True:
            yield self.read_frame()

    def action(self, name: str, **signals: object) -> int:
        body = json.dumps({"via_ctx": self.ctx, **signals}).encode()
        with RawClient(self.host, self.port) as client:
            client.send(
                f"POST /_action/{name} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
                f"Origin: http://{self.host}:{self.port}\r\nCookie: {self.cookie}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode()
                + body
            )
            return client.read_response().status

    def close_stream(self) -> None:
        if self.stream is not None:
            self.stream.close()
            self.stream = None
