"""Datastar's patches applied to the copy of the page a tab keeps: element patches to its markup,
signal patches to its signals.

Separate from the tab because it is string surgery with its own rules (Datastar's patch modes,
without morphing), which the tab only calls when an event arrives.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["SIMPLE_ID", "inner_of", "merge_signals", "patch_at", "replace_by_id"]

#: A selector a patch can target here: a single ``#id``.
SIMPLE_ID = re.compile(r"#[\w-]+\Z")


def merge_signals(target: dict[str, Any], patch: dict[str, Any]) -> None:
    """Merge a signals patch as Datastar does: None removes a signal, objects merge key by key."""
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            merge_signals(target[key], value)
        else:
            target[key] = value


def _element_span(markup: str, element_id: str) -> tuple[int, int, int, int] | None:
    """(outer start, inner start, inner end, outer end) of the element with ``element_id``."""
    m = re.search(r"<([a-zA-Z][\w-]*)\b[^>]*\bid=[\"']" + re.escape(element_id) + r"[\"'][^>]*>", markup)
    if not m:
        return None
    tag = m.group(1)
    depth = 1
    pos = m.end()
    tags = re.compile(rf"<(/?){tag}\b[^>]*>", re.IGNORECASE)
    for t in tags.finditer(markup, pos):
        depth += -1 if t.group(1) else 1
        if depth == 0:
            return m.start(), m.end(), t.start(), t.end()
    return None


def inner_of(markup: str, element_id: str) -> str:
    """The inner markup of the element with ``element_id`` (all of ``markup`` if there is none)."""
    span = _element_span(markup, element_id)
    return markup[span[1] : span[2]] if span else markup


def replace_by_id(markup: str, fragment: str) -> str:
    """Datastar's default patch: the fragment replaces the element that has its id."""
    m = re.match(r"\s*<[a-zA-Z][\w-]*\b[^>]*\bid=[\"']([^\"']+)[\"']", fragment)
    if not m:
        return markup
    span = _element_span(markup, m.group(1))
    if span is None:
        return markup
    return markup[: span[0]] + fragment + markup[span[3] :]


def patch_at(markup: str, element_id: str, mode: str, fragment: str) -> str:
    """Apply a patch at the element with ``element_id``, as Datastar's modes do (no morphing:
    the fragment replaces or joins the markup as it is)."""
    span = _element_span(markup, element_id)
    if span is None:
        return markup
    outer_start, inner_start, inner_end, outer_end = span
    if mode == "inner":
        return markup[:inner_start] + fragment + markup[inner_end:]
    if mode in ("outer", "replace"):
        return markup[:outer_start] + fragment + markup[outer_end:]
    if mode == "append":
        return markup[:inner_end] + fragment + markup[inner_end:]
    if mode == "prepend":
        return markup[:inner_start] + fragment + markup[inner_start:]
    if mode == "before":
        return markup[:outer_start] + fragment + markup[outer_start:]
    if mode == "after":
        return markup[:outer_end] + fragment + markup[outer_end:]
    if mode == "remove":
        return markup[:outer_start] + markup[outer_end:]
    return markup
