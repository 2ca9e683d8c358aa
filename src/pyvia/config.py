"""The app's settings: one frozen object, validated once when the App is made."""

from __future__ import annotations

import dataclasses
import difflib
import functools
import inspect
import ipaddress
import re
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from os import PathLike
from types import MappingProxyType
from typing import Any, Concatenate, ParamSpec, TypeVar

from pyvia.errors import ConfigError
from pyvia.schema import OutOfRange, named_problem, setting, specs, validate
from pyvia.security import HostPolicy, PeerExemption

#: A file or folder option's value: a string or a ``pathlib.Path``.
FilePath = str | PathLike[str]

_BASE_PATH = re.compile(r"/(?:[A-Za-z0-9][A-Za-z0-9_.-]*(?:/[A-Za-z0-9][A-Za-z0-9_.-]*)*/?)?\Z")


def _codings(value: Sequence[str]) -> Sequence[str]:
    codings = ("zstd", "br", "gzip", "identity")
    if any(c not in codings for c in value):
        raise ValueError(f"compression_preference={value!r}: a list of {codings}")
    return value


def _base_path(value: str) -> str:
    if not _BASE_PATH.match(value):
        raise ValueError(f"base_path={value!r}: must be '/' or '/segment[/segment…]' of [A-Za-z0-9_.-], like '/live'")
    return value if value.endswith("/") else value + "/"


def _engine_prefix(value: str) -> str:
    if not re.fullmatch(r"[A-Za-z0-9_-]{1,32}", value):
        raise ValueError(f"engine_prefix={value!r}: must match [A-Za-z0-9_-]{{1,32}}, like 'shop'")
    return value


def _cluster_address(value: str) -> str:
    cluster_host_port(value)
    return value


def _networks(value: Sequence[str]) -> Sequence[str]:
    for proxy in value:
        try:
            ipaddress.ip_network(proxy, strict=False)
        except ValueError:
            raise ValueError(f"trusted_proxies entry {proxy!r}: not an address or network") from None
    return value


def _origins(value: Sequence[str]) -> Sequence[str]:
    for origin in value:
        if "://" not in origin:
            raise ValueError(f"trusted_origins entry {origin!r}: must look like 'https://example.com'")
    return value


