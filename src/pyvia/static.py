"""Static files served from memory, precompressed off the event loop, with conditional GET.

Rules this module keeps:

1. The event loop never compresses at a static level. Each file is read once into memory (files
   over ``max_file_size`` are not served: a body is one ``bytes`` in ``pyvia.http``); brotli 11,
   zstd 19 and gzip 9 forms are made on an executor (one low-priority thread by default: all
   three libraries release the GIL while compressing — ``bench/compression.py`` measured the
   loop thread at full speed beside brotli 11, but much slowed beside pure Python). Until a
   form exists the plain bytes are sent with ``Cache-Control: no-cache``, so no cache keeps the
   stand-in past its next request.
2. What a request names is checked before the disk is touched: ``..`` and ``.`` segments,
   backslashes, NUL and dot-files or dot-directories (except ``/.well-known/``), also once more
   percent-decoded, are refused with a 404. Names that cannot be files but are harmless (empty,
   a trailing slash, ``a//b``) give None, so routing may answer them. A file whose real path
   (symlinks resolved) leaves the root, or lands on a dot-file, is refused with a 404 too.
3. Every encoding of a file has its own strong ``ETag`` (a content hash, suffixed with the
   coding), so a cache revalidates each variant on its own; ``Vary: Accept-Encoding`` goes with
   every compressible file. ``If-None-Match`` wins over ``If-Modified-Since`` (RFC 9110 §13.2.2).
4. Files added after start are found by their first request; a known file is stat-ed again at
   most every ``check_interval`` seconds and re-read when its mtime, size or inode changed.

The event loop only calls :meth:`StaticFiles.get` and :meth:`Asset.get`; executor threads only
install finished variants (one dict assignment each), so no lock is needed.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import email.utils
import functools
import hashlib
import logging
import mimetypes
import os
import stat
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote

from pyvia.compress import (
    CODINGS,
    DEFAULT_PREFERENCE,
    IDENTITY,
    STATIC_LEVELS,
    Levels,
    Negotiator,
    compress,
    is_compressible,
)
from pyvia.http import Request, Response

__all__ = [
    "DEFAULT_CACHE_CONTROL",
    "IMMUTABLE",
    "MIME_TYPES",
    "Asset",
    "StaticFiles",
    "mime_type",
]

log = logging.getLogger("pyvia.static")

#: Revalidate on every use: always correct for URLs that do not change with the content, and
#: cheap, since a match is a 304 from memory. Hashed file names should use :data:`IMMUTABLE`.
DEFAULT_CACHE_CONTROL = "no-cache"
#: For URLs carrying a content hash (the Datastar bundle's ``?v=``).
IMMUTABLE = "public, max-age=31536000, immutable"
_STAND_IN_CACHE_CONTROL = "no-cache"

MIME_TYPES: dict[str, str] = {
    "html": "text/html; charset=utf-8",
    "htm": "text/html; charset=utf-8",
    "css": "text/css; charset=utf-8",
    "js": "text/javascript; charset=utf-8",
    "mjs": "text/javascript; charset=utf-8",
    "json": "application/json",
    "map": "application/json",
    "webmanifest": "application/manifest+json",
    "txt": "text/plain; charset=utf-8",
    "md": "text/markdown; charset=utf-8",
    "csv": "text/csv; charset=utf-8",
    "xml": "application/xml",
    "rss": "application/rss+xml",
    "atom": "application/atom+xml",
    "svg": "image/svg+xml",
    "wasm": "application/wasm",
    "png": "image/png",
    "jpg": "image/jpeg",
    "jpeg": "image/jpeg",
    "gif": "image/gif",
    "webp": "image/webp",
    "avif": "image/avif",
    "ico": "image/x-icon",
    "woff2": "font/woff2",
    "woff": "font/woff",
    "ttf": "font/ttf",
    "otf": "font/otf",
    "pdf": "application/pdf",
    "mp4": "video/mp4",
    "webm": "video/webm",
    "mp3": "audio/mpeg",
}


def mime_type(name: str) -> str:
    """The ``Content-Type`` for a file name: the table above, then :mod:`mimetypes`, then binary."""
    ext = name.rpartition(".")[2].lower() if "." in name else ""
    found = MIME_TYPES.get(ext)
    if found is None:
        guessed = mimetypes.guess_type(name, strict=False)[0]
        found = guessed or "application/octet-stream"
        if found.startswith("text/"):
            found += "; charset=utf-8"
    return found


CacheControl = str | Callable[[str, str], str]


@dataclass(frozen=True, slots=True)
class _Variant:
    """One encoding of one file, with its header lists built once."""

    body: bytes
    etag: str
    headers: tuple[tuple[str, str], ...]  # for a 200
    not_modified: tuple[tuple[str, str], ...]  # for a 304


class _Entry:
    """A file (or an in-memory asset) held in memory with its variants."""

    __slots__ = (
        "checked_at",
        "compressible",
        "digest",
        "fs_path",
        "identity",
        "ino",
        "last_modified",
        "mime",
        "modified_at",
        "mtime_ns",
        "size",
        "stand_in",
        "variants",
    )

    def __init__(self, data: bytes, mime: str, modified_at: float, cache_control: str) -> None:
        self.mime = mime
        self.compressible = is_compressible(mime)
        self.digest = hashlib.blake2b(data, digest_size=12).hexdigest()
        self.modified_at = int(modified_at)
        self.last_modified = email.utils.formatdate(self.modified_at, usegmt=True)
        self.identity = self._variant(data, IDENTITY, cache_control)
        self.stand_in = self._variant(data, IDENTITY, _STAND_IN_CACHE_CONTROL) if self.compressible else None
        self.variants: dict[str, _Variant] = {}
        self.fs_path = ""
        self.mtime_ns = 0
        self.size = len(data)
        self.ino = 0
        self.checked_at = 0.0

    def _variant(self, body: bytes, coding: str, cache_control: str) -> _Variant:
        etag = f'"{self.digest}"' if coding == IDENTITY else f'"{self.digest}-{coding}"'
        common = [("etag", etag), ("last-modified", self.last_modified), ("cache-control", cache_control)]
        if self.compressible:
            common.append(("vary", "Accept-Encoding"))
        full = [("content-type", self.mime), *common, ("x-content-type-options", "nosniff")]
        if coding != IDENTITY:
            full.append(("content-encoding", coding))
        return _Variant(body, etag, tuple(full), tuple(common))

    def install(self, coding: str, body: bytes, cache_control: str) -> None:
        """Called from an executor thread: add a finished variant (one atomic dict assignment)."""
        if len(body) < len(self.identity.body):
            self.variants[coding] = self._variant(body, coding, cache_control)

    def respond(self, request: Request, coding: str, pending: bool) -> Response:
        variant = self.identity
        if coding != IDENTITY:
            found = self.variants.get(coding)
            if found is not None:
                variant = found
            elif pending and self.stand_in is not None:
                variant = self.stand_in
        if _not_modified(request, variant.etag, self.modified_at):
            return Response(304, list(variant.not_modified))
        return Response(200, list(variant.headers), variant.body)


def _not_modified(request: Request, etag: str, modified_at: int) -> bool:
    headers = request.headers
    inm = headers.get("if-none-match")
    if inm is not None:
        if inm == etag:
            return True
        for tag in inm.split(","):
            tag = tag.strip()
            if tag == "*" or tag.removeprefix("W/") == etag:
                return True
        return False
    ims = headers.get("if-modified-since")
    if ims is not None:
        try:
            parsed = email.utils.parsedate_tz(ims)
            since = None if parsed is None else email.utils.mktime_tz(parsed)
        except (TypeError, ValueError, IndexError, OverflowError):
            since = None
        return since is not None and modified_at <= since  # an unreadable date: send the file
    return False


def _compress_job(data: bytes, coding: str, level: int) -> bytes:
    """Run on the executor (module level, so a process pool can pickle it)."""
    return compress(data, coding, level)


def _lower_priority() -> None:
    """Executor thread initializer: nice 19 for this thread only (per-thread on Linux)."""
    with contextlib.suppress(AttributeError, OSError):  # not Linux, or not allowed: normal priority
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)


class _Precompressor:
    """Submits compression jobs for entries and installs the results."""

    __slots__ = ("_executor", "_futures", "_lock", "_own", "levels", "max_size", "negotiator")

    def __init__(
        self, executor: concurrent.futures.Executor | None, levels: Levels, max_size: int, negotiator: Negotiator
    ) -> None:
        self._executor = executor
        self._own = executor is None
        self._futures: set[concurrent.futures.Future[bytes]] = set()
        self._lock = threading.Lock()
        self.levels = levels
        self.max_size = max_size
        self.negotiator = negotiator

    def submit(self, entry: _Entry, cache_control: str, pending: set[str]) -> None:
        body = entry.identity.body
        if not entry.compressible or not body or len(body) > self.max_size:
            return
        if self._executor is None:
            self._executor = concurrent.futures.ThreadPoolExecutor(
                max_workers=1, thread_name_prefix="pyvia-precompress", initializer=_lower_priority
            )
        for coding in self.negotiator.preference:
            pending.add(coding)
            try:
                future = self._executor.submit(_compress_job, body, coding, self.levels.of(coding))
            except RuntimeError:  # the executor was shut down
                pending.discard(coding)
                continue
            with self._lock:
                self._futures.add(future)
            future.add_done_callback(
                functools.partial(self._done, entry=entry, coding=coding, cache_control=cache_control, pending=pending)
            )

    def _done(
        self,
        future: concurrent.futures.Future[bytes],
        entry: _Entry,
        coding: str,
        cache_control: str,
        pending: set[str],
    ) -> None:
        with self._lock:
            self._futures.discard(future)
        try:
            if not future.cancelled():
                entry.install(coding, future.result(), cache_control)
        except Exception:
            log.exception("precompressing %s (%s) failed; sending it uncompressed", entry.fs_path or "an asset", coding)
        finally:
            pending.discard(coding)

    def wait(self, timeout: float | None = None) -> bool:
        """Block until every submitted job is done; False on timeout. For start-up, tests, benches."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            with self._lock:
                futures = set(self._futures)
            if not futures:
                return True
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            _done, not_done = concurrent.futures.wait(futures, timeout=left)
            if not_done and left is not None and left <= 0:
                return False

    def close(self) -> None:
        if self._own and self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None


