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

import html as _html
import json
import re
from collections.abc import Iterable, Mapping, Sequence
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
#: Namespaces the shipped client (v1.0.1) creates new elements in; ``html`` is the default.
NAMESPACES = frozenset({"html", "svg", "mathml"})
#: The SSE reconnection delay the client assumes (SDK spec ``sseRetryDuration``), never sent.
DEFAULT_RETRY_MS = 1000

_PATCH_ELEMENTS_HEAD = b"event: " + PATCH_ELEMENTS.encode() + b"\n"
_PATCH_SIGNALS_EVENT = b"event: " + PATCH_SIGNALS.encode() + b"\n"
_PATCH_SIGNALS_HEAD = _PATCH_SIGNALS_EVENT + b"data: signals "
_LINE_BREAK = re.compile(r"\r\n|\r|\n")
_ONE_LINE = re.compile(r"[^\r\n\0]*\Z")
_ATTRIBUTE_NAME = re.compile(r"[^\s\"'>/=\0]+\Z")
_KEEP_ALIVE = b": keep-alive\n\n"
_SCRIPT_END = re.compile(r"</(script)", re.IGNORECASE)
_AUTO_REMOVE = ' data-effect="el.remove()"'

#: Bytes that open an SSE stream body; the comment makes proxies flush the head.
STREAM_PREAMBLE = b": via\n\n"
SSE_HEADERS: list[tuple[str, str]] = [
    ("content-type", "text/event-stream"),
    ("cache-control", "no-cache"),
    ("x-accel-buffering", "no"),
]


def _head(event: bytes, event_id: str | None, retry: int | None) -> bytes:
    """The ``event:`` line and, in the spec's order, the optional ``id:`` and ``retry:`` lines."""
    if event_id is None and retry is None:
        return event
    parts = [event]
    if event_id is not None:
        if not isinstance(event_id, str) or not event_id or not _ONE_LINE.match(event_id):
            raise ValueError(f"event_id {event_id!r} must be a non-empty string on one line, without NUL")
        parts.append(b"id: " + event_id.encode() + b"\n")
    if retry is not None:
        if type(retry) is not int or retry < 0:
            raise ValueError(f"retry {retry!r} must be a whole number of milliseconds >= 0")
        if retry != DEFAULT_RETRY_MS:
            parts.append(b"retry: %d\n" % retry)
    return b"".join(parts)


def patch_elements(
    html: str = "",
    selector: str | None = None,
    mode: str = "outer",
    *,
    namespace: str = "html",
    use_view_transition: bool = False,
    event_id: str | None = None,
    retry: int | None = None,
) -> bytes:
    """Format a ``datastar-patch-elements`` event; options at their default are not sent.

    ``retry`` is the browser's reconnection delay in milliseconds (1000, the default, is not sent).
    Raises ValueError for a selector, mode, namespace or event id the client could not read.
    """
    parts = [_head(_PATCH_ELEMENTS_HEAD, event_id, retry)]
    if selector is not None:
        if not selector or _LINE_BREAK.search(selector):
            raise ValueError(f"selector {selector!r} must be non-empty and on one line")
        parts.append(b"data: selector " + selector.encode() + b"\n")
    if mode != "outer":
        if mode not in MODES:
            raise ValueError(f"mode {mode!r} must be one of {sorted(MODES)}")
        parts.append(b"data: mode " + mode.encode() + b"\n")
    if use_view_transition:
        parts.append(b"data: useViewTransition true\n")
    if namespace != "html":
        if namespace not in NAMESPACES:
            raise ValueError(f"namespace {namespace!r} must be one of {sorted(NAMESPACES)}")
        parts.append(b"data: namespace " + namespace.encode() + b"\n")
    if html:
        parts.append(_data_lines("data: elements ", html))
    parts.append(b"\n")
    return b"".join(parts)


