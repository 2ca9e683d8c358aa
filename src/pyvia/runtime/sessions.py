"""Sessions: which browser session a request is (its signed cookie), and moving a session's tabs
to a new id (``regenerate_session``, here or on another worker)."""

from __future__ import annotations

import logging
import typing
from collections import OrderedDict

from pyvia.context import Context
from pyvia.http import Request
from pyvia.runtime.common import GRAVEYARD_CAP
from pyvia.scopes import Scope
from pyvia.session import SECURE_WROTE_COOKIE, SESSION_MAX_AGE, WROTE_COOKIE, WROTE_MAX_AGE

if typing.TYPE_CHECKING:
    from pyvia.app import App
    from pyvia.runtime import Runtime

log = logging.getLogger("pyvia")
ROTATION_OVERLAP = 2.0  # seconds the old cookie still works after regenerate_session (php-via 0.14)


class Sessions:
    """The session of each request, and the rotation of a session's id."""

    def __init__(self, app: App, rt: Runtime) -> None:
        self.app = app
        self.rt = rt
        # rotated session id -> (new id, until when the old one is still honoured)
        self.rotated: OrderedDict[str, tuple[str, float]] = OrderedDict()
        self.rotated_from: OrderedDict[str, str] = OrderedDict()  # new session -> the one its ids were signed for
        #: Sessions another worker rotated, by the new one's hash -> the old id, until a request
        #: brings the new id here (the engine carries hashes, never ids: _rotated_elsewhere).
        self.awaiting_rotation: OrderedDict[str, str] = OrderedDict()

    def of(self, request: Request) -> str | None:
        if not self.rotated:  # no session being rotated: what this app found before holds
            known = request.session_cache
            if known is not None and known[0] is self.app:
                return known[1]
        value = request.cookies.get(self.app.session_cookie)
        if value is None or not self.app.session_ids.is_issued(value):
            value = None  # none, or one this app never issued (planted): never adopted
        elif self.rotated:
            rotated = self.rotated.get(value)
            if rotated is not None and rotated[1] >= self.app.now():
                return rotated[0]  # a request already in flight when the session was rotated
            return value
        request.session_cache = (self.app, value)
        return value

    def regenerate(self, ctx: Context) -> str:
        """Give ``ctx``'s browser a new session id (at login or logout); return it.

        Every live tab of the old session moves to the new one, with its session data and session
        scope; the old cookie is still honoured for 2 s so requests already in flight succeed.
        """
        old = ctx.session_id
        new = self.app.session_ids.make()
        first = self.rotated_from.get(old, old)
        data = self.app.sessions.peek(old)
        if data is not None:
            saved = dict(data)
            self.app.sessions.clear(old)
            self.app.sessions.get(new).update(saved)
        self.rotate(old, new, first)
        self.app.store.session_rotated(old, new, first)  # the session's tabs on other workers move too
        ctx.add_cookie(self.cookie_header(new))
        return new

    def rotate(self, old: str, new: str, first: str) -> None:
        """Session ``old`` is ``new`` from now on (``regenerate_session`` here or on another
        worker): its tabs here move, and the old cookie is honoured for a moment. ``first``: the
        session their ids were signed for."""
        self.rotated[old] = (new, self.app.now() + ROTATION_OVERLAP)
        self.rotated_from.pop(old, None)
        self.rotated_from[new] = first
        while len(self.rotated) > GRAVEYARD_CAP:
            self.rotated.popitem(last=False)
        while len(self.rotated_from) > GRAVEYARD_CAP:
            self.rotated_from.popitem(last=False)
        old_scope, new_scope = Scope.session(old), Scope.session(new)
        for tab in [c for c in self.rt.registry.contexts.values() if c.session_id == old]:
            tab.session_id = new
            scopes = tab.scope_names
            if old_scope in scopes:
                scopes.remove(old_scope)
                if new_scope not in scopes:
                    scopes.append(new_scope)
        self.app.scopes.rename(old_scope, new_scope)

    def rotated_elsewhere(self, old_key: str, new_key: str) -> None:
        """``regenerate_session`` on another worker made the session hashed ``new_key`` of the one
        hashed ``old_key`` (the ids never travel: whoever reads the engine learns no cookie). Its
        session scope moves at once; its tabs here take the new id with the first request that
        carries it (:meth:`_same_session`)."""
        old_scope, new_scope = "session:" + old_key, "session:" + new_key
        state = self.app.scopes.get(old_scope)
        old = next((ctx.session_id for ctx in state.members.values()), None) if state is not None else None
        if old is None:
            old = next((sid for sid, data in self.app.sessions.items() if data.key == old_key), None)
        if old is None:
            old = next(
                (c.session_id for c in self.rt.registry.contexts.values() if Scope.session(c.session_id) == old_scope),
                None,
            )
        if old is None:
            return  # nothing of that session here
        self.app.sessions.forget(old)  # its data moved to the new session in the engine
        for tab in self.rt.registry.contexts.values():
            scopes = tab.scope_names
            if old_scope in scopes:
                scopes.remove(old_scope)
                if new_scope not in scopes:
                    scopes.append(new_scope)
        self.app.scopes.rename(old_scope, new_scope)
        self.awaiting_rotation[new_key] = old
        while len(self.awaiting_rotation) > GRAVEYARD_CAP:
            self.awaiting_rotation.popitem(last=False)

    def same(self, ctx: Context, session_id: str | None) -> bool:
        """Whether a request of ``session_id`` may use tab ``ctx``: its session, or the one another
        worker rotated it to (then the tab moves to it now)."""
        if ctx.session_id == session_id:
            return True
        old = self.rotation_of(session_id)
        if old is None or old != ctx.session_id:
            return False
        self.finish_rotation(old, session_id)  # type: ignore[arg-type]  # not None: _rotation_of found it
        return True

    def rotation_of(self, session_id: str | None) -> str | None:
        """The old id of a session another worker rotated to ``session_id``, if this one was told."""
        if session_id is None or not self.awaiting_rotation:
            return None
        return self.awaiting_rotation.get(Scope.session(session_id).split(":", 1)[1])

    def finish_rotation(self, old: str, new: str) -> None:
        del self.awaiting_rotation[Scope.session(new).split(":", 1)[1]]
        self.rotate(old, new, self.rotated_from.get(old, old))

    def wrote_cookie_header(self) -> str:
        """The cookie that makes the session's next page views read their own writes (``WROTE_COOKIE``)."""
        secure = self.app.config.secure_cookie
        name, path = (SECURE_WROTE_COOKIE, "/") if secure else (WROTE_COOKIE, self.app.url_base)
        return f"{name}=1; Path={path}; Max-Age={WROTE_MAX_AGE}; HttpOnly; SameSite=Lax{'; Secure' if secure else ''}"

    def wrote_recently(self, request: Request) -> bool:
        """Whether an action of the request's session wrote shared state moments ago."""
        name = SECURE_WROTE_COOKIE if self.app.config.secure_cookie else WROTE_COOKIE
        return name in request.cookies

    def cookie_header(self, session_id: str) -> str:
        secure = "; Secure" if self.app.config.secure_cookie else ""
        # Path=base_path keeps two apps mounted on one host from sharing a session (a __Host- cookie
        # must have Path=/).
        path = "/" if self.app.config.secure_cookie else self.app.url_base
        return (
            f"{self.app.session_cookie}={session_id}; Path={path}; Max-Age={SESSION_MAX_AGE}; HttpOnly; "
            f"SameSite=Lax{secure}"
        )
