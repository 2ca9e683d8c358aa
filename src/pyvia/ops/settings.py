"""One strict configuration from a ``pyvia.toml``, the environment and keyword arguments.

Rules this module keeps (DESIGN.md "Operations"; ``ephpm-lessons.md`` §5.8, lesson 12):

1. Sources, in increasing priority: the file, then ``PYVIA_<SECTION>__<KEY>`` environment
   variables, then ``pyvia run --set KEY=VALUE``, then keyword arguments. Anything not set keeps
   its default.
2. Strict: an unknown section or key, or a value of the wrong type or out of range, stops the
   start with a :class:`SettingsError` naming the key and where it came from (the file and its
   key, the variable, or the keyword). A typo never silently runs another configuration.
3. Every value remembers its source, so ``pyvia config`` and the start log can say where each
   effective value came from. Secrets are shown redacted.

Sections and keys (every key name is unique across sections, so keywords need no section):

* ``[app]`` — the fields of :class:`pyvia.config.Config` (top-level keys of the file are App
  options too);
* ``[server]`` — ``host``, ``port``, ``cert``, ``key``, ``workers`` (a count or ``"auto"``),
  ``pid_file`` (where ``pyvia run`` writes the supervisor's pid, and ``pyvia reload`` reads it), and
  the native server's limits: every field of :class:`pyvia.server.http.ServerLimits` but its
  ``sweep_interval`` (sizes, phase timeouts, connection and stream caps, shedding, allowed hosts);
* ``[log]`` — ``level``, ``format`` (``"text"`` or ``"json"``);
* ``[autotune]`` — ``memory_budget``, ``max_tabs``: pins on the derived profile
  (:mod:`pyvia.ops.autotune`; ``workers``, ``encoder_budget`` and ``gc_thresholds`` pin it too);
* ``[db]`` — ``url``, ``pool_size``, ``timeout``, ``busy_timeout`` (:mod:`pyvia.db`). As keywords
  they are spelled ``db_url``, ``db_pool_size``… (``App(db_url="sqlite:///app.db")``); a password
  in the URL is shown redacted.
"""

from __future__ import annotations

import difflib
import functools
import json
import os
import re
import tomllib
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyvia.config import Config, Limits
from pyvia.errors import ConfigError
from pyvia.schema import Rule, Spec, WrongType, accepts, describe_type, fits, named_problem, specs, validate

__all__ = [
    "DEFAULT_FILE",
    "ENV_PREFIX",
    "REDACTED",
    "SERVER_LIMITS",
    "Setting",
    "Settings",
    "SettingsError",
    "load_settings",
    "parse_size",
]

DEFAULT_FILE = "pyvia.toml"
ENV_PREFIX = "PYVIA_"
REDACTED = "<redacted>"

_SECRET_WORDS = ("secret", "password", "token")
_LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


class SettingsError(ConfigError):
    """A setting is unknown or has a bad value; the message names it and its source.

    ``key`` is the dotted name (``"app.connect_timeout"``, or what was given when it is unknown),
    ``where`` the place it came from (``"pyvia.toml [app] connect_timeout"``, ``"PYVIA_APP__PORT"``,
    ``"keyword argument port"``).
    """

    def __init__(self, where: str, key: str, problem: str) -> None:
        super().__init__(f"{where}: {problem}")
        self.where = where
        self.key = key


# --- value shapes ------------------------------------------------------------------------------

_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(i?B?)\s*\Z", re.IGNORECASE)


def parse_size(text: str) -> int:
    """Bytes from ``"512MiB"``, ``"1.5G"``, ``"300KB"`` or ``"4096"`` (K, M, G, T are powers of 1024).

    Raises ValueError for anything else.
    """
    m = _SIZE.match(text)
    if m is None:
        raise ValueError(f"{text!r} is not a size such as 4096, '512KiB', '64MiB' or '2GiB'")
    power = "KMGT".find(m.group(2).upper()) + 1 if m.group(2) else 0
    return int(float(m.group(1)) * (1024**power))


