"""Scopes: who shares a signal and who receives a broadcast.

A scope is a name. Four are built in:

* ``TAB`` — one tab; never shared (the default for signals and actions);
* ``ROUTE`` — every tab on the same route *pattern*, resolved to ``route:/items/{id}``;
* ``SESSION`` — every tab of one browser session, resolved to ``session:<hash>`` (a hash of the
  session id, never the cookie itself);
* ``GLOBAL`` — every tab.

Any other name made of parts joined by ``:`` is a custom scope (``room:lobby``, ``room:café``;
``Scope.custom("room", name)`` makes one from any text) that tabs join with ``c.add_scope`` or
by declaring a signal in it. Broadcasts
accept ``*`` wildcards (``room:*``). Every tab is a member of its route, session and the global
scope from the start; custom scopes are joined explicitly.

Invariant: a :class:`ScopeState` exists exactly while it has members or signals someone asked
for outside a context; it is dropped with its signals when its last member leaves.
"""

from __future__ import annotations

import fnmatch
import functools
import hashlib
import re
from collections.abc import Callable, Iterator, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, TypeVar

from pyvia import protocol
from pyvia.errors import DeclarationError
from pyvia.sharing import LOCAL_STORE
from pyvia.signals import Signal, copied

if TYPE_CHECKING:
    from pyvia.context import Context
    from pyvia.sharing import SharedStore

T = TypeVar("T")

__all__ = ["GLOBAL", "ROUTE", "SESSION", "TAB", "Scope", "ScopeRegistry", "ScopeState", "SharedSignal"]

TAB = "tab"
ROUTE = "route"
SESSION = "session"
GLOBAL = "global"

#: A custom scope: parts joined by ':', each any text but control characters (and, in a concrete
#: name, '*', which makes a pattern). ``Scope.custom`` escapes a name that holds ':', '*' or '%'.
_CUSTOM = re.compile(r"[^\x00-\x1f\x7f:*]+(?::[^\x00-\x1f\x7f:*]+)*\Z")
_PATTERN = re.compile(r"[^\x00-\x1f\x7f:]+(?::[^\x00-\x1f\x7f:]+)*\Z")
_KIND = re.compile(r"[A-Za-z][A-Za-z0-9]*\Z")
_ESCAPED = re.compile(r"[%:*\x00-\x1f\x7f]")
_ID_SAFE = re.compile(r"[A-WYZa-z0-9]")
_MAX_SCOPE = 200
_DIGEST_LEN = 34  # "%~" and 32 hex digits
_MISSING = object()


class Scope:
    """The built-in scope names, as ``Scope.TAB`` etc. (plain strings work as well), and the makers
    of concrete ones: ``Scope.custom("room", name)`` for any name."""

    TAB = TAB
    ROUTE = ROUTE
    SESSION = SESSION
    GLOBAL = GLOBAL

    @staticmethod
    def route(pattern: str) -> str:
        return "route:" + pattern

    @staticmethod
    def session(session_id: str) -> str:
        return _session_scope(session_id)

    @staticmethod
    def custom(kind: str, *names: str) -> str:
        """The scope ``kind:name…`` for names of any text (``Scope.custom("room", "café")``): a ':',
        '*' or '%' in a name is escaped, so distinct names are distinct scopes and a name is never a
        pattern, and a name too long for a scope stands in by its digest. ``Scope.custom("room",
        "*")`` is not the pattern ``room:*``; write that as is."""
        if not isinstance(kind, str) or not _KIND.match(kind) or kind in (TAB, ROUTE, SESSION, GLOBAL):
            raise DeclarationError(
                f"scope kind {kind!r} must match [A-Za-z][A-Za-z0-9]* and not be a built-in one, like 'room'"
            )
        if not names:
            raise DeclarationError(f"Scope.custom({kind!r}) needs at least one name")
        parts = [kind]
        for name in names:
            if not isinstance(name, str) or not name:
                raise DeclarationError(f"scope name {name!r} of kind {kind!r} must be a non-empty str")
            parts.append(_ESCAPED.sub(lambda m: f"%{ord(m.group()):02X}", name))
        # Too long a scope for its store keys: the longest names stand in by their digest, which no
        # escaped name can equal ('%' is always followed by two hex digits there).
        longest = sorted(range(1, len(parts)), key=lambda i: len(parts[i]), reverse=True)
        for i in longest:
            if sum(map(len, parts)) + len(parts) - 1 <= _MAX_SCOPE or len(parts[i]) <= _DIGEST_LEN:
                break
            parts[i] = "%~" + hashlib.blake2b(names[i - 1].encode(), digest_size=16).hexdigest()
        return check_custom(":".join(parts))


