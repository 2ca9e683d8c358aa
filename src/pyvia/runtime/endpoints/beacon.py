"""The close beacon: a closing page tells its tab to wait only for the cleanup grace."""

from __future__ import annotations

import logging
import typing

from pyvia.errors import MethodNotAllowed
from pyvia.http import Request, Response
from pyvia.lifecycle import State

if typing.TYPE_CHECKING:
    from pyvia.app import App
    from pyvia.runtime import Runtime

log = logging.getLogger("pyvia")


class Beacon:
    """Answers the close beacon a page sends as it unloads."""

    def __init__(self, app: App, rt: Runtime) -> None:
        self.app = app
        self.rt = rt

    def close(self, request: Request) -> Response:
        if request.method != "POST":
            raise MethodNotAllowed(headers=[("allow", "POST")])
        self.rt.dispatch.check_origin(request)
        ctx_id = request.body.decode(errors="replace").strip()
        ctx = self.rt.registry.contexts.get(ctx_id)
        if ctx is not None and self.rt.sessions.same(ctx, self.rt.sessions.of(request)):
            ctx.last_action = 0.0  # a closed tab waits only for the cleanup grace, not for a reconnect
            if ctx.state is State.DISCONNECTED:  # the stream closed first: shorten its deadline now
                self.rt.registry.set_deadline(ctx, min(ctx.deadline, self.app.now() + self.app.config.cleanup_delay))
        return Response(200)