# --- the schema ----------------------------------------------------------------------------------


def _port(value: int) -> int:
    if not 0 <= value <= 65535:
        raise ValueError(f"{value} is not a port number (0..65535)")
    return value


def _workers(value: int | str) -> int | str:
    if isinstance(value, str):
        if value.lower() != "auto":
            raise ValueError(f"{value!r}: must be a number of processes >= 1, or 'auto'")
        return "auto"
    if value < 1:
        raise ValueError(f"{value}: must be a number of processes >= 1, or 'auto'")
    return value


def _level(value: str) -> str:
    if value.upper() not in _LOG_LEVELS:
        raise ValueError(f"{value!r} is not a log level ({', '.join(_LOG_LEVELS)})")
    return value.upper()


def _format(value: str) -> str:
    if value.lower() not in ("text", "json"):
        raise ValueError(f"{value!r}: must be 'text' or 'json'")
    return value.lower()


def _db_url(value: str) -> str:
    from pyvia.db.url import parse_url

    parse_url(value)  # ValueError names what is wrong
    return value


#: The ``[server]`` keys of the native server's limits: (type, default, check), from the fields of
#: :class:`pyvia.config.Limits` (``ServerLimits`` without the sweep's period), where each is
#: declared once with its rule; ``check`` is :func:`pyvia.schema.validate` for that field.
SERVER_LIMITS: dict[str, tuple[Any, Any, Callable[[Any], Any]]] = {
    name: (spec.type, spec.default, functools.partial(validate, spec)) for name, spec in specs(Limits).items()
}

#: Keys of the server's sections, which App refuses (they go to ``app.run()`` or ``pyvia run``).
SERVER_KEYS = frozenset(
    {
        "host",
        "port",
        "cert",
        "key",
        "workers",
        "pid_file",
        *SERVER_LIMITS,
        "level",
        "format",
        "memory_budget",
        "max_tabs",
    }
)


def _schema() -> dict[str, dict[str, Spec]]:
    def key(section: str, name: str, tp: Any, default: Any, prefix: str = "", **rule: Any) -> Spec:
        return Spec(section, name, tp, default, Rule(section=section, **rule), prefix)

    server = {
        "host": key("server", "host", str, "127.0.0.1"),
        "port": key("server", "port", int, 3000, check=_port),
        "cert": key("server", "cert", str | None, None, unit="path"),
        "key": key("server", "key", str | None, None, unit="path"),
        "workers": key("server", "workers", int | str, 1, check=_workers),
        "pid_file": key("server", "pid_file", str | None, None, unit="path"),
        **specs(Limits),
    }
    log = {
        "level": key("log", "level", str, "INFO", check=_level),
        "format": key("log", "format", str, "text", check=_format),
    }
    autotune = {
        "memory_budget": key("autotune", "memory_budget", int | None, None, unit="bytes", low=1),
        "max_tabs": key("autotune", "max_tabs", int | None, None, low=1),
    }
    db = {
        "url": key("db", "url", str | None, None, "db_", check=_db_url),
        "pool_size": key("db", "pool_size", int, 4, "db_", low=1, high=1000, what="a number of connections"),
        "timeout": key("db", "timeout", float, 30.0, "db_", unit="s", low=0, above=True),
        "busy_timeout": key("db", "busy_timeout", float, 5.0, "db_", unit="s", low=0, above=True),
    }
    schema = {"app": specs(Config), "server": server, "log": log, "autotune": autotune, "db": db}
    names = [key.keyword for section in schema.values() for key in section.values()]
    clashes = {n for n in names if names.count(n) > 1}
    if clashes:  # keywords are unsectioned: a clash would make one of them unreachable
        raise RuntimeError(f"setting names used in two sections: {sorted(clashes)}")
    return schema


