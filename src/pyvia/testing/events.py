"""The Datastar events a tab's stream carries, parsed from their SSE text.

Separate from the tab so that a test (or a benchmark) can parse a recorded stream on its own,
and so that the wire format is read in one place.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import orjson

from pyvia.protocol import PATCH_ELEMENTS
from pyvia.render import VIEW_CLOSE, VIEW_OPEN

__all__ = ["Event", "parse_events"]


@dataclass(slots=True)
class Event:
    """One parsed Datastar event."""

    type: str
    selector: str | None = None
    mode: str = "outer"
    elements: str = ""
    signals: dict[str, Any] = field(default_factory=dict)
    #: The event's ``id:`` field, if it has one (a tab's frames end with an event that only has one).
    id: str | None = None

    @property
    def view(self) -> str | None:
        """The inside of the page's view element, if this event patches the whole view, else None."""
        if self.type != PATCH_ELEMENTS or self.selector is not None or self.mode != "outer":
            return None
        elements = self.elements
        if elements.startswith(VIEW_OPEN) and elements.endswith(VIEW_CLOSE):
            return elements[len(VIEW_OPEN) : -len(VIEW_CLOSE)]
        return None

    @property
    def script(self) -> str | None:
        """The JavaScript of an execute-script event, else None."""
        m = re.fullmatch(r'<script data-effect="el.remove\(\)">(.*)</script>', self.elements, re.DOTALL)
        return m.group(1) if m and self.selector == "body" and self.mode == "append" else None


def parse_events(data: bytes) -> tuple[list[Event], bytes]:
    """Parse complete SSE events from ``data``; return them and the unparsed rest."""
    events = []
    text = data.decode()
    *complete, rest = text.split("\n\n")
    for block in complete:
        lines = [line for line in block.split("\n") if line and not line.startswith(":")]
        if not lines:
            continue
        ev = Event(type="")
        element_lines = []
        for line in lines:
            key, _, value = line.partition(": ")
            if key == "event":
                ev.type = value
            elif key == "id":
                ev.id = value
            elif key == "data":
                dkey, _, dval = value.partition(" ")
                if dkey == "selector":
                    ev.selector = dval
                elif dkey == "mode":
                    ev.mode = dval
                elif dkey == "elements":
                    element_lines.append(dval)
                elif dkey == "signals":
                    ev.signals = orjson.loads(dval)
        ev.elements = "\n".join(element_lines)
        events.append(ev)
    return events, rest.encode()
