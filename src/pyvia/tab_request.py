"""What a tab reads of the request it is running for, and the cookies its answer sets.

A base class of :class:`pyvia.Context` (``c.input``, ``c.files``, ``c.cookies``, ``c.set_cookie``):
the current request is the page view's, an action's or a stream's, whichever runs the tab's code.
It sits between :class:`pyvia.tab_output.TabOutput` and the Context in one line of bases, so
each class keeps its own slots (the request and the queued cookies are this one's).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pyvia.http import format_cookie
from pyvia.protocol import execute_script
from pyvia.tab_output import TabOutput, redirect_script

if TYPE_CHECKING:
    from pyvia.http import Request

__all__ = ["TabRequest"]


class TabRequest(TabOutput):
    """The request side of a tab (see the module docstring)."""

    __slots__ = ("answer_events", "cookies_out", "request")
    #: The request whose code runs now: the page view's, then each action's or stream's.
    request: Request
    #: ``Set-Cookie`` values for the next page or action response.
    cookies_out: list[str] | tuple[()]
    #: Events for the running action's own answer, after its ``Set-Cookie`` (``redirect``).
    answer_events: bytes

    def redirect(self, url: str) -> None:
        """Send the tab to another URL.

        From an action that set cookies (a login's ``regenerate_session``), or when several workers
        share the app's state, the navigation goes in the action's own answer, after its
        ``Set-Cookie`` and once its writes are in the engine: on the stream it would arrive first,
        and the next page, served by another worker, could read what it had before the action
        (leaving the page would also cancel the answer, cookie and all)."""
        if self._batch is not None and (self.cookies_out or self.app.store.shared):  # in an action of this tab
            self.answer_events += execute_script(redirect_script(url))
            return
        super().redirect(url)

    @property
    def cookies(self) -> dict[str, str]:
        return self.request.cookies

    def input(self, name: str, default: Any = None) -> Any:
        """A form field or query parameter of the current request (form fields win)."""
        form = self.app.runtime.actions.form_of(self.request)
        if name in form:
            return form[name]
        return self.request.query.get(name, default)

    @property
    def files(self) -> dict[str, Any]:
        """Files uploaded with the current request (multipart), by field name (the last of each)."""
        return self.app.runtime.actions.files_of(self.request)

    def files_of(self, field_name: str) -> list[Any]:
        """Every file uploaded under ``field_name`` with the current request (``multiple`` inputs)."""
        form = self.request.form if self.request is not None else None
        return list(form.all_files.get(field_name, [])) if form is not None else []

    def set_cookie(
        self,
        name: str,
        value: str,
        *,
        max_age: int | None = None,
        path: str = "/",
        secure: bool = False,
        httponly: bool = True,
        samesite: str = "Lax",
    ) -> None:
        """Queue a cookie for the next page or action response of this tab."""
        self.add_cookie(
            format_cookie(name, value, max_age=max_age, path=path, secure=secure, httponly=httponly, samesite=samesite)
        )

    def add_cookie(self, header: str) -> None:
        """Queue a ``Set-Cookie`` value for the next page or action response."""
        self.cookies_out = [*self.cookies_out, header]

    def delete_cookie(self, name: str, path: str = "/") -> None:
        self.set_cookie(name, "", max_age=0, path=path)
