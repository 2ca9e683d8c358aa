"""The metrics pyvia exposes on ``/metrics``, and their collection from the App at scrape time.

The metric kinds and the text format are :mod:`pyvia.ops.metric_types`; the process monitors
(GC pauses, loop lag, resident memory) are :mod:`pyvia.ops.monitors`. This module declares
pyvia's set and its label values, defined here once (the native server takes its own from here).

Rules this module keeps (``ephpm-lessons.md`` §5.3):

1. Bounded label sets. Every label is declared with its closed set of values; anything else is
   counted under ``other``. No path, peer or tab id is ever a label value.
2. Fixed buckets per histogram, chosen for what it measures (an action: 0.5 ms to 10 s).
3. Counters and histograms are updated where things happen (the core calls
   :class:`PyviaMetrics`' methods: one dict-free attribute update each). Gauges cost nothing
   between scrapes: :func:`collect_app` reads the App's state when ``/metrics`` is asked for.
4. No dependency, no I/O except reading ``/proc/self/statm`` at scrape time.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from pyvia.ops.metric_types import CONTENT_TYPE, OTHER, Counter, Gauge, Histogram, Registry
from pyvia.ops.monitors import GC_GENERATIONS, GcMonitor, LoopLagMonitor, process_rss

if TYPE_CHECKING:
    from pyvia.app import App

__all__ = [
    "ACTION_BUCKETS",
    "CONTENT_TYPE",
    "DB_BUCKETS",
    "DB_KINDS",
    "FLUSH_BUCKETS",
    "GC_BUCKETS",
    "LAG_BUCKETS",
    "OTHER",
    "REFUSAL_STATUSES",
    "REQUEST_KINDS",
    "SERVER_CAPS",
    "STATUS_CLASSES",
    "TIMEOUT_PHASES",
    "UNAVAILABLE_REASONS",
    "Counter",
    "Gauge",
    "GcMonitor",
    "Histogram",
    "LoopLagMonitor",
    "PyviaMetrics",
    "Registry",
    "apps_of",
    "collect_app",
    "metrics_for",
    "process_rss",
    "status_class",
]

#: ``Request.kind`` as the core sets it, plus the ops endpoints.
REQUEST_KINDS = ("page", "action", "passed", "stream", "revival", "route", "asset", "beacon", "download", "ops")
STATUS_CLASSES = ("1xx", "2xx", "3xx", "4xx", "5xx")
_KINDS = frozenset(REQUEST_KINDS)
#: Cluster engines, by their ``name`` (pyvia.ops.health.engine_name).
ENGINES = ("memory", "nats", "redis")
#: How an action reaches the worker holding its tab (``pyvia_forwarded_total``).
FORWARD_CHANNELS = ("unix", "tcp", "engine")
CODINGS = ("identity", "zstd", "br", "gzip")
#: An action's round trip, 0.5 ms to 10 s (ePHPm's HTTP buckets, with a finer low end).
ACTION_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
#: A broadcast flush: a tick is 25 ms, and a flush past it delays the next (pyvia.broadcast).
FLUSH_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)
#: Event-loop lag past the 250 ms check period; anything over 100 ms is felt in the browser.
LAG_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
#: A collection: young ones take microseconds, a full one with many tabs far longer (bench/gc_pauses.py).
GC_BUCKETS = (0.0001, 0.0005, 0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)
#: Database statements by kind (pyvia.db.sql.classify) and outcome.
DB_KINDS = ("read", "write")
DB_STATUSES = ("ok", "error")
#: A statement as its caller saw it: a SQLite point read is tens of µs, a commit with fsync ms.
DB_BUCKETS = (0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 5.0)
#: The native server's label values, defined here once (pyvia.server.registry takes them): why it
#: answered 503 itself, where it timed a connection out, what it refused a request with.
UNAVAILABLE_REASONS = (
    "connections",
    "connections_per_ip",
    "backlog",
    "streams",
    "streams_per_ip",
    "in_flight",
    "loop_lag",
    "queued",
)
TIMEOUT_PHASES = ("header", "body", "idle", "send")
REFUSAL_STATUSES = ("400", "413", "414", "417", "431", "501", "505")
#: The native server's effective caps, as ``ConnectionRegistry.stats()`` names them.
SERVER_CAPS = ("max_connections", "max_connections_per_ip", "max_streams", "max_streams_per_ip", "max_in_flight")
#: A round trip to the cluster engine (NATS, Redis): fine low buckets, since loopback is fast.
ENGINE_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)


def status_class(status: int) -> str:
    """``"2xx"`` for 200..299 and so on; ``"other"`` outside 100..599."""
    return f"{status // 100}xx" if 100 <= status <= 599 else OTHER


# --- pyvia's metrics -------------------------------------------------------------------------------


class PyviaMetrics:
    """The metrics of one App. The core reports events through the methods; gauges and totals
    the App already keeps are read by :func:`collect_app` at scrape time."""

    def __init__(self) -> None:
        from pyvia import __version__

        r = self.registry = Registry()
        self.build_info = r.gauge(
            "pyvia_build_info", "pyvia version of this process (always 1).", labels={"version": (__version__,)}
        )
        self.build_info.labels(version=__version__).set(1)
        # events, reported by the core
        self.requests = r.counter(
            "pyvia_requests_total",
            "Requests answered, by kind and status class.",
            labels={"kind": REQUEST_KINDS, "status": STATUS_CLASSES},
        )
        self.action_seconds = r.histogram(
            "pyvia_action_duration_seconds", "Time from an action's request to its answer.", buckets=ACTION_BUCKETS
        )
        #: ``observe_action(seconds)``: the histogram's own method, not a wrapper (one call per action)
        self.observe_action = self.action_seconds.unlabelled().observe
        self.flush_seconds = r.histogram(
            "pyvia_broadcast_flush_duration_seconds",
            "Time one broadcast flush took (render and write every marked tab).",
            buckets=FLUSH_BUCKETS,
        )
        self.frames_sent = r.counter(
            "pyvia_stream_frames_sent_total", "Writes to tab streams.", labels={"coding": CODINGS}
        )
        self.bytes_sent = r.counter(
            "pyvia_stream_bytes_sent_total",
            "Bytes written to tab streams, after compression.",
            labels={"coding": CODINGS},
        )
        self.frames_held = r.counter(
            "pyvia_stream_frames_held_total", "View frames held back (and superseded) because a tab's socket was full."
        )
        self.engine_seconds = r.histogram(
            "pyvia_engine_round_trip_seconds", "Round trips to the cluster engine.", buckets=ENGINE_BUCKETS
        )
        forwarded = r.counter(
            "pyvia_forwarded_total",
            "Actions sent on to the worker holding their tab, by channel.",
            labels={"channel": FORWARD_CHANNELS},
        )
        self._forwarded = {channel: forwarded.labels(channel=channel) for channel in FORWARD_CHANNELS}
        self.loop_lag = r.histogram(
            "pyvia_event_loop_lag_seconds", "How late a callback scheduled every 250 ms ran.", buckets=LAG_BUCKETS
        )
        self.loop_lag_last = r.gauge("pyvia_event_loop_lag_last_seconds", "The lag of the latest check.")
        self.db_queries = r.counter(
            "pyvia_db_queries_total",
            "Database statements, by kind (read/write) and status (ok/error).",
            labels={"kind": DB_KINDS, "status": DB_STATUSES},
        )
        self.db_seconds = r.histogram(
            "pyvia_db_query_duration_seconds",
            "Time a database statement took, as its caller saw it, by kind.",
            buckets=DB_BUCKETS,
            labels={"kind": DB_KINDS},
        )
        self.db_write_wait = r.histogram(
            "pyvia_db_write_wait_seconds", "Time a SQLite write waited for the one write permit.", buckets=DB_BUCKETS
        )
        self.db_pool_timeouts = r.counter(
            "pyvia_db_pool_timeouts_total", "Statements refused because no connection or write permit came in time."
        )
        self.db_connections = r.gauge(
            "pyvia_db_connections",
            "Database connections the pool holds (SQLite: the writer and the readers); 0 without a database.",
        )
        self.db_idle = r.gauge("pyvia_db_connections_idle", "Database connections free to hand out.")
        self.db_discarded = r.counter(
            "pyvia_db_connections_discarded_total",
            "Database connections closed because they broke (never handed out again).",
        )
        self.gc_seconds = r.histogram(
            "pyvia_gc_pause_seconds",
            "Cyclic garbage collections, by generation.",
            buckets=GC_BUCKETS,
            labels={"generation": GC_GENERATIONS},
        )
        # state, read at scrape time
        self.tabs = r.gauge("pyvia_tabs", "Live tab contexts (with or without a stream).")
        self.tabs_waiting = r.gauge("pyvia_tabs_waiting", "Page contexts waiting for their first stream.")
        self.tabs_evicted = r.counter(
            "pyvia_tabs_waiting_evicted_total", "Page contexts destroyed unconnected past max_waiting_contexts."
        )
        self.streams = r.gauge("pyvia_streams_open", "Tabs with an open stream.")
        self.sessions = r.gauge("pyvia_sessions", "Sessions whose data is kept.")
        self.scopes = r.gauge("pyvia_scopes", "Scopes with members or held by the app.")
        self.flushes = r.counter("pyvia_broadcast_flushes_total", "Broadcast flushes.")
        self.broadcast_frames = r.counter("pyvia_broadcast_tab_frames_total", "Tabs written by broadcast flushes.")
        self.broadcast_pending = r.gauge("pyvia_broadcast_pending_scopes", "Scopes marked and not yet flushed.")
        self.flushes_cut_short = r.counter(
            "pyvia_broadcast_flushes_cut_short_total", "Flushes dropped after their first slices because a burst began."
        )
        self.encoder_bytes = r.gauge("pyvia_encoder_memory_bytes", "Estimated memory of live stream encoders.")
        self.encoder_peak = r.gauge("pyvia_encoder_memory_peak_bytes", "Highest encoder memory so far.")
        self.encoder_limit = r.gauge("pyvia_encoder_budget_bytes", "The cap on stream-encoder memory.")
        self.encoders = r.gauge("pyvia_encoders", "Live stream encoders.")
        self.encoder_releases = r.counter("pyvia_encoder_releases_total", "Encoders released to stay in budget.")
        self.replay_bytes = r.gauge("pyvia_replay_buffer_bytes", "Bytes of recent frames kept for tabs that reconnect.")
        self.replay_buffers = r.gauge("pyvia_replay_buffers", "Tabs with a replay buffer.")
        self.replay_limit = r.gauge("pyvia_replay_budget_bytes", "The cap on all replay buffers together.")
        self.resumes = r.counter(
            "pyvia_stream_resumes_total", "Reconnected streams given exactly the frames they missed."
        )
        self.replayed_frames = r.counter("pyvia_stream_replayed_frames_total", "Frames written again on a resume.")
        self.full_renders = r.counter(
            "pyvia_stream_full_renders_total",
            "Reconnected streams of a held tab that needed a full render (frames gone).",
        )
        self.replay_evictions = r.counter(
            "pyvia_replay_evictions_total", "Replay buffers dropped to stay within their budget."
        )
        self.errors = r.counter("pyvia_errors_total", "Errors raised by user code (logged with their phase).")
        self.rate_limited = r.counter("pyvia_rate_limited_total", "Actions refused with 429.")
        self.session_evictions = r.counter("pyvia_session_evictions_total", "Sessions dropped past max_sessions.")
        self.unsent = r.gauge("pyvia_unsent_bytes", "Bytes waiting in all tab sockets together (last sweep).")
        self.unsent_cap_hits = r.counter(
            "pyvia_unsent_cap_hits_total",
            "Times the tab sockets together went over max_unsent_bytes (view frames "
            "are held everywhere until they drain).",
        )
        self.engine_up = r.gauge(
            "pyvia_engine_up",
            "1 when the cluster engine is reachable, else 0; absent without an engine.",
            labels={"engine": ENGINES},
        )
        self.rss = r.gauge("process_resident_memory_bytes", "Resident memory of this process.")
        self.uptime = r.gauge("pyvia_uptime_seconds", "Seconds since the app started.")
        self.gc_monitor = GcMonitor(self.gc_seconds)
        self.lag_monitor = LoopLagMonitor(self.loop_lag, self.loop_lag_last)
        # pre-bound children: the hot paths do no label lookup
        self._request_children: dict[tuple[str, int], Any] = {}
        self._sent = {c: (self.frames_sent.labels(coding=c), self.bytes_sent.labels(coding=c)) for c in CODINGS}
        self._db = {
            (k, ok): (self.db_queries.labels(kind=k, status="ok" if ok else "error"), self.db_seconds.labels(kind=k))
            for k in DB_KINDS
            for ok in (True, False)
        }
        # the native server's counts, read at scrape time while it serves this app (watch_server)
        self._server_stats: Callable[[], Mapping[str, float]] | None = None
        self._server: _ServerMetrics | None = None

    def watch_server(self, stats: Callable[[], Mapping[str, float]] | None) -> None:
        """Read the native server's counts from ``stats()`` at each scrape (None: it stopped).

        The server calls it when it starts serving the app (``ConnectionRegistry.stats``); its
        metrics (``pyvia_server_*``) appear from then on, and keep their totals across restarts
        of the server in one process.
        """
        self._server_stats = stats
        if stats is not None and self._server is None:
            self._server = _ServerMetrics(self.registry)

    def collect_server(self) -> None:
        """Copy the watched server's counts into the ``pyvia_server_*`` metrics (at scrape time)."""
        if self._server_stats is not None and self._server is not None:
            self._server.read(self._server_stats())

    # --- what the core calls -------------------------------------------------------------------

    def observe_request(self, kind: str, status: int) -> None:
        """Count one answered request (``request.kind``, final status)."""
        key = (kind, status)
        child = self._request_children.get(key)
        if child is None:
            if kind not in _KINDS or not 100 <= status <= 599:  # keep the cache as bounded as the labels
                kind, status = (kind if kind in _KINDS else OTHER), (status if 100 <= status <= 599 else 0)
                key = (kind, status)
                child = self._request_children.get(key)
            if child is None:
                child = self._request_children[key] = self.requests.labels(kind=kind, status=status_class(status))
        child.value += 1

    def observe_flush(self, seconds: float) -> None:
        self.flush_seconds.observe(seconds)

    def frame_sent(self, nbytes: int, coding: str = "identity") -> None:
        """One write of ``nbytes`` (as sent, compressed or not) to a tab's stream."""
        pair = self._sent.get(coding)
        if pair is None:  # an unknown coding: counted under "other"
            pair = self._sent[coding] = (self.frames_sent.labels(coding=coding), self.bytes_sent.labels(coding=coding))
        frames, sent = pair
        frames.value += 1
        sent.value += nbytes

    def frame_held(self) -> None:
        self.frames_held.inc()

    def observe_query(self, kind: str, ok: bool, seconds: float) -> None:
        """One database statement of ``kind`` (``"read"``/``"write"``) that took ``seconds``."""
        pair = self._db.get((kind, ok))
        if pair is None:
            pair = self._db[(kind, ok)] = (
                self.db_queries.labels(kind=kind, status="ok" if ok else "error"),
                self.db_seconds.labels(kind=kind),
            )
        count, hist = pair
        count.value += 1
        hist.observe(seconds)

    def observe_engine(self, seconds: float) -> None:
        self.engine_seconds.observe(seconds)

    def forwarded(self, channel: str) -> None:
        """One action sent on to its tab's worker over ``channel`` (one of :data:`FORWARD_CHANNELS`)."""
        self._forwarded[channel].value += 1

    # --- monitors ------------------------------------------------------------------------------------

    def start_monitors(self, clock: Any) -> None:
        """Install the GC timer and start the loop-lag check on ``clock`` (the App's)."""
        self.gc_monitor.install()
        self.lag_monitor.start(clock)

    def stop_monitors(self) -> None:
        self.lag_monitor.stop()
        self.gc_monitor.uninstall()

    def render(self) -> bytes:
        return self.registry.render()


