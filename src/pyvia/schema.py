"""The settings schema: each setting declares its type, unit, range, section and variable once.

A field of :class:`pyvia.config.Config` (or of the server's limits) is declared with
:func:`setting`, which keeps a :class:`Rule` in the dataclass field's metadata::

    connect_timeout: float = setting(30.0, unit="s", low=0)

:func:`specs` reads a class's fields into :class:`Spec` values and :func:`validate` is the one
validator: the dataclasses call it for their fields, and :mod:`pyvia.ops.settings` for every value
it reads from ``pyvia.toml``, ``PYVIA_<SECTION>__<KEY>`` variables, ``pyvia run --set`` and
keywords, so a rule is written once and applies wherever a value comes from.
"""

from __future__ import annotations

import dataclasses
import os
import types
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

__all__ = [
    "OutOfRange",
    "Rule",
    "Spec",
    "WrongType",
    "describe_type",
    "fits",
    "named_problem",
    "setting",
    "specs",
    "validate",
]

_T = TypeVar("_T")

#: Words for the units of :attr:`Rule.unit`, shown by ``pyvia config`` and the docs.
UNITS = {"s": "seconds", "bytes": "bytes", "/s": "per second", "path": "a file or folder", "": ""}


@dataclass(frozen=True, slots=True)
class Rule:
    """What one setting accepts besides its type: its unit, its range, where it is read from.

    ``low``/``high`` bound numbers (``above`` makes ``low`` itself refused: > rather than >=);
    ``what`` names the value in messages ("a number of connections"); ``check`` is a further rule
    that returns the value (normalised) or raises ValueError saying what is wrong; ``env`` is a
    variable the core itself reads when nothing else sets the option (``PYVIA_SECRET``).
    """

    unit: str = ""
    low: float | None = None
    high: float | None = None
    above: bool = False
    what: str = ""
    section: str = "app"
    env: str = ""
    check: Callable[[Any], Any] | None = None

    def range_text(self, what: str = "") -> str:
        """``"must be >= 0"``, ``"must be a number > 0"``, ``"must be a number of connections, 1..1000"``
        (``what`` is used when the rule names no :attr:`what` of its own); empty: no range."""
        what = self.what or what
        if self.low is not None and self.high is not None:
            return f"must be {what + ', ' if what else 'in '}{_num(self.low)}..{_num(self.high)}"
        if self.low is not None:
            return f"must be {what + ' ' if what else ''}{'>' if self.above else '>='} {_num(self.low)}"
        if self.high is not None:
            return f"must be {what + ' ' if what else ''}<= {_num(self.high)}"
        return ""


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


def setting(
    default: _T,
    *,
    unit: str = "",
    low: float | None = None,
    high: float | None = None,
    above: bool = False,
    what: str = "",
    section: str = "app",
    env: str = "",
    check: Callable[[Any], Any] | None = None,
) -> _T:
    """A dataclass field with ``default`` and its :class:`Rule` (for type checkers: the default)."""
    rule = Rule(unit, low, high, above, what, section, env, check)
    return dataclasses.field(default=default, metadata={"pyvia": rule})


class OutOfRange(ValueError):
    """A number outside its setting's range (the message is the value and :meth:`Rule.range_text`)."""


class WrongType(ValueError):
    """A value not of its setting's type (the message says what was expected and what came)."""


@dataclass(frozen=True, slots=True)
class Spec:
    """One setting: its key, type, default and :class:`Rule`; ``keyword`` is its name as a keyword
    argument (``db_url`` for ``[db] url``) and ``env_name`` its ``PYVIA_<SECTION>__<KEY>`` variable."""

    section: str
    name: str
    type: Any
    default: Any
    rule: Rule = Rule()
    prefix: str = ""

    @property
    def keyword(self) -> str:
        return self.prefix + self.name

    @property
    def env_name(self) -> str:
        return f"PYVIA_{self.section.upper()}__{self.name.upper()}"

    @property
    def unit(self) -> str:
        return self.rule.unit


_SPECS: dict[type, dict[str, Spec]] = {}


def specs(cls: type) -> dict[str, Spec]:
    """The :class:`Spec` of every field of the dataclass ``cls``, by name, in field order."""
    found = _SPECS.get(cls)
    if found is None:
        found = _SPECS[cls] = _read_specs(cls)
    return found


