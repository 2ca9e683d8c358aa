"""Signed session ids and signed context ids.

A session id is random and signed with the app's secret, so the server recognises the ids it
issued (on any worker, after a restart) without a record, and adopts no id it never issued: a
planted cookie is replaced, never made a session (session fixation).

A context id carries what revival needs — the route pattern and path params — signed with the
app's secret and bound to the session, so a tab can be rebuilt after the process restarts or on
another worker without any server-side record, and no other session can forge or replay it. Only
the canonical spelling of an id verifies, so no alias of it names another tab.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import logging
import os
import re
import secrets
from collections.abc import Mapping
from pathlib import Path

import orjson

SESSION_COOKIE = "via_session_id"
SECURE_SESSION_COOKIE = "__Host-via_session_id"
#: Set by the answer of an action that wrote shared state (several workers): the session's next
#: page views read the shared signals they declare from the engine, not from their worker's copy.
WROTE_COOKIE = "via_wrote"
SECURE_WROTE_COOKIE = "__Host-via_wrote"
#: Seconds that cookie lasts: what a navigation after the action takes, with margin.
WROTE_MAX_AGE = 10
SESSION_MAX_AGE = 30 * 24 * 3600
#: 32 hex digits of randomness (128 bits), then 32 of their HMAC under the app's secret.
_SESSION_ID = re.compile(r"[0-9a-f]{64}\Z")
_NONCE_HEX = 32
_SIG_BYTES = 18
_URLSAFE = bytes.maketrans(b"+/", b"-_")
_B64URL = re.compile(r"[A-Za-z0-9_-]*\Z")

log = logging.getLogger("pyvia")


def is_session_id(value: str | None) -> bool:
    """Whether ``value`` has the shape of a session id (64 lowercase hex digits); not whether
    this server issued it, which :meth:`SessionIds.is_issued` decides."""
    return value is not None and _SESSION_ID.match(value) is not None


class SessionIds:
    """Makes session ids and recognises the ones signed with this secret.

    Every worker and every restart with the same secret recognise the same ids, with no record
    kept; an id in the right shape that this secret did not sign is not a session.
    """

    __slots__ = ("_issued", "_key")

    #: Ids recently found issued: one dict lookup instead of an HMAC per request. Cleared when
    #: full, so made-up ids cannot grow it (only issued ones go in).
    _CACHE_MAX = 16_384

    def __init__(self, secret: bytes) -> None:
        self._key = hashlib.sha256(b"pyvia session id\0" + secret).digest()
        self._issued: set[str] = set()

    def _tag(self, nonce: str) -> str:
        return hmac.digest(self._key, nonce.encode(), "sha256").hex()[: len(nonce)]

    def make(self) -> str:
        """A new session id: 128 random bits from the OS's CSPRNG and their signature."""
        nonce = secrets.token_hex(_NONCE_HEX // 2)
        return nonce + self._tag(nonce)

    def is_issued(self, value: str | None) -> bool:
        """Whether ``value`` is a session id signed with this secret."""
        if value is None:
            return False
        if value in self._issued:
            return True
        if _SESSION_ID.match(value) is None or not hmac.compare_digest(
            value[_NONCE_HEX:], self._tag(value[:_NONCE_HEX])
        ):
            return False
        if len(self._issued) >= self._CACHE_MAX:
            self._issued.clear()
        self._issued.add(value)
        return True


def _b64(data: bytes) -> str:
    return binascii.b2a_base64(data, newline=False).translate(_URLSAFE).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    """Decode unpadded base64url, strictly: a character outside the alphabet, padding, or a
    spelling that is not the canonical one (stray low bits) is a ValueError."""
    if _B64URL.match(text) is None or len(text) % 4 == 1:
        raise ValueError("not canonical unpadded base64url")
    data = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    if _b64(data) != text:
        raise ValueError("not canonical unpadded base64url")
    return data


#: What the id of a route without path parameters encodes (orjson writes a dict, not a mapping).
_NO_PARAMS: dict[str, str] = {}


class ContextIds:
    """Makes and checks signed context ids."""

    __slots__ = ("_key", "_random")

    def __init__(self, secret: bytes, app_path: str = "/") -> None:
        # the app's path is in the key: an id made by one app (of several mounted in a process,
        # sharing a secret) is not valid for another
        self._key = hashlib.sha256(b"pyvia context id\0" + secret + b"\0" + app_path.encode()).digest()
        self._random = memoryview(b"")

    def _sign(self, payload: bytes, session_id: str) -> bytes:
        return hmac.digest(self._key, payload + b"\0" + session_id.encode(), "sha256")[:_SIG_BYTES]

    def _nonce(self) -> str:
        """12 hex digits from the OS's CSPRNG, read 4 KiB at a time (one syscall per 680 page views)."""
        if len(self._random) < 6:
            self._random = memoryview(os.urandom(4096))
        chunk, self._random = self._random[:6], self._random[6:]
        return chunk.hex()

    def make(self, route: str, params: Mapping[str, str], session_id: str, issued: int = 0) -> str:
        """A new id for a tab of ``route``; ``issued`` (wall-clock seconds) dates it, so a tab
        that left no record behind can still be told recent (:meth:`issued`)."""
        params = params if isinstance(params, dict) else dict(params) if params else _NO_PARAMS
        payload = orjson.dumps([route, params, self._nonce(), issued])
        return _b64(payload) + "." + _b64(self._sign(payload, session_id))

    @staticmethod
    def issued(context_id: str) -> int:
        """When an id was made (wall-clock seconds), 0 if it does not say. Only an id that
        :meth:`verify` accepts is trusted with it: the signature covers the date."""
        try:
            payload = orjson.loads(_unb64(context_id.partition(".")[0]))
            issued = payload[3] if len(payload) > 3 else 0
        except (orjson.JSONDecodeError, ValueError, TypeError, IndexError, KeyError):
            return 0
        return issued if type(issued) is int and issued > 0 else 0

    def verify(self, context_id: str, session_id: str) -> tuple[str, dict[str, str]] | None:
        """Return (route pattern, params) if the id was made by this app for this session."""
        if not isinstance(context_id, str) or len(context_id) > 2048:
            return None
        body, dot, sig = context_id.partition(".")
        if not dot:
            return None
        try:
            payload = _unb64(body)
            signature = _unb64(sig)
        except (ValueError, TypeError):
            return None
        if not hmac.compare_digest(signature, self._sign(payload, session_id)):
            return None
        try:
            route, params, *_ = orjson.loads(payload)  # the nonce, and the issue time when there is one
        except (orjson.JSONDecodeError, ValueError, TypeError):
            return None
        if not isinstance(route, str) or not isinstance(params, dict):
            return None
        return route, {str(k): str(v) for k, v in params.items()}


def load_secret(explicit: str | bytes | None) -> bytes:
    """The app secret: given, else ``PYVIA_SECRET``, else one kept in the user's state dir.

    A secret that survives restarts is what lets tabs revive after a restart; in production set
    ``PYVIA_SECRET`` (the same on every node).
    """
    if explicit:
        return explicit.encode() if isinstance(explicit, str) else explicit
    env = os.environ.get("PYVIA_SECRET")
    if env:
        return env.encode()
    state = Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state") / "pyvia"
    path = state / "secret"
    try:
        return path.read_bytes().strip()
    except FileNotFoundError:
        pass
    except OSError as exc:
        log.warning("cannot read %s (%s); using a per-process secret", path, exc)
        return secrets.token_hex(32).encode()
    value = secrets.token_hex(32).encode()
    try:
        state.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(value)
        log.info("created an app secret in %s (set PYVIA_SECRET in production)", path)
    except FileExistsError:
        return path.read_bytes().strip()
    except OSError as exc:
        log.warning("cannot store a secret in %s (%s); tabs will not revive after a restart", path, exc)
    return value
