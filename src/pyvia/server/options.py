"""The native server's options from the one strict configuration (:mod:`pyvia.ops.settings`).

``app.run(...)``, ``pyvia run`` and each worker of ``pyvia run --workers N`` serve with the
limits this module makes: ``pyvia.toml`` ``[server]``, then ``PYVIA_SERVER__*``, then
``pyvia run --set KEY=VALUE``, then keywords, each checked as the App's options are (an unknown
key or a bad value stops the start with a message naming it and its source).
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

from pyvia.errors import ConfigError
from pyvia.ops.settings import SERVER_LIMITS, Settings, load_settings
from pyvia.server.http import ServerLimits

__all__ = ["limits_for", "serve_options"]


def limits_for(settings: Settings, *, trusted_proxies: Sequence[str] = ()) -> ServerLimits:
    """The :class:`ServerLimits` of ``settings``, with the App's ``trusted_proxies`` exempt from
    the per-address caps (a proxy's address is every user's: a per-address cap on it would be a
    process-wide one)."""
    return ServerLimits(**settings.server_limit_options()).exempting(trusted_proxies)


def serve_options(
    options: dict[str, Any], *, trusted_proxies: Sequence[str] = (), command_line: Sequence[str] = ()
) -> dict[str, Any]:
    """Keyword arguments for :func:`pyvia.server.runner.serve` from ``app.run(**options)``.

    Keys named like ``[server]`` limits (``max_streams_per_ip=64``) are read over the file, the
    environment and ``command_line``; ``limits=ServerLimits(...)`` replaces all of them (giving
    both is refused). Any other key must be one of ``serve()``'s. Raises ConfigError (a
    SettingsError naming the key and its source for a bad limit).
    """
    from pyvia.server.runner import serve

    accepted = set(inspect.signature(serve).parameters) - {"app"}
    options = dict(options)
    given = {k: options.pop(k) for k in list(options) if k not in accepted}
    settings = load_settings(command_line=command_line, **given)  # unknown names: refused with a hint
    misplaced = sorted(set(given) - set(SERVER_LIMITS))
    if misplaced:
        raise ConfigError(
            f"{', '.join(misplaced)}: not options of the native server; its options are "
            f"{', '.join(sorted(accepted | set(SERVER_LIMITS)))}"
        )
    limits = options.get("limits")
    if limits is None:
        limits = limits_for(settings)
    elif given:
        raise ConfigError(f"limits= and {', '.join(sorted(given))} given together: pass one or the other")
    options["limits"] = limits.exempting(trusted_proxies)
    return options
