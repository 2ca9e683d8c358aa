"""Undoing a response's ``Content-Encoding`` as a browser does: whole bodies and streams write by write.

Separate from the tab and its stream because a plain response needs it too
(:func:`decoded_body`), and because it is the only place the test client knows the codings.
"""

from __future__ import annotations

import zlib
from typing import Any

import brotli
import zstandard

from pyvia.http import Response

__all__ = ["Decoder", "decoded_body"]


class Decoder:
    """Decodes a compressed stream write by write, as a browser does (zstd may hold many frames)."""

    def __init__(self, coding: str) -> None:
        self.coding = coding
        self.wire_bytes = 0
        self._obj: Any = self._new()

    def _new(self) -> Any:
        if self.coding == "zstd":
            return zstandard.ZstdDecompressor().decompressobj()
        if self.coding == "br":
            return brotli.Decompressor()
        if self.coding == "gzip":
            return zlib.decompressobj(wbits=31)
        return None

    def decode(self, data: bytes) -> bytes:
        self.wire_bytes += len(data)
        if self._obj is None:
            return data
        if self.coding == "br":
            decoded: bytes = self._obj.process(data)
            return decoded
        out = b""
        while data:
            out += self._obj.decompress(data)
            if not self._obj.eof:
                break
            data = self._obj.unused_data
            self._obj = self._new()
        return out


def decoded_body(response: Response) -> bytes:
    """The body as the browser sees it, whatever its ``Content-Encoding``."""
    coding = dict(response.headers).get("content-encoding", "identity")
    decoder = Decoder(coding)
    body = decoder.decode(response.body)
    if coding == "zstd" and not body and response.body:
        body = zstandard.ZstdDecompressor().decompress(response.body, max_output_size=64 << 20)
    return body