# --- values with their sources --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Setting:
    """One effective value and where it came from.

    ``origin`` is ``"default"``, ``"file"``, ``"env"``, ``"command line"`` or ``"keyword"``;
    ``where`` names the place precisely (``"/srv/pyvia.toml [server] port"``,
    ``"PYVIA_SERVER__PORT"``, ``"--set port=8000"``, ``"keyword argument port"``, ``"default"``).
    """

    section: str
    key: str
    value: Any
    origin: str
    where: str

    @property
    def name(self) -> str:
        return f"{self.section}.{self.key}"

    @property
    def is_set(self) -> bool:
        """Whether an operator set it (any source but the default)."""
        return self.origin != "default"


def _redact_url(url: str) -> str:
    from pyvia.db.url import redact_url

    return redact_url(url)


def _is_secret(key: str) -> bool:
    return any(word in key.lower() for word in _SECRET_WORDS)


class Settings:
    """The effective configuration: every key of every section, each with its :class:`Setting`."""

    __slots__ = ("_env", "_values", "path")

    def __init__(self, values: dict[str, Setting], path: Path | None, env: Mapping[str, str]) -> None:
        self._values = values
        #: The file that was read, if any.
        self.path = path
        self._env = env

    def __getitem__(self, name: str) -> Any:
        """The value of ``"section.key"``: ``settings["server.port"]``."""
        return self.setting(name).value

    def setting(self, name: str) -> Setting:
        try:
            return self._values[name]
        except KeyError:
            raise KeyError(f"no setting {name!r}; known: {', '.join(self._values)}") from None

    def __iter__(self) -> typing.Iterator[Setting]:
        return iter(self._values.values())

    def app_options(self) -> dict[str, Any]:
        """Keyword arguments for ``pyvia.App(**...)``: the App options an operator set."""
        return {s.key: s.value for s in self._values.values() if s.section == "app" and s.is_set}

    def server_options(self) -> dict[str, Any]:
        """Keyword arguments for ``app.run(**...)``: ``host``, ``port``, ``certfile``, ``keyfile``.

        ``workers`` is not among them (the server takes no such option yet): read
        ``settings["server.workers"]`` (an int, or ``"auto"`` for :mod:`pyvia.ops.autotune`).
        """
        return {
            "host": self["server.host"],
            "port": self["server.port"],
            "certfile": self["server.cert"],
            "keyfile": self["server.key"],
        }

    def server_limit_options(self) -> dict[str, Any]:
        """The ``[server]`` limits, every one (set or default): keyword arguments of
        :class:`pyvia.server.http.ServerLimits` (:func:`pyvia.server.options.limits_for` makes it)."""
        return {name: self[f"server.{name}"] for name in SERVER_LIMITS}

    def log_options(self) -> dict[str, Any]:
        """Keyword arguments for :func:`pyvia.ops.logs.configure_logging`: ``level``, ``fmt``."""
        return {"level": self["log.level"], "fmt": self["log.format"]}

    def db_config(self) -> Any:
        """The :class:`pyvia.db.DatabaseConfig` of ``[db]``, or None when no ``url`` is set."""
        from pyvia.db.url import parse_url

        url = self["db.url"]
        if url is None:
            return None
        return parse_url(
            url, pool_size=self["db.pool_size"], timeout=self["db.timeout"], busy_timeout=self["db.busy_timeout"]
        )

    def autotune_pins(self) -> dict[str, Any]:
        """Keyword arguments for :func:`pyvia.ops.autotune.derive_profile`: the pinned values.

        A key appears when it has a value (``workers = "auto"`` and None leave it to autotune).
        ``workers`` has a default of 1, given but listed in ``defaulted`` so it is not marked as
        pinned by the operator. ``max_stream_buffer`` is the App's.
        """
        pins: dict[str, Any] = {}
        defaulted: list[str] = []
        for name, key in (
            ("server.workers", "workers"),
            ("app.encoder_budget", "encoder_budget"),
            ("autotune.memory_budget", "memory_budget"),
            ("autotune.max_tabs", "max_tabs"),
        ):
            s = self._values[name]
            if s.value is not None and s.value != "auto":
                pins[key] = s.value
                if not s.is_set:
                    defaulted.append(key)
        gc_setting = self._values.get("app.gc_thresholds")
        if gc_setting is not None:  # the core's GC policy: freeze at start, then these thresholds
            pins["gc_thresholds"] = gc_setting.value
            if not gc_setting.is_set:
                defaulted.append("gc_thresholds")
        pins["max_stream_buffer"] = self["app.max_stream_buffer"]
        pins["defaulted"] = frozenset(defaulted)
        return pins

    def describe(self) -> list[tuple[str, Any, str]]:
        """Rows of (``"section.key"``, value, source) for every key; secrets are redacted.

        An App option the core reads from the environment itself (``PYVIA_SECRET``,
        ``PYVIA_DATASTAR_JS``) shows that variable as its source when nothing else set it.
        """
        rows = []
        for s in self._values.values():
            value, where = s.value, s.where
            core_var = specs(Config)[s.key].rule.env if s.section == "app" else ""
            if not s.is_set and core_var and self._env.get(core_var):
                value, where = self._env[core_var], f"{core_var} (read by the App)"
            if _is_secret(s.key) and value is not None:
                value = REDACTED
            elif s.name == "db.url" and isinstance(value, str):
                value = _redact_url(value)
            rows.append((s.name, value, where))
        return rows

    def __repr__(self) -> str:
        def shown(s: Setting) -> str:
            if _is_secret(s.key):
                return REDACTED
            return repr(_redact_url(s.value) if s.name == "db.url" and isinstance(s.value, str) else s.value)

        changed = ", ".join(f"{s.name}={shown(s)}" for s in self._values.values() if s.is_set)
        return f"Settings({changed})"