def resolve(scope: str, route_pattern: str, session_id: str) -> str:
    """The concrete scope name for a tab on ``route_pattern`` in ``session_id``."""
    if scope == ROUTE:
        return Scope.route(route_pattern)
    if scope == SESSION:
        return Scope.session(session_id)
    if scope == GLOBAL:
        return GLOBAL
    check_custom(scope)
    return scope


def check_custom(scope: str) -> str:
    if not isinstance(scope, str) or len(scope) > _MAX_SCOPE or not _CUSTOM.match(scope):
        star = isinstance(scope, str) and "*" in scope
        raise DeclarationError(
            f"scope {scope!r} must be tab, route, session, global or non-empty parts joined by ':' "
            f"(at most {_MAX_SCOPE} characters, no control characters), like 'room:lobby'"
            + (
                "; a '*' makes it a pattern, which only app.broadcast takes: for a name holding one, "
                "use Scope.custom('room', name)"
                if star
                else ""
            )
        )
    if scope.split(":", 1)[0] in (TAB, ROUTE, SESSION) and ":" in scope:
        raise DeclarationError(f"scope {scope!r}: the prefixes tab:, route: and session: are pyvia's")
    return scope


def check_broadcast_target(scope: str) -> str:
    """Validate a name given to ``app.broadcast``: a concrete scope or a wildcard pattern."""
    if scope in (TAB, ROUTE, SESSION):
        raise DeclarationError(
            f"app.broadcast({scope!r}) names no tabs: broadcast from a context (c.broadcast()) or give "
            "a concrete scope such as 'route:/chat' or 'room:lobby'"
        )
    if scope.startswith(("route:", "session:")):
        return scope
    if scope == GLOBAL:
        return scope
    if not isinstance(scope, str) or len(scope) > _MAX_SCOPE or not _PATTERN.match(scope):
        raise DeclarationError(f"broadcast target {scope!r} is not a scope name or a '*' pattern of one")
    return scope


def signal_key(scope: str, name: str) -> str:
    """The key of a scoped signal in the browser: readable, and distinct for distinct (scope, name)
    and from every tab signal's name (a tab signal has no ``__``)."""
    if scope.startswith("route:"):
        prefix = "route"  # a tab is on one route and in one session, so the kind is enough
    elif scope.startswith("session:"):
        prefix = "session"
    else:
        prefix = _id_text(scope)
    return f"{prefix}__{name}"


def _id_text(scope: str) -> str:
    """``scope`` in the letters a Datastar signal name may use, one to one: letters and digits stay,
    ':' becomes '_', 'X' becomes 'XX' and anything else 'X' + its code in hex + '_'."""
    if scope.isascii() and scope.replace(":", "").isalnum() and "X" not in scope:
        return scope.replace(":", "_")  # the common case: room:lobby → room_lobby
    out = []
    for char in scope:
        if char == ":":
            out.append("_")
        elif char == "X":
            out.append("XX")
        elif _ID_SAFE.match(char):
            out.append(char)
        else:
            out.append(f"X{ord(char):x}_")
    return "".join(out)


