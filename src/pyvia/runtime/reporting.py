"""Error reporting: errors from user code logged once per kind a minute, counted and told to the
``on_error`` observers; refusals logged with their reason, throttled alike; a failed action told to its tab."""

from __future__ import annotations

import logging
import time
import typing
from typing import Any

from pyvia import protocol
from pyvia.context import Context
from pyvia.errors import ClientError, RateLimited, ServiceError, SignalTooLarge
from pyvia.forms import request_signals
from pyvia.http import Request
from pyvia.lifecycle import State
from pyvia.runtime.common import KIND_ACTION, KIND_BEACON, KIND_PASSED, KIND_REVIVAL, KIND_STREAM

if typing.TYPE_CHECKING:
    from pyvia.app import App
    from pyvia.runtime import Runtime

log = logging.getLogger("pyvia")
#: A kind of error from user code is logged with its traceback at most once in this many seconds.
ERROR_LOG_INTERVAL = 60.0
ERRORS_REMEMBERED = 256
#: Requests a tab makes: a refusal of one is a user's page that did not get what it asked for.
TAB_KINDS = frozenset({KIND_ACTION, KIND_STREAM, KIND_REVIVAL, KIND_BEACON, KIND_PASSED})


class Reporting:
    """Logs, counts and tells the observers of errors from user code; logs refusals."""

    def __init__(self, app: App, rt: Runtime) -> None:
        self.app = app
        self.rt = rt
        self.errors = 0
        #: (phase, where, error type, message) -> [when its traceback was last logged, repeats since]
        self.errors_seen: dict[tuple[str, ...], list[Any]] = {}

    def report(
        self, exc: BaseException, ctx: Context | None, phase: str, *, reraise: bool = True, where: str | None = None
    ) -> None:
        """Log an error from user code once, tell the on_error observers, never let it escape
        (except to a test that asked for it with ``raise_server_exceptions``). ``where``: what
        failed, when it is not a tab (a page view's ``GET /path``); else the tab's route."""
        self.errors += 1
        if where is None:
            where = ctx.route.pattern if ctx is not None else "app"
        if self.app.config.dev:
            self.app.dev_log.add(phase, where, f"{type(exc).__name__}: {exc}")
        self.log_error(exc, phase, where)
        for fn in self.app.error_hooks:
            try:
                fn(exc, ctx, phase)
            except Exception:
                log.exception("an on_error observer failed")
        if reraise and self.app.raise_server_exceptions:
            raise exc

    def tell_the_tab(self, exc: BaseException, request: Request) -> None:
        """An action of a tab failed: show the tab what happened, in its words (pyvia.alerts). The
        status alone reaches the page too (its answer); this says more where the server knows more."""
        ctx = context_of(request, self.app)
        if ctx is None or ctx.state is State.DESTROYED:
            return
        messages = ctx.route.messages
        if isinstance(exc, RateLimited):
            wait = next((v for k, v in exc.headers if k == "retry-after"), "1")
            text = f"{messages['429']} (wait {wait} s)"
        elif isinstance(exc, ClientError):
            text = (
                exc.public_message
                if exc.public_message != type(exc).public_message
                else messages.get(str(exc.status), messages["default"])
            )
        elif isinstance(exc, ServiceError):
            text = messages.get(str(exc.status), messages["default"])
        else:
            text = messages["500"]
        given_back = (
            ctx.posted_back(request.signals, refused=isinstance(exc, SignalTooLarge)) if request.signals else None
        )
        ctx.show_error(text, given_back)

    def log_refusal(self, request: Request, exc: ClientError) -> None:
        """One line per refusal with its reason: at WARNING when a tab's request was refused (the
        user's page is affected), at INFO for pages and routes. Refusals come in floods (a
        rate-limited client, a crawler): the same kind is logged once a minute, with its count.
        A value over its ``max_length`` is of a kind per signal (declared names: a bounded set),
        so the second input that is too large is logged too."""
        level = logging.WARNING if request.kind in TAB_KINDS else logging.INFO
        key = (
            "refusal",
            request.kind or "request",
            type(exc).__name__,
            str(exc.status),
            str(getattr(exc, "signal", "")),
        )
        now = self.app.clock.now() if self.app.clock is not None else time.monotonic()
        seen = self.errors_seen.get(key)
        if seen is not None and now - seen[0] < ERROR_LOG_INTERVAL:
            seen[1] += 1
            log.debug("%s %s -> %d %s", request.method, request.path, exc.status, exc.detail)
            return
        if len(self.errors_seen) >= ERRORS_REMEMBERED:
            self.errors_seen.clear()
        self.errors_seen[key] = [now, 0]
        more = ""
        if seen is not None and seen[1]:
            more = f" (and {seen[1]} more like it in the last {int(now - seen[0])} s)"
        log.log(level, "%s %s -> %d %s%s", request.method, request.path, exc.status, exc.detail, more)

    def log_error(self, exc: BaseException, phase: str, where: str) -> None:
        """One traceback per kind of error a minute: a timer that keeps failing, or every tab
        hitting the same bug, would otherwise fill the log with copies. The repeats are counted
        and said with the next traceback."""
        key = (phase, where, type(exc).__name__, str(exc)[:200])
        now = self.app.clock.now() if self.app.clock is not None else time.monotonic()
        seen = self.errors_seen.get(key)
        if seen is not None and now - seen[0] < ERROR_LOG_INTERVAL:
            seen[1] += 1
            log.debug("error in %s of %s (again): %s: %s", phase, where, type(exc).__name__, exc)
            return
        repeats = seen[1] if seen is not None else 0
        if len(self.errors_seen) >= ERRORS_REMEMBERED:
            self.errors_seen.clear()
        self.errors_seen[key] = [now, 0]
        if repeats:
            log.error(
                "error in %s of %s (and %d more like it in the last %d s)",
                phase,
                where,
                repeats,
                int(now - seen[0]) if seen is not None else 0,
                exc_info=exc,
            )
        else:
            log.error("error in %s of %s", phase, where, exc_info=exc)


def context_of(request: Request, app: App) -> Context | None:
    """The tab a failed action or stream belonged to, for error reports (None for pages)."""
    if request.kind not in (KIND_ACTION, KIND_STREAM):
        return None
    try:
        signals = request_signals(request, request.form)
    except ClientError:
        return None
    ctx_id = signals.get(protocol.CONTEXT_SIGNAL)
    return app.contexts.get(ctx_id) if isinstance(ctx_id, str) else None