# --- loading -----------------------------------------------------------------------------------------


def load_settings(
    path: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    *,
    command_line: Sequence[str] = (),
    **kwargs: Any,
) -> Settings:
    """Read the file, then the ``PYVIA_<SECTION>__<KEY>`` variables of ``env``, then
    ``command_line``, then ``kwargs``.

    ``path`` None reads ``./pyvia.toml`` when it exists; a path given must exist. ``env``
    defaults to ``os.environ``. ``command_line`` holds ``KEY=VALUE`` texts (``pyvia run --set``),
    read as the variables are. Keyword names are the keys themselves (``port=8000``,
    ``title="Shop"``). Raises :class:`SettingsError` naming the first bad key and its source.
    """
    if env is None:
        env = os.environ
    schema = _schema()
    values: dict[str, Setting] = {
        f"{sec}.{k.name}": Setting(sec, k.name, k.default, "default", "default")
        for sec, keys in schema.items()
        for k in keys.values()
    }
    file: Path | None = None
    if path is not None:
        file = Path(path)
        if not file.is_file():
            raise SettingsError(str(file), "", "no such configuration file")
    elif Path(DEFAULT_FILE).is_file():
        file = Path(DEFAULT_FILE)
    if file is not None:
        for setting in _from_file(file, schema):
            values[setting.name] = setting
    for setting in _from_env(env, schema):
        values[setting.name] = setting
    by_name = {key.keyword: key for keys in schema.values() for key in keys.values()}
    for setting in _from_command_line(command_line, schema, by_name):
        values[setting.name] = setting
    for name, raw in kwargs.items():
        where = f"keyword argument {name}"
        key = by_name.get(name)
        if key is None:
            raise SettingsError(where, name, f"unknown setting {name!r}{_hint(name, by_name)}")
        setting = _accept(key, raw, "keyword", where)
        values[setting.name] = setting
    _check_app_together(values)
    return Settings(values, file.resolve() if file is not None else None, env)


