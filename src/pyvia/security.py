"""Request-level defences: the client's address and scheme behind proxies, whether an ``Origin``
is this site's, per-address rate limits, and which peers and ``Host`` names a server accepts.

Pure decisions over values and a clock reading: the App calls the first three on the action path,
the native server the last two at accept and per request, and the settings use them to check
``per_ip_exempt`` and ``allowed_hosts`` before anything starts.
"""

from __future__ import annotations

import ipaddress
import re
from collections import OrderedDict
from collections.abc import Iterable, Sequence

from pyvia.http import Request

__all__ = ["HostPolicy", "PeerExemption", "RateLimiter", "TrustedProxies", "normalize_host", "same_origin"]

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
        if not self._networks or not self._trusted(peer):
            return peer
        chain = _forwarded_for(request)
        for address in reversed(chain):
            if not self._trusted(address):
                return address
        return chain[0] if chain else peer

    def scheme(self, request: Request) -> str:
        """The scheme the client used: what a trusted proxy says (``X-Forwarded-Proto``, else
        the ``proto`` of ``Forwarded``), else the request's own. A proxy that terminates TLS
        talks plain HTTP to us, so without it an ``https`` page's Origin would look foreign."""
        if not self._networks or not self._trusted(request.client):
            return request.scheme
        for header in request.headers.get_all("x-forwarded-proto"):
            first = header.split(",", 1)[0].strip().lower()
            if first:
                return first
        for header in request.headers.get_all("forwarded"):
            for pair in header.split(",", 1)[0].split(";"):
                key, _, value = pair.strip().partition("=")
                if key.lower() == "proto" and value.strip('"'):
                    return value.strip('"').lower()
        return request.scheme


_DEFAULT_PORT = {"http": ":80", "https": ":443"}


def same_origin(origin: str, scheme: str, host: str) -> bool:
    """Whether ``origin`` (an ``Origin`` header) is ``scheme://host``, the site the request was
    sent to: same scheme, host and port (a default port written or not), compared without case.
    ``null``, an opaque or foreign scheme, or another host or port is not."""
    key = (origin, scheme, host)
    known = _SAME_ORIGIN.get(key)
    if known is None:  # a site's browsers send the same pair with every post: worked out once
        known = _same_origin(origin, scheme, host)
        if len(origin) + len(host) <= 256:
            if len(_SAME_ORIGIN) >= _SAME_ORIGIN_KEPT:
                _SAME_ORIGIN.clear()
            _SAME_ORIGIN[key] = known
    return known


#: Answers of :func:`same_origin` for short pairs, at most ``_SAME_ORIGIN_KEPT`` (cleared when full).
_SAME_ORIGIN: dict[tuple[str, str, str], bool] = {}
_SAME_ORIGIN_KEPT = 1024


def _same_origin(origin: str, scheme: str, host: str) -> bool:
    their_scheme, sep, their_host = origin.partition("://")
    scheme = scheme.lower()
    if not sep or their_scheme.lower() != scheme or not host:
        return False
    default = _DEFAULT_PORT.get(scheme)
    theirs, ours = their_host.lower(), host.strip().lower()
    if default is not None:
        theirs, ours = theirs.removesuffix(default), ours.removesuffix(default)
    return theirs == ours


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

    __slots__ = ("_buckets", "burst", "evictions", "limited", "max_addresses", "rate", "spent")

    def __init__(self, rate: float, burst: float, max_addresses: int = 100_000) -> None:
        self.rate = rate
        self.burst = max(burst, 1.0)
        self.max_addresses = max_addresses
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()
        self.evictions = 0
        self.limited = 0
        #: Tokens taken here since the other workers were last told (None: one worker, not counted).
        self.spent: dict[str, int] | None = None

    def reset(self) -> None:
        self._buckets.clear()

    def check(self, address: str, now: float) -> float:
        """Take one token; return 0 if allowed, else the seconds until one is available."""
        if self.rate <= 0:
            return 0.0
        tokens, last = self._buckets.pop(address, (self.burst, now))
        if now > last:  # comparisons, not min() and max(): this runs on every action
            tokens += (now - last) * self.rate
        if tokens > self.burst:
            tokens = self.burst
        if tokens >= 1.0:
            self._buckets[address] = (tokens - 1.0, now)
            wait = 0.0
            spent = self.spent
            if spent is not None and (address in spent or len(spent) < self.max_addresses):
                spent[address] = spent.get(address, 0) + 1
        else:
            self._buckets[address] = (tokens, now)
            self.limited += 1
            wait = (1.0 - tokens) / self.rate
        if len(self._buckets) > self.max_addresses:
            self._buckets.popitem(last=False)
            self.evictions += 1
        return wait

    def take_spent_elsewhere(self, address: str, count: int, now: float) -> None:
        """Another worker let ``count`` requests of ``address`` through: they come out of this bucket too,
        so the rate holds for the app, not for each worker."""
        if self.rate <= 0 or count <= 0:
            return
        tokens, last = self._buckets.pop(address, (self.burst, now))
        tokens = min(self.burst, tokens + max(0.0, now - last) * self.rate)
        self._buckets[address] = (max(0.0, tokens - count), now)
        if len(self._buckets) > self.max_addresses:
            self._buckets.popitem(last=False)
            self.evictions += 1


