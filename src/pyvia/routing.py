"""Route patterns, compiled once at registration.

A pattern is a path with ``{name}`` placeholders, each matching one non-empty segment. Literal
routes are found with one dict lookup; patterned ones are tried in registration order.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pyvia.errors import RouteError
from pyvia.http import NO_PATH_PARAMS

_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
_RESERVED_PREFIXES = (
    "/_sse",
    "/_action/",
    "/_session/",
    "/_download/",
    "/_via",
    "/datastar.js",
    "/_health",
    "/_ready",
    "/metrics",
)

Middleware = Callable[..., Any]


@dataclass(slots=True)
class Route:
    """One registered route: a page (``kind == "page"``) or a plain HTTP handler."""

    pattern: str
    handler: Callable[..., Any]
    kind: str
    methods: frozenset[str]
    middleware: tuple[Middleware, ...] = ()
    title: str | None = None
    regex: re.Pattern[str] | None = None
    param_names: tuple[str, ...] = ()
    #: How the handler is called: (source, name, cast) per parameter, decided at registration.
    call_args: tuple[Any, ...] = field(default=())
    is_async: bool = False
    #: A page's words for failures (pyvia.alerts) and its alert element, made at registration.
    messages: dict[str, str] = field(default_factory=dict)
    alert: str = ""
    #: The view blocks whose first update was checked for elements Datastar cannot find by id.
    checked_blocks: set[str] = field(default_factory=set)


def compile_route(
    pattern: str,
    handler: Callable[..., Any],
    kind: str,
    methods: Sequence[str],
    middleware: Sequence[Middleware] = (),
    title: str | None = None,
) -> Route:
    if not pattern.startswith("/"):
        raise RouteError(f"route pattern {pattern!r} must start with '/'")
    if any(
        pattern == p.rstrip("/") or pattern.startswith(p if p.endswith("/") else p + "/") for p in _RESERVED_PREFIXES
    ):
        raise RouteError(f"route pattern {pattern!r} collides with a path pyvia reserves ({_RESERVED_PREFIXES})")
    names = tuple(_PLACEHOLDER.findall(pattern))
    if len(set(names)) != len(names):
        raise RouteError(f"route pattern {pattern!r} repeats a parameter name")
    regex = None
    if names:
        pieces, pos = [], 0
        for m in _PLACEHOLDER.finditer(pattern):
            pieces.append(re.escape(pattern[pos : m.start()]))
            pieces.append(f"(?P<{m.group(1)}>[^/]+)")
            pos = m.end()
        pieces.append(re.escape(pattern[pos:]))
        regex = re.compile("".join(pieces) + r"\Z")
    if "{" in _PLACEHOLDER.sub("", pattern) or "}" in _PLACEHOLDER.sub("", pattern):
        raise RouteError(f"route pattern {pattern!r} has a malformed placeholder; use {{name}}")
    return Route(
        pattern=pattern,
        handler=handler,
        kind=kind,
        methods=frozenset(m.upper() for m in methods),
        middleware=tuple(middleware),
        title=title,
        regex=regex,
        param_names=names,
        is_async=inspect.iscoroutinefunction(handler),
    )


class Router:
    """Finds the route for a path."""

    __slots__ = ("_by_pattern", "_literal", "_patterned")

    def __init__(self) -> None:
        self._literal: dict[str, list[Route]] = {}
        self._patterned: list[Route] = []
        self._by_pattern: dict[str, Route] = {}

    def add(self, route: Route) -> None:
        same = [r for r in (*self._literal.get(route.pattern, ()), *self._patterned) if r.pattern == route.pattern]
        for existing in same:
            if existing.kind == "page" or route.kind == "page" or existing.methods & route.methods:
                raise RouteError(f"route {route.pattern!r} is already registered")
        self._by_pattern.setdefault(route.pattern, route)
        if route.regex is None:
            self._literal.setdefault(route.pattern, []).append(route)
        else:
            self._patterned.append(route)

    def page(self, pattern: str) -> Route | None:
        """The page route registered under exactly this pattern (used by revival)."""
        route = self._by_pattern.get(pattern)
        return route if route is not None and route.kind == "page" else None

    def match(self, path: str) -> tuple[list[Route], Mapping[str, str]]:
        """Routes registered for ``path`` (all methods) and the path params."""
        routes = self._literal.get(path)
        if routes:
            return routes, NO_PATH_PARAMS
        found: list[Route] = []
        params: Mapping[str, str] = NO_PATH_PARAMS
        for route in self._patterned:
            assert route.regex is not None
            m = route.regex.match(path)
            if m:
                if not found:
                    params = m.groupdict()
                    found.append(route)
                elif route.pattern == found[0].pattern:
                    found.append(route)
        return found, params
