"""Components: named parts of a page with their own signals, actions and view.

``c.component(setup, "cart")`` runs ``setup(comp)`` at once; the component declares on ``comp``
what a page declares on its context. Its ids are the page's with a ``cart__`` prefix (signals
``cart__count``, actions ``/_action/cart__add``), so they are deterministic and a revived page
gets the same ones. Its HTML is wrapped in ``<div id="c-cart">``: put the component in the page's
view with ``{{ cart }}`` (or ``str(cart)``), and ``comp.sync()`` patches only that element.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from markupsafe import Markup

from pyvia import protocol
from pyvia.context import Action, ActionCallback, _callable_shape
from pyvia.errors import DeclarationError
from pyvia.scopes import TAB
from pyvia.signals import Signal, check_name
from pyvia.view_frame import ViewFrame

if TYPE_CHECKING:
    from pyvia.context import Context

T = TypeVar("T")
_NAME = re.compile(r"[A-Za-z][A-Za-z0-9]*(?:_[A-Za-z0-9]+)*\Z")

__all__ = ["Component"]


class Component:
    """A namespaced part of one tab's page."""

    __slots__ = ("_actions", "_signals", "_view", "_view_data", "ctx", "name")

    def __init__(self, ctx: Context, name: str) -> None:
        if not isinstance(name, str) or not _NAME.match(name):
            raise DeclarationError(
                f"component name {name!r} in page {ctx.route.pattern!r} must match [A-Za-z][A-Za-z0-9_]* without '__'"
            )
        self.ctx = ctx
        self.name = name
        self._signals: dict[str, Signal[Any]] = {}
        self._actions: dict[str, Action] = {}
        self._view: str | Callable[[bool], str] | None = None
        self._view_data: Mapping[str, Any] | Callable[[], Mapping[str, Any]] | None = None

    @property
    def element_id(self) -> str:
        return f"c-{self.name}"

    def _id(self, name: str) -> str:
        check_name("name", name, f"component {self.name!r}")
        if "__" in name:
            raise DeclarationError(f"name {name!r} in component {self.name!r} must not contain '__'")
        return f"{self.name}__{name}"

    def signal(
        self, initial: T, name: str, *, scope: str = TAB, writable: bool = False, max_length: int | None = None
    ) -> Signal[T]:
        """Declare a signal of this component (or a shared one, exactly as on the page)."""
        if scope != TAB:
            sig = self.ctx.signal(initial, name, scope=scope, writable=writable, max_length=max_length)
        else:
            sig = self.ctx.tab_signal(initial, self._id(name), writable, max_length)
        self._signals[name] = sig
        return sig

    def action(self, fn: ActionCallback | str | None = None, name: str | None = None) -> Any:
        """Register an action of this component; same forms as ``Context.action``."""
        if fn is None or isinstance(fn, str):
            return functools.partial(self.action, name=fn if isinstance(fn, str) else name)
        fn_name: str = getattr(fn, "__name__", "")
        local = name or fn_name
        act = self.ctx.action(fn, self._id(local))
        self._actions[local] = act
        return act

    def view(
        self, view: str | Callable[..., str], data: Mapping[str, Any] | Callable[[], Mapping[str, Any]] | None = None
    ) -> None:
        """Set the component's view: a template name (with ``data``) or ``fn(is_update) -> str``."""
        if callable(view):
            _, nparams = _callable_shape(view)
            self._view = view if nparams else (lambda _u, _v=view: _v())
        elif isinstance(view, str) and "<" not in view:
            self._view = view
        else:
            raise DeclarationError("component view takes a template name or a callable")
        self._view_data = data

    def render(self, is_update: bool = True) -> Markup:
        """The component's HTML inside its ``<div id="c-name">`` wrapper."""
        view = self._view
        inner = ""
        if isinstance(view, str):
            ns: dict[str, Any] = {"c": self.ctx, "component": self, **self._signals, **self._actions}
            data = self._view_data() if callable(self._view_data) else self._view_data
            if data:
                ns.update(data)
            inner = self.ctx.app.templates.render(view, ns)
        elif view is not None:
            inner = view(is_update)
        return Markup(f'<div id="{self.element_id}">{inner}</div>')

    def __html__(self) -> Markup:
        return self.render(self.ctx.updating)

    def __str__(self) -> str:
        return self.__html__()

    def sync(self) -> None:
        """Re-render only this component and send it with the page's changed signals."""
        frame = ViewFrame(protocol.patch_elements(str(self.render(True))), whole=False)
        self.ctx.send_frame(self.ctx.signal_frame(), frame)

    def sync_signals(self) -> None:
        self.ctx.sync_signals()

    @property
    def signals(self) -> Mapping[str, Signal[Any]]:
        return self._signals

    @property
    def actions(self) -> Mapping[str, Action]:
        return self._actions
