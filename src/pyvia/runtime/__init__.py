"""The runtime of an App: the parts that serve its tabs, each in its own module.

``App`` declares (routes, hooks, mounts, configuration) and builds one :class:`Runtime`; the
parts reach each other through it (``rt.registry``, ...) and the App through ``app``.
"""

from __future__ import annotations

import typing

from pyvia.runtime.registry import Registry

if typing.TYPE_CHECKING:
    from pyvia.app import App

__all__ = ["Runtime"]


class Runtime:
    """The parts of one App's runtime."""

    __slots__ = ("registry",)

    def __init__(self, app: App) -> None:
        self.registry = Registry(app, self)
