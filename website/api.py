"""The API reference, generated from pyvia's docstrings and signatures."""

from __future__ import annotations

import inspect
from typing import Any

import pyvia
import pyvia.db
from pyvia import Markup, errors, html, testing

#: (title, objects) in reading order: the public names users touch.
SECTIONS: list[tuple[str, list[Any]]] = [
    ("App", [pyvia.App]),
    ("Context", [pyvia.Context]),
    ("Signals and actions", [pyvia.Signal, pyvia.SharedSignal, pyvia.Action]),
    ("HTML in Python", [pyvia.html, pyvia.raw]),
    ("Scopes", [pyvia.Scope]),
    ("HTTP", [pyvia.Request, pyvia.Response, pyvia.UploadedFile]),
    ("Database", [pyvia.db.connect, pyvia.db.Database, pyvia.db.Transaction]),
    ("Testing", [testing.TestClient, testing.Tab]),
    (
        "Errors",
        [
            pyvia.PyviaError,
            pyvia.UsageError,
            pyvia.ConfigError,
            pyvia.DeclarationError,
            pyvia.RouteError,
            pyvia.ClientError,
            pyvia.UserError,
            pyvia.ServiceError,
            errors.DatabaseError,
            errors.IntegrityError,
            errors.DatabaseUnavailable,
            errors.PoolTimeout,
        ],
    ),
]


def _signature(obj: Any) -> str:
    try:
        return str(inspect.signature(obj))
    except (TypeError, ValueError):
        return ""


def _doc(obj: Any) -> Markup | str:
    text = inspect.getdoc(obj) or ""
    return html("<pre class='doc'>{}</pre>", text) if text else ""


def _members(cls: type) -> list[tuple[str, Any]]:
    """The public methods and properties of ``cls``, its pyvia base classes' included (App's)."""
    out: dict[str, Any] = {}
    for klass in cls.__mro__:
        if not klass.__module__.startswith("pyvia"):
            continue
        for name, member in vars(klass).items():
            if name.startswith("_") or name in out:
                continue
            if (
                isinstance(member, property)
                or inspect.isfunction(member)
                or isinstance(member, (staticmethod, classmethod))
            ):
                out[name] = member
    return list(out.items())


def render_reference() -> Markup:
    """The whole reference as one HTML fragment."""
    parts = [
        html(
            "<h1>API reference</h1><p>Generated from the docstrings of the public names "
            "(<code>pyvia.__all__</code>, <code>pyvia.db</code> and <code>pyvia.testing</code>).</p>"
        )
    ]
    for title, objects in SECTIONS:
        parts.append(html("<h2>{}</h2>", title))
        for obj in objects:
            name = f"{obj.__module__.replace('pyvia.', 'pyvia.', 1)}.{obj.__qualname__}"
            parts.append(
                html("<h3 id='{}'><code>{}{}</code></h3>{}", obj.__qualname__, name, _signature(obj), _doc(obj))
            )
            if inspect.isclass(obj) and not issubclass(obj, BaseException):
                for member_name, member in _members(obj):
                    target = member.fget if isinstance(member, property) else getattr(member, "__func__", member)
                    sig = "" if isinstance(member, property) else _signature(target)
                    kind = "property " if isinstance(member, property) else ""
                    parts.append(html("<h4><code>{}{}{}</code></h4>{}", kind, member_name, sig, _doc(target)))
    return html("{}", parts)
