"""The Datastar 1.0 wire protocol: events out, signals in. Values in, bytes out; no I/O.

Invariants:

1. Every event is formatted so that user text can never end it early or forge another one:
   HTML is split on ``\\r\\n``, ``\\r`` and ``\\n`` and every line gets its own ``data:`` prefix;
   selectors and modes containing a line break are refused; JSON comes from orjson, which
   escapes control characters.
2. Parsing either returns a ``dict`` of signals or raises :class:`MalformedRequest`, never
   anything else.
"""

from __future__ import annotations

import re
from typing import Any

import orjson

from pyvia.errors import MalformedRequest, PayloadTooLarge

PATCH_ELEMENTS = "datastar-patch-elements"
PATCH_SIGNALS = "datastar-patch-signals"
DATASTAR_PARAM = "datastar"
CONTEXT_SIGNAL = "via_ctx"
DISCONNECTED_SIGNAL = "_disconnected"
#: ``{signal id: revision}`` of the server writes of writable signals the browser has applied;
#: it comes back with every action, so a value posted before a server write is dropped.
REVISION_SIGNAL = "via_rev"
#: The signed snapshot of the tab's server-owned signals; sent only when the stream revives.
SNAPSHOT_SIGNAL = "_via_snap"
#: Set by the server when it no longer holds the tab: the page then opens its stream with a POST
#: carrying its writable signals and its snapshot, and the tab is revived from them.
REVIVE_SIGNAL = "_via_revive"
#: What a framework action leaves out of its request (a pattern of signal ids): every ``_`` signal
#: while the stream is open, all but the snapshot while it is down or about to move (the server
#: that gets the action may then not hold the tab).
FILTER_SIGNAL = "_via_filter"
FILTER_OPEN = "(^|\\.)_"
FILTER_DOWN = "(^|\\.)_(?!via_snap)"

#: Datastar 1.0 element patch modes; ``outer`` is the default and is not sent.
MODES = frozenset({"outer", "inner", "replace", "prepend", "append", "before", "after", "remove"})

_PATCH_ELEMENTS_HEAD = b"event: " + PATCH_ELEMENTS.encode() + b"\n"
_PATCH_SIGNALS_HEAD = b"event: " + PATCH_SIGNALS.encode() + b"\ndata: signals "
_LINE_BREAK = re.compile(r"\r\n|\r|\n")
_KEEP_ALIVE = b": keep-alive\n\n"
_SCRIPT_END = re.compile(r"</(script)", re.IGNORECASE)

#: Bytes that open an SSE stream body; the comment makes proxies flush the head.
STREAM_PREAMBLE = b": via\n\n"
SSE_HEADERS: list[tuple[str, str]] = [
    ("content-type", "text/event-stream"),
    ("cache-control", "no-cache"),
    ("x-accel-buffering", "no"),
]


def patch_elements(html: str, selector: str | None = None, mode: str = "outer") -> bytes:
    """Format a ``datastar-patch-elements`` event."""
    parts = [_PATCH_ELEMENTS_HEAD]
    if selector is not None:
        if not selector or _LINE_BREAK.search(selector):
            raise ValueError(f"selector {selector!r} must be non-empty and on one line")
        parts.append(b"data: selector " + selector.encode() + b"\n")
    if mode != "outer":
        if mode not in MODES:
            raise ValueError(f"mode {mode!r} must be one of {sorted(MODES)}")
        parts.append(b"data: mode " + mode.encode() + b"\n")
    if html:
        for line in _LINE_BREAK.split(html):
            parts.append(b"data: elements " + line.encode() + b"\n")
    parts.append(b"\n")
    return b"".join(parts)


def patch_signals(signals: dict[str, Any]) -> bytes:
    """Format a ``datastar-patch-signals`` event (JSON merge patch; ``None`` removes a signal)."""
    return _PATCH_SIGNALS_HEAD + orjson.dumps(signals) + b"\n\n"


def execute_script(js: str) -> bytes:
    """Run ``js`` once in the page: Datastar 1.0 has no script event, so append a self-removing tag."""
    body = _SCRIPT_END.sub(r"<\\/\1", js)
    return patch_elements(f'<script data-effect="el.remove()">{body}</script>', "body", "append")


_RAW_EVENT_TYPES = frozenset({PATCH_ELEMENTS, PATCH_SIGNALS})
_RAW_FIELDS = ("data: ", "id: ", "retry: ", ":")


