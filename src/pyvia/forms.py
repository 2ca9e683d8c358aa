"""Request bodies: signals JSON, url-encoded forms and multipart uploads (python-multipart).

Parsing is lazy (an action that reads no form pays nothing) and total: anything malformed
becomes :class:`~pyvia.errors.MalformedRequest`.
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl

import python_multipart
from python_multipart.exceptions import FormParserError

from pyvia import protocol
from pyvia.errors import MalformedRequest
from pyvia.http import Request


@dataclass(frozen=True, slots=True)
class UploadedFile:
    """A file from a multipart request, held in memory."""

    field_name: str
    filename: str
    content_type: str
    data: bytes

    @property
    def size(self) -> int:
        return len(self.data)


@dataclass(frozen=True, slots=True)
class Form:
    fields: dict[str, str]
    #: The last file of each field (one per field is the common case).
    files: dict[str, UploadedFile]
    #: Every file of each field, in order (``<input type="file" multiple>``).
    all_files: dict[str, list[UploadedFile]] = field(default_factory=dict)


_EMPTY = Form({}, {})
_BOUNDARY = re.compile(r"boundary=(\"[^\"]+\"|[^;\s]+)", re.IGNORECASE)


def parse_form(request: Request) -> Form:
    """Fields and files of a url-encoded or multipart body; empty for anything else."""
    ctype = request.content_type
    if ctype == "application/x-www-form-urlencoded":
        try:
            text = request.body.decode()
        except UnicodeDecodeError:
            raise MalformedRequest("form body is not UTF-8") from None
        return Form(dict(parse_qsl(text, keep_blank_values=True)), {})
    if ctype != "multipart/form-data":
        return _EMPTY
    fields: dict[str, str] = {}
    files: dict[str, UploadedFile] = {}
    all_files: dict[str, list[UploadedFile]] = {}

    def on_field(field: Any) -> None:
        name = (field.field_name or b"").decode(errors="replace")
        value = field.value
        fields[name] = value.decode(errors="replace") if isinstance(value, bytes) else (value or "")

    def on_file(file: Any) -> None:
        obj = file.file_object
        obj.seek(0)
        name = (file.field_name or b"").decode(errors="replace")
        ctype = getattr(file, "content_type", None)
        if isinstance(ctype, bytes):
            ctype = ctype.decode(errors="replace")
        upload = files[name] = UploadedFile(
            field_name=name,
            filename=(file.file_name or b"").decode(errors="replace"),
            content_type=ctype or "application/octet-stream",
            data=obj.read(),
        )
        all_files.setdefault(name, []).append(upload)
        file.close()

    raw_type = request.headers.get("content-type") or ""
    boundary = _BOUNDARY.search(raw_type)
    if boundary is None:
        raise MalformedRequest("malformed multipart body: no boundary")
    closing = b"--" + boundary.group(1).strip('"').encode("latin-1", errors="replace") + b"--"
    if not request.body.rstrip(b"\r\n").endswith(closing):
        raise MalformedRequest("malformed multipart body: cut short (no closing boundary)")
    try:
        headers = {"Content-Type": raw_type.encode("latin-1")}
    except UnicodeEncodeError:
        raise MalformedRequest("Content-Type is not latin-1") from None
    try:
        python_multipart.parse_form(
            headers, io.BytesIO(request.body), on_field, on_file,  # type: ignore[arg-type]  # dict of bytes is what it reads
        )
    except (FormParserError, ValueError) as exc:
        raise MalformedRequest(f"malformed multipart body: {exc}") from None
    return Form(fields, files, all_files)


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
        raw = form.fields.get(protocol.DATASTAR_PARAM)
        if raw:
            return protocol.parse_signals(raw)
        return dict(form.fields)
    if request.body and request.content_type in ("", "text/plain"):
        return protocol.parse_signals(request.body)
    return {}
