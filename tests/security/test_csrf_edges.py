"""Issue 21 item 5: the CSRF edge cases of the Origin check, over real sockets on the native server.

Each forged action is refused with 403 and changes nothing on the server; next to them, the
controls that must still pass: the same origin, an exact ``trusted_origins`` entry, and the
scheme a trusted TLS proxy reports (``X-Forwarded-Proto`` or ``Forwarded: proto=``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from pyvia import App, Context
from pyvia.security import same_origin
from tests.helpers import RawResponse, running_server
from tests.security.servers import Client
from tests.server.test_app_over_http import open_page

PROXY = "127.0.0.2"  # a trusted proxy's address; any other loopback address is a client


def counter_app() -> App:
    app = App(action_rate=0, trusted_proxies=[PROXY], trusted_origins=["https://app.example"])

    @app.page("/")
    def page(c: Context) -> None:
        count = c.signal(0, "count")

        @c.action
        def inc() -> None:
            count.value += 1

        c.view(lambda: f"<p id='n'>{count.value}</p>")

    return app


class Site:
    def __init__(self, app: App, host: str, port: int) -> None:
        self.app, self.host, self.port = app, host, port
        _, seed, self.cookie = open_page(host, port)
        self.ctx = seed["via_ctx"]

    @property
    def count(self) -> int:
        value = self.app.contexts[self.ctx].signals["count"].value
        assert isinstance(value, int)
        return value

    def post(self, head_lines: str, *, source: str = "127.0.0.1", version: str = "1.1") -> RawResponse:
        """POST the action with ``head_lines`` as its Host/Origin/forwarding headers."""
        body = json.dumps({"via_ctx": self.ctx}).encode()
        with Client(self.host, self.port, source=source) as client:
            client.send(
                f"POST /_action/inc HTTP/{version}\r\n{head_lines}Cookie: {self.cookie}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode()
                + body
            )
            return client.read_response()


@pytest.fixture(scope="module")
def site() -> Iterator[Site]:
    app = counter_app()
    with running_server(app) as (host, port):
        yield Site(app, host, port)


def forged(host: str, port: int) -> dict[str, str]:
    here = f"{host}:{port}"
    return {
        "https for an http server": f"Host: {here}\r\nOrigin: https://{here}\r\n",
        "another scheme": f"Host: {here}\r\nOrigin: foo://{here}\r\n",
        "two Origins, evil first": f"Host: {here}\r\nOrigin: https://evil.example\r\nOrigin: http://{here}\r\n",
        "two Origins, evil last": f"Host: {here}\r\nOrigin: http://{here}\r\nOrigin: https://evil.example\r\n",
        "two Origins, both this one": f"Host: {here}\r\nOrigin: http://{here}\r\nOrigin: http://{here}\r\n",
        "Origin null": f"Host: {here}\r\nOrigin: null\r\n",
        "empty Host": f"Host: \r\nOrigin: http://{here}\r\n",
        "empty Host and an empty origin host": "Host: \r\nOrigin: http://\r\n",
        "an Origin with a path": f"Host: {here}\r\nOrigin: http://{here}/\r\n",
        "another port": f"Host: {here}\r\nOrigin: http://{host}:{port + 1}\r\n",
        "no port": f"Host: {here}\r\nOrigin: http://{host}\r\n",
        "a suffix": f"Host: {here}\r\nOrigin: http://{here}.evil.example\r\n",
        "a trusted origin twice": f"Host: {here}\r\nOrigin: https://app.example\r\nOrigin: https://app.example\r\n",
        "a trusted origin, empty Host": "Host: \r\nOrigin: https://app.example\r\n",
        "X-Forwarded-Proto from a client": f"Host: {here}\r\nOrigin: https://{here}\r\nX-Forwarded-Proto: https\r\n",
        "Forwarded proto from a client": f"Host: {here}\r\nOrigin: https://{here}\r\nForwarded: proto=https\r\n",
    }


@pytest.mark.parametrize("case", list(forged("h", 1)))
def test_a_forged_origin_is_refused_and_changes_nothing(site: Site, case: str) -> None:
    before = site.count
    response = site.post(forged(site.host, site.port)[case], source="127.0.0.3")
    assert response.status == 403, (case, response.body)
    assert site.count == before


def test_an_action_without_host_over_http_1_0_is_refused(site: Site) -> None:
    before = site.count
    assert site.post(f"Origin: http://{site.host}:{site.port}\r\n", version="1.0").status == 403
    assert site.count == before


def test_a_trusted_proxy_saying_http_refuses_an_https_origin(site: Site) -> None:
    here = f"{site.host}:{site.port}"
    before = site.count
    response = site.post(f"Host: {here}\r\nOrigin: https://{here}\r\nX-Forwarded-Proto: http\r\n", source=PROXY)
    assert response.status == 403
    assert site.count == before


@pytest.mark.parametrize(
    "case",
    [
        "same origin",
        "trusted origin",
        "X-Forwarded-Proto from the proxy",
        "Forwarded proto from the proxy",
        "upper-case scheme and host",
    ],
)
def test_the_controls_still_pass(site: Site, case: str) -> None:
    here = f"{site.host}:{site.port}"
    head, source = {
        "same origin": (f"Host: {here}\r\nOrigin: http://{here}\r\n", "127.0.0.3"),
        "trusted origin": (f"Host: {here}\r\nOrigin: https://app.example\r\n", "127.0.0.3"),
        "X-Forwarded-Proto from the proxy": (
            f"Host: {here}\r\nOrigin: https://{here}\r\nX-Forwarded-Proto: https\r\nX-Forwarded-For: 203.0.113.9\r\n",
            PROXY,
        ),
        "Forwarded proto from the proxy": (
            f"Host: {here}\r\nOrigin: https://{here}\r\nForwarded: for=203.0.113.9;proto=https\r\n",
            PROXY,
        ),
        "upper-case scheme and host": (f"Host: {here}\r\nOrigin: HTTP://{here.upper()}\r\n", "127.0.0.3"),
    }[case]
    before = site.count
    response = site.post(head, source=source)
    assert response.status == 200, (case, response.body)
    assert site.count == before + 1


@pytest.mark.parametrize(
    ("origin", "scheme", "host", "same"),
    [
        ("http://example.com", "http", "example.com:80", True),  # a default port written or not
        ("https://example.com:443", "https", "example.com", True),
        ("https://example.com", "http", "example.com", False),
        ("http://example.com:8080", "http", "example.com", False),
        ("http://example.com", "http", "", False),
        ("null", "http", "example.com", False),
        ("example.com", "http", "example.com", False),
    ],
)
def test_same_origin_compares_scheme_host_and_port(origin: str, scheme: str, host: str, same: bool) -> None:
    assert same_origin(origin, scheme, host) is same
