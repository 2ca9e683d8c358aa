"""pyvia: real-time, server-rendered web apps in Python.

One context per browser tab on the server, one Server-Sent-Events stream per tab, and the
Datastar client morphing what the server sends. See ``docs/`` for the guides.
"""

from pyvia.app import App, RouteGroup
from pyvia.context import Action, Context
from pyvia.errors import (
    ClientError,
    ConfigError,
    DeclarationError,
    NotFound,
    PyviaDeprecationWarning,
    PyviaError,
    RouteError,
    ServiceError,
    UsageError,
    UserError,
)
from pyvia.forms import UploadedFile
from pyvia.http import Request, Response
from pyvia.markup import Markup, html, raw
from pyvia.scopes import Scope, SharedSignal
from pyvia.signals import Signal

__version__ = "0.1.0"

__all__ = [
    "Action",
    "App",
    "ClientError",
    "ConfigError",
    "Context",
    "DeclarationError",
    "Markup",
    "NotFound",
    "PyviaDeprecationWarning",
    "PyviaError",
    "Request",
    "Response",
    "RouteError",
    "RouteGroup",
    "Scope",
    "ServiceError",
    "SharedSignal",
    "Signal",
    "UploadedFile",
    "UsageError",
    "UserError",
    "__version__",
    "html",
    "raw",
]
