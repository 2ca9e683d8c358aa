"""One-shot download URLs, bound to the session that asked for them."""

from __future__ import annotations

import mimetypes
import secrets
from collections import OrderedDict
from collections.abc import Iterable
from os import PathLike
from pathlib import Path
from urllib.parse import quote

from pyvia.http import Response

DOWNLOAD_PREFIX = "/_download/"


class Downloads:
    """Pending downloads: token -> (session, source, filename, media type); newest ``limit`` kept."""

    __slots__ = ("_items", "limit")

    def __init__(self, limit: int = 1000) -> None:
        self._items: OrderedDict[str, tuple[str, object, str, str]] = OrderedDict()
        self.limit = limit

    def add(self, session_id: str, source: object, filename: str, media_type: str | None) -> str:
        token = secrets.token_urlsafe(18)
        mtype = media_type or mimetypes.guess_type(filename)[0] or "application/octet-stream"
        self._items[token] = (session_id, source, filename, mtype)
        while len(self._items) > self.limit:
            self._items.popitem(last=False)
        return DOWNLOAD_PREFIX + token

    def take(self, token: str, session_id: str) -> Response | None:
        """Answer a download once; ``None`` if the token is unknown or another session's."""
        item = self._items.get(token)
        if item is None or item[0] != session_id:
            return None
        del self._items[token]
        _, source, filename, mtype = item
        if isinstance(source, (str, PathLike)):
            body = Path(source).read_bytes()
        elif isinstance(source, (bytes, bytearray)):
            body = bytes(source)
        else:
            assert isinstance(source, Iterable)
            body = b"".join(chunk.encode() if isinstance(chunk, str) else chunk for chunk in source)
        return Response(
            200,
            [("content-type", mtype), ("content-disposition", disposition(filename)), ("cache-control", "no-store")],
            body,
        )


def disposition(filename: str) -> str:
    """``attachment`` with ``filename`` as RFC 8187 allows it: a file's name, not a path (the
    directories of ``a/b.txt`` are dropped), every byte outside its attr-chars percent-encoded."""
    name = filename.replace("\\", "/").rsplit("/", 1)[-1]
    if not name.strip("."):
        name = "download"
    return "attachment; filename*=UTF-8''" + quote(name, safe="!#$&+^`|")
