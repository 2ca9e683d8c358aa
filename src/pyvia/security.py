"""Request-level defences: the client's address behind proxies, and per-address rate limits.

Pure decisions over values and a clock reading; the App calls them on the action path.
"""

from __future__ import annotations

import ipaddress
from collections import OrderedDict
from collections.abc import Sequence

from pyvia.http import Request

__all__ = ["RateLimiter", "TrustedProxies"]

_Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class TrustedProxies:
    """Which peers may tell us the client's address (``Forwarded`` / ``X-Forwarded-For``).

    Behind Caddy or nginx every request comes from the proxy; without this, every user would be
    one address to the rate limiter. Headers from any other peer are ignored: they are forgeable.
    """

    __slots__ = ("_networks",)

    def __init__(self, proxies: Sequence[str]) -> None:
        self._networks: list[_Network] = [ipaddress.ip_network(p, strict=False) for p in proxies]

    def _trusted(self, address: str) -> bool:
        if not self._networks:
            return False
        try:
            ip = ipaddress.ip_address(address)
        except ValueError:
            return False
        return any(ip in net for net in self._networks)

    def client_address(self, request: Request) -> str:
        """The nearest address in the forwarding chain that is not one of our proxies."""
        peer = request.client
        if not self._trusted(peer):
            return peer
        chain = _forwarded_for(request)
        for address in reversed(chain):
            if not self._trusted(address):
                return address
        return chain[0] if chain else peer


def _forwarded_for(request: Request) -> list[str]:
    """The forwarding chain, from X-Forwarded-For (which Caddy and nginx append to), else Forwarded.

    X-Forwarded-For comes first: a proxy that appends only to it would pass a client's own
    ``Forwarded`` header through unchanged, and reading that would let the client pick its address.
    """
    out: list[str] = []
    for header in request.headers.get_all("x-forwarded-for"):
        out.extend(part.strip() for part in header.split(",") if part.strip())
    if out:
        return out
    for header in request.headers.get_all("forwarded"):
        for element in header.split(","):
            for pair in element.split(";"):
                key, _, value = pair.strip().partition("=")
                if key.lower() == "for" and value:
                    value = value.strip('"')
                    if value.startswith("["):  # [2001:db8::1]:4711
                        value = value[1:].split("]", 1)[0]
                    elif value.count(":") == 1:  # 192.0.2.1:4711
                        value = value.split(":", 1)[0]
                    out.append(value)
    return out


class RateLimiter:
    """A token bucket per address: ``rate`` tokens a second, up to ``burst``.

    At most ``max_addresses`` buckets are kept; the least recently used is evicted (it comes back
    full, which only ever errs on the side of letting a request through). ``rate <= 0`` disables.
    """

    __slots__ = ("_buckets", "burst", "evictions", "limited", "max_addresses", "rate")

    def __init__(self, rate: float, burst: float, max_addresses: int = 100_000) -> None:
        self.rate = rate
        self.burst = max(burst, 1.0)
        self.max_addresses = max_addresses
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()
        self.evictions = 0
        self.limited = 0

    def reset(self) -> None:
        self._buckets.clear()

    def check(self, address: str, now: float) -> float:
        """Take one token; return 0 if allowed, else the seconds until one is available."""
        if self.rate <= 0:
            return 0.0
        tokens, last = self._buckets.pop(address, (self.burst, now))
        tokens = min(self.burst, tokens + max(0.0, now - last) * self.rate)
        if tokens >= 1.0:
            self._buckets[address] = (tokens - 1.0, now)
            wait = 0.0
        else:
            self._buckets[address] = (tokens, now)
            self.limited += 1
            wait = (1.0 - tokens) / self.rate
        if len(self._buckets) > self.max_addresses:
            self._buckets.popitem(last=False)
            self.evictions += 1
        return wait
