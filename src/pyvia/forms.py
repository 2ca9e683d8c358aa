"""Request bodies: signals JSON, url-encoded forms and multipart uploads (python-multipart).

Parsing is lazy (an action that reads no form pays nothing), bounded and total:

- :func:`check_form` refuses, from the raw bytes and before any parsing, a body with more
  fields or parts than :class:`FormLimits` allows (a count of separators, at C speed), or a
  url-encoded body past ``max_form_bytes``;
- :func:`parse_form` counts again as it goes, caps each field and file, spools files above
  ``upload_spool_bytes`` to an unnamed temporary file, and turns anything malformed into
  :class:`~pyvia.errors.MalformedRequest` (400) and anything past a limit into
  :class:`~pyvia.errors.PayloadTooLarge` (413), each with a reason the user can be shown;
- :func:`parses_off_loop` says which bodies are big enough to be parsed on a worker thread, so
  that decoding them never holds up the other tabs of the event loop.
"""

from __future__ import annotations

import concurrent.futures
import io
import os
import re
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO, Any, TypeVar
from urllib.parse import parse_qsl

from python_multipart.exceptions import FormParserError
from python_multipart.multipart import MultipartParser, parse_options_header

from pyvia import protocol
from pyvia.errors import ClientError, MalformedRequest, PayloadTooLarge
from pyvia.http import Request

__all__ = [
    "Form",
    "FormLimits",
    "UploadedFile",
    "check_form",
    "parse_form",
    "parses_off_loop",
    "parsing_threads",
    "request_signals",
]

URLENCODED = "application/x-www-form-urlencoded"
MULTIPART = "multipart/form-data"
FORM_TYPES = (URLENCODED, MULTIPART)

#: Bodies up to this size are parsed on the event loop: the worst of them (all percent escapes)
#: decodes in a few milliseconds; bigger ones go to a worker thread (:func:`parses_off_loop`).
INLINE_BYTES = 64 * 1024


@dataclass(frozen=True, slots=True)
class FormLimits:
    """What one form may hold (the ``App`` options of the same names, ``max_`` prefixed).

    Django's defaults for the counts (1000 fields, 100 files); fields share the signals
    payload's 1 MiB, files the server's body limit unless ``max_file_bytes`` is lower.
    """

    max_fields: int = 1000
    max_files: int = 100
    #: Bytes of all non-file fields together (a url-encoded body: its whole size).
    max_form_bytes: int = 1 << 20
    #: Bytes of one file; None: only the server's body limit (16 MiB by default) applies.
    max_file_bytes: int | None = None
    #: Files larger than this are written to an unnamed temporary file instead of memory.
    spool_bytes: int = 1 << 20
    #: Where those temporary files go (None: the system's temporary directory).
    upload_dir: str | os.PathLike[str] | None = None


DEFAULT_LIMITS = FormLimits()


class UploadedFile:
    """A file from a multipart request.

    Up to ``upload_spool_bytes`` it is held in memory, above that in an unnamed temporary file
    (deleted by the system when the file is closed or this object is dropped). ``file`` is a
    binary file object at position 0; ``data`` reads it whole.
    """

    __slots__ = ("content_type", "field_name", "file", "filename", "size")

    def __init__(self, field_name: str, filename: str, content_type: str, file: IO[bytes], size: int) -> None:
        self.field_name = field_name
        self.filename = filename
        self.content_type = content_type
        self.file = file
        self.size = size

    @classmethod
    def from_bytes(cls, field_name: str, filename: str, content_type: str, data: bytes) -> UploadedFile:
        """An in-memory file holding ``data`` (for tests and for code that builds one itself)."""
        return cls(field_name, filename, content_type, io.BytesIO(data), len(data))

    @property
    def data(self) -> bytes:
        """The whole content (read from disk when it was spooled there)."""
        self.file.seek(0)
        content = self.file.read()
        self.file.seek(0)
        return content

    @property
    def in_memory(self) -> bool:
        """False when the file was spooled to disk (larger than ``upload_spool_bytes``)."""
        return isinstance(self.file, io.BytesIO)

    def close(self) -> None:
        """Free the memory or delete the temporary file now rather than when dropped."""
        self.file.close()

    def __repr__(self) -> str:
        where = "memory" if self.in_memory else "disk"
        return f"UploadedFile({self.field_name!r}, {self.filename!r}, {self.size} bytes in {where})"


@dataclass(frozen=True, slots=True)
class Form:
    fields: dict[str, str]
    #: The last file of each field (one per field is the common case).
    files: dict[str, UploadedFile]
    #: Every file of each field, in order (``<input type="file" multiple>``).
    all_files: dict[str, list[UploadedFile]] = field(default_factory=dict)

    def close(self) -> None:
        """Close every file (the App does once the request is answered)."""
        for files in self.all_files.values():
            for upload in files:
                upload.close()


_EMPTY = Form({}, {})
_Refusal = TypeVar("_Refusal", MalformedRequest, PayloadTooLarge)
_BOUNDARY = re.compile(r"boundary=(\"[^\"]+\"|[^;\s]+)", re.IGNORECASE)


