"""Typed action arguments: ``def toggle(item_id: int)`` called from a view as ``toggle(item_id=3)``.

The view binds the arguments when it renders: each goes into the action's URL as JSON
(``/_action/toggle?item_id=3``), so the click posts exactly what the view showed. When the action
runs, each argument is decoded and converted by the parameter's annotation; a missing, unknown
or ill-typed one answers 400 naming the action, the argument and what it expected, and the
action does not run. Arguments come from the browser: they are user input, to authorize like
any other (a user can edit a URL).

Supported annotations: ``int``, ``float``, ``str``, ``bool``, ``None``, enums, ``Literal``,
``X | None``, ``list[X]``, ``tuple[X, ...]``, ``dict[str, X]``, dataclasses, pydantic models (when
pydantic is installed), and ``Any`` or no annotation (the JSON value as it came).

The shape of a function is read once per code object, not per page view.
"""

from __future__ import annotations

import dataclasses
import enum
import inspect
import math
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import orjson

from pyvia.errors import DeclarationError, MalformedRequest
from pyvia.signals import MAX_SAFE_INTEGER

__all__ = ["ArgumentError", "Parameters", "encode_arguments", "parameters_of"]

#: Names a first parameter takes the Context by, when it is not annotated.
_CONTEXT_NAMES = frozenset({"c", "ctx", "context"})
_MISSING = object()


class ArgumentError(MalformedRequest):
    """An action argument the browser sent is missing, unknown or of the wrong type (400)."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.public_message = detail


@dataclass(frozen=True, slots=True)
class Parameter:
    name: str
    annotation: Any
    required: bool


@dataclass(frozen=True, slots=True)
class Parameters:
    """How an action is called: whether it takes the Context, and its typed arguments."""

    takes_context: bool
    arguments: tuple[Parameter, ...]

    @property
    def names(self) -> frozenset[str]:
        return frozenset(p.name for p in self.arguments)


#: A memo of ``_inspect`` by code object: every closure a page handler makes on a view shares its
#: code, so the (slow) signature is read once per action in the program, not once per page view.
_SHAPES: dict[types.CodeType, Parameters] = {}
_SHAPES_KEPT = 4096


def parameters_of(fn: Callable[..., Any], where: str) -> Parameters:
    """The parameters of an action (by code object: a page declares its actions on every view)."""
    code = getattr(getattr(fn, "__func__", fn), "__code__", None)
    if code is None:  # a callable object: read it each time
        return _inspect(fn, where)
    shape = _SHAPES.get(code)
    if shape is None:
        if len(_SHAPES) >= _SHAPES_KEPT:
            _SHAPES.clear()
        shape = _SHAPES[code] = _inspect(fn, where)
    return shape


def _inspect(fn: Callable[..., Any], where: str) -> Parameters:
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return Parameters(False, ())
    try:
        hints = typing.get_type_hints(fn)
    except Exception:  # an annotation that does not resolve: use them as written
        hints = {}
    params = list(signature.parameters.values())
    takes_context = False
    if params and params[0].kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD):
        first = params[0]
        hint = hints.get(first.name, first.annotation)
        if _is_context(hint) or (hint is inspect.Parameter.empty and first.name in _CONTEXT_NAMES):
            takes_context = True
            params = params[1:]
        elif hint is inspect.Parameter.empty and len(params) == 1 and first.default is first.empty:
            takes_context = True  # ``def act(c)``: the one unannotated parameter is the Context
            params = []
    arguments = []
    for p in params:
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD, p.POSITIONAL_ONLY):
            raise DeclarationError(
                f"action {where}: parameter {p.name!r} must be a plain or keyword-only "
                "parameter (the browser sends arguments by name)"
            )
        arguments.append(Parameter(p.name, hints.get(p.name, Any), p.default is p.empty))
    return Parameters(takes_context, tuple(arguments))


def _is_context(hint: Any) -> bool:
    from pyvia.context import Context  # the context module imports this one

    return hint is Context or hint == "Context"


def check_argument_names(action_name: str, shape: Parameters, names: Iterable[str]) -> None:
    """Raise DeclarationError when a view binds an argument the action does not take."""
    unknown = sorted(set(names) - shape.names)
    if unknown:
        raise DeclarationError(
            f"action {action_name!r} has no argument {unknown[0]!r}; it takes {sorted(shape.names) or 'none'}"
        )


def encode_arguments(action_name: str, shape: Parameters, values: Mapping[str, Any]) -> str:
    """The query string that carries ``values`` for the action (raises DeclarationError on misuse)."""
    check_argument_names(action_name, shape, values)
    parts = []
    for name, value in values.items():
        try:
            text = orjson.dumps(_jsonable(value), option=orjson.OPT_NON_STR_KEYS)
        except TypeError as exc:
            raise DeclarationError(f"action {action_name!r} argument {name!r}: {exc}") from None
        parts.append(f"{quote(name, safe='')}={quote(text, safe='')}")
    return "&".join(parts)


def _jsonable(value: Any) -> Any:
    dump = getattr(value, "model_dump", None)  # a pydantic model
    if callable(dump) and not isinstance(value, type):
        return dump(mode="json")
    return value


def decode_arguments(action_name: str, shape: Parameters, query: Mapping[str, str]) -> dict[str, Any]:
    """The keyword arguments for a call, from the request's query; raises ArgumentError."""
    out: dict[str, Any] = {}
    for p in shape.arguments:
        raw = query.get(p.name)
        if raw is None:
            if p.required:
                raise ArgumentError(f"action {action_name!r} needs its argument {p.name!r}")
            continue
        try:
            value = orjson.loads(raw)
        except orjson.JSONDecodeError:
            raise ArgumentError(f"action {action_name!r} argument {p.name!r} is not JSON: {raw[:80]!r}") from None
        converted = _convert(p.annotation, value)
        if converted is _MISSING:
            raise ArgumentError(
                f"action {action_name!r} argument {p.name!r} must be {_describe(p.annotation)}, not {_shown(raw)}"
            )
        out[p.name] = converted
    return out