def _data_lines(field: str, text: str) -> bytes:
    """``text`` as ``data:`` lines of one field, each ending with a line feed: every line break
    of SSE (CR LF, CR, LF) starts a new line. Replaced in one pass, not split line by line: a
    view written over fifty lines is formatted in a ninth of the time."""
    if type(text) is not str:
        text = str(text)  # a Markup would escape what replace() puts in
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    return (field + text.replace("\n", "\n" + field) + "\n").encode()


def remove_elements(
    selector: str,
    *,
    use_view_transition: bool = False,
    event_id: str | None = None,
    retry: int | None = None,
) -> bytes:
    """Remove the elements ``selector`` matches (a patch in ``remove`` mode; v1.0.1 needs a selector)."""
    return patch_elements(
        "", selector, "remove", use_view_transition=use_view_transition, event_id=event_id, retry=retry
    )


def patch_signals(
    signals: Mapping[str, Any] | str | bytes,
    *,
    only_if_missing: bool = False,
    event_id: str | None = None,
    retry: int | None = None,
) -> bytes:
    """Format a ``datastar-patch-signals`` event: a JSON merge patch (``None`` removes a signal).

    ``signals`` is a mapping (encoded with orjson) or JSON text made elsewhere, which must be one
    object; each of its lines gets its own ``data: signals`` prefix. ``only_if_missing``: the
    browser keeps the signals it already has.
    """
    if type(signals) is dict and not only_if_missing and event_id is None and retry is None:
        return _PATCH_SIGNALS_HEAD + orjson.dumps(signals) + b"\n\n"  # the hot path (a tab's changed signals)
    if isinstance(signals, (str, bytes)):
        raw = signals.encode() if isinstance(signals, str) else signals
        try:
            value = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise ValueError(f"signals are not valid JSON: {exc}") from None
        if not isinstance(value, dict):
            raise ValueError("signals must be one JSON object")
        lines = [b"data: signals " + line + b"\n" for line in raw.strip().splitlines()]
    else:
        if not only_if_missing and event_id is None and retry is None:
            return _PATCH_SIGNALS_HEAD + orjson.dumps(signals) + b"\n\n"  # the hot path
        lines = [b"data: signals " + orjson.dumps(signals) + b"\n"]
    head = _head(_PATCH_SIGNALS_EVENT, event_id, retry)
    flag = b"data: onlyIfMissing true\n" if only_if_missing else b""
    return b"".join((head, flag, *lines, b"\n"))


def removal_patch(paths: str | Iterable[str]) -> dict[str, Any]:
    """The merge patch that removes signals by dotted path (``"user.email"``): ``None`` leaves.

    Raises ValueError for an empty path or segment.
    """
    out: dict[str, Any] = {}
    for path in [paths] if isinstance(paths, str) else paths:
        segments = path.split(".") if isinstance(path, str) else [""]
        if not all(segments):
            raise ValueError(f"signal path {path!r} must be names joined by dots, like 'user.email'")
        node = out
        for name in segments[:-1]:
            if name not in node:
                node[name] = {}
            child = node[name]
            if child is None:  # a removed parent already covers its children
                break
            node = child
        else:
            node[segments[-1]] = None
    if not out:
        raise ValueError("remove_signals needs at least one signal path")
    return out


def remove_signals(paths: str | Iterable[str], *, event_id: str | None = None, retry: int | None = None) -> bytes:
    """Remove signals from the browser's store by dotted path."""
    return patch_signals(removal_patch(paths), event_id=event_id, retry=retry)