def _too_large(reason: str) -> PayloadTooLarge:
    return _shown(PayloadTooLarge(reason))


def _malformed(reason: str) -> MalformedRequest:
    return _shown(MalformedRequest(reason))


def _shown(exc: _Refusal) -> _Refusal:
    """The reason goes in the answer (and the page's alert): it names a limit or a defect of the
    input, nothing of the server."""
    exc.public_message = f"{type(exc).public_message}: {exc.detail}"
    return exc


def _boundary(request: Request) -> bytes:
    raw_type = request.headers.get_lower("content-type") or ""
    found = _BOUNDARY.search(raw_type)
    if found is None:
        raise _malformed("malformed multipart body: no boundary")
    try:
        boundary = found.group(1).strip('"').encode("latin-1")
    except UnicodeEncodeError:
        raise _malformed("malformed multipart body: the boundary is not latin-1") from None
    if not 1 <= len(boundary) <= 70:  # RFC 2046 §5.1.1
        raise _malformed("malformed multipart body: the boundary must be 1 to 70 characters")
    return boundary


def check_form(request: Request, limits: FormLimits = DEFAULT_LIMITS) -> None:
    """Refuse a form body that is over a limit, from its raw bytes, before anything parses it.

    The counts are upper bounds a conforming body cannot exceed (each url-encoded field is
    separated by ``&``; each multipart part follows a CRLF and the delimiter, RFC 2046 §5.1.1).
    """
    ctype = request.content_type
    body = request.body
    if ctype == URLENCODED:
        if len(body) > limits.max_form_bytes:
            raise _too_large(f"a form of {len(body)} bytes is over the limit of {limits.max_form_bytes}")
        if body.count(b"&") >= limits.max_fields:
            raise _too_large(f"a form with more than {limits.max_fields} fields")
    elif ctype == MULTIPART:
        delimiter = b"--" + _boundary(request)
        parts = body.count(b"\r\n" + delimiter) + (1 if body.startswith(delimiter) else 0) - 1
        if parts > limits.max_fields + limits.max_files:
            raise _too_large(
                f"a form with more than {limits.max_fields + limits.max_files} parts "
                f"({limits.max_fields} fields and {limits.max_files} files at most)"
            )


def parsing_threads() -> concurrent.futures.ThreadPoolExecutor:
    """New threads to parse big forms on: two, so a burst of uploads queues rather than piling up
    copies of bodies in memory (an app makes them when it first needs them, and ends them when
    it stops)."""
    return concurrent.futures.ThreadPoolExecutor(2, thread_name_prefix="pyvia-forms")


def parses_off_loop(request: Request) -> bool:
    """Whether this body is a form big enough to be parsed on a worker thread."""
    return len(request.body) > INLINE_BYTES and request.content_type in FORM_TYPES


def parse_form(request: Request, limits: FormLimits = DEFAULT_LIMITS) -> Form:
    """Fields and files of a url-encoded or multipart body; empty for anything else.

    Raises MalformedRequest (400) or PayloadTooLarge (413), with the reason in the answer.
    """
    ctype = request.content_type
    if ctype == URLENCODED:
        check_form(request, limits)
        try:
            text = request.body.decode()
        except UnicodeDecodeError:
            raise _malformed("the form is not UTF-8") from None
        try:
            pairs = parse_qsl(text, keep_blank_values=True, max_num_fields=limits.max_fields)
        except ValueError:
            raise _too_large(f"a form with more than {limits.max_fields} fields") from None
        return Form(dict(pairs), {})
    if ctype != MULTIPART:
        return _EMPTY
    check_form(request, limits)
    return _Multipart(limits).parse(_boundary(request), request.body)


