"""The runtime of an App: the parts that serve its tabs, each in its own module.

``App`` declares (routes, hooks, mounts, configuration) and builds one :class:`Runtime`; the
parts reach each other through it (``rt.registry``, ...) and the App through ``app``.
"""

from __future__ import annotations

import typing

from pyvia.runtime.dispatch import Dispatch
from pyvia.runtime.endpoints.action import Actions
from pyvia.runtime.endpoints.assets import Assets
from pyvia.runtime.endpoints.beacon import Beacon
from pyvia.runtime.endpoints.page import Pages
from pyvia.runtime.endpoints.stream import Streams
from pyvia.runtime.persistence import Persistence
from pyvia.runtime.registry import Registry
from pyvia.runtime.reporting import Reporting
from pyvia.runtime.revival import Revival
from pyvia.runtime.serving import Serving
from pyvia.runtime.sessions import Sessions

if typing.TYPE_CHECKING:
    from pyvia.app import App

__all__ = ["Runtime"]


class Runtime:
    """The parts of one App's runtime."""

    __slots__ = (
        "actions",
        "assets",
        "beacon",
        "dispatch",
        "pages",
        "persistence",
        "registry",
        "reporting",
        "revival",
        "serving",
        "sessions",
        "streams",
    )

    def __init__(self, app: App) -> None:
        self.reporting = Reporting(app, self)
        self.registry = Registry(app, self)
        self.sessions = Sessions(app, self)
        self.revival = Revival(app, self)
        self.persistence = Persistence(app, self)
        self.dispatch = Dispatch(app, self)
        self.pages = Pages(app, self)
        self.streams = Streams(app, self)
        self.actions = Actions(app, self)
        self.assets = Assets(app, self)
        self.beacon = Beacon(app, self)
        self.serving = Serving(app, self)