class _File:
    """An entry of :class:`StaticFiles` with its pending codings."""

    __slots__ = ("entry", "pending")

    def __init__(self, entry: _Entry) -> None:
        self.entry = entry
        self.pending: set[str] = set()


class StaticFiles:
    """The files under ``directory``, served from memory at ``prefix``.

    ``cache_control`` is a header value or a callable ``(relative path, mime type) -> value``,
    called once per file version. ``executor`` runs the precompression (a thread or process
    pool; by default one low-priority thread created on first need and shut down by
    :meth:`close`). ``preference`` and ``levels`` choose the codings made and their levels;
    files over ``max_compress_size`` are sent plain, files over ``max_file_size`` are not
    served (they would have to be held whole). ``check_interval`` (seconds, on ``clock``) bounds
    how long a changed or deleted file may still be served; 0 stats on every request.
    """

    __slots__ = (
        "_cache_control",
        "_clock",
        "_files",
        "_pre",
        "_root",
        "_root_real",
        "check_interval",
        "max_file_size",
        "prefix",
    )

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        prefix: str = "/",
        cache_control: CacheControl = DEFAULT_CACHE_CONTROL,
        executor: concurrent.futures.Executor | None = None,
        preference: Iterable[str] = DEFAULT_PREFERENCE,
        levels: Levels = STATIC_LEVELS,
        max_file_size: int = 16 << 20,
        max_compress_size: int = 8 << 20,
        check_interval: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        root = Path(directory)
        if not root.is_dir():
            raise ValueError(f"static directory {str(root)!r} does not exist or is not a directory")
        if not prefix.startswith("/"):
            raise ValueError(f"static prefix {prefix!r} must start with '/'")
        self.prefix = prefix if prefix.endswith("/") else prefix + "/"
        self._root = os.path.abspath(root)
        self._root_real = os.path.realpath(root)
        self._cache_control = cache_control
        self.max_file_size = max_file_size
        self.check_interval = check_interval
        self._clock = clock
        self._files: dict[str, _File] = {}
        self._pre = _Precompressor(executor, levels, max_compress_size, Negotiator(preference))

    # -- the hot path --

    def get(self, path: str, request: Request) -> Response | None:
        """The response for ``path`` (percent-decoded, as ``Request.path``), or None when it
        names no static file (not GET/HEAD, outside ``prefix``, missing, a directory), so routing
        can go on. A refused name gets a 404 response.

        For HEAD the response carries the body too: front ends send its length, not the bytes
        (``server/http.py``, ``encode_response(head_only=True)``).
        """
        if request.method != "GET" and request.method != "HEAD":
            return None
        prefix = self.prefix
        if not path.startswith(prefix):
            return None
        rel = path[len(prefix) :]
        file = self._files.get(rel)
        if file is None or self.check_interval <= 0 or self._clock() - file.entry.checked_at >= self.check_interval:
            if file is None:
                verdict = _check(rel)
                if verdict is not _OK:
                    return None if verdict is _NOT_A_FILE else _refused()
            try:
                file = self._refresh(rel, file)
            except _Refused:
                return _refused()
            if file is None:
                return None
        entry = file.entry
        coding = self._pre.negotiator.for_request(request) if entry.compressible else IDENTITY
        return entry.respond(request, coding, coding in file.pending)

    # -- loading --

    def start(self) -> int:
        """Read every file under the root now and queue its precompression; return the count.

        Call it before serving (at app start); files found later load on their first request.
        """
        count = 0
        for dirpath, dirnames, filenames in os.walk(self._root):
            rel_dir = os.path.relpath(dirpath, self._root)
            rel_dir = "" if rel_dir == "." else rel_dir.replace(os.sep, "/") + "/"
            dirnames[:] = [d for d in dirnames if _check(rel_dir + d + "/x") is _OK]
            for name in filenames:
                rel = rel_dir + name
                if _check(rel) is _OK and rel not in self._files:
                    with contextlib.suppress(_Refused):  # a link out of the root: left out
                        count += self._refresh(rel, None) is not None
        return count

    def wait(self, timeout: float | None = None) -> bool:
        """Block until all queued precompression is done (False on timeout)."""
        return self._pre.wait(timeout)

    def close(self) -> None:
        """Stop the executor this object created (one passed in is left to its owner)."""
        self._pre.close()

    @property
    def stats(self) -> dict[str, int]:
        files = list(self._files.values())
        return {
            "files": len(files),
            # list(): executor threads may add variants meanwhile (copying the values is atomic)
            "bytes": sum(
                len(f.entry.identity.body) + sum(len(v.body) for v in list(f.entry.variants.values())) for f in files
            ),
            "pending": sum(len(f.pending) for f in files),
        }

    def _cache_control_for(self, rel: str, mime: str) -> str:
        cc = self._cache_control
        return cc if isinstance(cc, str) else cc(rel, mime)

    def _refresh(self, rel: str, file: _File | None) -> _File | None:
        """Stat ``rel``; (re)load it when new or changed. None: not a file (or too big).

        Raises _Refused when its real path leaves the root or lands on a dot-file.
        """
        full = os.path.join(self._root, *rel.split("/"))
        try:
            st = os.stat(full)
        except (OSError, ValueError):
            if file is not None:
                self._files.pop(rel, None)
            return None
        now = self._clock()
        if file is not None:
            entry = file.entry
            if st.st_mtime_ns == entry.mtime_ns and st.st_size == entry.size and st.st_ino == entry.ino:
                entry.checked_at = now
                return file
        if not stat.S_ISREG(st.st_mode):
            self._files.pop(rel, None)
            return None
        real = os.path.realpath(full)
        inside = os.path.relpath(real, self._root_real).replace(os.sep, "/")
        if inside.startswith("../") or inside == ".." or os.path.isabs(inside) or _check(inside) is not _OK:
            self._files.pop(rel, None)
            raise _Refused(rel)
        loaded = self._read(real, rel)
        if loaded is None:
            self._files.pop(rel, None)
            return None
        data, st = loaded
        mime = mime_type(rel)
        cache_control = self._cache_control_for(rel, mime)
        entry = _Entry(data, mime, st.st_mtime, cache_control)
        entry.fs_path, entry.mtime_ns, entry.size, entry.ino = full, st.st_mtime_ns, st.st_size, st.st_ino
        entry.checked_at = now
        file = _File(entry)
        self._files[rel] = file
        self._pre.submit(entry, cache_control, file.pending)
        return file

    def _read(self, real: str, rel: str) -> tuple[bytes, os.stat_result] | None:
        try:
            fd = os.open(real, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        except OSError:
            return None
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode):
                return None
            if st.st_size > self.max_file_size:
                log.warning(
                    "static file %s is not served: %d bytes is over max_file_size (%d)",
                    rel,
                    st.st_size,
                    self.max_file_size,
                )
                return None
            return f.read(), st

    def __repr__(self) -> str:
        return f"StaticFiles({self._root!r}, prefix={self.prefix!r}, files={len(self._files)})"


