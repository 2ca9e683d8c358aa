"""pyvia's exceptions.

::

    PyviaError
    ├─ UsageError          the developer misused the API; raised at declaration or start
    │  ├─ ConfigError      (also ValueError) a bad option
    │  ├─ RouteError       (also ValueError) a bad route pattern or a duplicate route
    │  └─ DeclarationError (also ValueError) a bad signal, action or view declaration
    ├─ ClientError         the browser sent something wrong; ``.status`` is the HTTP answer
    │  ├─ MalformedRequest     400
    │  ├─ UserError            400  (raised by app code: its message is shown to the user)
    │  ├─ ContextNotFound      400  (unknown tab that cannot be revived)
    │  ├─ Forbidden            403  (another session's tab, a foreign Origin)
    │  ├─ NotFound             404
    │  ├─ MethodNotAllowed     405
    │  ├─ TabGone              409  (an action for a tab this server does not hold: it reconnects first)
    │  ├─ PayloadTooLarge      413
    │  │  └─ SignalTooLarge    413  (a writable signal over its ``max_length``; names the signal)
    │  └─ RateLimited          429  (with ``Retry-After``)
    ├─ ServiceError        the server cannot serve now; ``.status`` 503 and ``.retry_after``
    │  ├─ ActionTimeout    504  an action ran past ``action_timeout``
    │  └─ DatabaseUnavailable  503  the database cannot be reached, or no connection came in time
    │     └─ PoolTimeout       503  every connection (or SQLite's write permit) stayed busy too long
    └─ DatabaseError       a statement failed (bad SQL, a constraint); answered with a bare 500
       └─ IntegrityError   a unique, foreign-key, not-null or check constraint refused a write

Warnings: ``PyviaDeprecationWarning`` (a ``UserWarning``, so it shows by default) names a spelling
that goes in the next minor release, and the one to use instead.

Database errors are the same classes whichever back end runs (SQLite or PostgreSQL); the
driver's own exception is their ``__cause__``.

Client errors are raised as one internal type and turned into a short plain-text answer at the
dispatch boundary, with one log line and no traceback. Anything else raised by user code is
logged once with its phase, route and context id, and answered with a bare 500.
"""

from __future__ import annotations

__all__ = [
    "ActionTimeout",
    "ClientError",
    "ConfigError",
    "ContextNotFound",
    "DatabaseError",
    "DatabaseUnavailable",
    "DeclarationError",
    "Forbidden",
    "IntegrityError",
    "MalformedRequest",
    "MethodNotAllowed",
    "NotFound",
    "PayloadTooLarge",
    "PoolTimeout",
    "PyviaDeprecationWarning",
    "PyviaError",
    "RateLimited",
    "RouteError",
    "ServiceError",
    "SignalTooLarge",
    "TabGone",
    "UsageError",
    "UserError",
]


class PyviaDeprecationWarning(UserWarning):
    """A spelling that goes in the next minor release; the message names its replacement.

    A ``UserWarning`` rather than a ``DeprecationWarning``, which Python hides outside tests."""


class PyviaError(Exception):
    """Base of every exception pyvia raises on purpose."""


class UsageError(PyviaError):
    """The framework was used in a way it does not support."""


class ConfigError(UsageError, ValueError):
    """An option has a bad value."""


class RouteError(UsageError, ValueError):
    """A route pattern is malformed or registered twice."""


class DeclarationError(UsageError, ValueError):
    """A signal, action or view was declared wrongly."""


class ClientError(PyviaError):
    """The request is at fault; answered with :attr:`status` and :attr:`public_message`."""

    status = 400
    public_message = "Bad Request"

    def __init__(self, detail: str = "", *, headers: list[tuple[str, str]] | None = None) -> None:
        super().__init__(detail or self.public_message)
        self.detail = detail or self.public_message
        self.headers = headers or []


class MalformedRequest(ClientError):
    status = 400
    public_message = "Bad Request"


class UserError(ClientError):
    """A refusal meant for the user: ``raise UserError("That name is taken")`` in an action answers
    400 (or ``status``) and the page shows the message in its alert."""

    def __init__(self, message: str, *, status: int = 400) -> None:
        if not 400 <= status <= 499:
            raise ValueError(f"UserError status {status} must be a 4xx")
        super().__init__(message)
        self.status = status
        self.public_message = message


class ContextNotFound(ClientError):
    status = 400
    public_message = "Invalid context"


class Forbidden(ClientError):
    status = 403
    public_message = "Forbidden"


class NotFound(ClientError):
    status = 404
    public_message = "Not Found"


class MethodNotAllowed(ClientError):
    status = 405
    public_message = "Method Not Allowed"


class PayloadTooLarge(ClientError):
    status = 413
    public_message = "Content Too Large"


class TabGone(ClientError):
    """The action's tab is not on this server (a restart, a crash): its stream revives it first."""

    status = 409
    public_message = "This page lost its connection to the server. Try again in a moment."


class SignalTooLarge(PayloadTooLarge):
    """A writable signal got more than its ``max_length``; the answer says which and how much."""

    def __init__(self, detail: str, *, signal: str) -> None:
        super().__init__(detail)
        self.signal = signal
        self.public_message = detail


class RateLimited(ClientError):
    status = 429
    public_message = "Too Many Requests"


class ServiceError(PyviaError):
    """The server cannot answer now; the client should retry after :attr:`retry_after` seconds."""

    status = 503
    public_message = "Service Unavailable"

    def __init__(self, detail: str = "", *, retry_after: int = 1) -> None:
        super().__init__(detail or self.public_message)
        self.retry_after = retry_after


class ActionTimeout(ServiceError):
    status = 504
    public_message = "Action timed out"


class DatabaseUnavailable(ServiceError):
    """The database cannot be reached (or gave no connection in time); retry later (503)."""

    public_message = "Service Unavailable"


class PoolTimeout(DatabaseUnavailable):
    """Every pooled connection, or SQLite's one write permit, stayed busy past ``[db] timeout``."""


class DatabaseError(PyviaError):
    """A statement failed: bad SQL, a missing table, a refused value. Answered with a bare 500."""


class IntegrityError(DatabaseError):
    """A constraint (unique, foreign key, not null, check) refused a write."""