class SharedSignal(Signal[T]):
    """A signal whose one value is shared by every tab of its scope.

    Writing it marks the scope for broadcast; the value reaches every member at the next flush.
    In one process every read-modify-write that does not ``await`` in between is atomic;
    :meth:`increment` and :meth:`mutate` keep that promise when state moves to a cluster.
    """

    __slots__ = ("scope",)

    def __init__(
        self, scope: ScopeState, name: str, initial: T, *, writable: bool, max_length: int | None = None
    ) -> None:
        super().__init__(name, initial, writable=writable, max_length=max_length, key=signal_key(scope.name, name))
        self.scope = scope

    @property
    def value(self) -> T:
        return self._value

    @value.setter
    def value(self, new: T) -> None:
        self._set_local(new)
        self.scope.registry.store.put_signal(self)

    def _set_local(self, new: T) -> None:
        self._value = new
        self.changed = True
        if self.writable:
            self.revision += 1
        self.scope.touch(self)

    def increment(self, by: int = 1) -> int:
        """Add ``by`` to an integer value and return the result, atomically.

        With several workers the engine adds; the value returned is this worker's view, and every
        worker ends on the engine's total.
        """
        current = self._value
        if not isinstance(current, int) or isinstance(current, bool):
            raise TypeError(f"increment() needs an int signal; {self.id} holds {type(current).__name__}")
        self._set_local(current + by)  # type: ignore[arg-type]  # checked int above
        self.scope.registry.store.increment_signal(self, by)
        return self._value  # type: ignore[return-value]  # checked int above

    def mutate(self, fn: Callable[[T], T]) -> T:
        """Replace the value with ``fn(value)`` atomically; ``fn`` must be pure and must not await
        (with several workers the engine may run it again on a newer value)."""
        before = self._value
        self._set_local(fn(before))
        self.scope.registry.store.mutate_signal(self, fn, before)
        return self._value

    async def committed(self) -> T:
        """The value once this worker's writes of it are in the engine: what every worker ends on
        (with one worker, the value now). After :meth:`mutate` or :meth:`increment`, it says what
        really happened where the engine ran ``fn`` again on another worker's newer value; raises
        ``EngineUnavailable`` (503) when the write did not reach the engine."""
        value: T = await self.scope.registry.store.committed(self)
        return value

    def accept_client_value(self, value: Any) -> bool:
        accepted = super().accept_client_value(value)
        if accepted:
            self.changed = True
            self.scope.touch(self)
            self.scope.registry.store.put_signal(self)
        return accepted

    def __repr__(self) -> str:
        return f"SharedSignal({self.scope.name!r}, {self.name!r}, {self._value!r})"


_NO_SIGNALS: Mapping[str, Any] = MappingProxyType({})


class ScopeState:
    """The members and shared signals of one scope."""

    __slots__ = ("dirty", "kept", "last_flush", "members", "name", "registry", "signals")

    def __init__(self, registry: ScopeRegistry, name: str) -> None:
        self.registry = registry
        self.name = name
        self.members: dict[str, Context] = {}
        #: Its shared signals by name: one shared empty mapping until the first is declared (a
        #: session's scope, one per visitor, mostly has none).
        self.signals: dict[str, SharedSignal[Any]] | Mapping[str, SharedSignal[Any]] = _NO_SIGNALS
        self.dirty = False
        self.kept = False  # asked for outside a context: survives having no members
        self.last_flush = 0.0

    def signal(
        self, name: str, initial: T, *, writable: bool = False, max_length: int | None = None, new: bool = False
    ) -> SharedSignal[T]:
        """The scope's signal ``name``, declared now with ``initial`` unless it exists. ``new``: the
        scope was made by the request declaring it (a session just made), so no other worker
        can hold a value yet."""
        existing = self.signals.get(name)
        if existing is not None:
            if existing.writable != writable:
                raise DeclarationError(
                    f"signal {name!r} of scope {self.name!r} is declared both writable and server-owned; "
                    "declare it the same way everywhere (app.signal included)"
                )
            return existing
        restored = self.registry.restored.pop((self.name, name), _MISSING)
        if restored is not _MISSING:
            initial = restored  # saved at the last graceful stop
        sig: SharedSignal[T] = SharedSignal(self, name, initial, writable=writable, max_length=max_length)
        sig.changed = False  # the first declaration is already in every page that declares it
        signals = self.signals
        if not isinstance(signals, dict):
            signals = self.signals = {}
        signals[name] = sig
        self.registry.store.track(sig, new=new)  # other workers may hold a value already
        return sig

    def touch(self, sig: SharedSignal[Any]) -> None:
        """A signal changed: the scope needs a broadcast."""
        self.registry.on_change(self)

    def take_changes(self) -> dict[str, Any]:
        """The changed signals by browser id (with the revisions of writable ones), marked as sent."""
        out: dict[str, Any] = {}
        revisions: dict[str, int] | None = None
        for sig in self.signals.values():
            if sig.changed:
                out[sig.id] = sig.take_patch()
                if sig.writable:
                    if revisions is None:
                        revisions = {}
                    revisions[sig.id] = sig.revision
        if revisions:
            out[protocol.REVISION_SIGNAL] = revisions
        return out

    def restore_changes(self, changes: dict[str, Any]) -> None:
        """Mark the signals of ``changes`` (from :meth:`take_changes`) changed again: they were not sent."""
        if changes:
            for sig in self.signals.values():
                if sig.id in changes:
                    sig.changed = True

    def values(self) -> dict[str, Any]:
        return {sig.id: sig.value for sig in self.signals.values()}


