"""What code outside any tab reaches of an App: shared signals, session data, tabs, broadcasts.

Timers, background tasks and plain routes have no ``c``; they use these methods of the App (this
is its base class), each a thin, checked entry to the scopes (:mod:`pyvia.scopes`), the
broadcaster (:mod:`pyvia.broadcast`) and the shared store (:mod:`pyvia.sharing`).
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

from pyvia import protocol
from pyvia.config import seconds_of
from pyvia.errors import DeclarationError, PyviaDeprecationWarning
from pyvia.lifecycle import State
from pyvia.scopes import GLOBAL, ROUTE, SESSION, TAB, check_broadcast_target, check_custom
from pyvia.signals import check_name

if TYPE_CHECKING:
    from pyvia.app import App
    from pyvia.broadcast import Broadcaster
    from pyvia.context import Context
    from pyvia.runtime.ownership import Ownership
    from pyvia.scopes import ScopeRegistry, SharedSignal
    from pyvia.sharing import SharedStore
    from pyvia.state import SessionData, SessionStore
    from pyvia.tab_output import TabOutput

__all__ = ["AppShared"]


class AppShared:
    """The App's shared state as code outside a tab sees it (a base class of :class:`pyvia.App`)."""

    scopes: ScopeRegistry
    broadcaster: Broadcaster
    store: SharedStore
    ownership: Ownership
    rendering: TabOutput | None
    sessions: SessionStore
    mounts: list[tuple[str, App]]

    def broadcast(self, scope: str) -> None:
        """Mark a scope (``"global"``, ``"route:/chat"``, ``"room:lobby"``, ``"room:*"``) for the next flush
        (on every worker and node)."""
        check_broadcast_target(scope)
        for state in self.scopes.matching(scope):
            self.broadcaster.mark(state)
        self.store.broadcast(scope)

    def patch_elements(
        self, scope: str, html: str, selector: str | None = None, mode: str = "outer", *, namespace: str = "html"
    ) -> None:
        """Patch part of the page of every tab in ``scope`` (a name or ``*`` pattern), on every
        worker and node, as ``c.patch_elements`` does for one tab: one small frame where a broadcast
        would render every tab's view (a card of a board of 10,000 changed). The views must render
        what the patches make: a tab that reconnects past its missed frames gets its view again."""
        check_broadcast_target(scope)
        if mode not in ("outer", "replace") and selector is None:
            raise DeclarationError(f"patch_elements mode {mode!r} needs a selector")
        frame = protocol.patch_elements(html, selector, mode, namespace=namespace)
        self.deliver_to_scope(scope, frame)
        self.store.patch_scope(scope, frame)

    def deliver_to_scope(self, scope: str, frame: bytes) -> None:
        """Send ``frame`` to this worker's tabs of ``scope`` (another worker's patch lands here too)."""
        for state in self.scopes.matching(scope):
            for ctx in list(state.members.values()):
                ctx.send_frame(frame, None)

    def flush_broadcasts(self) -> int:
        """Send every marked scope now, ignoring the tick and throttles; return the tabs written
        (mounted apps included)."""
        return self.broadcaster.flush(force=True) + sum(m.flush_broadcasts() for _, m in self.mounts)

    def broadcast_throttle(
        self, scope: str, seconds: float | None = None, *, min_interval_ms: float | None = None
    ) -> None:
        """Render ``scope`` (a name or ``*`` pattern) at most once every ``seconds``; the last state
        always goes out. ``min_interval_ms=`` is the deprecated spelling in milliseconds."""
        seconds = seconds_of("broadcast_throttle", seconds, min_interval_ms, "min_interval_ms")
        if scope in (TAB, ROUTE, SESSION):
            raise DeclarationError(f"broadcast_throttle needs a concrete scope or pattern, not {scope!r}")
        check_broadcast_target(scope)
        self.broadcaster.throttle(scope, seconds)

    def signal(
        self, initial: Any, name: str, *, scope: str, writable: bool = False, max_length: int | None = None
    ) -> SharedSignal[Any]:
        """A shared signal reached from outside any tab (timers, background tasks), like ``c.signal``.

        ``scope`` is concrete: ``"global"``, ``"route:/path"``, ``"room:lobby"``. The scope is kept
        even without members while the app holds it this way. Server-owned unless ``writable``,
        as every signal; a page declaring it must declare it the same way.
        """
        if scope in (TAB, ROUTE, SESSION):
            raise DeclarationError(f"app.signal needs a concrete scope, not {scope!r}")
        if not scope.startswith(("route:", "session:")) and scope != GLOBAL:
            check_custom(scope)
        check_name("signal", name, f"scope {scope!r}")
        state = self.scopes.state(scope)
        state.kept = True
        return state.signal(name, initial, writable=writable, max_length=max_length)

    def session_data(self, session_id: str) -> SessionData:
        return self.sessions.get(session_id)

    def local_clients(self, scope: str = GLOBAL) -> list[Context]:
        """This worker's tabs with an open stream in ``scope`` (a concrete name or a ``*`` pattern).

        With several workers or nodes the others' tabs are objects in other processes: count
        them with :meth:`count_clients`, which covers every worker."""
        seen: dict[str, Context] = {}
        for state in self.scopes.matching(scope):
            for ctx in state.members.values():
                if ctx.state is State.CONNECTED:
                    seen[ctx.id] = ctx
        return list(seen.values())

    def clients(self, scope: str = GLOBAL) -> list[Context]:
        """Renamed :meth:`local_clients` (it lists this worker's tabs only); goes in 0.2."""
        warnings.warn(
            "app.clients() lists this worker's tabs only and is now app.local_clients(); "
            "app.count_clients() counts the tabs of every worker",
            PyviaDeprecationWarning,
            stacklevel=2,
        )
        return self.local_clients(scope)

    def count_clients(self, scope: str = GLOBAL) -> int:
        """Tabs with an open stream in ``scope``, on every worker and node (:meth:`local_clients`
        lists this worker's). The other workers' counts are as they last told them (within 250 ms)."""
        local = len(self.local_clients(scope))
        return local + self.ownership.remote_count(scope)