class _Refused(Exception):
    """A name that resolves outside the root or onto a dot-file (answered 404)."""


_OK, _NOT_A_FILE, _REFUSE = "ok", "not a file", "refuse"


def _refused() -> Response:
    return Response.text("Not Found", 404)


def _check(rel: str) -> str:
    """Whether a relative request path may name a file (module docstring, rule 2).

    ``_REFUSE`` for what could escape the root or reveal a dot-file; ``_NOT_A_FILE`` for names
    that are harmless but cannot be a file (empty, a directory's trailing slash, ``a//b``), so
    routing may still answer them; ``_OK`` otherwise.
    """
    if "\\" in rel or "\x00" in rel:
        return _REFUSE
    segments = rel.split("/")
    verdict = _OK
    for i, seg in enumerate(segments):
        if not seg:
            verdict = _NOT_A_FILE
            continue
        if seg[0] == "." and not (i == 0 and seg == ".well-known" and len(segments) > 1):
            return _REFUSE
        if "%" in seg:
            decoded = unquote(seg)
            if decoded[:1] == "." or "/" in decoded or "\\" in decoded or "\x00" in decoded:
                return _REFUSE
    return verdict


class Asset:
    """One in-memory file at a fixed URL, such as the Datastar bundle: precompressed like static
    files, cached for a year (its URL carries ``version``, a content hash).

    ``get(request)`` answers GET and HEAD (None for other methods) with the best ready encoding,
    or a 304 when ``If-None-Match`` names it.
    """

    __slots__ = ("_entry", "_negotiator", "_pending", "_pre", "version")

    def __init__(
        self,
        body: bytes,
        *,
        content_type: str,
        version: str | None = None,
        cache_control: str = IMMUTABLE,
        executor: concurrent.futures.Executor | None = None,
        preference: Iterable[str] = DEFAULT_PREFERENCE,
        levels: Levels = STATIC_LEVELS,
        modified_at: float | None = None,
    ) -> None:
        self._entry = _Entry(body, content_type, time.time() if modified_at is None else modified_at, cache_control)
        self.version = version or self._entry.digest[:10]
        self._negotiator = Negotiator(preference)
        self._pending: set[str] = set()
        self._pre = _Precompressor(executor, levels, max(len(body), 1), self._negotiator)
        self._pre.submit(self._entry, cache_control, self._pending)

    def get(self, request: Request) -> Response | None:
        if request.method != "GET" and request.method != "HEAD":
            return None
        entry = self._entry
        coding = self._negotiator.for_request(request) if entry.compressible else IDENTITY
        return entry.respond(request, coding, coding in self._pending)

    @property
    def codings(self) -> tuple[str, ...]:
        """The encodings ready now (besides identity)."""
        return tuple(c for c in CODINGS if c in self._entry.variants)

    def wait(self, timeout: float | None = None) -> bool:
        return self._pre.wait(timeout)

    def close(self) -> None:
        self._pre.close()