@dataclass(frozen=True, slots=True)
class Config:
    """Every option of :class:`pyvia.App`; durations are in seconds."""

    #: The ``<title>`` of pages whose route gives none.
    title: str = "pyvia"
    #: The ``lang`` attribute of every page's ``<html>``.
    lang: str = "en"
    #: A folder of Jinja templates (``c.template("page.html", ...)``); None: no templates.
    template_dir: FilePath | None = setting(None, unit="path")
    #: Signs context ids; set it (or ``PYVIA_SECRET``) so tabs revive after a restart everywhere.
    secret: str | bytes | None = setting(None, env="PYVIA_SECRET")
    #: Development mode: error overlays, the devtools panel, reload on change; never in production.
    dev: bool = False
    #: A page whose stream never connects is destroyed after this (php-via 0.13: 30 s).
    connect_timeout: float = setting(30.0, unit="s", low=0)
    #: Page contexts kept while they wait for their stream; past it the oldest waiting one is
    #: destroyed (its tab revives from its signed id if its stream comes after all). A crawler's
    #: views never connect: each holds a few KB (bench/RESULTS.md), so this bounds their memory.
    max_waiting_contexts: int = setting(10_000, low=1)
    #: Grace after a tab's last stream closes before its context is destroyed (5 s).
    cleanup_delay: float = setting(5.0, unit="s", low=0)
    #: A disconnected tab's context (and the events queued for it) is kept this long after its
    #: last action (60 s; Datastar's retry backoff caps at 30 s).
    reconnect_timeout: float = setting(60.0, unit="s", low=0)
    #: An unknown context id is revived if its context was destroyed less than this ago (10 min).
    revival_window: float = setting(600.0, unit="s", low=0)
    #: An idle stream gets a comment after this much silence (15 s), so proxies keep it open.
    keep_alive: float = setting(15.0, unit="s", low=0)
    #: Period of the one sweep that runs timeouts and keep-alives for every tab.
    sweep_interval: float = setting(1.0, unit="s", low=0, above=True)
    #: Minimum gap between broadcast flushes (25 ms, php-via 0.13).
    broadcast_tick: float = setting(0.025, unit="s", low=0)
    #: A flush that starts on an idle loop is dropped when its scopes change again while it is
    #: written (a burst began); the burst is flushed once no change has come for this long (2 ms),
    #: at most a tick after it began (bench/RESULTS-2.md 1b). 0: plain tick policy.
    broadcast_settle: float = setting(0.002, unit="s", low=0)
    #: Sessions whose ``session_data`` is kept; the least recently used go first.
    max_sessions: int = setting(10_000, low=1)
    #: Unsent bytes on a tab's socket above which its view frames are held (1 MiB, php-via 0.13).
    max_stream_buffer: int = setting(1 << 20, unit="bytes", low=0)
    #: A tab whose socket stays over ``max_stream_buffer`` this long is disconnected (it
    #: reconnects and gets a full render); at four times the limit it is disconnected at once.
    slow_tab_timeout: float = setting(30.0, unit="s", low=0)
    #: Origins (``scheme://host[:port]``) accepted on actions besides the request's own host.
    trusted_origins: Sequence[str] = setting((), check=_origins)
    #: Per-address action rate: tokens a second and bucket size (429 + Retry-After past them).
    #: High enough for a benchmark of 1,000 actions a second from one address; 0 turns it off.
    action_rate: float = setting(1200.0, unit="/s", low=0)
    #: Bucket size of the per-address action rate (actions at once before ``action_rate`` applies).
    action_burst: float = setting(2400.0, low=0)
    #: Proxies (addresses or CIDRs) whose ``Forwarded``/``X-Forwarded-For`` name the client.
    trusted_proxies: Sequence[str] = setting((), check=_networks)
    #: The largest snapshot of a tab's server-owned signals the browser keeps for its revival
    #: (bytes of JSON); a tab whose values are larger revives with its handler's values.
    max_snapshot_bytes: int = setting(16 << 10, unit="bytes", low=0)
    #: An async action still running after this is cancelled and answered 504.
    action_timeout: float = setting(60.0, unit="s", low=0, above=True)
    #: ``nosniff``, ``Referrer-Policy`` and ``X-Frame-Options`` on pages.
    security_headers: bool = True
    #: A nonce-based Content-Security-Policy on pages (Datastar needs ``'unsafe-eval'``).
    content_security_policy: bool = False
    #: Accept actions without an ``Origin`` header (always on in dev mode).
    allow_missing_origin: bool = False
    #: Use the ``__Host-`` session cookie with ``Secure`` (needs HTTPS).
    secure_cookie: bool = False
    #: Markup added to every page's ``<head>``.
    head: Sequence[str] = ()
    #: Markup added to every page before ``</body>``.
    foot: Sequence[str] = ()
    #: URL prefix the browser sees when the app is mounted below ``/`` (``"/live/"``); used to
    #: make URLs, not to route (a mounting front end or proxy strips it).
    base_path: str = setting("/", check=_base_path)
    #: Compress pages and streams when the browser accepts it, in this order of preference
    #: (zstd costs much less CPU than brotli for about the same bytes: bench/RESULTS.md).
    compression: bool = True
    #: The codings offered, best first: any of ``zstd``, ``br``, ``gzip``, ``identity``.
    compression_preference: Sequence[str] = setting(("zstd", "br", "gzip"), check=_codings)
    #: Cap on the memory of all stream encoders (bytes); default: a quarter of what is available.
    encoder_budget: int | None = setting(None, unit="bytes", low=0)
    #: A zstd or gzip stream idle this long frees its encoder (zstd ends its frame; the stream stays open).
    encoder_idle_release: float = setting(60.0, unit="s", low=0)
    #: A shared render (``share_render=True``) whose scope has this many tabs compresses each of its
    #: re-renders once into zstd frames that its zstd tabs take whole, instead of once per tab; 0: never.
    shared_frames_min_tabs: int = setting(16, low=0)
    #: Bytes of recent frames kept per tab, so a stream that reconnects gets exactly the frames it
    #: missed instead of a full render (64 KiB: a minute of small frames ten times a second); 0 keeps none.
    replay_tab_bytes: int = setting(64 << 10, unit="bytes", low=0)
    #: Cap on the replay buffers of all tabs together; default a quarter of ``encoder_budget``. They
    #: also give way to the encoders: encoders and buffers together stay within ``encoder_budget``.
    replay_budget: int | None = setting(None, unit="bytes", low=0)
    #: A tab's replay buffer is dropped once no frame was added to it for this long (seconds).
    replay_idle: float = setting(30.0, unit="s", low=0)
    #: A folder served as static files (paths with an extension are looked up there first).
    static_dir: FilePath | None = setting(None, unit="path")
    #: ``Cache-Control`` of static files: a string, or ``fn(relative_path, mime) -> str``.
    static_cache_control: str | Callable[[str, str], str] = "no-cache"
    #: Garbage-collector thresholds set when a server starts the app (None leaves Python's).
    #: Tabs are long-lived and hold no reference cycles, so Python's default (700 allocations)
    #: makes the collector walk them again and again, slowing every page view (in-process;
    #: bench/RESULTS.md). Objects alive at start are frozen too.
    #: The middle threshold stays small: a generation-1 pass walks up to 50,000 x it survivors,
    #: and with many waiting page contexts 50 gave pauses long enough to trip the load shedder,
    #: 5 does not (in-process, bench/RESULTS.md finding 1).
    gc_thresholds: tuple[int, int, int] | None = (50_000, 5, 100)
    #: A SQLite file where global state, shared signals and session data are kept across a
    #: graceful restart (written at stop, read at start). None keeps them in memory only.
    persist_path: FilePath | None = setting(None, unit="path")
    #: Keep global state, shared signals and session data across graceful restarts in the app's
    #: database (``[db] url``, table ``pyvia_state``) instead of a ``persist_path`` file; one process.
    persist_in_db: bool = False
    #: Namespace of this app's buckets and subjects on a shared engine (NATS or Redis), so apps
    #: sharing one engine stay apart; the same on every worker and node of one app.
    engine_prefix: str = setting("pyvia", check=_engine_prefix)
    #: Workers of one machine forward actions to each other over a unix socket rather than through
    #: the engine (several times cheaper: bench/RESULTS-2.md); workers on other machines use the engine.
    cluster_direct: bool = True
    #: ``HOST[:PORT]``: each worker also serves that direct channel on TCP, so nodes on other
    #: machines forward to it without the engine (``PORT`` + the worker's index, or any free port
    #: without ``PORT``). ``HOST`` must be an address they reach; the channel checks the app secret
    #: but is not encrypted: a private network only (docs/deployment.md). Default: off, or
    #: ``PYVIA_CLUSTER_ADDRESS`` (``pyvia run --cluster-address``).
    cluster_address: str | None = setting(None, env="PYVIA_CLUSTER_ADDRESS", check=_cluster_address)
    #: Cap on the bytes waiting in all tab sockets together; past it every tab's view frames are
    #: held (signals still go out) until the sockets drain. Default 256 MiB.
    max_unsent_bytes: int = setting(256 << 20, unit="bytes", low=0)
    # Forms posted to actions (docs/security.md#forms-and-uploads); past a limit: 413 with the reason.
    #: Most fields of one form posted to an action.
    max_form_fields: int = setting(1000, low=0)
    #: Most files of one form posted to an action.
    max_form_files: int = setting(100, low=0)
    #: Most bytes of a form's fields, files aside.
    max_form_bytes: int = setting(1 << 20, unit="bytes", low=0)
    #: Most bytes of one uploaded file (None: only the server's body limit).
    max_file_bytes: int | None = setting(None, unit="bytes", low=0)
    #: An uploaded file larger than this goes to a temporary file instead of memory.
    upload_spool_bytes: int = setting(1 << 20, unit="bytes", low=0)
    #: The folder of those temporary files (None: the system's).
    upload_dir: FilePath | None = setting(None, unit="path")
    #: The words a page shows when a request fails, by status (and ``lost``, ``gone``, ``default``);
    #: merged over pyvia.alerts.DEFAULT_MESSAGES. Pages may add their own.
    error_messages: Mapping[str | int, str] | None = None
    #: ``fn(channel) -> html`` drawing the alert (pyvia.alerts.ErrorChannel); None: the default one.
    error_view: Callable[..., str] | None = None
    #: Path of the Datastar bundle (default: the copy fetched by ``python -m pyvia.fetch_assets``).
    datastar_js: FilePath | None = setting(None, unit="path", env="PYVIA_DATASTAR_JS")
    #: The app's own settings, kept as given (``app.config.extra["currency"]``); pyvia reads none.
    extra: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for spec in specs(Config).values():
            value = getattr(self, spec.name)
            try:
                checked = validate(spec, value)
            except ValueError as exc:
                raise ConfigError(named_problem(spec, value, exc)) from None
            if checked is not value and not isinstance(value, list):  # a normalised value (base_path "/live/")
                object.__setattr__(self, spec.name, checked)
        if self.persist_in_db and self.persist_path is not None:
            raise ConfigError("persist_in_db and persist_path both keep the shared state: choose one")

    @classmethod
    def field_names(cls) -> frozenset[str]:
        return frozenset(f.name for f in dataclasses.fields(cls))

    @classmethod
    def from_options(cls, options: dict[str, Any]) -> Config:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(options) - known)
        if unknown:
            raise ConfigError(f"unknown App option(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        return cls(**options)


#: App options that are not fields of :class:`Config`: the ``[db]`` keys, spelled as keywords.
DB_OPTIONS = ("db_url", "db_pool_size", "db_timeout", "db_busy_timeout")
#: The default of ``App(extra=...)``: no settings of the app's own.
NO_EXTRA: Mapping[str, Any] = MappingProxyType({})

_Self = TypeVar("_Self")
_P = ParamSpec("_P")


class UnknownOptionError(ConfigError, TypeError):
    """An option that is not one of App's (a typo, or a server option given to the App).

    A TypeError, as Python's own for an unexpected keyword, and a ConfigError; the message names
    the closest known option.
    """


def unknown_option(owner: str, name: str, known: Iterable[str]) -> UnknownOptionError:
    """The error for option ``name`` given to ``owner``, naming the closest of ``known``."""
    from pyvia.ops.settings import SERVER_KEYS  # lazily: the settings read this module

    if name in SERVER_KEYS:
        return UnknownOptionError(f"{name}: not App options (the server's go to app.run() or pyvia run)")
    close = difflib.get_close_matches(name, list(known), n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return UnknownOptionError(f"{owner}() got an unknown option {name!r}{hint}")


def keyword_options(init: Callable[Concatenate[_Self, _P], None]) -> Callable[Concatenate[_Self, _P], None]:
    """Wrap an ``__init__`` whose parameters are keyword-only options (``App.__init__``).

    The signature stays the one written (editors and type checkers see it); at run time an unknown
    keyword is an :class:`UnknownOptionError` naming the closest known one, and the options the
    caller gave are stored as ``self.given_options`` before ``init`` runs, so that a keyword given wins
    over ``pyvia.toml`` and the environment while one left out does not (even if equal to its default).
    """
    known = frozenset(inspect.signature(init).parameters) - {"self"}
    owner = init.__qualname__.partition(".")[0]

    def checked(self: _Self, /, *args: _P.args, **kwargs: _P.kwargs) -> None:
        if args:
            raise TypeError(f"{owner}() takes options by keyword only, like {owner}(title='Shop')")
        for name in kwargs:
            if name not in known:
                raise unknown_option(owner, name, known)
        object.__setattr__(self, "given_options", dict(kwargs))
        init(self, *args, **kwargs)

    functools.update_wrapper(checked, init)  # inspect.signature(App) shows the options
    return checked


_KIB = 1024
#: Peers the per-address caps do not apply to by default: loopback (see ``Limits.per_ip_exempt``).
LOOPBACK = ("127.0.0.0/8", "::1")
#: Paths never shed under overload: the core's probes and metrics (``Limits.shed_exempt``).
PROBE_PATHS = ("/_health", "/_ready", "/metrics")


def _exempt(value: tuple[str, ...]) -> tuple[str, ...]:
    PeerExemption(value)  # raises ValueError naming the entry
    return value


def _hosts(value: tuple[str, ...]) -> tuple[str, ...]:
    HostPolicy(value)  # raises ValueError naming the pattern
    return value


def _paths(value: tuple[str, ...]) -> tuple[str, ...]:
    bad = [p for p in value if not p.startswith("/")]
    if bad:
        raise ValueError(f"{bad[0]!r}: a request path, starting with '/'")
    return value


@dataclass(frozen=True, slots=True)
class Limits:
    """The ``[server]`` limits of the native server, declared here so that reading the
    configuration never imports the server: :class:`pyvia.server.http.ServerLimits` is this class
    with the timeout sweep's period, and its docstring says why each default is what it is."""

    #: Longest request target (URL) in bytes → 414. nginx, Node and h11 all stop near 8 KiB.
    max_request_line: int = setting(8 * _KIB, unit="bytes", low=1, section="server")
    #: Most header fields in one request (trailers included) → 431. Browsers send 10-25.
    max_header_count: int = setting(100, low=1, section="server")
    #: Most bytes of header fields in one request (names, values, ": " and CRLF) → 431.
    max_header_bytes: int = setting(64 * _KIB, unit="bytes", low=1, section="server")
    #: Largest request body, declared or streamed → 413. Actions post signals, not files.
    max_body: int = setting(16 * _KIB * _KIB, unit="bytes", low=1, section="server")
    #: Seconds from the first byte of a request to the end of its head → 408 (slowloris guard:
    #: trickling bytes does not extend it).
    header_timeout: float = setting(10.0, unit="s", low=0, above=True, section="server")
    #: Longest silence while a request body is arriving → 408; also the grace before
    #: ``min_body_rate`` applies.
    body_timeout: float = setting(30.0, unit="s", low=0, above=True, section="server")
    #: Bytes a second a body must average after its first ``body_timeout`` seconds → 408 (the
    #: slow-POST guard: a body trickled a byte at a time cannot hold a connection for ever).
    #: 500 B/s is Apache mod_reqtimeout's ``MinRate``; 16 MiB at that rate still gets 9 hours.
    min_body_rate: float = setting(500.0, unit="bytes/s", low=0, above=True, section="server")
    #: Seconds an idle keep-alive connection is kept; longer than browsers' and proxies' reuse
    #: windows (Chromium drops idle sockets after 60 s), so the client closes first. Also how long
    #: a peer that stopped reading may hold a response (or a closing connection) unflushed.
    keep_alive_timeout: float = setting(75.0, unit="s", low=0, above=True, section="server")
    #: Requests parsed ahead of the one being answered; at this depth the server stops reading.
    max_pipelined: int = setting(32, low=1, section="server")
    #: Open connections in this process → 503 and close at accept. None: derived from the fd limit.
    max_connections: int | None = setting(None, low=1, section="server")
    #: Open connections from one peer address → 503 and close at accept. None: max_connections / 4.
    max_connections_per_ip: int | None = setting(None, low=1, section="server")
    #: Open streams (SSE responses) in this process → 503. None: 9/10 of ``max_connections``.
    max_streams: int | None = setting(None, low=1, section="server")
    #: Open streams from one peer address → 503. None: max_streams / 4.
    max_streams_per_ip: int | None = setting(None, low=1, section="server")
    #: Addresses or networks the two per-address caps do not apply to (proxies, loopback).
    per_ip_exempt: tuple[str, ...] = setting(LOOPBACK, check=_exempt, section="server")
    #: Requests the app is still answering asynchronously → 503 for new ones past it.
    max_in_flight: int = setting(1024, low=1, section="server")
    #: Under overload, the longest a request waits for its answer (503 or not); see above. None: never shed.
    shed_after: float | None = setting(0.18, unit="s", low=0, above=True, section="server")
    #: Exact request paths answered even while shedding.
    shed_exempt: tuple[str, ...] = setting(PROBE_PATHS, check=_paths, section="server")
    #: Host names this server answers (``"example.com"``, ``"*.example.com"`` for any
    #: subdomain, ``"*"``); another ``Host`` → 400, before the app sees it. None: any host.
    allowed_hosts: tuple[str, ...] | None = setting(None, check=_hosts, section="server")
    #: Seconds in the ``Retry-After`` of every 503.
    retry_after: int = setting(1, unit="s", low=1, section="server")
    #: The kernel send buffer (``SO_SNDBUF``) of a connection once it carries a stream, in bytes
    #: (Linux doubles it for its own bookkeeping). Autotuned, a socket whose peer stopped reading
    #: takes up to ``tcp_wmem``'s 4 MiB of kernel memory; capped, the rest waits in the process,
    #: where the slow-client policy sees it and ends the stream. 128 KiB keeps ~1 MB/s at 100 ms
    #: of round trip, far above what a tab's events need. None: leave it to the kernel.
    stream_send_buffer: int | None = setting(128 * _KIB, unit="bytes", low=1, section="server")

    def __post_init__(self) -> None:
        for spec in specs(type(self)).values():
            value = getattr(self, spec.name)
            try:
                checked = validate(spec, value)
            except OutOfRange:  # every numeric limit is a positive number
                raise ValueError(f"ServerLimits.{spec.name} must be positive, got {value!r}") from None
            except ValueError as exc:
                raise ValueError(f"ServerLimits.{spec.name}: {exc}") from None
            if checked is not value:
                object.__setattr__(self, spec.name, checked)


def seconds_of(where: str, seconds: float | None, ms: float | None, ms_name: str) -> float:
    """A duration given in seconds, or by the deprecated ``ms_name=`` keyword in milliseconds
    (with a DeprecationWarning); exactly one of them. Durations are seconds everywhere in pyvia."""
    if ms is not None:
        if seconds is not None:
            raise TypeError(f"{where}() takes seconds or {ms_name}=, not both")
        warnings.warn(
            f"{where}({ms_name}=...) is deprecated: give the period in seconds ({where}(..., {ms / 1000.0:g}))",
            DeprecationWarning,
            stacklevel=3,
        )
        return ms / 1000.0
    if seconds is None:
        raise TypeError(f"{where}() needs a period in seconds")
    return float(seconds)


def cluster_host_port(text: str) -> tuple[str, int]:
    """``(host, port)`` from a ``cluster_address``: ``HOST``, ``HOST:PORT``, ``[IPv6]:PORT``; port 0
    when not given. Raises ConfigError for anything else, or a host no other machine can reach."""
    shape = f"cluster_address={text!r}: expected HOST or HOST:PORT, like '10.0.0.5' or '10.0.0.5:7700'"
    if not isinstance(text, str):
        raise ConfigError(shape)
    host, port = text, "0"
    if text.startswith("["):
        host, _, port = text[1:].partition("]")
        port = port.removeprefix(":") if port else "0"
    elif text.count(":") == 1:  # more colons: a bare IPv6 address
        host, port = text.split(":")
    if not port.isdigit() or int(port) > 65535 or not re.fullmatch(r"[A-Za-z0-9.:-]+", host):
        raise ConfigError(shape)
    try:
        unspecified = ipaddress.ip_address(host).is_unspecified
    except ValueError:
        if ":" in host:
            raise ConfigError(shape) from None
        unspecified = False
    if unspecified:
        raise ConfigError(
            f"cluster_address={text!r}: the other machines connect to this address, "
            "so it must be this machine's own (such as its private network address), not 0.0.0.0 or ::"
        )
    return host, int(port)