class ScopeRegistry:
    """All scopes of one process: membership, shared signals and wildcard lookup."""

    __slots__ = ("_scopes", "on_change", "restored", "store")

    def __init__(self, on_change: Callable[[ScopeState], None]) -> None:
        self._scopes: dict[str, ScopeState] = {}
        self.on_change = on_change
        #: Where shared signals are shared (:mod:`pyvia.sharing`): nowhere else in one process.
        self.store: SharedStore = LOCAL_STORE
        #: Values saved at the last graceful stop, taken by the first declaration of each signal.
        self.restored: dict[tuple[str, str], Any] = {}

    def get(self, name: str) -> ScopeState | None:
        return self._scopes.get(name)

    def restore(self, values: Mapping[tuple[str, str], Any]) -> None:
        """Values saved at the last graceful stop, by (scope, name): a signal declared already
        (``app.signal`` at import, before the start read them) takes its value now, the others
        at their first declaration."""
        for key, value in values.items():
            state = self._scopes.get(key[0])
            sig = state.signals.get(key[1]) if state is not None else None
            if sig is None:
                self.restored[key] = value
            else:
                sig.restore(value)

    def saved_values(self) -> list[tuple[str, str, Any]]:
        """(scope, name, value) of every shared signal, declared or still waiting in ``restored``,
        once each: what a graceful stop keeps."""
        values = dict(self.restored)
        for state in self._scopes.values():
            for name, sig in state.signals.items():
                values[(state.name, name)] = sig.value
        return [(scope, name, value) for (scope, name), value in values.items()]

    def checkpoint(self) -> dict[str, dict[str, tuple[Any, int]]]:
        """Every shared signal's value and revision, by scope and name: what :meth:`rollback`
        puts back (a test client's next run starts as a new process of the same code would)."""
        return {
            name: {key: (copied(sig.value), sig.revision) for key, sig in state.signals.items()}
            for name, state in self._scopes.items()
        }

    def rollback(self, checkpoint: Mapping[str, Mapping[str, tuple[Any, int]]]) -> None:
        """Back to ``checkpoint``: scopes and signals declared since are dropped, the others hold
        their values and revisions again; values kept for a restore are forgotten."""
        self.restored.clear()
        for name, state in list(self._scopes.items()):
            kept = checkpoint.get(name)
            for key, sig in list(state.signals.items()):
                if kept is None or key not in kept:
                    self.store.untrack(sig)
                    if isinstance(state.signals, dict):
                        del state.signals[key]
                else:
                    value, revision = kept[key]
                    sig.restore(copied(value))
                    sig.revision = revision
            if kept is None:
                del self._scopes[name]

    def state(self, name: str) -> ScopeState:
        state = self._scopes.get(name)
        if state is None:
            state = self._scopes[name] = ScopeState(self, name)
        return state

    def join(self, ctx: Context, name: str) -> ScopeState:
        state = self.state(name)
        state.members[ctx.id] = ctx
        return state

    def leave(self, ctx: Context, name: str) -> None:
        state = self._scopes.get(name)
        if state is None:
            return
        if state.members.get(ctx.id) is ctx:
            del state.members[ctx.id]
        if not state.members and not state.kept:
            del self._scopes[name]
            for sig in state.signals.values():
                self.store.untrack(sig)

    def rename(self, old: str, new: str) -> None:
        """A session got a new id (``regenerate_session``): its scope goes on under the new name,
        with its members and the very signals its tabs declared (their values included)."""
        state = self._scopes.pop(old, None)
        if state is None:
            return
        store = self.store
        for sig in state.signals.values():
            store.untrack(sig)
        state.name = new
        joined = self._scopes.get(new)  # tabs of the new id that joined before the news came
        if joined is not None:
            state.members.update(joined.members)
        self._scopes[new] = state
        for sig in state.signals.values():
            store.track(sig)  # the value under the new name (created with this one if none yet)

    def matching(self, pattern: str) -> Iterator[ScopeState]:
        """Scopes named ``pattern``, or matching it where it holds ``*`` wildcards."""
        if "*" not in pattern:
            state = self._scopes.get(pattern)
            if state is not None:
                yield state
            return
        for name, state in list(self._scopes.items()):
            if fnmatch.fnmatchcase(name, pattern):
                yield state

    def __len__(self) -> int:
        return len(self._scopes)

    def __iter__(self) -> Iterator[ScopeState]:
        return iter(list(self._scopes.values()))


@functools.lru_cache(maxsize=4096)
def _session_scope(session_id: str) -> str:
    """The session's scope name (a hash of its id, which is a secret): the same on every view of it."""
    return "session:" + hashlib.sha256(session_id.encode()).hexdigest()[:32]