class _ServerMetrics:
    """The native server's part of ``/metrics``: what it holds, what it refused and why."""

    def __init__(self, r: Registry) -> None:
        self.open = r.gauge("pyvia_server_connections_open", "Connections the server has admitted and not closed.")
        self.accepted = r.counter("pyvia_server_connections_accepted_total", "Connections admitted.")
        self.streams = r.gauge("pyvia_server_streams_open", "Streamed (SSE) responses open on the server.")
        self.in_flight = r.gauge("pyvia_server_requests_in_flight", "Requests the app is still answering.")
        self.shedding = r.gauge("pyvia_server_shedding", "1 while new requests are answered 503 (overload).")
        self.unsent = r.gauge("pyvia_server_unsent_bytes", "Bytes every connection still holds for its peer.")
        self.caps = r.gauge(
            "pyvia_server_capacity",
            "The effective caps (None ones derived from the fd limit).",
            labels={"cap": SERVER_CAPS},
        )
        self.unavailable = r.counter(
            "pyvia_server_unavailable_total",
            "503s the server answered by itself: a connection cap or the listen backlog at accept (connections, "
            "connections_per_ip, backlog), a stream cap (streams, streams_per_ip), load shedding (in_flight, "
            "loop_lag, queued).",
            labels={"reason": UNAVAILABLE_REASONS},
        )
        self.timeouts = r.counter(
            "pyvia_server_timeouts_total",
            "Connections timed out: request head (408), body (408), idle keep-alive (closed), a peer not reading "
            "(send, aborted).",
            labels={"phase": TIMEOUT_PHASES},
        )
        self.refused = r.counter(
            "pyvia_server_refused_requests_total",
            "Requests refused before the app, by status (malformed, too large, bad Host...).",
            labels={"status": REFUSAL_STATUSES},
        )
        self.smuggling = r.counter(
            "pyvia_server_smuggling_refused_total",
            "Requests refused with 400 for ambiguous framing (two Content-Length, "
            "Content-Length with Transfer-Encoding...): request-smuggling attempts.",
        )
        self.hosts = r.counter(
            "pyvia_server_host_refused_total",
            "Requests refused with 400 for a Host that is invalid or not in allowed_hosts.",
        )

    def read(self, stats: Mapping[str, float]) -> None:
        self.open.set(stats.get("connections", 0))
        self.accepted.set_total(stats.get("accepted", 0))
        self.streams.set(stats.get("streams", 0))
        self.in_flight.set(stats.get("in_flight", 0))
        self.shedding.set(stats.get("shedding", 0))
        self.unsent.set(stats.get("buffered_bytes", 0))
        for cap in SERVER_CAPS:
            self.caps.labels(cap=cap).set(stats.get(cap, 0))
        for reason in UNAVAILABLE_REASONS:
            self.unavailable.labels(reason=reason).set_total(stats.get(f"unavailable.{reason}", 0))
        for phase in TIMEOUT_PHASES:
            self.timeouts.labels(phase=phase).set_total(stats.get(f"timeouts.{phase}", 0))
        for status in REFUSAL_STATUSES:
            self.refused.labels(status=status).set_total(stats.get(f"refused.{status}", 0))
        self.smuggling.set_total(stats.get("smuggling", 0))
        self.hosts.set_total(stats.get("hosts_refused", 0))