class _Multipart:
    """One multipart body through python-multipart's parser, counting and capping as it goes."""

    __slots__ = (
        "all_files",
        "content_type",
        "field_bytes",
        "field_count",
        "fields",
        "file_count",
        "filename",
        "files",
        "header_name",
        "header_value",
        "headers",
        "limits",
        "name",
        "sink",
        "size",
    )

    def __init__(self, limits: FormLimits) -> None:
        self.limits = limits
        self.fields: dict[str, str] = {}
        self.files: dict[str, UploadedFile] = {}
        self.all_files: dict[str, list[UploadedFile]] = {}
        self.field_bytes = 0
        self.field_count = 0
        self.file_count = 0
        self.headers: dict[bytes, bytes] = {}
        self.header_name = bytearray()
        self.header_value = bytearray()
        self.name = ""
        self.filename: str | None = None
        self.content_type = ""
        self.sink: bytearray | IO[bytes] = bytearray()
        self.size = 0

    def parse(self, boundary: bytes, body: bytes) -> Form:
        closing = b"--" + boundary + b"--"
        if not body.rstrip(b"\r\n").endswith(closing):
            raise _malformed("malformed multipart body: cut short (no closing boundary)")
        callbacks: dict[str, Callable[..., None]] = {
            "on_part_begin": self.on_part_begin,
            "on_header_field": self.on_header_field,
            "on_header_value": self.on_header_value,
            "on_header_end": self.on_header_end,
            "on_headers_finished": self.on_headers_finished,
            "on_part_data": self.on_part_data,
            "on_part_end": self.on_part_end,
        }
        try:
            parser = MultipartParser(boundary, callbacks)  # type: ignore[arg-type]  # a dict of the callbacks it names
            parser.write(body)
            parser.finalize()
        except (FormParserError, ValueError) as exc:
            self.close()
            raise _malformed(f"malformed multipart body: {exc}") from None
        except ClientError:
            self.close()
            raise
        return Form(self.fields, self.files, self.all_files)

    def close(self) -> None:
        Form(self.fields, self.files, self.all_files).close()
        if not isinstance(self.sink, bytearray):
            self.sink.close()

    def on_part_begin(self) -> None:
        self.headers = {}

    def on_header_field(self, data: bytes, start: int, end: int) -> None:
        self.header_name += data[start:end]

    def on_header_value(self, data: bytes, start: int, end: int) -> None:
        self.header_value += data[start:end]

    def on_header_end(self) -> None:
        self.headers[bytes(self.header_name).lower()] = bytes(self.header_value).strip(b" \t")
        self.header_name.clear()
        self.header_value.clear()

    def on_headers_finished(self) -> None:
        _disposition, options = parse_options_header(self.headers.get(b"content-disposition"))
        name = options.get(b"name")
        if name is None:  # RFC 7578 §4.2: every part names its field
            raise _malformed("malformed multipart body: a part without a field name")
        self.name = name.decode(errors="replace")
        filename = options.get(b"filename")
        self.filename = None if filename is None else filename.decode(errors="replace")
        ctype = self.headers.get(b"content-type")
        self.content_type = ctype.decode("latin-1") if ctype else "application/octet-stream"
        self.size = 0
        self.sink = bytearray()
        if self.filename:  # a nameless one is a file only if it has content (see on_part_data)
            self._count_file()
        elif self.filename is None:
            self.field_count += 1
            if self.field_count > self.limits.max_fields:
                raise _too_large(f"a form with more than {self.limits.max_fields} fields")

    def _count_file(self) -> None:
        self.file_count += 1
        if self.file_count > self.limits.max_files:
            raise _too_large(f"a form with more than {self.limits.max_files} files")

    def on_part_data(self, data: bytes, start: int, end: int) -> None:
        size = end - start
        if self.filename == "" and self.size == 0 and size:
            self._count_file()
        self.size += size
        limits = self.limits
        if self.filename is None:
            self.field_bytes += size
            if self.field_bytes > limits.max_form_bytes:
                raise _too_large(f"form fields of more than {limits.max_form_bytes} bytes (files aside)")
        elif limits.max_file_bytes is not None and self.size > limits.max_file_bytes:
            raise _too_large(f"the file {self.filename!r} is over the limit of {limits.max_file_bytes} bytes")
        sink = self.sink
        if isinstance(sink, bytearray):
            sink += data[start:end]
            if self.filename is not None and len(sink) > limits.spool_bytes:
                # unnamed, so gone once closed; it outlives this call (the UploadedFile holds it)
                spool = tempfile.TemporaryFile(dir=limits.upload_dir)  # noqa: SIM115
                spool.write(sink)
                self.sink = spool
        else:
            sink.write(data[start:end])

    def on_part_end(self) -> None:
        sink, self.sink = self.sink, bytearray()
        if self.filename is None:
            assert isinstance(sink, bytearray)  # fields are never spooled
            self.fields[self.name] = sink.decode(errors="replace")
            return
        if self.filename == "" and self.size == 0:
            return  # a file input left empty: the browser sends a nameless empty part, not a file
        if isinstance(sink, bytearray):
            file: IO[bytes] = io.BytesIO(sink)
        else:
            file = sink
            file.seek(0)
        upload = self.files[self.name] = UploadedFile(self.name, self.filename, self.content_type, file, self.size)
        self.all_files.setdefault(self.name, []).append(upload)


def request_signals(request: Request, form: Form | None) -> dict[str, Any]:
    """The Datastar signals a request carries, in php-via's priority order.

    1. the ``datastar`` query parameter (GET, including the stream connect);
    2. a JSON body;
    3. a ``datastar`` form field, or else the form fields themselves (``contentType: 'form'``
       posts carry ``via_ctx`` as a hidden input).
    """
    if request.method in ("GET", "HEAD"):
        raw = request.query.get(protocol.DATASTAR_PARAM, "")
        return protocol.parse_signals(raw) if raw else {}
    if request.content_type == "application/json":
        return protocol.parse_signals(request.body)
    if form is not None and (form.fields or form.files):
        field_value = form.fields.get(protocol.DATASTAR_PARAM)
        if field_value:
            return protocol.parse_signals(field_value)
        return dict(form.fields)
    if request.body and request.content_type in ("", "text/plain"):
        return protocol.parse_signals(request.body)
    return {}
