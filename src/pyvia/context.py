"""Context: the server side of one browser tab.

A page handler receives a fresh Context and declares on it what the tab has: signals
(``c.signal``), actions (``c.action``) and a view (``c.view``). Later, actions run against the
same Context, and whatever they change goes out on the tab's stream. The lifecycle (connect
timeout, reconnect, cleanup, revival) is driven by the App; see ``pyvia.lifecycle``.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import inspect
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from types import FunctionType, MappingProxyType, MethodType
from typing import TYPE_CHECKING, Any, TypeVar, overload
from urllib.parse import quote

from markupsafe import Markup, escape

from pyvia.arguments import check_argument_names, encode_arguments, parameters_of
from pyvia.config import seconds_of
from pyvia.errors import DeclarationError
from pyvia.http import Request, Response
from pyvia.lifecycle import CREATED, DESTROYED
from pyvia.scopes import GLOBAL, SESSION, TAB, Scope, SharedSignal, resolve
from pyvia.signals import Signal, check_name
from pyvia.stream import Stream
from pyvia.tab_request import TabRequest
from pyvia.view_frame import ViewFrame

if TYPE_CHECKING:
    from pyvia.app import App
    from pyvia.clock import TimerHandle
    from pyvia.components import Component
    from pyvia.routing import Route
    from pyvia.state import SessionData

T = TypeVar("T")
#: The one empty mapping of every tab that declared no component or shared signal (read-only).
_NO_ITEMS: Mapping[str, Any] = MappingProxyType({})
log = logging.getLogger("pyvia")

ActionCallback = Callable[..., Any]
ViewCallable = Callable[..., str]

__all__ = ["Action", "BoundAction", "Context"]


class Action:
    """A server callback the browser can trigger with ``@post(action.url)``.

    ``str(action)`` is the Datastar expression itself, so a template can write
    ``data-on:click="{{ increment }}"``. An action with typed parameters (``def toggle(item_id:
    int)``) is called in the view to bind them: ``{{ toggle(item_id=item.id) }}``
    (:mod:`pyvia.arguments`).
    """

    __slots__ = ("callback", "name", "params", "url")

    def __init__(self, name: str, callback: ActionCallback, url: str) -> None:
        self.name = name
        self.callback = callback
        self.url = url
        self.params = parameters_of(callback, repr(name))

    @property
    def id(self) -> str:
        return self.name

    @property
    def pass_context(self) -> bool:
        return self.params.takes_context

    def __call__(self, **arguments: Any) -> BoundAction:
        """This action with its arguments bound, for a view: ``toggle(item_id=3)``."""
        if not arguments:
            return BoundAction(self, self.url)
        return BoundAction(self, f"{self.url}?{encode_arguments(self.name, self.params, arguments)}")

    def js(self, **expressions: str) -> BoundAction:
        """This action with arguments the browser computes when it posts: ``turn.js(key="evt.key")``.

        Each value is a JavaScript expression, evaluated where the action fires and sent as JSON
        in the URL like any bound argument, so the server converts and checks it by the
        parameter's annotation (a 400 naming it when it does not fit).
        """
        if not expressions:
            raise DeclarationError(f"action {self.name!r}: js() needs at least one argument")
        check_argument_names(self.name, self.params, expressions)
        query = " + '&' + ".join(
            f"'{quote(name, safe='')}=' + encodeURIComponent(JSON.stringify({expression}))"
            for name, expression in expressions.items()
        )
        return BoundAction(self, self.url, f"'{self.url}?' + {query}")

    def __str__(self) -> str:
        return _post(self.url)

    def __html__(self) -> Markup:
        return _post_markup(self.url)

    def __repr__(self) -> str:
        return f"Action({self.name!r})"


class BoundAction:
    """An action with the arguments a view gave it: the same Datastar expression, another URL
    (``target``: the JavaScript that makes the URL, when the browser computes arguments)."""

    __slots__ = ("action", "target", "url")

    def __init__(self, action: Action, url: str, target: str | None = None) -> None:
        self.action = action
        self.url = url
        self.target = target

    def __str__(self) -> str:
        return _post(self.url) if self.target is None else _post_to(self.target)

    def __html__(self) -> Markup:
        return _post_markup(self.url) if self.target is None else Markup(escape(_post_to(self.target)))

    def __repr__(self) -> str:
        return f"BoundAction({self.action.name!r}, {self.url!r})"


def _post(url: str) -> str:
    return _post_to(f"'{url}'")


def _post_to(target: str) -> str:
    """``_post`` for a URL made by the JavaScript expression ``target``."""
    # Datastar aborts a request still in flight when the same element posts again; the server
    # may have run it anyway, so a quick second click would lose the first one's outcome on the
    # client. Every click is an intent: never cancel. While the stream is down the request also
    # carries the tab's snapshot (``_via_filter``), so a server that no longer holds the tab can
    # revive it and run the action. Datastar posts a request again when its answer was lost to
    # the network, though the server may have run it: each click carries a random id, the same in
    # every retry, so the tab runs it once (``via-click``). Like the stream, a click never gives up
    # while the page is open and is tried at most 8 s apart: Datastar's default stops after ten
    # tries (about 150 s), and what the click cleared in the page was lost with it.
    return (
        f"@post({target}, {{requestCancellation: 'disabled', filterSignals: {{exclude: $_via_filter}}, "
        "headers: {'via-click': Math.random()}, retryMaxCount: Infinity, retryMaxWait: 8000})"
    )


@functools.lru_cache(maxsize=4096)
def _post_markup(url: str) -> Markup:
    """``_post(url)`` for an HTML attribute: the same for every view of an action, so made once."""
    return Markup(_post(url).replace("'", "&#39;"))


def _callable_shape(fn: Callable[..., Any]) -> tuple[bool, int]:
    """(is it a coroutine function, how many positional arguments it requires).

    Plain functions are read from their code object: an action is declared on every page view,
    and ``inspect.signature`` would cost more than the rest of the declaration.
    """
    bound = type(fn) is MethodType  # a bound method (the app's own hooks are): self is given
    plain = fn.__func__ if bound else fn  # type: ignore[attr-defined]  # checked just above
    if type(plain) is FunctionType:
        code = plain.__code__
        required = code.co_argcount - len(plain.__defaults__ or ()) - bound
        return bool(code.co_flags & inspect.CO_COROUTINE), required
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False, 0
    required = sum(1 for p in params if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD))
    return inspect.iscoroutinefunction(fn), required


class Context(TabRequest):
    """One tab: its signals, actions, view, hooks and outbound stream."""

    __slots__ = (  # noqa: RUF023  # grouped by lifetime, not sorted
        # identity, fixed at creation
        "app",
        "id",
        "route",
        "params",
        "session_id",
        # what the page declared
        "_signals",
        "actions",
        "_view",
        "_view_block",
        "_view_data",
        "share_render",
        "_shared",
        "scope_names",
        "primary_scope",
        "_components",
        "cleanup_hooks",
        "disconnect_hooks",
        "connect_hooks",
        "_timers",
        "head_tags",
        "foot_tags",
        # (the request and the cookies its answer sets: TabRequest's slots; what the browser was
        # sent and the frames on their way: TabOutput's)
        # lifecycle, driven by the App
        "state",
        "deadline",
        "last_action",
        "recent_clicks",
        "click_answer",
        "acting",
        "revived",
        "stream",
        # user data
        "_middleware_state",
        "_tab_state",
        "__weakref__",
    )

    def __init__(
        self,
        app: App,
        context_id: str,
        route: Route,
        params: Mapping[str, str],
        session_id: str,
        request: Request,
    ) -> None:
        self.app = app
        self.id = context_id
        self.route = route
        self.params = params
        self.session_id = session_id
        self._signals: dict[str, Signal[Any]] = {}
        #: The tab's actions by name (``c.action`` adds them).
        self.actions: dict[str, Action] = {}
        self._view: str | ViewCallable | None = None
        self._view_block: str | None = None
        self.share_render = False
        # What most tabs never declare starts as one shared empty value (a tuple, a read-only
        # mapping), made a list or dict of its own on the first declaration: an idle tab holds none.
        self._components: dict[str, Component] | Mapping[str, Component] = _NO_ITEMS
        self.updating = False
        #: Shared signals this tab declared, by browser id.
        self._shared: dict[str, SharedSignal[Any]] | Mapping[str, SharedSignal[Any]] = _NO_ITEMS
        #: Concrete names of the scopes this tab belongs to (route, session, global from the start).
        # a list, not a set: a tab is in a few scopes (a set of three is 216 bytes, a list 88); the
        # registry swaps in the names its scopes hold, so a tab keeps no copy of its own
        self.scope_names: list[str] = [Scope.route(route.pattern), Scope.session(session_id), GLOBAL]
        #: Where ``c.broadcast()`` goes: ``"tab"`` (this tab only) until ``c.scope()`` says otherwise.
        self.primary_scope = TAB
        self._view_data: Mapping[str, Any] | Callable[[], Mapping[str, Any]] | None = None
        self.cleanup_hooks: list[Callable[..., Any]] | tuple[()] = ()
        self.disconnect_hooks: list[Callable[..., Any]] | tuple[()] = ()
        self.connect_hooks: list[Callable[..., Any]] | tuple[()] = ()
        self._timers: list[TimerHandle] | tuple[()] = ()
        self.head_tags: list[str] | tuple[()] = ()
        self.foot_tags: list[str] | tuple[()] = ()
        self.request = request
        self.cookies_out: list[str] | tuple[()] = ()
        self.answer_events = b""
        self._batch: list[bytes | ViewFrame | Awaitable[ViewFrame | None]] | None = None
        self._snapshot_seq = 0
        self.error_shown = False
        self.pending_frames: deque[tuple[bytes, Any]] | None = None
        self.state = CREATED
        self.deadline = 0.0
        self.last_action = 0.0
        #: The ``via-click`` ids of the tab's latest clicks (``runtime.endpoints.action.first_time``).
        self.recent_clicks: tuple[str, ...] = ()
        #: The latest click whose answer said more than an empty 200 (a refusal, a cookie, a
        #: navigation), with that answer: its retry gets it again.
        self.click_answer: tuple[str, Response] | None = None
        #: While an ``async`` action of the tab runs, the tab's next posts wait in this line, each
        #: for its turn, so each runs on the values its own post carried (None: the tab is free).
        self.acting: ActionLine | None = None
        self.revived = False
        self.stream = Stream(app.config.max_stream_buffer, app.outflow, app.replays, route.pattern)
        self._middleware_state: dict[str, Any] | None = request.state_if_made  # None: middleware put nothing
        self._tab_state: dict[str, Any] | None = None  # made on first use: most tabs keep none

    @property
    def state_from_middleware(self) -> dict[str, Any]:
        """Data middleware put in ``request.state`` on the page view (or the revival): that dict
        itself, not a copy (no middleware touches it once the view began)."""
        state = self._middleware_state
        if state is None:  # none was put: the page's own while it is the tab's request, else a new one
            request = self.request
            state = self._middleware_state = request.state if request.kind in ("page", "revival", "") else {}
        return state

    @property
    def tab_state(self) -> dict[str, Any]:
        """Server-side per-tab values; kept when the tab is revived in this process."""
        state = self._tab_state
        if state is None:
            state = self._tab_state = {}
        return state

    @tab_state.setter
    def tab_state(self, value: dict[str, Any]) -> None:
        self._tab_state = value

    @property
    def held_tab_state(self) -> dict[str, Any] | None:
        """The tab state if the tab ever used it (reading ``tab_state`` would make one)."""
        return self._tab_state

    def __repr__(self) -> str:
        return f"<Context {self.route.pattern} {self.state.name}>"

    # --- declarations ---------------------------------------------------------------------------

    @overload
    def signal(self, initial: T, name: str, *, writable: bool = False, max_length: int | None = None) -> Signal[T]: ...

    @overload
    def signal(
        self, initial: T, name: str, *, scope: str, writable: bool = False, max_length: int | None = None
    ) -> Signal[T]: ...

    def signal(
        self, initial: T, name: str, *, scope: str = TAB, writable: bool = False, max_length: int | None = None
    ) -> Signal[T]:
        """Declare a signal of this tab, or (with ``scope=``) one shared by every tab of a scope.

        It is server-owned: the browser shows it, only the server writes it. ``writable=True``
        makes it an input the user edits: the browser's value comes back with each action (at
        most ``max_length`` characters or items; more answers 413 naming it). A tab signal
        declared again gets the new value; a shared one keeps the shared value, and declaring it
        joins this tab to its scope.
        """
        if scope != TAB:
            return self._shared_signal(initial, name, scope, writable, max_length)
        if "__" in name:
            raise DeclarationError(
                f"signal name {name!r} in page {self.route.pattern!r} must not contain '__' "
                "(it separates a scope or component from a name in browser ids)"
            )
        return self.tab_signal(initial, name, writable, max_length)

    def tab_signal(self, initial: T, name: str, writable: bool, max_length: int | None) -> Signal[T]:
        existing = self._signals.get(name)
        if existing is not None:
            if existing.writable != writable:
                raise DeclarationError(
                    f"signal {name!r} in page {self.route.pattern!r} is declared twice, once writable and once not"
                )
            existing.reset(initial)
            return existing
        check_name("signal", name, f"page {self.route.pattern!r}")
        if name in self.actions:
            raise DeclarationError(f"signal {name!r} in page {self.route.pattern!r} has an action's name")
        sig: Signal[T] = Signal(name, initial, writable=writable, max_length=max_length)
        self._signals[name] = sig
        return sig

    def _shared_signal(
        self, initial: T, name: str, scope: str, writable: bool, max_length: int | None
    ) -> SharedSignal[T]:
        check_name("signal", name, f"page {self.route.pattern!r}")
        concrete = resolve(scope, self.route.pattern, self.session_id)
        state = self.app.scopes.state(concrete)
        new = scope == SESSION and self.request is not None and self.request.new_session
        followed = self.app.store.shared and state.signals.get(name) is not None
        sig = state.signal(name, initial, writable=writable, max_length=max_length, new=new)
        if followed and self.request is not None and self.app.runtime.sessions.wrote_recently(self.request):
            self.app.store.refresh(sig)  # the session's own write may not have reached this copy yet
        if self._signals.get(name) is not None or self.actions.get(name) is not None:
            raise DeclarationError(f"shared signal {name!r} in page {self.route.pattern!r} clashes with a tab name")
        shared = self._shared
        if not isinstance(shared, dict):
            shared = self._shared = {}
        shared[sig.id] = sig
        self._join(concrete)
        return sig

    # --- scopes ----------------------------------------------------------------------------------

    def scope(self, scope: str) -> None:
        """Set the primary scope (the target of ``c.broadcast()`` and of shared renders) and join it."""
        if scope == TAB:
            self.primary_scope = TAB
            return
        concrete = resolve(scope, self.route.pattern, self.session_id)
        self.primary_scope = concrete
        self._join(concrete)

    def add_scope(self, scope: str) -> None:
        """Join a scope now: this tab receives its broadcasts from here on."""
        if scope == TAB:
            return
        self._join(resolve(scope, self.route.pattern, self.session_id))

    def remove_scope(self, scope: str) -> None:
        """Leave a scope: no more broadcasts from it; its shared signals stop reaching this tab."""
        if scope == TAB:
            raise DeclarationError("a tab cannot leave its own TAB scope")
        concrete = resolve(scope, self.route.pattern, self.session_id)
        if concrete in self.scope_names:
            self.scope_names.remove(concrete)
        shared = self._shared
        if isinstance(shared, dict):
            for sid in [sid for sid, sig in shared.items() if sig.scope.name == concrete]:
                del shared[sid]
        if self.primary_scope == concrete:
            self.primary_scope = TAB
        if self.app.contexts.get(self.id) is self:
            self.app.scopes.leave(self, concrete)

    def _join(self, concrete: str) -> None:
        if concrete not in self.scope_names:
            self.scope_names.append(concrete)
        if self.app.contexts.get(self.id) is self:  # a live tab joins now; a new one at registration
            self.app.scopes.join(self, concrete)

    @property
    def scopes(self) -> frozenset[str]:
        """The concrete scope names this tab belongs to."""
        return frozenset(self.scope_names)

    def broadcast(self) -> None:
        """Re-render every tab of the primary scope at the next flush (this tab only for TAB)."""
        if self.primary_scope == TAB:
            self.sync()
        else:
            self.app.broadcast(self.primary_scope)

    @overload
    def action(self, fn: ActionCallback, name: str | None = None) -> Action: ...

    @overload
    def action(self, fn: str) -> Callable[[ActionCallback], Action]: ...

    @overload
    def action(self, fn: None = None, name: str | None = None) -> Callable[[ActionCallback], Action]: ...

    def action(
        self, fn: ActionCallback | str | None = None, name: str | None = None
    ) -> Action | Callable[[ActionCallback], Action]:
        """Register an action; works as ``c.action(fn, "name")``, ``@c.action`` or ``@c.action("name")``.

        The id is the name (the function's name by default), so it is the same after revival.
        """
        if fn is None or isinstance(fn, str):
            return functools.partial(self.action, name=fn if isinstance(fn, str) else name)
        fn_name: str = getattr(fn, "__name__", "")
        action_name = name or fn_name
        check_name("action", action_name, f"page {self.route.pattern!r}")
        if action_name in self._signals:
            raise DeclarationError(f"action {action_name!r} in page {self.route.pattern!r} has a signal's name")
        act = Action(action_name, fn, self.app.url_for_action(action_name))
        self.actions[action_name] = act
        return act

    def view(
        self,
        view: str | ViewCallable,
        data: Mapping[str, Any] | Callable[[], Mapping[str, Any]] | None = None,
        *,
        block: str | None = None,
        share_render: bool = False,
    ) -> None:
        """Set the tab's view: a template name (``data``, ``block`` allowed) or ``fn(is_update) -> str``.

        ``share_render=True`` promises the update render is the same for every tab of the primary
        scope on this route, so a broadcast renders it once and writes the same bytes to all.
        """
        if share_render and self.primary_scope == TAB:
            raise DeclarationError(
                f"share_render in page {self.route.pattern!r} needs a shared primary scope: call c.scope() first"
            )
        self.share_render = share_render
        if callable(view):
            if data is not None or block is not None:
                raise DeclarationError("data= and block= go with a template name, not a callable view")
            _, nparams = _callable_shape(view)
            self._view = view if nparams else (lambda _is_update, _v=view: _v())
        elif isinstance(view, str):
            if "<" in view:
                raise DeclarationError("c.view() takes a template name or a callable; wrap literal HTML in a function")
            self._view = view
        else:
            raise DeclarationError(f"c.view() takes a template name or a callable, not {type(view).__name__}")
        self._view_block = block
        self._view_data = data

    def component(self, setup: Callable[[Component], Any], name: str) -> Component:
        """Declare a named component: ``setup(comp)`` declares its signals, actions and view."""
        from pyvia.components import Component

        if name in self._components:
            raise DeclarationError(f"component {name!r} is declared twice in page {self.route.pattern!r}")
        comp = Component(self, name)
        components = self._components
        if not isinstance(components, dict):
            components = self._components = {}
        components[name] = comp
        setup(comp)
        return comp

    def append_head(self, *markup: str) -> None:
        """Add markup to this page's ``<head>`` (after the app's own ``head`` includes)."""
        self.head_tags = [*self.head_tags, *markup]

    def append_foot(self, *markup: str) -> None:
        """Add markup before this page's ``</body>``."""
        self.foot_tags = [*self.foot_tags, *markup]

    def on_cleanup(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """Run ``fn(c)`` (or ``fn()``) when the context is destroyed."""
        self.cleanup_hooks = [*self.cleanup_hooks, fn]
        return fn

    def on_disconnect(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """Run ``fn(c)`` (or ``fn()``) when the tab's last stream closes."""
        self.disconnect_hooks = [*self.disconnect_hooks, fn]
        return fn

    def set_interval(
        self, fn: Callable[..., Any], seconds: float | None = None, *, ms: float | None = None
    ) -> TimerHandle:
        """Call ``fn`` every ``seconds`` until the context is destroyed (``ms=``: deprecated, milliseconds)."""
        period = seconds_of("set_interval", seconds, ms, "ms")
        if period <= 0:
            raise DeclarationError(f"set_interval needs a positive period, got {period} s")
        return self.app.runtime.registry.arm_interval(self, fn, period)

    # --- reading ---------------------------------------------------------------------------------

    @property
    def signals(self) -> Mapping[str, Signal[Any]]:
        return self._signals

    @property
    def is_connected(self) -> bool:
        return self.stream.is_connected

    @property
    def is_destroyed(self) -> bool:
        return self.state is DESTROYED

    @property
    def session_data(self) -> SessionData:
        """Data shared by every tab of this browser session (kept server-side, LRU-bounded)."""
        return self.app.sessions.get(self.session_id)

    def regenerate_session(self) -> str:
        """Rotate this browser's session id (call it at login and logout); return the new id."""
        return self.app.regenerate_session(self)

    def spawn(self, awaitable: Awaitable[Any]) -> None:
        """Run a coroutine in the background; errors are reported with this tab, never fatal.

        The task keeps running if the tab is destroyed; check ``c.is_destroyed`` in long loops.
        """
        self.app.spawn(awaitable, self, "task")

    def on_connect(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """Run ``fn(c)`` (or ``fn()``) each time this tab's stream opens (first connect and reconnects)."""
        self.connect_hooks = [*self.connect_hooks, fn]
        return fn

    def add_timer(self, timer: TimerHandle) -> None:
        timers = self._timers
        if isinstance(timers, list):
            timers.append(timer)
        else:
            self._timers = [timer]

    # --- teardown ---------------------------------------------------------------------------------
    def cancel_timers(self) -> None:
        """Stop the tab's timers (``c.set_interval``): the tab is being destroyed."""
        for timer in self._timers:
            timer.cancel()

    def forget(self) -> None:
        """Drop what closures hold once the tab is destroyed, so it leaves no reference cycle."""
        self._signals = {}
        self._shared = _NO_ITEMS
        self._components = _NO_ITEMS
        self.actions = {}
        self._view = None
        self._view_data = None
        self._timers = ()
        self.cleanup_hooks = ()
        self.disconnect_hooks = ()
        self.connect_hooks = ()

    # --- running user code ----------------------------------------------------------------------

    def run_action(self, action: Action, arguments: Mapping[str, Any] | None = None) -> Awaitable[None] | None:
        """Run an action; return an awaitable if it is async. The caller ends the batch."""
        kwargs = arguments or {}
        result = action.callback(self, **kwargs) if action.params.takes_context else action.callback(**kwargs)
        if result is not None and inspect.isawaitable(result):
            return result
        return None


class ActionLine:
    """The posts of a tab that came while one of its actions was running, in the order they came;
    the tab's actions run one at a time, each in its turn. Plain objects, not futures: a place is
    taken where no loop may be running (an in-process call), and waited for on the loop that runs."""

    __slots__ = ("waiting",)

    def __init__(self) -> None:
        self.waiting: collections.deque[Turn] = collections.deque()

    def join(self) -> Turn:
        """A place at the end of the line, taken now (so the order is the order of arrival)."""
        turn = Turn()
        self.waiting.append(turn)
        return turn

    def next(self) -> bool:
        """Give the turn to the first post still waiting; False when none is (the tab is free)."""
        while self.waiting:
            if self.waiting.popleft().give():
                return True
        return False


class Turn:
    """A post's place in its tab's :class:`ActionLine`."""

    __slots__ = ("given", "left", "waiter")

    def __init__(self) -> None:
        self.given = False
        self.left = False  # it stopped waiting (its time was up): its turn goes to the next
        self.waiter: asyncio.Future[None] | None = None

    def give(self) -> bool:
        if self.left:
            return False
        self.given = True
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)
        return True

    async def wait(self, timeout: float) -> None:
        """Until this post's turn, or ``TimeoutError`` after ``timeout`` seconds (it left the line)."""
        if self.given:
            return
        self.waiter = asyncio.get_running_loop().create_future()
        try:
            await asyncio.wait_for(self.waiter, timeout)
        finally:
            if not self.given:
                self.left = True


def call_hook(fn: Callable[..., Any], ctx: Context) -> Any:
    """Call a hook with the context if it takes an argument."""
    return fn(ctx) if _callable_shape(fn)[1] else fn()
