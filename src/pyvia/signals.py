"""Signals: values that live both in a tab's context and in the browser's Datastar store.

A signal is **server-owned** unless declared ``writable=True``. The server never takes the
browser's value of a server-owned signal, and the browser never sends one: its id in the
browser's store starts with ``_``, which Datastar leaves out of every request. A writable signal
(an input the user edits) keeps its name as its id, and its value comes back with each action.

Every server write of a writable signal bumps its ``revision``; the revision travels with the
value (``via_rev``), and a value the browser posted before it saw that write is dropped. So the
server's write wins over a post that crossed it, at any network latency.

A signal's id is derived from its name only, so a revived context declares the same ids and the
page already in the browser keeps working. ``via_`` is reserved for the framework.
"""

from __future__ import annotations

import copy
import math
import re
from collections.abc import Mapping
from typing import Any, Generic, TypeVar

from markupsafe import Markup, escape

from pyvia.errors import DeclarationError, SignalTooLarge

T = TypeVar("T")

_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*\Z")
_RESERVED_PREFIX = "via_"
#: Names that passed :func:`check_name` (the same for both kinds), at most ``_VALID_KEPT``.
_VALID_NAMES: set[str] = set()
_VALID_KEPT = 4096
#: The largest integer a browser holds exactly (JavaScript numbers are doubles).
MAX_SAFE_INTEGER = (1 << 53) - 1
#: What a writable signal accepts unless declared with ``max_length``: characters of a string,
#: items of a list or dict.
DEFAULT_MAX_LENGTH = 1 << 18

__all__ = ["DEFAULT_MAX_LENGTH", "MAX_SAFE_INTEGER", "Signal", "check_name", "owned_values", "wire_id"]


def check_name(kind: str, name: str, where: str) -> str:
    """Validate a signal or action name, or raise a DeclarationError that says how to fix it."""
    if type(name) is str and name in _VALID_NAMES:  # a page declares the same names on every view
        return name
    if not isinstance(name, str) or not _NAME.match(name):
        raise DeclarationError(
            f"{kind} name {name!r} in {where} must match [A-Za-z][A-Za-z0-9_]* "
            "(a letter first; no dots, dashes or spaces)"
        )
    if name.startswith(_RESERVED_PREFIX):
        raise DeclarationError(f"{kind} name {name!r} in {where}: the prefix 'via_' is reserved for pyvia")
    if len(_VALID_NAMES) >= _VALID_KEPT:
        _VALID_NAMES.clear()
    _VALID_NAMES.add(name)
    return name


def wire_id(key: str, writable: bool) -> str:
    """The id in the browser's store: ``key`` for a writable signal, ``_key`` for a server-owned one
    (Datastar never sends signals whose name starts with ``_``)."""
    return key if writable else "_" + key


class Signal(Generic[T]):
    """A reactive value of one tab. Assigning :attr:`value` marks it for the next sync.

    A ``writable`` signal takes the values the browser sends with each action, after a type check
    against its current value and its ``max_length``; refused values are neither stored nor echoed.
    """

    __slots__ = ("_sent", "_value", "acked", "changed", "id", "max_length", "name", "revision", "writable")

    def __init__(
        self, name: str, initial: T, *, writable: bool = False, max_length: int | None = None, key: str | None = None
    ) -> None:
        self.name = name
        self.id = wire_id(key or name, writable)
        self._value: T = initial
        self._sent: Any = initial  # what the browser holds, as far as this process knows
        #: Changed since it was last sent to the browser (the next frame carries it).
        self.changed = True
        self.writable = writable
        #: Server writes of a writable signal so far; the browser echoes the one it has seen.
        self.revision = 0
        #: The revision the browser said it had seen when it last posted this value: a full resend
        #: leaves out a value whose every write the browser has (it may have typed on since).
        self.acked = 0
        self.max_length = DEFAULT_MAX_LENGTH if max_length is None else max_length

    @property
    def value(self) -> T:
        return self._value

    @value.setter
    def value(self, new: T) -> None:
        self._value = new
        self.changed = True
        if self.writable:
            self.revision += 1

    def set(self, new: T) -> None:
        """Set the value (same as assigning :attr:`value`)."""
        self.value = new

    @property
    def has_changed(self) -> bool:
        return self.changed

    def mark_synced(self) -> None:
        self.changed = False

    def take_whole(self) -> Any:
        """The value to send whole (a page's seed, a full resend), now marked as sent."""
        self._sent = value = self._value
        self.changed = False
        return value

    def reset(self, initial: Any) -> None:
        """Start again from ``initial``, as the browser will (a page that declares the signal again)."""
        self._value = self._sent = initial
        self.changed = True

    def restore(self, value: Any) -> None:
        """Hold ``value`` as the server's, to be sent: a revival's, another worker's, a redeclaration's.
        Unlike a write of :attr:`value` it is no new write (the revision stays)."""
        self._value = value
        self.changed = True

    def take_patch(self) -> Any:
        """The value to send, now marked as sent. A dict that replaced a dict carries ``""`` for
        the keys it no longer has: Datastar merges a patch into what the browser holds (RFC 7396),
        so a key left out would stay there, and a key it deletes (``null``) stays on screen, as the
        expressions that read it never run again. (A dict changed in place cannot show what it lost.)"""
        value, sent = self._value, self._sent
        self.changed = False
        self._sent = value
        if type(value) is dict and type(sent) is dict and value is not sent:
            return merge_patch(sent, value)  # type: ignore[arg-type]  # type() is dict, as mypy cannot see
        return value

    # typed reads ------------------------------------------------------------------------------
    def as_int(self, default: int = 0) -> int:
        try:
            return int(self._value)  # type: ignore[call-overload, no-any-return]  # any value may come from the client
        except (TypeError, ValueError, OverflowError):
            return default

    def as_float(self, default: float = 0.0) -> float:
        try:
            return float(self._value)  # type: ignore[arg-type]  # any value may come from the client
        except (TypeError, ValueError, OverflowError):
            return default

    def as_str(self) -> str:
        return "" if self._value is None else str(self._value)

    def as_bool(self) -> bool:
        v = self._value
        if isinstance(v, str):
            return v.strip().lower() in ("true", "1", "yes", "on")
        return bool(v)

    # template helpers -------------------------------------------------------------------------
    def bind(self) -> Markup:
        """The attribute that two-way binds an input to this signal: ``data-bind="id"``.

        Only a writable signal can be bound: what the user types into a server-owned one would
        never reach the server.
        """
        if not self.writable:
            raise DeclarationError(
                f"signal {self.name!r} is server-owned, so an input bound to it would never reach the server; "
                f"declare it with writable=True to bind an input"
            )
        return Markup(f'data-bind="{self.id}"')

    def ref(self) -> str:
        """The Datastar expression naming this signal: ``$id``."""
        return "$" + self.id

    def __str__(self) -> str:
        return self.as_str()

    def __html__(self) -> Markup:
        return escape(self.as_str())

    def __repr__(self) -> str:
        return f"Signal({self.name!r}, {self._value!r})"

    # client input -----------------------------------------------------------------------------
    def accept_client_value(self, value: Any) -> bool:
        """Store a value sent by the browser if it has the declared type; return whether it did.

        Raises :class:`~pyvia.errors.SignalTooLarge` for a value over ``max_length``: the user
        sent it on purpose, so it is refused out loud rather than dropped.
        """
        kind = type(value)
        if kind is int or kind is bool or kind is float or value is None:
            pass  # no length to check (type() first: isinstance with a tuple costs more on every action)
        elif isinstance(value, (str, list, dict)) and len(value) > self.max_length:
            unit = "characters" if isinstance(value, str) else "items"
            raise SignalTooLarge(
                f"signal {self.name!r} got {len(value):,} {unit}; it takes at most {self.max_length:,}",
                signal=self.name,
            )
        coerced = _coerce(self._value, value)
        if coerced is _REFUSED:
            return False
        self._value = self._sent = coerced  # the browser holds it already
        return True


