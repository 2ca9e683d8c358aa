"""The ownership seam: which process holds a tab, and what a request for a tab held elsewhere does.

In one process every tab is here: :data:`LOCAL_OWNERSHIP` holds no directory, knows no other
owner and runs the app timers. With several workers the cluster's link
(``pyvia.cluster.link.ClusterLink``) is the ownership: it claims and releases tabs in the
engine's directory, finds a tab's owner, passes it the connection, relays or forwards an action
to it, takes a tab over from it, and says whether app timers run here."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from pyvia.http import Request, Response

__all__ = ["LOCAL_OWNERSHIP", "LocalOwnership", "Ownership"]


class Ownership(Protocol):
    """What the runtime asks about where tabs are (see the module docstring)."""

    @property
    def shared(self) -> bool:
        """Whether other processes hold tabs of this app too: a tab not here may be elsewhere."""

    def claim(self, ctx_id: str, *, wait: bool = False) -> None:
        """This process holds the tab now (``wait``: the page waits until others can find it)."""

    def release(self, ctx_id: str) -> None:
        """The tab is destroyed here."""

    async def owner(self, ctx_id: str, *, cached: bool = True) -> str | None:
        """The other process holding ``ctx_id``, else None."""

    async def pass_connection(self, owner: str, request: Request, *, balanced: bool = False) -> bool:
        """Hand the request's connection to ``owner``; True once it answers there."""

    def relay(
        self, ctx_id: str, request: Request, timeout: float, answer: Callable[[Response | Exception | None], None]
    ) -> bool:
        """Send an action straight to the tab's known owner; ``answer`` gets the response, None
        (the long way: :meth:`forward` or a revival) or the failure. False when nothing was sent."""

    async def forward(self, ctx_id: str, request: Request, timeout: float) -> Response | None:
        """The owner's answer to ``request``; None when no live process holds the tab."""

    async def take_over(self, owner: str, ctx_id: str, session_hash: str) -> dict[str, Any] | None:
        """Ask ``owner`` to let the tab go: its tab state, or None."""

    def stop_taking_connections(self) -> None:
        """The app drains: refuse the connections other processes pass from now on."""

    def remote_count(self, scope: str) -> int:
        """Open tabs in ``scope`` (a name or pattern) held by other processes."""

    @property
    def is_timer_leader(self) -> bool:
        """Whether the app's timers run in this process."""


class LocalOwnership:
    """One process: every tab is here, nobody else to ask."""

    __slots__ = ()

    shared = False
    is_timer_leader = True

    def claim(self, ctx_id: str, *, wait: bool = False) -> None:
        pass

    def release(self, ctx_id: str) -> None:
        pass

    async def owner(self, ctx_id: str, *, cached: bool = True) -> str | None:
        return None

    async def pass_connection(self, owner: str, request: Request, *, balanced: bool = False) -> bool:
        return False

    def relay(
        self, ctx_id: str, request: Request, timeout: float, answer: Callable[[Response | Exception | None], None]
    ) -> bool:
        return False

    async def forward(self, ctx_id: str, request: Request, timeout: float) -> Response | None:
        return None

    async def take_over(self, owner: str, ctx_id: str, session_hash: str) -> dict[str, Any] | None:
        return None

    def stop_taking_connections(self) -> None:
        pass

    def remote_count(self, scope: str) -> int:
        return 0


#: The ownership of every app until a cluster's link replaces it (``App.share_through``).
LOCAL_OWNERSHIP: Ownership = LocalOwnership()