def _shown(raw: str) -> str:
    """The value as it was sent (``1e3``, not the ``1000.0`` it decodes to), cut to 80 characters."""
    return raw if len(raw) <= 80 else raw[:77] + "..."


def _describe(annotation: Any) -> str:
    name = getattr(annotation, "__name__", None)
    return f"{'an' if (name or 'x')[0] in 'aeiou' else 'a'} {name}" if name else str(annotation)


def _convert(annotation: Any, value: Any) -> Any:  # one branch per kind of annotation
    """``value`` (decoded JSON) as ``annotation`` says, or ``_MISSING``."""
    if annotation is Any or annotation is inspect.Parameter.empty:
        return value
    if annotation is None or annotation is type(None):
        return None if value is None else _MISSING
    origin = typing.get_origin(annotation)
    if origin is typing.Union or origin is types.UnionType:
        for option in typing.get_args(annotation):
            converted = _convert(option, value)
            if converted is not _MISSING:
                return converted
        return _MISSING
    if origin is typing.Literal:
        for option in typing.get_args(annotation):
            if value == option and type(value) is type(option):
                return option
        return _MISSING
    if origin in (list, tuple, set, frozenset) and isinstance(value, list):
        args = typing.get_args(annotation)
        item_type = args[0] if args else Any
        if origin is tuple and args and (len(args) != 2 or args[1] is not Ellipsis):
            if len(args) != len(value):
                return _MISSING
            items = [_convert(t, v) for t, v in zip(args, value, strict=True)]
        else:
            items = [_convert(item_type, v) for v in value]
        return _MISSING if any(i is _MISSING for i in items) else origin(items)
    if origin is dict and isinstance(value, dict):
        args = typing.get_args(annotation)
        item_type = args[1] if len(args) == 2 else Any
        entries = {k: _convert(item_type, v) for k, v in value.items()}
        return _MISSING if any(i is _MISSING for i in entries.values()) else entries
    if origin is not None:
        return _MISSING
    if annotation is bool:
        return value if isinstance(value, bool) else _MISSING
    if annotation is int:
        if isinstance(value, bool) or not isinstance(value, int) or abs(value) > MAX_SAFE_INTEGER:
            return _MISSING
        return value
    if annotation is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            return _MISSING
        return float(value)
    if annotation is str:
        return value if isinstance(value, str) else _MISSING
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        try:
            return annotation(value)
        except ValueError:
            return annotation.__members__.get(value, _MISSING) if isinstance(value, str) else _MISSING
    if dataclasses.is_dataclass(annotation) and isinstance(annotation, type) and isinstance(value, dict):
        return _dataclass(annotation, value)
    validate = getattr(annotation, "model_validate", None)
    if callable(validate):  # a pydantic model
        try:
            return validate(value)
        except Exception:
            return _MISSING
    return value if isinstance(annotation, type) and isinstance(value, annotation) else _MISSING


def _dataclass(cls: type, value: dict[str, Any]) -> Any:
    try:
        hints = typing.get_type_hints(cls)
    except Exception:
        hints = {}
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.name in value:
            converted = _convert(hints.get(f.name, Any), value[f.name])
            if converted is _MISSING:
                return _MISSING
            kwargs[f.name] = converted
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            return _MISSING
    if set(value) - set(kwargs):
        return _MISSING
    return cls(**kwargs)