class PeerExemption:
    """Which peer addresses the per-address caps skip: ``exempt(ip)``, cached per address."""

    __slots__ = ("_cache", "_networks")

    _CACHE_MAX = 4096

    def __init__(self, entries: Iterable[str]) -> None:
        self._networks = []
        for entry in entries:
            try:
                self._networks.append(ipaddress.ip_network(entry.strip(), strict=False))
            except ValueError:
                raise ValueError(f"per_ip_exempt entry {entry!r}: not an address or network") from None
        self._cache: dict[str, bool] = {}

    def __call__(self, address: str) -> bool:
        found = self._cache.get(address)
        if found is None:
            found = self._match(address)
            if len(self._cache) >= self._CACHE_MAX:
                self._cache.clear()
            self._cache[address] = found
        return found

    def _match(self, address: str) -> bool:
        if not self._networks:
            return False
        try:
            ip = ipaddress.ip_address(address.partition("%")[0])  # fe80::1%eth0: drop the zone
        except ValueError:
            return False  # a Unix socket or an unknown peer: counted like any other address
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped  # a dual-stack socket's ::ffff:127.0.0.1
        return any(ip.version == net.version and ip in net for net in self._networks)


#: RFC 9110 §7.2 / RFC 3986 §3.2.2: an IP literal or a reg-name, then an optional port.
_HOST = re.compile(r"(\[[0-9A-Fa-f:.vV]+\]|[A-Za-z0-9\-._~!$&'()*+,;=%]*)(?::[0-9]*)?")


def normalize_host(value: str) -> str | None:
    """The host name of a ``Host`` field value (lower case, no port, no trailing dot), or None
    when the value is not a valid ``uri-host [ ":" port ]`` (RFC 9112 §3.2 makes that a 400)."""
    match = _HOST.fullmatch(value.strip(" \t"))  # OWS only: str.strip() would take \xa0 and other Unicode spaces
    if match is None:
        return None
    return match.group(1).lower().rstrip(".")


class HostPolicy:
    """Whether a ``Host`` field value names this server: ``policy(value) -> bool``, cached.

    ``None`` patterns allow every valid host. A pattern is a host name (``example.com``), a
    wildcard for its subdomains at any depth (``*.example.com``, which does not match
    ``example.com`` itself: list both), an IP literal (``[::1]``, ``127.0.0.1``) or ``*``.
    Comparison ignores case, the port and a trailing dot. An invalid value is always refused.
    """

    __slots__ = ("_any", "_exact", "_suffixes", "cache")

    _CACHE_MAX = 1024

    def __init__(self, patterns: Iterable[str] | None) -> None:
        self._any = patterns is None
        self._exact: set[str] = set()
        self._suffixes: list[str] = []
        for pattern in patterns or ():
            name = pattern.strip().lower().rstrip(".")
            if name == "*":
                self._any = True
            elif name.startswith("*."):
                rest = name[2:]
                if not rest or "*" in rest or normalize_host(rest) != rest:
                    raise ValueError(f"allowed_hosts pattern {pattern!r}: expected *.domain")
                self._suffixes.append("." + rest)
            elif not name or "*" in name or normalize_host(name) != name:
                raise ValueError(f"allowed_hosts pattern {pattern!r}: expected a host name without port")
            else:
                self._exact.add(name)
        #: value -> verdict; a connection reads it directly (one dict lookup a request) and calls
        #: the policy only on a miss. Cleared when full, so random names cannot grow it.
        self.cache: dict[str, bool] = {}

    def __call__(self, value: str) -> bool:
        found = self.cache.get(value)
        if found is None:
            found = self._check(value)
            if len(self.cache) >= self._CACHE_MAX:
                self.cache.clear()
            self.cache[value] = found
        return found

    def _check(self, value: str) -> bool:
        name = normalize_host(value)
        if name is None:
            return False
        if self._any:
            return True
        return name in self._exact or any(name.endswith(s) for s in self._suffixes)
