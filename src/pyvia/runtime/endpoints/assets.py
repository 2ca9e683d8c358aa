"""The asset endpoint: the Datastar bundle and the files of ``static_dir``, precompressed off the loop."""

from __future__ import annotations

import concurrent.futures
import logging
import typing

from pyvia.assets import Bundle, load_bundle
from pyvia.errors import MethodNotAllowed
from pyvia.http import Request, Response
from pyvia.runtime.common import BUNDLE_PATH
from pyvia.static import Asset, StaticFiles

if typing.TYPE_CHECKING:
    from pyvia.app import App
    from pyvia.runtime import Runtime

log = logging.getLogger("pyvia")


class Assets:
    """Serves the Datastar bundle and the static files."""

    def __init__(self, app: App, rt: Runtime) -> None:
        self.app = app
        self.rt = rt
        self.loaded: Bundle | None = None
        self.bundle_url = ""
        self.executor: concurrent.futures.ThreadPoolExecutor | None = None
        self.bundle_asset: Asset | None = None
        self.static: StaticFiles | None = None

    @property
    def bundle(self) -> Bundle:
        if self.loaded is None:
            self.loaded = load_bundle(self.app.config.datastar_js)
            self.bundle_url = f"{self.app.url_base}{BUNDLE_PATH[1:]}?v={self.loaded.version}"
        return self.loaded

    def executor_for_assets(self) -> concurrent.futures.ThreadPoolExecutor:
        """One low-priority thread precompresses static files off the loop (the codecs release the GIL)."""
        if self.executor is None:
            self.executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="pyvia-precompress")
        return self.executor

    def start(self) -> None:
        bundle = self.bundle
        if self.bundle_asset is None:
            self.bundle_asset = Asset(
                bundle.body,
                content_type="text/javascript; charset=utf-8",
                version=bundle.version,
                executor=self.executor_for_assets(),
            )
        if self.app.config.static_dir is not None and self.static is None:
            self.static = StaticFiles(
                self.app.config.static_dir,
                cache_control=self.app.config.static_cache_control,
                executor=self.executor_for_assets(),
                preference=self.app.config.compression_preference,
            )
            self.static.start()

    def response(self, request: Request) -> Response:
        if self.bundle_asset is None:
            self.start()
        assert self.bundle_asset is not None
        found = self.bundle_asset.get(request)
        if found is None:
            raise MethodNotAllowed(headers=[("allow", "GET, HEAD")])
        return found