def _hint(name: str, known: typing.Iterable[str]) -> str:
    close = difflib.get_close_matches(name, list(known), n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


def _from_file(file: Path, schema: dict[str, dict[str, Spec]]) -> list[Setting]:
    try:
        data = tomllib.loads(file.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise SettingsError(str(file), "", f"not valid TOML: {exc}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SettingsError(str(file), "", f"cannot be read: {exc}") from None
    out: list[Setting] = []
    all_keys = {k: sec for sec, keys in schema.items() for k in keys}
    for top, value in data.items():
        if isinstance(value, dict) and top in schema:
            for name, raw in value.items():
                where = f"{file} [{top}] {name}"
                key = schema[top].get(name)
                if key is None:
                    elsewhere = all_keys.get(name)
                    hint = f"; {name!r} belongs in [{elsewhere}]" if elsewhere else _hint(name, schema[top])
                    raise SettingsError(where, f"{top}.{name}", f"unknown key {name!r} in [{top}]{hint}")
                out.append(_accept(key, _resolve_path(key, raw, file), "file", where))
            continue
        where = f"{file} {top}"
        key = schema["app"].get(top)
        if key is None:
            if isinstance(value, dict):
                problem = f"unknown section [{top}]; sections are {', '.join(f'[{s}]' for s in schema)}"
            elif top in all_keys:
                problem = f"{top!r} belongs in [{all_keys[top]}]"
            else:
                problem = f"unknown key {top!r}{_hint(top, schema['app'])}"
            raise SettingsError(where, top, problem)
        out.append(_accept(key, _resolve_path(key, value, file), "file", where))
    return out


def _resolve_path(key: Spec, value: Any, file: Path) -> Any:
    if key.unit == "path" and isinstance(value, str) and value and not os.path.isabs(value):
        return str(file.resolve().parent / value)
    return value


def _from_env(env: Mapping[str, str], schema: dict[str, dict[str, Spec]]) -> list[Setting]:
    out: list[Setting] = []
    for var in sorted(env):
        if not var.startswith(ENV_PREFIX):
            continue
        rest = var[len(ENV_PREFIX) :]
        section, sep, name = rest.partition("__")
        if not sep:
            for sec in schema:  # PYVIA_APP_TITLE: the likely typo of PYVIA_APP__TITLE
                key_part = rest[len(sec) + 1 :]
                if rest.startswith(sec.upper() + "_") and key_part.lower() in schema[sec]:
                    meant = f"{ENV_PREFIX}{sec.upper()}__{key_part}"
                    raise SettingsError(
                        var,
                        f"{sec}.{key_part.lower()}",
                        f"did you mean {meant}? (two underscores between section and key)",
                    )
            continue  # PYVIA_SECRET and other single variables belong to the core
        sec_keys = schema.get(section.lower())
        if sec_keys is None:
            raise SettingsError(
                var,
                f"{section.lower()}.{name.lower()}",
                f"unknown section {section!r}; sections are {', '.join(s.upper() for s in schema)}",
            )
        key = sec_keys.get(name.lower())
        if key is None:
            raise SettingsError(
                var,
                f"{section.lower()}.{name.lower()}",
                f"unknown key {name!r} in [{section.lower()}]{_hint(name.lower(), sec_keys)}",
            )
        out.append(_accept(key, _env_value(key, var, env[var]), "env", var))
    return out


def _from_command_line(
    pairs: Sequence[str], schema: dict[str, dict[str, Spec]], by_name: dict[str, Spec]
) -> list[Setting]:
    """``KEY=VALUE`` texts: ``KEY`` is a keyword name (``max_body``, ``level``) or ``section.key``."""
    out: list[Setting] = []
    for pair in pairs:
        name, sep, raw = pair.partition("=")
        name = name.strip().lower()
        where = f"--set {pair}"
        section, dot, bare = name.rpartition(".")
        if not sep or not bare:
            raise SettingsError(where, name, "expected KEY=VALUE, such as max_streams_per_ip=64")
        key = schema.get(section, {}).get(bare) if dot else by_name.get(bare)
        if key is None:
            elsewhere = by_name.get(bare) or next(
                (k for keys in schema.values() for k in keys.values() if k.name == bare), None
            )
            if dot and elsewhere is not None:
                raise SettingsError(where, name, f"{bare!r} belongs in [{elsewhere.section}], not [{section}]")
            raise SettingsError(where, name, f"unknown setting {name!r}{_hint(bare, by_name)}")
        if key.section in ("app", "db"):
            raise SettingsError(
                where,
                name,
                f"{bare!r} is read when the App is made, so set it in pyvia.toml or "
                f"PYVIA_{key.section.upper()}__{key.name.upper()}",
            )
        out.append(_accept(key, _env_value(key, where, raw), "command line", where))
    return out


def _env_value(key: Spec, var: str, raw: str) -> Any:
    """JSON for lists, tables, booleans, numbers and null; the plain text for a string key."""
    text = raw.strip()
    if accepts(key.type, bool) and key.type is not Any and text.lower() in ("true", "false"):
        return text.lower() == "true"
    try:
        parsed = json.loads(text)
    except ValueError:
        if accepts(key.type, str) or key.unit == "bytes":
            return raw
        raise SettingsError(
            var, f"{key.section}.{key.name}", f"{raw!r} is not valid JSON; expected {describe_type(key.type)}"
        ) from None
    if fits(parsed, key.type) or not accepts(key.type, str):
        return parsed
    return raw  # a string key given something that parses as JSON ("123", "[x]"): keep the text


def _accept(key: Spec, raw: Any, origin: str, where: str) -> Setting:
    """Check ``raw`` against the key's type and rule; normalise it; remember its source."""
    name = f"{key.section}.{key.name}"
    value = raw
    if key.unit == "bytes" and isinstance(value, str):
        try:
            value = parse_size(value)
        except ValueError as exc:
            raise SettingsError(where, name, str(exc)) from None
    if isinstance(value, os.PathLike) and key.section != "app":
        value = os.fspath(value)
    try:
        checked = validate(key, value)  # the one validator: type, range and rule, as Config's own
    except ValueError as exc:
        problem = named_problem(key, value, exc) if key.section == "app" and not isinstance(exc, WrongType) else exc
        raise SettingsError(where, name, str(problem)) from None
    value = checked
    return Setting(key.section, key.name, value, origin, where)


def _check_app_together(values: dict[str, Setting]) -> None:
    options = {s.key: s for s in values.values() if s.section == "app" and s.is_set}
    try:
        Config(**{k: s.value for k, s in options.items()})
    except (ConfigError, TypeError, ValueError) as exc:
        sources = "; ".join(s.where for s in options.values())
        raise SettingsError(sources or "settings", "app", f"App options do not go together: {exc}") from None


# --- ``pyvia config`` --------------------------------------------------------------------------------


def render(settings: Settings, *, profile_line: str | None = None) -> str:
    """The effective configuration as aligned rows ``key  value  source`` (secrets redacted)."""
    rows = [
        (name, json.dumps(value, default=str, ensure_ascii=False, separators=(",", ":")), where)
        for name, value, where in settings.describe()
    ]
    width_key = max(len(r[0]) for r in rows)
    width_value = min(40, max(len(r[1]) for r in rows))
    file = str(settings.path) if settings.path is not None else "none"
    lines = [f"# pyvia configuration (file: {file}; precedence: default < file < env < --set < keyword)"]
    lines += [f"{k:<{width_key}}  {v:<{width_value}}  {w}" for k, v, w in rows]
    if profile_line:
        lines.append(f"# {profile_line}")
    return "\n".join(lines) + "\n"


def config_command(file: str | None, env: Mapping[str, str] | None = None) -> int:
    """``pyvia config [--file F]``: print the effective configuration; 2 when it is refused."""
    import sys

    from pyvia.ops.autotune import profile_for

    try:
        settings = load_settings(file, env)
    except SettingsError as exc:
        print(f"pyvia config: error: {exc}", file=sys.stderr)
        return 2
    sys.stdout.write(render(settings, profile_line=profile_for(settings).log_line()))
    return 0
