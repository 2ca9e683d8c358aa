"""Content negotiation: which coding a client accepts, and which bodies are worth compressing.

Separate from the compressors because it only reads headers: it decides, once per request (and
cached per distinct ``Accept-Encoding``), and never touches bytes of the body.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from pyvia.compress.codings import CODINGS, DEFAULT_PREFERENCE, GZIP, IDENTITY
from pyvia.http import Request

__all__ = ["Negotiator", "is_compressible", "negotiate", "parse_accept_encoding"]

_MAX_ELEMENTS = 64  # Accept-Encoding elements looked at; more is an abuse, not a browser

_COMPRESSIBLE_TYPES = frozenset(
    {
        "application/javascript",
        "application/json",
        "application/manifest+json",
        "application/wasm",
        "application/xml",
        "application/xhtml+xml",
        "application/rss+xml",
        "application/atom+xml",
        "application/ld+json",
        "application/geo+json",
        "application/x-javascript",
        "image/svg+xml",
        "image/x-icon",
        "image/vnd.microsoft.icon",
        "font/ttf",
        "font/otf",
        "application/vnd.ms-fontobject",
    }
)


def is_compressible(content_type: str) -> bool:
    """Whether a body of this media type gains from compression (text, JSON, JS, SVG, wasm...)."""
    mime = content_type.split(";", 1)[0].strip().lower()
    return mime.startswith("text/") or mime in _COMPRESSIBLE_TYPES or mime.endswith(("+json", "+xml"))


def parse_accept_encoding(header: str) -> dict[str, float]:
    """The codings of an ``Accept-Encoding`` value with their q-values (RFC 9110 §12.5.3).

    Names are lower-cased and ``x-gzip`` counts as ``gzip``. An element whose q-value is not a
    number in 0..1 is dropped (it is invalid, so it says nothing); when a coding is named twice
    the first rating counts. Never raises.
    """
    out: dict[str, float] = {}
    for element in header.split(",", _MAX_ELEMENTS)[:_MAX_ELEMENTS]:
        name, _, params = element.partition(";")
        name = name.strip().lower()
        if not name:
            continue
        q = 1.0
        if params:
            for param in params.split(";"):
                key, _, value = param.partition("=")
                if key.strip().lower() == "q":
                    try:
                        q = float(value.strip())
                    except ValueError:
                        q = -1.0
                    break
            if not 0.0 <= q <= 1.0:  # also false for NaN
                continue
        if name == "x-gzip":
            name = GZIP
        out.setdefault(name, q)
    return out


def negotiate(header: str | None, preference: Sequence[str] = DEFAULT_PREFERENCE) -> str:
    """Choose the coding to send: one of ``preference`` or ``"identity"``.

    The client's q-values rank first; among codings it rates equally the server's
    ``preference`` order decides. ``q=0`` refuses a coding, ``*`` rates every coding not named,
    unknown codings are ignored. ``identity`` is chosen when the client rates it above every
    coding we can produce, when the header is missing (RFC 9110 allows anything then, but tools
    such as curl send no header and expect plain bytes) or empty, or when nothing else is
    acceptable — even if the client said ``identity;q=0``, since a 406 would leave the tab blank:
    that refusal is honoured whenever another coding is acceptable.
    """
    if not header:
        return IDENTITY
    rated = parse_accept_encoding(header)
    star = rated.get("*")
    best, best_q = IDENTITY, 0.0
    for coding in preference:
        q = rated.get(coding, star if star is not None else 0.0)
        if q > best_q:
            best, best_q = coding, q
    if best == IDENTITY:
        return IDENTITY
    identity_q = rated.get(IDENTITY)
    if identity_q is None:
        identity_q = star if star is not None else 0.0  # unnamed identity: the last resort
    return IDENTITY if identity_q > best_q else best


class Negotiator:
    """:func:`negotiate` with a configured preference and a small cache.

    Browsers send a handful of distinct ``Accept-Encoding`` values, so the answer for each is
    kept (at most 256 entries; the cache is emptied when full, which only costs a re-parse).
    """

    __slots__ = ("_cache", "preference")

    def __init__(self, preference: Iterable[str] = DEFAULT_PREFERENCE) -> None:
        order = tuple(c.strip().lower() for c in preference)
        for coding in order:
            if coding not in CODINGS:
                raise ValueError(f"unknown coding {coding!r} in the preference {order!r}; use some of {CODINGS}")
        if len(set(order)) != len(order):
            raise ValueError(f"the coding preference {order!r} names a coding twice")
        self.preference = order
        self._cache: dict[str | None, str] = {}

    def choose(self, header: str | None) -> str:
        try:
            return self._cache[header]
        except KeyError:
            pass
        coding = negotiate(header, self.preference)
        if len(self._cache) >= 256:
            self._cache.clear()
        self._cache[header] = coding
        return coding

    def for_request(self, request: Request) -> str:
        """The coding for ``request``, reading every ``Accept-Encoding`` header it carries."""
        headers = request.headers
        if "accept-encoding" not in headers:
            return IDENTITY
        values = headers.get_all("accept-encoding")
        return self.choose(values[0] if len(values) == 1 else ", ".join(values))
