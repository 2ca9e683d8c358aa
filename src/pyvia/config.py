"""The app's settings: one frozen object, validated once when the App is made."""

from __future__ import annotations

import dataclasses
import difflib
import functools
import inspect
import ipaddress
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from os import PathLike
from types import MappingProxyType
from typing import Any, Concatenate, ParamSpec, TypeVar

from pyvia.errors import ConfigError

#: A file or folder option's value: a string or a ``pathlib.Path``.
FilePath = str | PathLike[str]

_BASE_PATH = re.compile(r"/(?:[A-Za-z0-9][A-Za-z0-9_.-]*(?:/[A-Za-z0-9][A-Za-z0-9_.-]*)*/?)?\Z")


@dataclass(frozen=True, slots=True)
class Config:
    """Every option of :class:`pyvia.App`; durations are in seconds."""

    #: The ``<title>`` of pages whose route gives none.
    title: str = "pyvia"
    #: The ``lang`` attribute of every page's ``<html>``.
    lang: str = "en"
    #: A folder of Jinja templates (``c.template("page.html", ...)``); None: no templates.
    template_dir: FilePath | None = None
    #: Signs context ids; set it (or ``PYVIA_SECRET``) so tabs revive after a restart everywhere.
    secret: str | bytes | None = None
    #: Development mode: error overlays, the devtools panel, reload on change; never in production.
    dev: bool = False
    #: A page whose stream never connects is destroyed after this (php-via 0.13: 30 s).
    connect_timeout: float = 30.0
    #: Page contexts kept while they wait for their stream; past it the oldest waiting one is
    #: destroyed (its tab revives from its signed id if its stream comes after all). A crawler's
    #: views never connect: at ~5 KB each (bench/RESULTS.md) 10,000 hold about 50 MB.
    max_waiting_contexts: int = 10_000
    #: Grace after a tab's last stream closes before its context is destroyed (5 s).
    cleanup_delay: float = 5.0
    #: A disconnected tab's context (and the events queued for it) is kept this long after its
    #: last action (60 s; Datastar's retry backoff caps at 30 s).
    reconnect_timeout: float = 60.0
    #: An unknown context id is revived if its context was destroyed less than this ago (10 min).
    revival_window: float = 600.0
    #: An idle stream gets a comment after this much silence (15 s), so proxies keep it open.
    keep_alive: float = 15.0
    #: Period of the one sweep that runs timeouts and keep-alives for every tab.
    sweep_interval: float = 1.0
    #: Minimum gap between broadcast flushes (25 ms, php-via 0.13).
    broadcast_tick: float = 0.025
    #: A flush that starts on an idle loop is dropped when its scopes change again while it is
    #: written (a burst began); the burst is flushed once no change has come for this long (2 ms),
    #: at most a tick after it began (bench/RESULTS-2.md 1b). 0: plain tick policy.
    broadcast_settle: float = 0.002
    #: Sessions whose ``session_data`` is kept; the least recently used go first.
    max_sessions: int = 10_000
    #: Unsent bytes on a tab's socket above which its view frames are held (1 MiB, php-via 0.13).
    max_stream_buffer: int = 1 << 20
    #: A tab whose socket stays over ``max_stream_buffer`` this long is disconnected (it
    #: reconnects and gets a full render); at four times the limit it is disconnected at once.
    slow_tab_timeout: float = 30.0
    #: Origins (``scheme://host[:port]``) accepted on actions besides the request's own host.
    trusted_origins: Sequence[str] = ()
    #: Per-address action rate: tokens a second and bucket size (429 + Retry-After past them).
    #: High enough for a benchmark of 1,000 actions a second from one address; 0 turns it off.
    action_rate: float = 1200.0
    #: Bucket size of the per-address action rate (actions at once before ``action_rate`` applies).
    action_burst: float = 2400.0
    #: Proxies (addresses or CIDRs) whose ``Forwarded``/``X-Forwarded-For`` name the client.
    trusted_proxies: Sequence[str] = ()
    #: The largest snapshot of a tab's server-owned signals the browser keeps for its revival
    #: (bytes of JSON); a tab whose values are larger revives with its handler's values.
    max_snapshot_bytes: int = 16 << 10
    #: An async action still running after this is cancelled and answered 504.
    action_timeout: float = 60.0
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
    base_path: str = "/"
    #: Compress pages and streams when the browser accepts it, in this order of preference
    #: (zstd costs a third of brotli's CPU for about the same bytes: bench/RESULTS.md).
    compression: bool = True
    #: The codings offered, best first: any of ``zstd``, ``br``, ``gzip``, ``identity``.
    compression_preference: Sequence[str] = ("zstd", "br", "gzip")
    #: Cap on the memory of all stream encoders (bytes); default: a quarter of what is available.
    encoder_budget: int | None = None
    #: A zstd or gzip stream idle this long frees its encoder (zstd ends its frame; the stream stays open).
    encoder_idle_release: float = 60.0
    #: Bytes of recent frames kept per tab, so a stream that reconnects gets exactly the frames it
    #: missed instead of a full render (64 KiB: a minute of small frames ten times a second); 0 keeps none.
    replay_tab_bytes: int = 64 << 10
    #: Cap on the replay buffers of all tabs together; default a quarter of ``encoder_budget``. They
    #: also give way to the encoders: encoders and buffers together stay within ``encoder_budget``.
    replay_budget: int | None = None
    #: A tab's replay buffer is dropped once no frame was added to it for this long (seconds).
    replay_idle: float = 30.0
    #: A folder served as static files (paths with an extension are looked up there first).
    static_dir: FilePath | None = None
    #: ``Cache-Control`` of static files: a string, or ``fn(relative_path, mime) -> str``.
    static_cache_control: str | Callable[[str, str], str] = "no-cache"
    #: Garbage-collector thresholds set when a server starts the app (None leaves Python's).
    #: Tabs are long-lived and hold no reference cycles, so Python's default (700 allocations)
    #: makes the collector walk them again and again: 70 µs per counter page view instead of 47
    #: (in-process, 40,000 views; bench/RESULTS.md). Objects alive at start are frozen too.
    #: The middle threshold stays small: a generation-1 pass walks up to 50,000 x it survivors,
    #: and with 150,000 waiting page contexts 50 gave 0.57 s pauses (enough to trip the load
    #: shedder), 5 gives 81 ms (in-process, bench/RESULTS.md finding 1).
    gc_thresholds: tuple[int, int, int] | None = (50_000, 5, 100)
    #: A SQLite file where global state, shared signals and session data are kept across a
    #: graceful restart (written at stop, read at start). None keeps them in memory only.
    persist_path: FilePath | None = None
    #: Keep global state, shared signals and session data across graceful restarts in the app's
    #: database (``[db] url``, table ``pyvia_state``) instead of a ``persist_path`` file; one process.
    persist_in_db: bool = False
    #: Namespace of this app's buckets and subjects on a shared engine (NATS or Redis), so apps
    #: sharing one engine stay apart; the same on every worker and node of one app.
    engine_prefix: str = "pyvia"
    #: Workers of one machine forward actions to each other over a unix socket rather than through
    #: the engine (several times cheaper: bench/RESULTS-2.md); workers on other machines use the engine.
    cluster_direct: bool = True
    #: ``HOST[:PORT]``: each worker also serves that direct channel on TCP, so nodes on other
    #: machines forward to it without the engine (``PORT`` + the worker's index, or any free port
    #: without ``PORT``). ``HOST`` must be an address they reach; the channel checks the app secret
    #: but is not encrypted: a private network only (docs/deployment.md). Default: off, or
    #: ``PYVIA_CLUSTER_ADDRESS`` (``pyvia run --cluster-address``).
    cluster_address: str | None = None
    #: Cap on the bytes waiting in all tab sockets together; past it every tab's view frames are
    #: held (signals still go out) until the sockets drain. Default 256 MiB.
    max_unsent_bytes: int = 256 << 20
    # Forms posted to actions (docs/security.md#forms-and-uploads); past a limit: 413 with the reason.
    #: Most fields of one form posted to an action.
    max_form_fields: int = 1000
    #: Most files of one form posted to an action.
    max_form_files: int = 100
    #: Most bytes of a form's fields, files aside.
    max_form_bytes: int = 1 << 20
    #: Most bytes of one uploaded file (None: only the server's body limit).
    max_file_bytes: int | None = None
    #: An uploaded file larger than this goes to a temporary file instead of memory.
    upload_spool_bytes: int = 1 << 20
    #: The folder of those temporary files (None: the system's).
    upload_dir: FilePath | None = None
    #: The words a page shows when a request fails, by status (and ``lost``, ``gone``, ``default``);
    #: merged over pyvia.alerts.DEFAULT_MESSAGES. Pages may add their own.
    error_messages: Mapping[str | int, str] | None = None
    #: ``fn(channel) -> html`` drawing the alert (pyvia.alerts.ErrorChannel); None: the default one.
    error_view: Callable[..., str] | None = None
    #: Path of the Datastar bundle (default: the copy fetched by ``python -m pyvia.fetch_assets``).
    datastar_js: FilePath | None = None
    #: The app's own settings, kept as given (``app.config.extra["currency"]``); pyvia reads none.
    extra: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("connect_timeout", "cleanup_delay", "reconnect_timeout", "revival_window", "keep_alive",
                     "broadcast_tick", "broadcast_settle", "slow_tab_timeout", "encoder_idle_release", "action_rate",
                     "action_burst", "replay_idle"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0:
                raise ConfigError(f"{name}={value!r}: must be a number >= 0")
        if not isinstance(self.action_timeout, (int, float)) or self.action_timeout <= 0:
            raise ConfigError(f"action_timeout={self.action_timeout!r}: must be a number of seconds > 0")
        if not isinstance(self.max_snapshot_bytes, int) or isinstance(self.max_snapshot_bytes, bool) \
                or self.max_snapshot_bytes < 0:
            raise ConfigError(f"max_snapshot_bytes={self.max_snapshot_bytes!r}: must be a byte count >= 0")
        if not isinstance(self.max_unsent_bytes, int) or self.max_unsent_bytes < 0:
            raise ConfigError(f"max_unsent_bytes={self.max_unsent_bytes!r}: must be a byte count >= 0")
        if self.encoder_budget is not None and (not isinstance(self.encoder_budget, int) or self.encoder_budget < 0):
            raise ConfigError(f"encoder_budget={self.encoder_budget!r}: must be a byte count >= 0, or None")
        if not isinstance(self.replay_tab_bytes, int) or isinstance(self.replay_tab_bytes, bool) \
                or self.replay_tab_bytes < 0:
            raise ConfigError(f"replay_tab_bytes={self.replay_tab_bytes!r}: must be a byte count >= 0")
        if self.replay_budget is not None and (not isinstance(self.replay_budget, int)
                                               or isinstance(self.replay_budget, bool) or self.replay_budget < 0):
            raise ConfigError(f"replay_budget={self.replay_budget!r}: must be a byte count >= 0, or None")
        codings = ("zstd", "br", "gzip", "identity")
        if isinstance(self.compression_preference, str) or any(c not in codings for c in self.compression_preference):
            raise ConfigError(f"compression_preference={self.compression_preference!r}: a list of {codings}")
        if not isinstance(self.max_waiting_contexts, int) or isinstance(self.max_waiting_contexts, bool) \
                or self.max_waiting_contexts < 1:
            raise ConfigError(f"max_waiting_contexts={self.max_waiting_contexts!r}: must be a whole number >= 1")
        for name in ("max_form_fields", "max_form_files", "max_form_bytes", "upload_spool_bytes"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ConfigError(f"{name}={value!r}: must be a whole number >= 0")
        if self.max_file_bytes is not None and (
                not isinstance(self.max_file_bytes, int) or isinstance(self.max_file_bytes, bool)
                or self.max_file_bytes < 0):
            raise ConfigError(f"max_file_bytes={self.max_file_bytes!r}: must be a byte count >= 0, or None")
        if not isinstance(self.max_sessions, int) or self.max_sessions < 1:
            raise ConfigError(f"max_sessions={self.max_sessions!r}: must be a whole number >= 1")
        if not isinstance(self.sweep_interval, (int, float)) or self.sweep_interval <= 0:
            raise ConfigError(f"sweep_interval={self.sweep_interval!r}: must be a number of seconds > 0")
        if not isinstance(self.max_stream_buffer, int) or self.max_stream_buffer < 0:
            raise ConfigError(f"max_stream_buffer={self.max_stream_buffer!r}: must be a byte count >= 0")
        if not isinstance(self.base_path, str) or not _BASE_PATH.match(self.base_path):
            raise ConfigError(
                f"base_path={self.base_path!r}: must be '/' or '/segment[/segment…]' of [A-Za-z0-9_.-], like '/live'"
            )
        if self.persist_in_db and self.persist_path is not None:
            raise ConfigError("persist_in_db and persist_path both keep the shared state: choose one")
        if not isinstance(self.engine_prefix, str) or not re.fullmatch(r"[A-Za-z0-9_-]{1,32}", self.engine_prefix):
            raise ConfigError(f"engine_prefix={self.engine_prefix!r}: must match [A-Za-z0-9_-]{{1,32}}, like 'shop'")
        if self.cluster_address is not None:
            cluster_host_port(self.cluster_address)
        if not self.base_path.endswith("/"):
            object.__setattr__(self, "base_path", self.base_path + "/")
        for proxy in self.trusted_proxies:
            try:
                ipaddress.ip_network(proxy, strict=False)
            except ValueError:
                raise ConfigError(f"trusted_proxies entry {proxy!r}: not an address or network") from None
        if self.error_messages is not None and not isinstance(self.error_messages, Mapping):
            raise ConfigError(f"error_messages={self.error_messages!r}: a mapping of status (or lost/gone/default) "
                              "to the words to show")
        if self.error_view is not None and not callable(self.error_view):
            raise ConfigError(f"error_view={self.error_view!r}: a function of the error channel returning HTML")
        for origin in self.trusted_origins:
            if not isinstance(origin, str) or "://" not in origin:
                raise ConfigError(f"trusted_origins entry {origin!r}: must look like 'https://example.com'")

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
    caller gave are stored as ``self._options`` before ``init`` runs, so that a keyword given wins
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
        object.__setattr__(self, "_options", dict(kwargs))
        init(self, *args, **kwargs)

    functools.update_wrapper(checked, init)  # inspect.signature(App) shows the options
    return checked


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
        raise ConfigError(f"cluster_address={text!r}: the other machines connect to this address, "
                          "so it must be this machine's own (such as its private network address), not 0.0.0.0 or ::")
    return host, int(port)
