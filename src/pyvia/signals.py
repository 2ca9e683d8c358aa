"""Signals: values that live both in a tab's context and in the browser's Datastar store.

A signal's id is its name (validated once at declaration), so a revived context declares the
same ids and the page already in the browser keeps working. Names starting with ``_`` are
Datastar-local (never sent by the browser) and ``via_`` is reserved for the framework.
"""

from __future__ import annotations

import math
import re
from typing import Any, Generic, TypeVar

from markupsafe import Markup

from pyvia.errors import DeclarationError

T = TypeVar("T")

_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*\Z")
_RESERVED_PREFIX = "via_"

__all__ = ["Signal", "check_name"]


def check_name(kind: str, name: str, where: str) -> str:
    """Validate a signal or action name, or raise a DeclarationError that says how to fix it."""
    if not isinstance(name, str) or not _NAME.match(name):
        raise DeclarationError(
            f"{kind} name {name!r} in {where} must match [A-Za-z][A-Za-z0-9_]* "
            "(a letter first; no dots, dashes or spaces)"
        )
    if name.startswith(_RESERVED_PREFIX):
        raise DeclarationError(f"{kind} name {name!r} in {where}: the prefix 'via_' is reserved for pyvia")
    return name


class Signal(Generic[T]):
    """A reactive value of one tab. Assigning :attr:`value` marks it for the next sync.

    ``client_writable`` signals take the values the browser sends with each action or
    reconnect, after a type check against the declared initial value; refused values are
    neither stored nor echoed.
    """

    __slots__ = ("_changed", "_sent", "_value", "client_writable", "id", "name")

    def __init__(self, name: str, initial: T, *, client_writable: bool = True) -> None:
        self.name = name
        self.id = name
        self._value: T = initial
        self._sent: Any = initial  # what the browser holds, as far as this process knows
        self._changed = True
        self.client_writable = client_writable

    @property
    def value(self) -> T:
        return self._value

    @value.setter
    def value(self, new: T) -> None:
        self._value = new
        self._changed = True

    def set(self, new: T) -> None:
        """Set the value (same as assigning :attr:`value`)."""
        self.value = new

    @property
    def has_changed(self) -> bool:
        return self._changed

    def mark_synced(self) -> None:
        self._changed = False

    def take_patch(self) -> Any:
        """The value to send, now marked as sent. A dict that replaced a dict carries ``None`` for
        the keys it no longer has: Datastar merges a patch into what the browser holds (RFC 7396),
        so a key left out would stay there. (A dict changed in place cannot show what it lost.)"""
        value, sent = self._value, self._sent
        self._changed = False
        self._sent = value
        if type(value) is dict and type(sent) is dict and value is not sent:
            return merge_patch(sent, value)
        return value

    # typed reads ------------------------------------------------------------------------------
    def as_int(self, default: int = 0) -> int:
        try:
            return int(self._value)  # type: ignore[call-overload]  # any value may come from the client
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
        """The attribute that two-way binds an input to this signal: ``data-bind="id"``."""
        return Markup(f'data-bind="{self.id}"')

    def ref(self) -> str:
        """The Datastar expression naming this signal: ``$id``."""
        return "$" + self.id

    def __str__(self) -> str:
        return self.as_str()

    def __html__(self) -> str:
        return str(Markup.escape(self.as_str()))

    def __repr__(self) -> str:
        return f"Signal({self.name!r}, {self._value!r})"

    # client input -----------------------------------------------------------------------------
    def accept_client_value(self, value: Any) -> bool:
        """Store a value sent by the browser if it has the declared type; return whether it did."""
        current = self._value
        coerced = _coerce(current, value)
        if coerced is _REFUSED:
            return False
        self._value = self._sent = coerced  # the browser holds it already
        return True


_REFUSED = object()


def merge_patch(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """``new`` as a JSON merge patch over ``old``: the keys it lost (at any depth) set to None."""
    gone = [key for key in old if key not in new]
    nested = [key for key, value in new.items() if type(value) is dict and type(old.get(key)) is dict]
    if not gone and not nested:
        return new
    patch = dict(new)
    for key in gone:
        patch[key] = None
    for key in nested:
        patch[key] = merge_patch(old[key], new[key])
    return patch


def _coerce(current: Any, value: Any) -> Any:
    """Coerce ``value`` to the type of ``current``, or return ``_REFUSED``."""
    if current is None:
        return value
    if isinstance(current, bool):
        return value if isinstance(value, bool) else _REFUSED
    if isinstance(current, int):
        if isinstance(value, bool):
            return _REFUSED
        if isinstance(value, int):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str):
            try:
                return int(value.strip())
            except ValueError:
                return _REFUSED
        return _REFUSED
    if isinstance(current, float):
        try:
            if isinstance(value, str):
                number = float(value.strip())
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