_REFUSED = object()


def copied(value: Any) -> Any:
    """A deep copy of ``value``, or ``value`` itself where it cannot be copied (a lock, a handle)."""
    try:
        return copy.deepcopy(value)
    except Exception:
        return value


def owned_values(signals: Mapping[str, Signal[Any]]) -> dict[str, Any]:
    """The values of the server-owned ones of ``signals``, by name (what a tab's snapshot holds)."""
    values = {}
    for name, sig in signals.items():  # a loop: cheaper than a comprehension's frame
        if not sig.writable:
            values[name] = sig._value
    return values


def merge_patch(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """``new`` as a merge patch over ``old``, the keys it lost (at any depth) set to ``""``: what
    an expression reads for a key the browser lacks, and unlike ``null`` it re-runs them."""
    gone = [key for key in old if key not in new]
    nested = [key for key, value in new.items() if type(value) is dict and type(old.get(key)) is dict]
    if not gone and not nested:
        return new
    patch = dict(new)
    for key in gone:
        patch[key] = ""
    for key in nested:
        patch[key] = merge_patch(old[key], new[key])
    return patch


def _coerce(current: Any, value: Any) -> Any:
    """Coerce ``value`` to the type of ``current``, or return ``_REFUSED``.

    Total: any JSON value gives a value that renders and serialises, or ``_REFUSED``. Integers
    stay within what a browser holds exactly (``MAX_SAFE_INTEGER``), floats are finite.
    """
    if current is None:
        return value
    kind = type(current)
    if kind is type(value) and (kind is str or kind is list or kind is dict):
        return value  # the same type, as most posts send: what the chain below returns too
    if kind is int and type(value) is int:
        return value if -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER else _REFUSED
    if isinstance(current, bool):
        return value if isinstance(value, bool) else _REFUSED
    if isinstance(current, int):
        return _client_int(value)
    if isinstance(current, float):
        try:
            if isinstance(value, str):
                number = float(value.strip()) if len(value) <= 64 else math.inf
            elif isinstance(value, (int, float)) and not isinstance(value, bool):
                number = float(value)
            else:
                return _REFUSED
        except (ValueError, OverflowError):
            return _REFUSED
        return number if math.isfinite(number) else _REFUSED
    if isinstance(current, str):
        if isinstance(value, str):
            return value
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return str(value)
        return _REFUSED
    if isinstance(current, list):
        return value if isinstance(value, list) else _REFUSED
    if isinstance(current, dict):
        return value if isinstance(value, dict) else _REFUSED
    return value


def _client_int(value: Any) -> Any:
    """An integer from the browser (a number, or the text of one), if a browser can hold it exactly."""
    if isinstance(value, bool):
        return _REFUSED
    if isinstance(value, float):
        if not value.is_integer():
            return _REFUSED
        value = int(value)
    elif isinstance(value, str):
        text = value.strip()
        if not 0 < len(text) <= 17:  # 2**53 has 16 digits; a sign makes 17
            return _REFUSED
        try:
            value = int(text)
        except ValueError:
            return _REFUSED
    elif not isinstance(value, int):
        return _REFUSED
    return value if -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER else _REFUSED
