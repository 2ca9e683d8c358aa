"""Options replaced for one run of an app: one test (``TestClient(app, settings=...)``) or one
mount (``asgi(app, base_path=..., db_url=...)``), restored when that run ends.

The options are checked as ``App(...)`` checks them (an unknown one is a TypeError naming the
closest), over the options the app was made with. They can be replaced only while the app is
stopped, and the app gets its own again when the run stops, so the next test or another front
end sees the app as it was declared. Routes, hooks and timers are the app's own throughout; what
the options make (the database, the URLs under ``base_path``, the limits, the session store,
the compression and replay budgets, the broadcast tick) is made anew for the run.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from pyvia.db import NoDatabase, connect
from pyvia.errors import ConfigError, UsageError

if TYPE_CHECKING:
    from pyvia.app import App

__all__ = ["override"]

#: Options read when a page is registered: a run cannot replace them (give them to App(...)).
_READ_AT_REGISTRATION = frozenset({"error_messages", "error_view"})
#: What App(...) makes from its options, replaced for the run and put back after it.
_MADE_FROM_OPTIONS = (
    "given_options",
    "config",
    "messages",
    "templates",
    "secret",
    "session_ids",
    "session_cookie",
    "limiter",
    "form_limits",
    "compression",
    "proxies",
    "sessions",
    "replays",
    "db",
)


def override(app: App, settings: Mapping[str, Any]) -> Callable[[], None]:
    """Replace ``settings`` (App options by name) on the stopped ``app``; returns what puts its own
    options back. Raises TypeError for an unknown option, ConfigError for a bad value or for an
    option read when pages are registered, UsageError when the app is running."""
    if app.is_running:
        raise UsageError(
            "an app's options can be replaced only while it is stopped (before the test client "
            "or the ASGI server starts it)"
        )
    fixed = sorted(set(settings) & _READ_AT_REGISTRATION)
    if fixed:
        raise ConfigError(f"{', '.join(fixed)}: read when pages are registered, so give it to App(...)")
    made = type(app)(**{**app.given_options, **settings})  # checked as App(...) checks them
    saved = {name: getattr(app, name) for name in _MADE_FROM_OPTIONS}
    saved_tick = (app.broadcaster.tick, app.broadcaster.settle)
    for name in _MADE_FROM_OPTIONS:
        setattr(app, name, getattr(made, name))
    # the database the app opens at start, counting into this app's metrics
    app.db = (
        NoDatabase(metrics=app.metrics)
        if isinstance(made.db, NoDatabase)
        else connect(made.db.config, metrics=app.metrics)
    )
    app.broadcaster.tick, app.broadcaster.settle = app.config.broadcast_tick, app.config.broadcast_settle
    app.set_base(app.config.base_path)

    def restore() -> None:
        for name, value in saved.items():
            setattr(app, name, value)
        app.broadcaster.tick, app.broadcaster.settle = saved_tick
        app.set_base(app.config.base_path)

    return restore