def metrics_for(app: App) -> PyviaMetrics:
    """The :class:`PyviaMetrics` of ``app`` (its ``metrics``)."""
    return app.metrics


def apps_of(app: App) -> list[App]:
    """``app`` and every App mounted in it (``app.mount``), depth first: one process's apps."""
    out = [app]
    for _prefix, mounted in app.mounts:
        out.extend(apps_of(mounted))
    return out


def collect_app(
    app: App, metrics: PyviaMetrics | None = None, *, rss: Callable[[], int | None] = process_rss
) -> PyviaMetrics:
    """Read the App's current state (with its mounted apps') into the gauges and totals.

    Call it once per scrape; it costs a few ``len()`` calls and one read of ``/proc/self/statm``.
    """
    from pyvia.ops.health import engine_name, engine_state  # health imports this module

    m = metrics if metrics is not None else metrics_for(app)
    apps = apps_of(app)
    m.tabs.set(sum(len(a.contexts) for a in apps))
    m.tabs_waiting.set(sum(len(a.waiting) for a in apps))
    m.tabs_evicted.set_total(sum(a.evicted_waiting for a in apps))
    m.streams.set(sum(len(a.connected) for a in apps))
    m.sessions.set(sum(len(a.sessions) for a in apps))
    m.scopes.set(sum(len(a.scopes) for a in apps))
    totals: dict[str, float] = {}
    for a in apps:
        for source in (a.broadcaster.stats(), a.compression.budget.stats(), a.replays.stats()):
            for k, v in source.items():
                totals[k] = totals.get(k, 0) + v
        totals["rate_limited"] = totals.get("rate_limited", 0) + a.limiter.limited
        totals["errors"] = totals.get("errors", 0) + a.errors
        totals["evictions"] = totals.get("evictions", 0) + a.sessions.evictions
        totals["unsent"] = totals.get("unsent", 0) + a.outflow.unsent
        totals["cap_hits"] = totals.get("cap_hits", 0) + a.outflow.cap_hits
    m.flushes.set_total(totals.get("flushes", 0))
    m.broadcast_frames.set_total(totals.get("tab_frames", 0))
    m.broadcast_pending.set(totals.get("pending", 0))
    m.flushes_cut_short.set_total(totals.get("flushes_cut_short", 0))
    m.encoder_bytes.set(totals.get("bytes", 0))
    m.encoder_peak.set(totals.get("peak_bytes", 0))
    m.encoder_limit.set(totals.get("limit_bytes", 0))
    m.encoders.set(totals.get("encoders", 0))
    m.encoder_releases.set_total(totals.get("releases", 0))
    m.replay_bytes.set(totals.get("replay_bytes", 0))
    m.replay_buffers.set(totals.get("replay_buffers", 0))
    m.replay_limit.set(totals.get("replay_limit_bytes", 0))
    m.resumes.set_total(totals.get("resumes", 0))
    m.replayed_frames.set_total(totals.get("replayed_frames", 0))
    m.full_renders.set_total(totals.get("full_renders", 0))
    m.replay_evictions.set_total(totals.get("replay_evicted", 0))
    m.errors.set_total(totals["errors"])
    m.rate_limited.set_total(totals["rate_limited"])
    m.session_evictions.set_total(totals["evictions"])
    db = app.db
    if db.kind != "none":
        pool = db.pool_stats()
        m.db_connections.set(pool["open"])
        m.db_idle.set(pool["idle"])
        m.db_discarded.set_total(pool["discarded"])
    m.unsent.set(totals.get("unsent", 0))
    m.unsent_cap_hits.set_total(totals.get("cap_hits", 0))
    m.collect_server()
    state = engine_state(app)
    if state != "none":
        m.engine_up.labels(engine=engine_name(app)).set(1 if state == "up" else 0)
    resident = rss()
    if resident is not None:
        m.rss.set(resident)
    if app.clock is not None:
        m.uptime.set(max(0.0, app.clock.now() - app.started_at))
    return m
