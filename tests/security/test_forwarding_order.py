"""Which forwarding header is read first, in the code and in both guides that describe it."""

from __future__ import annotations

from pathlib import Path

from pyvia.http import Headers, Request
from pyvia.security import TrustedProxies

DOCS = Path(__file__).resolve().parents[2] / "docs"
PROXIES = TrustedProxies(["10.0.0.0/8"])


def _via_proxy(*headers: tuple[str, str]) -> Request:
    return Request("POST", "/", client="10.0.0.1", headers=Headers(list(headers)))


def test_x_forwarded_for_wins_over_a_forwarded_header() -> None:
    both = _via_proxy(("forwarded", "for=192.0.2.66"), ("x-forwarded-for", "198.51.100.7"))
    assert PROXIES.client_address(both) == "198.51.100.7"
    assert PROXIES.client_address(_via_proxy(("forwarded", "for=192.0.2.66"))) == "192.0.2.66"


def test_x_forwarded_proto_wins_over_forwarded_proto() -> None:
    both = _via_proxy(("forwarded", "proto=http"), ("x-forwarded-proto", "https"))
    assert PROXIES.scheme(both) == "https"
    assert PROXIES.scheme(_via_proxy(("forwarded", "proto=https"))) == "https"


def test_security_and_deployment_say_what_the_code_does() -> None:
    for page in ("security.md", "deployment.md"):
        text = " ".join((DOCS / page).read_text(encoding="utf-8").split())
        assert "reads `X-Forwarded-For` when the request has one" in text, page
        assert "prefer a Forwarded" not in text, page
