"""What the runtime's parts share: the framework's paths, a few answers, and the helpers that
let a handler be sync or async (a value or an awaitable of one passes through unchanged)."""

from __future__ import annotations

import asyncio
import contextlib
import enum
import functools
import inspect
from collections.abc import Callable
from typing import Any

from pyvia import protocol
from pyvia.http import Response

SSE_PATH = "/_sse"
ACTION_PREFIX = "/_action/"
CLOSE_PATH = "/_session/close"
BUNDLE_PATH = "/datastar.js"
#: At most this many records of destroyed tabs, rotated sessions and reload notices are kept.
GRAVEYARD_CAP = 100_000
#: What an action answers once its connection went to the worker holding the tab (never written).
PASSED = Response(204)

#: What a page is told when its stream is down or about to end: actions carry its snapshot.
STREAM_DOWN = {protocol.DISCONNECTED_SIGNAL: True, protocol.FILTER_SIGNAL: protocol.FILTER_DOWN}


class RequestKind(enum.StrEnum):
    """What a request is, as the dispatch decides (``request.kind``; a ``str``, so middleware may
    compare it with ``"page"``). The metrics count requests by it."""

    PAGE = "page"  #: a page view: a new tab
    ROUTE = "route"  #: a plain HTTP route
    STREAM = "stream"  #: a tab's stream opening
    ACTION = "action"  #: an action of a tab
    PASSED = "passed"  #: a stream or action whose connection went to the worker holding its tab
    REVIVAL = "revival"  #: a tab rebuilt from its signed id (its handler runs again)
    ASSET = "asset"  #: the Datastar bundle or a static file
    BEACON = "beacon"  #: the close beacon of a page being left
    DOWNLOAD = "download"  #: a one-time download a tab offered
    OPS = "ops"  #: health, readiness, metrics and the dev tools: never behind middleware


# The kinds as module names, which the request path reads: on CPython 3.11 a member read through
# its class is not specialized (EnumType defines __getattr__) and costs ~150 ns, a global ~20 ns.
KIND_PAGE = RequestKind.PAGE
KIND_ROUTE = RequestKind.ROUTE
KIND_STREAM = RequestKind.STREAM
KIND_ACTION = RequestKind.ACTION
KIND_PASSED = RequestKind.PASSED
KIND_REVIVAL = RequestKind.REVIVAL
KIND_ASSET = RequestKind.ASSET
KIND_BEACON = RequestKind.BEACON
KIND_DOWNLOAD = RequestKind.DOWNLOAD
KIND_OPS = RequestKind.OPS


#: What handlers return most, never awaitable: checked by type before ``inspect.isawaitable``
#: (whose ABC check costs more than the rest of ``then``).
_PLAIN_RESULTS = frozenset({type(None), str, bytes, dict, list, Response})


def then(result: Any, fn: Callable[[Any], Any]) -> Any:
    """Apply ``fn`` to ``result`` now, or after awaiting it if it is awaitable."""
    if type(result) not in _PLAIN_RESULTS and inspect.isawaitable(result):
        return _then_later(result, fn)
    return fn(result)


async def _then_later(result: Any, fn: Callable[[Any], Any]) -> Any:
    # Not a closure inside then(): its variables would be cells, made at every call (see "Rules
    # the parts keep" in docs/architecture.md).
    value = fn(await result)
    return await value if inspect.isawaitable(value) else value


def settle(answer: asyncio.Future[Any], result: Any) -> None:
    """Give ``answer`` the value of ``result``, now or once it is done."""
    if type(result) in _PLAIN_RESULTS or not inspect.isawaitable(result):
        answer.set_result(result)
        return
    asyncio.ensure_future(result).add_done_callback(functools.partial(_pass_on, answer))


def _pass_on(answer: asyncio.Future[Any], task: asyncio.Future[Any]) -> None:
    """Give ``answer`` what ``task`` ended with (unless its asker left)."""
    if answer.done():
        return
    if task.cancelled():
        answer.cancel()
    elif task.exception() is not None:
        answer.set_exception(task.exception())  # type: ignore[arg-type]  # checked
    else:
        answer.set_result(task.result())


async def when_done(task: asyncio.Task[Any], then: Callable[[], Any]) -> Any:
    """``then()`` once ``task`` is done, whatever it ended with."""
    with contextlib.suppress(Exception):
        await asyncio.shield(task)
    return then()


async def settled(result: Any) -> Any:
    """The value of a result that may be awaitable (handlers and middleware may be sync or async)."""
    return await result if inspect.isawaitable(result) else result


def newest(
    kept: tuple[int, dict[str, Any]] | None, sent: tuple[int, dict[str, Any]] | None
) -> tuple[int, dict[str, Any]] | None:
    """The later of two snapshots of one tab (by number; the server's own when they tie)."""
    if kept is None or (sent is not None and sent[0] > kept[0]):
        return sent
    return kept