def check_events(events: str | bytes) -> bytes:
    """Validate whole Datastar events made elsewhere (e.g. by the datastar-py SDK) and return their bytes.

    Raises ValueError unless the text is one or more complete events of the two Datastar types,
    with nothing but ``data:``, ``id:``, ``retry:`` and comment lines after the ``event:`` line —
    so a line break smuggled into a selector cannot forge an extra event.
    """
    text = events.decode() if isinstance(events, bytes) else str(events)
    if "\r" in text or "\0" in text:
        raise ValueError("raw events must not contain CR or NUL")
    if not text.endswith("\n\n"):
        raise ValueError("raw events must end with a blank line")
    for block in text[:-2].split("\n\n"):
        lines = block.split("\n")
        kind = lines[0].removeprefix("event: ")
        if not lines[0].startswith("event: ") or kind not in _RAW_EVENT_TYPES:
            raise ValueError(f"raw event must start with one of {sorted(_RAW_EVENT_TYPES)}, got {lines[0]!r}")
        for line in lines[1:]:
            if not line.startswith(_RAW_FIELDS):
                raise ValueError(f"raw event line {line!r} is not a data, id, retry or comment line")
            if line.startswith("event:"):
                raise ValueError("one event per blank-line block")
    return text.encode()


def keep_alive() -> bytes:
    return _KEEP_ALIVE


# --- signals in --------------------------------------------------------------------------------

#: Payload limits: bytes of the JSON text, nesting depth, items of one object or list.
MAX_SIGNAL_BYTES = 4 << 20
MAX_SIGNAL_DEPTH = 16
MAX_SIGNAL_ITEMS = 10_000


def parse_signals(raw: bytes | str) -> dict[str, Any]:
    """Decode a Datastar signals payload: a JSON object within the payload limits.

    Raises :class:`PayloadTooLarge` past ``MAX_SIGNAL_BYTES`` and :class:`MalformedRequest` for
    anything else wrong, naming the signal where one is at fault; never anything else.
    """
    if not raw:
        return {}
    size = len(raw) if isinstance(raw, bytes) else len(raw.encode(errors="surrogatepass"))
    if size > MAX_SIGNAL_BYTES:
        raise PayloadTooLarge(f"signals payload of {size} bytes exceeds {MAX_SIGNAL_BYTES}")
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise MalformedRequest(f"signals are not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise MalformedRequest("signals must be a JSON object")
    if len(value) > MAX_SIGNAL_ITEMS:
        raise MalformedRequest(f"more than {MAX_SIGNAL_ITEMS:,} signals")
    for key, item in value.items():
        _check_shape(key, item, 1)
    return value


def _check_shape(key: str, value: Any, depth: int) -> None:
    if depth > MAX_SIGNAL_DEPTH:
        raise MalformedRequest(f"signal {key!r} is nested deeper than {MAX_SIGNAL_DEPTH}")
    if isinstance(value, dict):
        if len(value) > MAX_SIGNAL_ITEMS:
            raise MalformedRequest(f"signal {key!r} holds an object of more than {MAX_SIGNAL_ITEMS:,} keys")
        for item in value.values():
            _check_shape(key, item, depth + 1)
    elif isinstance(value, list):
        if len(value) > MAX_SIGNAL_ITEMS:
            raise MalformedRequest(f"signal {key!r} holds a list of more than {MAX_SIGNAL_ITEMS:,} items")
        for item in value:
            _check_shape(key, item, depth + 1)


# --- the page's seed -----------------------------------------------------------------------------

#: What Datastar's expression compiler would rewrite or split inside the seed's string literals:
#: ``@name(`` becomes an action call and ``$name`` a signal read, ``;`` splits statements, and its
#: escape markers start with U+1F595. Their JSON escapes mean the same string and contain none of them.
_SEED_ESCAPES = (
    (b"@", b"\\u0040"),
    (b"$", b"\\u0024"),
    (b";", b"\\u003b"),
    ("\U0001f595".encode(), b"\\ud83d\\udd95"),
    ("\u2028".encode(), b"\\u2028"),
    ("\u2029".encode(), b"\\u2029"),
)


def seed_json(signals: dict[str, Any]) -> str:
    """The signals of a page's ``data-signals`` attribute, as a JSON object Datastar evaluates to
    exactly these values whatever the strings hold (not yet HTML-escaped)."""
    raw = orjson.dumps(signals)
    for char, escape in _SEED_ESCAPES:
        if char in raw:
            raw = raw.replace(char, escape)
    return raw.decode()