def script_tag(
    js: str, *, auto_remove: bool = True, attributes: Mapping[str, str] | Sequence[str] | None = None
) -> str:
    """The ``<script>`` element of an execute-script patch: ``attributes`` (a mapping, escaped, or
    the spec's list of ``name="value"`` strings, written as given) then the self-removal."""
    attrs = ""
    if attributes:
        if isinstance(attributes, Mapping):
            for name, value in attributes.items():
                if not isinstance(name, str) or not _ATTRIBUTE_NAME.match(name):
                    raise ValueError(f"script attribute name {name!r} is not a valid attribute name")
                attrs += f' {name}="{_html.escape(str(value), quote=True)}"'
        else:
            for item in attributes:
                if not isinstance(item, str) or not item.strip() or ">" in item or "<" in item or "\0" in item:
                    raise ValueError(f"script attribute {item!r} must be like 'type=\"module\"', without < or >")
                attrs += " " + item.strip()
    body = _SCRIPT_END.sub(r"<\\/\1", js)
    return f"<script{attrs}{_AUTO_REMOVE if auto_remove else ''}>{body}</script>"


def execute_script(
    js: str,
    *,
    auto_remove: bool = True,
    attributes: Mapping[str, str] | Sequence[str] | None = None,
    event_id: str | None = None,
    retry: int | None = None,
) -> bytes:
    """Run ``js`` once in the page: Datastar 1.0 has no script event, so append a script tag to
    ``<body>`` that (with ``auto_remove``, the default) removes itself once it ran."""
    return patch_elements(
        script_tag(js, auto_remove=auto_remove, attributes=attributes), "body", "append", event_id=event_id, retry=retry
    )


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


# --- a tab's frame ids ---------------------------------------------------------------------------


def frame_id(epoch: str, seq: int) -> bytes:
    """The id event that ends a tab's frame ``seq``: ``id: EPOCH.SEQ`` and a blank line.

    It is an event of its own (no type, so Datastar dispatches nothing), after the frame's last
    event: the browser takes the id as its last-event-id only once every event before it was
    applied, so a connection cut anywhere inside a frame leaves the previous id.
    """
    return b"id: %s.%d\n\n" % (epoch.encode(), seq)


def parse_frame_id(text: str | None) -> tuple[str, int] | None:
    """``(epoch, seq)`` of a ``last-event-id`` made by :func:`frame_id`, else None."""
    if not text or len(text) > 64:
        return None
    epoch, dot, seq = text.rpartition(".")
    if not dot or not epoch or not seq.isdigit() or not seq.isascii():
        return None
    return epoch, int(seq)


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
        if "surrogate" not in str(exc):
            raise MalformedRequest(f"signals are not valid JSON: {exc}") from None
        value = _with_lone_surrogates(raw, exc)
    if type(value) is not dict:  # orjson makes plain dicts and lists: type() is cheaper than isinstance
        raise MalformedRequest("signals must be a JSON object")
    if len(value) > MAX_SIGNAL_ITEMS:
        raise MalformedRequest(f"more than {MAX_SIGNAL_ITEMS:,} signals")
    for key, item in value.items():
        kind = type(item)
        if kind is dict or kind is list:  # a scalar has no shape to check
            _check_shape(key, item, 1)
    return value


def _with_lone_surrogates(raw: bytes | str, error: orjson.JSONDecodeError) -> Any:
    """Decode JSON that holds half of a UTF-16 pair (``"\\ud83d"``), which orjson refuses: a
    browser's string can hold one (an emoji cut by a script, a paste), and refusing it would lose
    what the user typed. Each half becomes U+FFFD, as the page shows it; a payload wrong in any other
    way is refused as before."""
    try:
        value = json.loads(raw, parse_constant=_no_constant)  # NaN and Infinity: not JSON, as orjson says
    except (ValueError, RecursionError):
        raise MalformedRequest(f"signals are not valid JSON: {error}") from None
    if type(value) is dict:
        for key, item in value.items():
            if type(item) is dict or type(item) is list:
                _check_shape(key, item, 1)
    return _replace_surrogates(value)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


#: After ``json.loads`` a whole pair is one character: any surrogate left is half of one.
_SURROGATE = re.compile("[\ud800-\udfff]")


def _replace_surrogates(value: Any) -> Any:
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value)
    if isinstance(value, dict):
        return {_SURROGATE.sub("\ufffd", k): _replace_surrogates(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_replace_surrogates(v) for v in value]
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
