"""How a handler's parameters are filled: the context, the request, or a path parameter of its type."""

from __future__ import annotations

import inspect
import math
import re
import typing
from collections.abc import Callable, Mapping
from typing import Any

from pyvia.context import Context
from pyvia.errors import DeclarationError, NotFound
from pyvia.http import Request
from pyvia.routing import Route

_PATH_INT = re.compile(r"-?[0-9]{1,19}\Z")
_PATH_FLOAT = re.compile(r"-?(?:[0-9]{1,300}(?:\.[0-9]{0,300})?|\.[0-9]{1,300})(?:[eE][-+]?[0-9]{1,3})?\Z")


def _path_int(text: str) -> int:
    """A whole number that fits 64 bits, in ASCII digits: what a database key can be. Anything
    else (thousands of digits, ``1_000``, other scripts' digits) is no such page (404)."""
    if _PATH_INT.match(text) is None:
        raise ValueError(text)
    value = int(text)
    if not -(2**63) <= value < 2**63:
        raise ValueError(text)
    return value


def _path_float(text: str) -> float:
    """A finite decimal number; ``nan``, ``inf`` and overflowing exponents are no such page."""
    if _PATH_FLOAT.match(text) is None:
        raise ValueError(text)
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(text)
    return value


_CASTS: dict[Any, Callable[[str], Any]] = {
    int: _path_int,
    float: _path_float,
    bool: lambda v: v.lower() in ("1", "true", "yes", "on"),
    str: str,
}


def binders(handler: Callable[..., Any], param_names: tuple[str, ...], path: str) -> tuple[tuple[str, str, Any], ...]:
    """Decide once how each handler parameter is filled: the context, the request or a path param."""
    try:
        hints = typing.get_type_hints(handler)
    except Exception:
        hints = {}
    out: list[tuple[str, str, Any]] = []
    for name, param in inspect.signature(handler).parameters.items():
        hint = hints.get(name)
        if hint is Context or (hint is None and name in ("c", "ctx", "context")):
            out.append(("context", name, None))
        elif hint is Request or name == "request":
            out.append(("request", name, None))
        elif name in param_names:
            out.append(("param", name, _CASTS.get(hint, str)))
        elif param.default is param.empty:
            raise DeclarationError(
                f"handler {getattr(handler, '__name__', handler)!r} for {path!r} has a parameter {name!r} "
                "that is neither the context, the request nor a path parameter"
            )
    return tuple(out)


def bind(route: Route, params: Mapping[str, str], ctx: Context | None, request: Request) -> dict[str, Any]:
    kwargs: dict[str, Any] = {}
    for source, name, cast in route.call_args:
        if source == "context":
            if ctx is None:
                raise DeclarationError(f"plain route {route.pattern!r} cannot take a Context")
            kwargs[name] = ctx
        elif source == "request":
            kwargs[name] = request
        else:
            try:
                kwargs[name] = cast(params[name])
            except (ValueError, KeyError):
                raise NotFound(f"path parameter {name!r} has the wrong form") from None
    return kwargs
