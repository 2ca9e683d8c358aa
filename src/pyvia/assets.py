"""The Datastar client bundle: fetched from PyPI at set-up time, served from memory.

The bundle is never committed (DESIGN.md decision 2). ``python -m pyvia.fetch_assets`` (run by the
README's set-up commands) downloads the ``starhtml`` 0.7.0 wheel, which ships Datastar v1.0.1 as
``starhtml/static/js/datastar-core.js``, and keeps that file with the wheel's licence files in
``pyvia/_vendor/``. The app serves it at ``/datastar.js?v=<content hash>`` with a year-long
immutable cache and an SRI hash in the page.
"""

from __future__ import annotations

import base64
import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from pyvia.errors import ConfigError

VENDOR_DIR = Path(__file__).parent / "_vendor"
BUNDLE_NAME = "datastar.js"
_WHEEL = "starhtml==0.7.0"
_MEMBER = "starhtml/static/js/datastar-core.js"
_NOTICE = """\
datastar.js is Datastar v1.0.1 (https://data-star.dev), MIT License, Copyright (c) Star Federation,
as distributed (with small patches named in its first line) in the starhtml 0.7.0 wheel from PyPI,
whose licence (Apache-2.0) and notice are kept beside it as STARHTML-LICENSE and STARHTML-NOTICE.
"""


@dataclass(frozen=True, slots=True)
class Bundle:
    """The bundle's bytes and the URL parts derived from them once."""

    body: bytes
    version: str
    integrity: str

    @classmethod
    def from_bytes(cls, body: bytes) -> Bundle:
        digest = hashlib.sha384(body).digest()
        return cls(
            body=body,
            version=hashlib.sha256(body).hexdigest()[:10],
            integrity="sha384-" + base64.b64encode(digest).decode(),
        )


def load_bundle(path: str | os.PathLike[str] | None = None) -> Bundle:
    """Read the bundle (``path``, else ``PYVIA_DATASTAR_JS``, else the vendored copy)."""
    source = Path(path or os.environ.get("PYVIA_DATASTAR_JS") or VENDOR_DIR / BUNDLE_NAME)
    try:
        return Bundle.from_bytes(source.read_bytes())
    except FileNotFoundError:
        raise ConfigError(
            f"the Datastar bundle is missing at {source}; run `python -m pyvia.fetch_assets` once to fetch it"
        ) from None


def fetch(dest: Path = VENDOR_DIR) -> Path:
    """Download the wheel with pip and extract the bundle and licence files into ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--quiet",
                "--no-deps",
                "--only-binary=:all:",
                "--python-version",
                "3.12",
                "--dest",
                tmp,
                _WHEEL,
            ],
            check=True,
        )
        wheel = next(Path(tmp).glob("starhtml-*.whl"))
        with zipfile.ZipFile(wheel) as zf:
            (dest / BUNDLE_NAME).write_bytes(zf.read(_MEMBER))
            for name in zf.namelist():
                base = name.rsplit("/", 1)[-1]
                if "/licenses/" in name and base in ("LICENSE", "NOTICE"):
                    (dest / f"STARHTML-{base}").write_bytes(zf.read(name))
    (dest / "DATASTAR-NOTICE").write_text(_NOTICE)
    return dest / BUNDLE_NAME