def _read_specs(cls: type) -> dict[str, Spec]:
    hints = typing.get_type_hints(cls)
    out: dict[str, Spec] = {}
    for f in dataclasses.fields(cls):
        rule = f.metadata.get("pyvia", Rule())
        default = (
            f.default
            if f.default is not dataclasses.MISSING
            else (f.default_factory() if f.default_factory is not dataclasses.MISSING else None)
        )
        out[f.name] = Spec(rule.section, f.name, hints[f.name], default, rule)
    return out


def validate(spec: Spec, value: Any) -> Any:
    """``value`` checked against ``spec`` (type, range, further rule) and normalised (a list becomes
    a tuple); raises ValueError (:class:`OutOfRange` for a number out of range) saying what is wrong,
    for the caller to prefix with the setting's name or source."""
    if not fits(value, spec.type):
        raise WrongType(f"expected {describe_type(spec.type)}, got {value!r} ({type(value).__name__})")
    if isinstance(value, list):
        value = tuple(value)
    rule = spec.rule
    if isinstance(value, int | float) and not isinstance(value, bool):
        low, high = rule.low, rule.high
        if (low is not None and (value <= low if rule.above else value < low)) or (high is not None and value > high):
            raise OutOfRange(f"{value!r}: {rule.range_text()}")
    if rule.check is not None and value is not None:
        value = rule.check(value)
    return value


def named_problem(spec: Spec, value: Any, exc: ValueError) -> str:
    """What :func:`validate` refused, worded for an option given by name (``App(...)``, ``[app]``):
    ``connect_timeout=-1: must be a number >= 0``; a further rule's message names the option itself."""
    if isinstance(exc, OutOfRange):
        return f"{spec.name}={value!r}: {spec.rule.range_text('a number')}"
    if isinstance(exc, WrongType):
        return f"{spec.name}: {exc}"
    return str(exc)


# --- value shapes ---------------------------------------------------------------------------------


def describe_type(tp: Any) -> str:
    """Words for a type: ``int | None`` is ``"an integer or nothing (null)"``."""
    if tp is Any:
        return "any value"
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(describe_type(a) for a in typing.get_args(tp))
    if origin is not None and origin in (Sequence, list, tuple):
        args = typing.get_args(tp)
        item = describe_type(args[0] if args else Any).removeprefix("a ").removeprefix("an ")
        if origin is tuple and args and Ellipsis not in args:
            return f"a list of {len(args)} {item}s"
        return f"a list of {item}s"
    if origin is dict or tp is dict:
        return "a table (dict)"
    if origin is os.PathLike:
        return "a path"
    return {
        str: "a string",
        bytes: "bytes",
        bool: "true or false",
        int: "an integer",
        float: "a number",
        type(None): "nothing (null)",
    }.get(tp, getattr(tp, "__name__", str(tp)))


def fits(value: Any, tp: Any) -> bool:
    """Whether ``value`` has the shape ``tp`` asks for (ints pass as floats, paths as strings)."""
    if tp is Any:
        return True
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        return any(fits(value, a) for a in typing.get_args(tp))
    if origin is not None and origin in (Sequence, list, tuple):
        args = typing.get_args(tp)
        if not isinstance(value, (list, tuple)):
            return False
        if origin is tuple and args and Ellipsis not in args:  # tuple[int, int, int]: that many
            return len(value) == len(args) and all(fits(v, a) for v, a in zip(value, args, strict=True))
        return all(fits(v, args[0] if args else Any) for v in value)
    if origin is dict or tp is dict:
        return isinstance(value, dict)
    if tp is type(None):
        return value is None
    if tp is bool:
        return isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if tp is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if tp is str:
        return isinstance(value, (str, os.PathLike))
    if isinstance(origin, type):  # Mapping[str, str], Callable[..., str], PathLike[str]: their class
        return isinstance(value, origin)
    return isinstance(value, tp) if isinstance(tp, type) else True


def accepts(tp: Any, simple: type) -> bool:
    """Whether ``tp`` is ``simple``, ``Any``, or a union with ``simple`` in it."""
    if tp is simple or tp is Any:
        return True
    origin = typing.get_origin(tp)
    return origin in (typing.Union, types.UnionType) and any(accepts(a, simple) for a in typing.get_args(tp))
