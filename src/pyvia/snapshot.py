"""Signed snapshots of a tab's server-owned signals, kept by the browser for the tab's revival.

A server-owned signal's value never comes from the browser. Yet a tab must get its values back
when the server that held it is gone (a restart, a crash, another worker): the server then has
no record, and the browser is the only place the tab still lives. So every frame that changes
a server-owned tab signal also carries a snapshot of all of them, signed with the app secret and
bound to the context id. The browser holds it as ``_via_snap``, never sends it with an action,
and sends it once, in the body of the stream request that revives the tab (DESIGN.md decision 6).

Rules:

1. A snapshot verifies only for the context id it was made for, with the secret it was made with,
   in its canonical spelling; anything else is refused.
2. Its sequence number grows with each snapshot of the tab, so a server that still knows a tab
   (its record of a destroyed context) refuses an older snapshot than the last it sent.
3. It is bounded: values whose JSON passes ``max_bytes`` get no snapshot (the tab then revives
   with its handler's values), so a snapshot never makes the page's traffic unbounded.
"""

from __future__ import annotations

import binascii
import hashlib
import hmac
import re
from typing import Any

import orjson

__all__ = ["DEFAULT_MAX_BYTES", "Snapshots"]

#: The largest snapshot made, in bytes of its JSON (about a page of text).
DEFAULT_MAX_BYTES = 16 << 10
_MAC_BYTES = 16
_URLSAFE = bytes.maketrans(b"+/", b"-_")
_PADDING = b"=\n"  # what b2a_base64 puts after the 22 characters of a 16-byte MAC
_SHAPE = re.compile(r"([A-Za-z0-9_-]{22})\.(0|[1-9][0-9]{0,15})\.(\{.*\})\Z", re.DOTALL)


class Snapshots:
    """Makes and opens the snapshots of one app (its secret and its path are in the key)."""

    __slots__ = ("_keyed", "max_bytes")

    def __init__(self, secret: bytes, app_path: str = "/", *, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        key = hashlib.sha256(b"pyvia snapshot\0" + secret + b"\0" + app_path.encode()).digest()
        # keyed BLAKE2b is a MAC by design (RFC 7693 §2.1); the key's block is hashed once, here,
        # and each MAC starts from a copy of that state
        self._keyed = hashlib.blake2b(key=key, digest_size=_MAC_BYTES)
        self.max_bytes = max_bytes

    def _mac(self, signed: bytes) -> str:
        """The base64url MAC of ``signed`` (``context id \0 seq \0 body``), without padding."""
        mac = self._keyed.copy()
        mac.update(signed)
        return binascii.b2a_base64(mac.digest()).translate(_URLSAFE, _PADDING).decode()

    def make(self, context_id: str, seq: int, values: dict[str, Any]) -> str | None:
        """The snapshot of ``values`` (signal name → value), or None when it would pass ``max_bytes``.

        Raises TypeError when a value is not JSON (a server-owned signal's value goes to the
        browser as JSON anyway, so this fails where the page would).
        """
        body = orjson.dumps(values)
        if len(body) > self.max_bytes:
            return None
        text = body.decode()
        mac = self._keyed.copy()  # _mac(), inline: once per frame that changes a server-owned signal
        mac.update(f"{context_id}\0{seq}\0{text}".encode())
        return f"{binascii.b2a_base64(mac.digest()).translate(_URLSAFE, _PADDING).decode()}.{seq}.{text}"

    def open(self, context_id: str, snapshot: object) -> tuple[int, dict[str, Any]] | None:
        """``(seq, values)`` of a snapshot made for ``context_id`` by this app, else None."""
        if not isinstance(snapshot, str) or len(snapshot) > self.max_bytes + 64:
            return None
        shape = _SHAPE.match(snapshot)
        if shape is None:
            return None
        mac, seq, body = shape.groups()
        raw = body.encode()
        if not hmac.compare_digest(mac, self._mac(b"%s\0%s\0%s" % (context_id.encode(), seq.encode(), raw))):
            return None
        try:
            values = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return None
        if not isinstance(values, dict):
            return None
        return int(seq), values
