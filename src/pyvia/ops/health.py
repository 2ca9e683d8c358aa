"""``/_health``, ``/_ready`` and ``/metrics``: what probes and scrapers ask a worker.

Rules this module keeps (``ephpm-lessons.md`` §5.4, lesson 7):

* ``/_health`` is liveness: 200 while the process serves, 503 only when a cluster engine is
  configured and not connected (this worker cannot share state, so a restart may help).
* ``/_ready`` is readiness: 503 until the app has started (``app.clock`` set) and while it
  drains; it never looks at the engine, so an engine outage does not empty the service.
* Each answer is built from the App's current state with no side effect, and is never cached.

The engine is found as ``app.engine`` (None or absent: no engine) and read through the
contract of :class:`pyvia.cluster.base.Engine`: ``name``, ``is_connected``, ``status()``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from pyvia.http import Response
from pyvia.ops.metrics import CONTENT_TYPE, PyviaMetrics, apps_of, collect_app

if TYPE_CHECKING:
    from pyvia.app import App

__all__ = [
    "HEALTH_PATH",
    "METRICS_PATH",
    "READY_PATH",
    "engine_name",
    "engine_state",
    "health_response",
    "metrics_response",
    "ready_response",
]

HEALTH_PATH = "/_health"
READY_PATH = "/_ready"
METRICS_PATH = "/metrics"
_NO_STORE = ("cache-control", "no-store")


def engine_name(app: App) -> str:
    """``"memory"``, ``"nats"``, ``"redis"`` (the engine's ``name``), or ``"none"``."""
    engine = app.engine
    if engine is None:
        return "none"
    return str(getattr(engine, "name", type(engine).__name__)).lower()


def engine_state(app: App) -> str:
    """``"none"`` without an engine, else ``"up"`` or ``"down"`` from its ``is_connected``."""
    engine = app.engine
    if engine is None:
        return "none"
    connected = getattr(engine, "is_connected", True)
    if callable(connected):
        connected = connected()
    return "up" if connected else "down"


def _redact_url(url: str) -> str:
    try:
        parts = urlsplit(url)
    except ValueError:
        return ""
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def _engine_detail(app: App) -> dict[str, Any]:
    state = engine_state(app)
    detail: dict[str, Any] = {"name": engine_name(app), "state": state}
    status_fn = getattr(app.engine, "status", None)
    if state != "none" and callable(status_fn):
        try:
            status = status_fn()
        except Exception as exc:  # a probe must answer even when the engine's status fails
            detail["error"] = f"status() failed: {type(exc).__name__}"
        else:
            for field in ("node_id", "reconnects", "last_error"):
                if hasattr(status, field):
                    detail[field] = getattr(status, field)
            if isinstance(getattr(status, "url", None), str):
                detail["url"] = _redact_url(status.url)
    return detail


def health_response(app: App) -> Response:
    """Liveness as JSON: status, ``pyvia.__version__``, engine, tabs and open streams.

    200 ``{"status": "ok", ...}``; 503 ``{"status": "engine down", ...}`` (with ``Retry-After``)
    when an engine is configured and not connected.
    """
    from pyvia import __version__

    engine = _engine_detail(app)
    down = engine["state"] == "down"
    body = {
        "status": "engine down" if down else "ok",
        "version": __version__,
        "started": app.clock is not None,
        "engine": engine,
        "contexts": sum(len(a.contexts) for a in apps_of(app)),
        "streams": sum(len(a.connected) for a in apps_of(app)),
    }
    headers = [_NO_STORE, ("retry-after", "1")] if down else [_NO_STORE]
    return Response.json(body, 503 if down else 200, headers)


def ready_response(app: App) -> Response:
    """Readiness: 200 ``{"ready": true}`` once started (and not draining), else 503 with the reason."""
    if app.clock is None:
        reason = "not started"
    elif app.draining:
        reason = "draining"
    elif app.runtime.assets.loaded is None:
        reason = "warming up"
    else:
        return Response.json({"ready": True}, 200, [_NO_STORE])
    return Response.json({"ready": False, "reason": reason}, 503, [_NO_STORE, ("retry-after", "1")])


def metrics_response(app: App, metrics: PyviaMetrics | None = None) -> Response:
    """The App's metrics in the Prometheus text format (its gauges read now)."""
    m = collect_app(app, metrics)
    return Response(200, [("content-type", CONTENT_TYPE), _NO_STORE], m.render())
