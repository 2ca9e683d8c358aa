"""The App as the front ends, its tabs and the cluster see it while it runs: the host.

What a running app is asked for (its clock, background tasks, a client's address, an error
report, its live tabs) is this base class of :class:`pyvia.App`, apart from what an app declares
(``pyvia/app.py``). Each answer comes from the runtime's parts (:mod:`pyvia.runtime`); the methods
here keep the names the App has always had.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

from pyvia.http import HandleResult, Request

if TYPE_CHECKING:
    from pyvia.assets import Bundle
    from pyvia.clock import Clock
    from pyvia.context import Context
    from pyvia.runtime import Runtime
    from pyvia.security import TrustedProxies
    from pyvia.static import StaticFiles

T = TypeVar("T")

__all__ = ["Host"]


class Host:
    """The running side of an App (its base class); the App sets these attributes."""

    runtime: Runtime
    clock: Clock | None
    #: The running loop, once started: asyncio.get_running_loop() costs a getpid() system call on 3.11.
    loop: asyncio.AbstractEventLoop | None
    background_tasks: set[Any]
    proxies: TrustedProxies
    started_at: float
    started_wall: float

    # --- what the front ends, the tabs and the cluster ask of a running app --------------------------

    def session_id(self, request: Request) -> str | None:
        """The browser session of ``request`` (for middleware: ``app.session_data(app.session_id(r))``)."""
        return self.runtime.sessions.of(request)

    def now(self) -> float:
        """The app clock's time in seconds (monotonic; a manual clock under pyvia.testing)."""
        if self.clock is None:
            raise RuntimeError("the app has not been started; run it with app.run() or pyvia.testing")
        return self.clock.now()

    def wall_time(self) -> float:
        """Seconds since the epoch, moving with the app clock (so a manual clock moves it too):
        what a context id is dated with, comparable across processes and restarts."""
        return self.started_wall + (self.now() - self.started_at)

    def spawn(self, awaitable: Awaitable[Any], ctx: Context | None = None, phase: str = "task") -> None:
        """Run a coroutine in the background; its errors are reported (against ``ctx`` and
        ``phase``, when a tab's code runs it), never fatal."""

        async def guarded() -> None:
            try:
                await awaitable
            except Exception as exc:
                with contextlib.suppress(Exception):  # nothing above a background task to raise to
                    self.runtime.reporting.report(exc, ctx, phase)

        task = self.create_task(guarded())
        self.background_tasks.add(task)
        task.add_done_callback(self.background_tasks.discard)

    def create_task(self, coro: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
        """A task on the app's loop (the one it was started on), even from a callback outside it."""
        if self.loop is not None:
            return self.loop.create_task(coro)
        return asyncio.ensure_future(coro)

    def client_address(self, request: Request) -> str:
        """The client's address: the peer's, or what a trusted proxy says it is."""
        return self.proxies.client_address(request)

    @property
    def is_running(self) -> bool:
        """Whether the app was started and not stopped since (its sweep is armed)."""
        return self.runtime.registry.sweep_handle is not None

    # --- the runtime's state, as the App has always shown it ------------------------------------------

    @property
    def contexts(self) -> dict[str, Context]:
        """Every live tab of this worker, by context id."""
        return self.runtime.registry.contexts

    @property
    def connected(self) -> dict[str, Context]:
        """The tabs of this worker whose stream is open, by context id."""
        return self.runtime.registry.connected

    @property
    def waiting(self) -> dict[str, Context]:
        """The page contexts of this worker still waiting for their stream, by context id."""
        return self.runtime.registry.waiting

    @property
    def evicted_waiting(self) -> int:
        """Page contexts destroyed unconnected because more than ``max_waiting_contexts`` waited."""
        return self.runtime.registry.evicted_waiting

    def destroy(self, ctx: Context) -> None:
        """Destroy a context now: timers stop, cleanup hooks run, its stream ends."""
        self.runtime.registry.destroy(ctx)

    def handle(self, request: Request) -> HandleResult:
        """Answer one request (:mod:`pyvia.runtime.dispatch`): a Response, a StreamResponse, or an
        awaitable of one when user code is asynchronous."""
        return self.runtime.dispatch.handle(request)

    @property
    def bundle(self) -> Bundle:
        """The Datastar bundle the pages load (read at the first use)."""
        return self.runtime.assets.bundle

    @property
    def static(self) -> StaticFiles | None:
        """The files of ``static_dir``, once started."""
        return self.runtime.assets.static

    @property
    def errors(self) -> int:
        """Errors from user code so far (each reported once, to the log and the on_error observers)."""
        return self.runtime.reporting.errors

    def report(self, exc: BaseException, ctx: Context | None, phase: str, *, reraise: bool = True) -> None:
        self.runtime.reporting.report(exc, ctx, phase, reraise=reraise)

    def regenerate_session(self, ctx: Context) -> str:
        """Give ``ctx``'s browser a new session id (at login or logout); return it.

        Every live tab of the old session moves to the new one, with its session data and session
        scope; the old cookie is still honoured for 2 s so requests already in flight succeed.
        """
        return self.runtime.sessions.regenerate(ctx)

    @property
    def persists_in_db(self) -> bool:
        """Shared state is kept in the app's database across graceful restarts: ``persist_in_db``
        is on and no engine holds the state (one worker)."""
        return self.runtime.persistence.in_db

    async def restore_from_db(self) -> None:
        """Read back what the last graceful stop kept in the database (``startup`` calls it)."""
        await self.runtime.persistence.restore_from_db()
