"""The test client: one browser for an App, in-process, with a manual clock and its own loop.

Separate from the tab because it is the part that speaks to the app (requests, cookies, the
app's start and stop, its background work), while a tab is one page's view of what came back.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any
from urllib.parse import unquote

import orjson

from pyvia.app import App
from pyvia.clock import ManualClock
from pyvia.errors import UsageError
from pyvia.http import Headers, Request, Response, StreamResponse
from pyvia.overrides import override
from pyvia.testing.tab import Tab

__all__ = ["TestClient"]

_ORIGIN = "http://testserver"


def _apps(app: App) -> Iterator[App]:
    """An app and the apps mounted in it, at any depth."""
    yield app
    for _, mounted in app.mounts:
        yield from _apps(mounted)


def _forget_tabs(app: App) -> None:
    for _, mounted in app.mounts:
        _forget_tabs(mounted)
    for ctx in list(app.contexts.values()):
        app.destroy(ctx)


#: What an app holds outside its tabs when a test client starts it: its shared signals, its
#: global state and the ids of its sessions (of each mounted app too).
_Fresh = tuple[Any, dict[str, Any], frozenset[str], list[Any]]


def _fresh_state(app: App) -> _Fresh:
    return (
        app.scopes.checkpoint(),
        app.global_state.checkpoint(),
        frozenset(sid for sid, _ in app.sessions.items()),
        [_fresh_state(mounted) for _, mounted in app.mounts],
    )


def _back_to(app: App, fresh: _Fresh) -> None:
    """The app's own state as the client found it: the next client starts as a new process of the
    same code would (what ``persist_path`` or a database kept comes back at its start)."""
    signals, global_state, sessions, mounted = fresh
    app.scopes.rollback(signals)
    app.global_state.rollback(global_state)
    app.sessions.forget_all_but(sessions)
    for (_, sub), sub_fresh in zip(app.mounts, mounted, strict=False):
        _back_to(sub, sub_fresh)


_LINE_BREAKS = frozenset("\r\n\0")


def _fits_latin1(text: str) -> bool:
    try:
        text.encode("latin-1")
    except UnicodeEncodeError:
        return False
    return True


class TestClient:
    """An in-process browser for one App, with a manual clock."""

    __test__ = False  # not a pytest test class

    def __init__(
        self,
        app: App,
        *,
        raise_server_exceptions: bool = True,
        origin: str = _ORIGIN,
        accept_encoding: str | None = None,
        settings: Mapping[str, Any] | None = None,
    ) -> None:
        """``settings`` replaces some of the app's options (``{"db_url": ...}``) for this client's
        run only: the app gets its own back at :meth:`close` (pyvia.overrides)."""
        self.app = app
        self._restore: Callable[[], None] | None = None
        #: Sent with every request, as a browser sends it (None: no header, so identity).
        self.accept_encoding = accept_encoding
        self._loop: asyncio.AbstractEventLoop | None = None
        self.origin = origin
        self.cookies: dict[str, str] = {}
        app.raise_server_exceptions = raise_server_exceptions
        # A second client on a running app is another browser: same clock, own cookies.
        self._owner = not isinstance(app.clock, ManualClock)
        if settings and not self._owner:
            raise UsageError("settings= on a second TestClient of a running app: give them to the first one")
        self._fresh: _Fresh | None = None
        if self._owner:
            self.clock = ManualClock()
            self._fresh = _fresh_state(app)
            if settings:
                self._restore = override(app, settings)
            try:
                app.start(self.clock, self.loop)
            except BaseException:
                self.loop.close()  # a refused start (a database that cannot open) leaves nothing open
                self._loop = None
                self._put_back()
                raise
            if app.persists_in_db:
                self.loop.run_until_complete(app.restore_from_db())
        else:
            assert isinstance(app.clock, ManualClock)
            self.clock = app.clock
            self._loop = app.loop  # the app's tasks (async renders) run on the first client's loop

    def __enter__(self) -> TestClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The loop async handlers run on, made on first use."""
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
        return self._loop

    def close(self) -> None:
        if self._owner:
            self.loop.run_until_complete(self.app.shutdown())
            _forget_tabs(self.app)  # as a process exit would: the next client starts clean
            if self._fresh is not None:
                _back_to(self.app, self._fresh)
            self.app.clock = None
            self._put_back()
            if self._loop is not None:
                self._loop.close()
        self._loop = None

    def _put_back(self) -> None:
        """The app's own options again, after a run with ``settings``."""
        restore, self._restore = self._restore, None
        if restore is not None:
            restore()

    def settle(self, timeout: float = 5.0) -> None:
        """Run the app's background work (async views rendering, spawned tasks) until none is left,
        for at most ``timeout`` seconds of real time; the manual clock does not move."""
        deadline = time.monotonic() + timeout
        while self.app.background_tasks and time.monotonic() < deadline:
            self.loop.run_until_complete(
                asyncio.wait(list(self.app.background_tasks), timeout=deadline - time.monotonic())
            )
            self.clock.run_due()

    def _settle_renders(self, timeout: float = 5.0) -> None:
        """Let async views that are rendering finish, so a request's frames are all in when it returns."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and any(
            ctx.pending_frames is not None for app in _apps(self.app) for ctx in app.contexts.values()
        ):
            self.loop.run_until_complete(asyncio.sleep(0.001))
            self.clock.run_due()

    # --- plain requests ----------------------------------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        *,
        body: bytes = b"",
        json: Any = None,
        headers: dict[str, str] | None = None,
        cookies: bool = True,
    ) -> Response | StreamResponse:
        path, _, query = path.partition("?")
        if "%" in path:
            path = unquote(path)  # as the servers give the core its path: percent-decoded
        base = self.app.config.base_path
        if base != "/" and path.startswith(base):
            path = "/" + path[len(base) :]  # what a mounting front end or proxy does
        hdrs = Headers([("host", "testserver")])
        if json is not None:
            body = orjson.dumps(json)
            hdrs.add("content-type", "application/json")
        if method not in ("GET", "HEAD"):
            hdrs.add("origin", self.origin)
        for k, v in (headers or {}).items():
            hdrs.add(k, v)
        if self.accept_encoding is not None:
            hdrs.add("accept-encoding", self.accept_encoding)
        if cookies and self.cookies:
            hdrs.add("cookie", "; ".join(f"{k}={v}" for k, v in self.cookies.items()))
        req = Request(method=method, path=path, query_string=query, headers=hdrs, body=body, client="127.0.0.1")
        result = self.app.handle(req)
        if inspect.isawaitable(result):
            result = self.loop.run_until_complete(result)
        self.clock.run_due()
        self._settle_renders()
        for name, value in result.headers:  # what a server cannot write fails here too, not only there
            if not _fits_latin1(name + value) or _LINE_BREAKS.intersection(value):
                raise AssertionError(
                    f"{method} {path} answered header {name}: {value!r}, which no server can write "
                    "(HTTP/1.1 heads are latin-1, one line each): a browser would get a 500"
                )
        for name, value in result.headers:
            if name.lower() == "set-cookie":
                cname, _, rest = value.partition("=")
                self.cookies[cname] = rest.split(";", 1)[0]
        return result

    def get(self, path: str, **kw: Any) -> Response:
        response = self.request("GET", path, **kw)
        assert isinstance(response, Response), "use client.open() for a page with its stream"
        return response

    def post(self, path: str, **kw: Any) -> Response:
        response = self.request("POST", path, **kw)
        assert isinstance(response, Response)
        return response

    def open(self, path: str) -> Tab:
        """Load a page and connect its stream, as a browser tab does."""
        response = self.get(path)
        if response.status != 200:
            raise AssertionError(f"GET {path} answered {response.status}: {response.body[:200]!r}")
        tab = Tab(self, path, response)
        tab.connect()
        return tab
