"""Shared state and messages for several workers or nodes: the engines.

``create_engine(url)`` picks the implementation from the URL scheme: ``memory://`` (one process,
the default), ``nats://`` / ``tls://`` (NATS with JetStream), ``redis://`` / ``rediss://`` /
``unix://`` (Redis). The NATS and Redis clients are imported only when used, so they stay
optional dependencies. ``pyvia run --workers N`` hands the URL to each worker in
``PYVIA_ENGINE_URL``; :func:`join_from_env` attaches an app to it (the native server calls it
before the app starts), :func:`engine_from_env` makes the engine alone.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from pyvia.cluster.base import (
    Engine,
    EngineError,
    EngineStatus,
    EngineUnavailable,
    InvalidName,
    KvChange,
    NoResponders,
    RemoteError,
    RequestTimeout,
    Subscription,
    valid_wire_scope,
)
from pyvia.cluster.memory import MemoryEngine, MemoryHub
from pyvia.cluster.replica import Replica

if TYPE_CHECKING:
    from pyvia.app import App
    from pyvia.cluster.link import ClusterLink

__all__ = [
    "CLUSTER_ADDRESS_ENV",
    "ENGINE_URL_ENV",
    "Engine",
    "EngineError",
    "EngineStatus",
    "EngineUnavailable",
    "InvalidName",
    "KvChange",
    "MemoryEngine",
    "MemoryHub",
    "NoResponders",
    "RemoteError",
    "Replica",
    "RequestTimeout",
    "Subscription",
    "attach",
    "check_engine_url",
    "create_engine",
    "engine_from_env",
    "join_from_env",
    "valid_wire_scope",
]

#: The environment variable through which the supervisor tells each worker where the engine is.
ENGINE_URL_ENV = "PYVIA_ENGINE_URL"
#: ``HOST[:PORT]`` where each worker serves the direct channel to other machines, when the App's
#: ``cluster_address`` is not set (``pyvia run --cluster-address`` sets it for its workers).
CLUSTER_ADDRESS_ENV = "PYVIA_CLUSTER_ADDRESS"
#: Which worker of its node a process is (0, 1, …), and how many the node runs: set by the supervisor.
WORKER_ID_ENV = "PYVIA_WORKER_ID"
WORKERS_ENV = "PYVIA_WORKERS"

_NATS = ("nats", "tls")
_REDIS = ("redis", "rediss", "unix")


def check_engine_url(url: str, *, workers: int = 1) -> str:
    """Check an engine URL's scheme (and that ``memory://`` is not asked of several workers).

    Raises ValueError with the accepted forms; nothing is imported or connected.
    """
    scheme = url.split("://", 1)[0].lower() if "://" in url else ""
    if scheme not in ("memory", *_NATS, *_REDIS):
        raise ValueError(
            f"engine URL {url!r} must start with memory://, nats://, tls://, redis://, rediss:// or unix://"
        )
    if scheme == "memory" and workers > 1:
        raise ValueError(
            "the memory engine lives in one process: give --engine nats://... or redis://... "
            "to several workers, or no --engine to start a local nats-server"
        )
    return url


def create_engine(url: str, *, prefix: str = "pyvia") -> Engine:
    """An unconnected engine for ``url``; ``prefix`` keeps apps sharing one server apart.

    Raises ValueError naming the accepted schemes for any other URL.
    """
    scheme = check_engine_url(url).split("://", 1)[0].lower()
    if scheme == "memory":
        return MemoryEngine()
    if scheme in _NATS:
        from pyvia.cluster.nats import NatsEngine

        return NatsEngine(url, prefix=prefix)
    from pyvia.cluster.redis import RedisEngine

    return RedisEngine(url, prefix=prefix)


def engine_from_env(*, prefix: str = "pyvia") -> Engine:
    """The engine named by ``PYVIA_ENGINE_URL``, or a :class:`MemoryEngine` when it is unset."""
    return create_engine(os.environ.get(ENGINE_URL_ENV) or "memory://", prefix=prefix)


async def attach(app: App, engine: Engine) -> ClusterLink:
    """Share ``app``'s scoped signals, global state, broadcasts and tabs with other workers through
    ``engine`` (not yet connected): the started link becomes the app's ownership and shared store."""
    from pyvia.cluster.link import ClusterLink

    link = ClusterLink(app, engine)
    await link.start()
    app.share_through(link, link)
    return link


async def join_from_env(app: App) -> ClusterLink | None:
    """Attach ``app`` to the engine ``PYVIA_ENGINE_URL`` names, as each worker of ``pyvia run
    --workers N`` does before it serves; None when the variable is unset, names the memory engine
    (one process: nothing to share) or the app already shares through a live link."""
    url = os.environ.get(ENGINE_URL_ENV)
    if not url or url.startswith("memory:") or (app.store.shared and not app.store.is_stopped):
        return None
    return await attach(app, create_engine(url, prefix=app.config.engine_prefix))
