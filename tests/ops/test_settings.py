"""pyvia.ops.settings: one strict configuration from pyvia.toml, PYVIA_* variables and keywords."""

from __future__ import annotations

from pathlib import Path

import pytest

from pyvia import App, ConfigError
from pyvia.ops.settings import REDACTED, SettingsError, load_settings, parse_size

TOML = """\
title = "From the top"

[app]
connect_timeout = 12
trusted_origins = ["https://a.example"]
template_dir = "templates"

[server]
host = "0.0.0.0"
port = 8000
workers = "auto"

[log]
level = "debug"
format = "json"

[autotune]
max_tabs = 5000
memory_budget = "256MiB"
"""


@pytest.fixture
def toml(tmp_path: Path) -> Path:
    path = tmp_path / "pyvia.toml"
    path.write_text(TOML)
    return path


def test_file_values_are_read_with_their_sources(toml: Path) -> None:
    s = load_settings(toml, env={})
    assert s["app.title"] == "From the top"
    assert s.setting("app.title").where == f"{toml} title"
    assert s["app.connect_timeout"] == 12
    assert s.setting("app.connect_timeout").where == f"{toml} [app] connect_timeout"
    assert s.setting("app.connect_timeout").origin == "file"
    assert s["app.trusted_origins"] == ("https://a.example",)
    assert s["app.template_dir"] == str(toml.parent / "templates")  # relative to the file
    assert s["server.port"] == 8000 and s["server.workers"] == "auto"
    assert s["log.level"] == "DEBUG" and s["log.format"] == "json"
    assert s["autotune.memory_budget"] == 256 << 20
    assert s.setting("app.lang").origin == "default" and s["app.lang"] == "en"
    assert s.path == toml.resolve()


def test_precedence_is_file_then_env_then_keywords(toml: Path) -> None:
    env = {"PYVIA_APP__CONNECT_TIMEOUT": "20", "PYVIA_SERVER__PORT": "9000"}
    s = load_settings(toml, env=env, port=9100)
    assert s["app.connect_timeout"] == 20
    assert s.setting("app.connect_timeout").where == "PYVIA_APP__CONNECT_TIMEOUT"
    assert s["server.port"] == 9100
    assert s.setting("server.port").where == "keyword argument port"
    assert s["server.host"] == "0.0.0.0"  # the file's, untouched by the others


def test_env_values_are_json_for_lists_tables_bools_and_numbers_else_text() -> None:
    env = {
        "PYVIA_APP__TRUSTED_PROXIES": '["10.0.0.0/8", "192.168.1.1"]',
        "PYVIA_APP__EXTRA": '{"plan": "pro", "seats": 3}',
        "PYVIA_APP__DEV": "True",
        "PYVIA_APP__COMPRESSION": "false",
        "PYVIA_APP__MAX_SESSIONS": "50",
        "PYVIA_APP__ACTION_RATE": "12.5",
        "PYVIA_APP__TITLE": "123",  # a string key keeps the text
        "PYVIA_APP__TEMPLATE_DIR": "/srv/templates",
        "PYVIA_APP__ENCODER_BUDGET": "64MiB",
        "PYVIA_SERVER__WORKERS": "auto",
        "PYVIA_APP__GC_THRESHOLDS": "[1000, 10, 10]",
        "PYVIA_SECRET": "not ours: the App reads it",
        "HOME": "/root",
    }
    s = load_settings(env=env)
    assert s["app.trusted_proxies"] == ("10.0.0.0/8", "192.168.1.1")
    assert s["app.extra"] == {"plan": "pro", "seats": 3}
    assert s["app.dev"] is True and s["app.compression"] is False
    assert s["app.max_sessions"] == 50 and s["app.action_rate"] == 12.5
    assert s["app.title"] == "123"
    assert s["app.template_dir"] == "/srv/templates"
    assert s["app.encoder_budget"] == 64 << 20
    assert s["server.workers"] == "auto"
    assert s["app.gc_thresholds"] == (1000, 10, 10)
    assert s.setting("app.extra").where == "PYVIA_APP__EXTRA"


def test_app_options_make_an_app(toml: Path) -> None:
    s = load_settings(toml, env={"PYVIA_APP__CLEANUP_DELAY": "7"}, title="Keyword")
    options = s.app_options()
    assert options == {
        "title": "Keyword",
        "connect_timeout": 12,
        "trusted_origins": ("https://a.example",),
        "template_dir": str(toml.parent / "templates"),
        "cleanup_delay": 7,
    }
    app = App(**options)
    assert app.config.title == "Keyword" and app.config.cleanup_delay == 7
    assert s.server_options() == {"host": "0.0.0.0", "port": 8000, "certfile": None, "keyfile": None}
    assert s.log_options() == {"level": "DEBUG", "fmt": "json"}


def test_no_file_and_no_env_means_defaults(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    s = load_settings(env={})
    assert s.path is None
    assert s.app_options() == {}
    assert all(setting.origin == "default" for setting in s)


def test_pyvia_toml_in_the_current_directory_is_read_by_default(toml: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(toml.parent)
    assert load_settings(env={})["server.port"] == 8000


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("titel = 'x'\n", "pyvia.toml titel: unknown key 'titel'; did you mean 'title'?"),
        (
            "[app]\nconect_timeout = 1\n",
            "pyvia.toml [app] conect_timeout: unknown key 'conect_timeout' in [app]; did you mean 'connect_timeout'?",
        ),
        ("[app]\nport = 1\n", "pyvia.toml [app] port: unknown key 'port' in [app]; 'port' belongs in [server]"),
        ("port = 1\n", "pyvia.toml port: 'port' belongs in [server]"),
        (
            "[database]\nurl = 'x'\n",
            "pyvia.toml database: unknown section [database]; sections are [app], [server], [log], [autotune]",
        ),
        ("[app]\nconnect_timeout = 'soon'\n", "pyvia.toml [app] connect_timeout: expected a number, got 'soon' (str)"),
        ("[app]\nconnect_timeout = -1\n", "pyvia.toml [app] connect_timeout: connect_timeout=-1: must be a number"),
        ("[app]\ndev = 1\n", "pyvia.toml [app] dev: expected true or false, got 1 (int)"),
        (
            "[app]\ntrusted_origins = 'https://a.example'\n",
            "pyvia.toml [app] trusted_origins: expected a list of strings, got 'https://a.example' (str)",
        ),
        (
            "[app]\ntrusted_proxies = ['nonsense']\n",
            "pyvia.toml [app] trusted_proxies: trusted_proxies entry 'nonsense': not an address or network",
        ),
        ("[server]\nport = 70000\n", "pyvia.toml [server] port: 70000 is not a port number (0..65535)"),
        ("[server]\nworkers = 0\n", "pyvia.toml [server] workers: 0: must be a number of processes >= 1, or 'auto'"),
        ("[log]\nlevel = 'loud'\n", "pyvia.toml [log] level: 'loud' is not a log level"),
        ("[log]\nformat = 'xml'\n", "pyvia.toml [log] format: 'xml': must be 'text' or 'json'"),
        ("[autotune]\nmemory_budget = 'lots'\n", "pyvia.toml [autotune] memory_budget: 'lots' is not a size"),
        ("[app\n", "pyvia.toml: not valid TOML"),
    ],
)
def test_bad_file_entries_are_refused_naming_the_file_and_key(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "pyvia.toml"
    path.write_text(text)
    with pytest.raises(SettingsError) as refused:
        load_settings(path, env={})
    assert message in str(refused.value)
    assert str(refused.value).startswith(str(tmp_path))
    assert isinstance(refused.value, ConfigError) and isinstance(refused.value, ValueError)


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"PYVIA_APP__TITEL": "x"}, "PYVIA_APP__TITEL: unknown key 'TITEL' in [app]; did you mean 'title'?"),
        (
            {"PYVIA_DATABASE__URL": "x"},
            "PYVIA_DATABASE__URL: unknown section 'DATABASE'; sections are APP, SERVER, LOG",
        ),
        ({"PYVIA_APP_TITLE": "x"}, "PYVIA_APP_TITLE: did you mean PYVIA_APP__TITLE? (two underscores"),
        ({"PYVIA_SERVER__PORT": "eighty"}, "PYVIA_SERVER__PORT: 'eighty' is not valid JSON; expected an integer"),
        ({"PYVIA_SERVER__PORT": "80.5"}, "PYVIA_SERVER__PORT: expected an integer, got 80.5 (float)"),
        ({"PYVIA_APP__DEV": "yes"}, "PYVIA_APP__DEV: 'yes' is not valid JSON; expected true or false"),
        (
            {"PYVIA_APP__TRUSTED_ORIGINS": '["example.com"]'},
            "PYVIA_APP__TRUSTED_ORIGINS: trusted_origins entry 'example.com': must look like 'https://example.com'",
        ),
        ({"PYVIA_APP__BASE_PATH": "live"}, "PYVIA_APP__BASE_PATH: base_path='live': must be '/'"),
    ],
)
def test_bad_environment_variables_are_refused_naming_the_variable(env: dict[str, str], message: str) -> None:
    with pytest.raises(SettingsError) as refused:
        load_settings(env=env)
    assert message in str(refused.value)
    assert refused.value.where == next(iter(env))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"titel": "x"}, "keyword argument titel: unknown setting 'titel'; did you mean 'title'?"),
        ({"port": "80"}, "keyword argument port: expected an integer, got '80' (str)"),
        ({"sweep_interval": 0}, "keyword argument sweep_interval: sweep_interval=0: must be"),
        (
            {"gc_thresholds": [1, 2]},
            "keyword argument gc_thresholds: expected a list of 3 integers or nothing (null), got [1, 2] (list)",
        ),
        ({"secure_cookie": None}, "keyword argument secure_cookie: expected true or false, got None (NoneType)"),
    ],
)
def test_bad_keywords_are_refused_naming_the_keyword(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(SettingsError) as refused:
        load_settings(env={}, **kwargs)
    assert message in str(refused.value)
    assert refused.value.key == next(iter(kwargs)) or refused.value.key.endswith("." + next(iter(kwargs)))


def test_a_missing_file_given_explicitly_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="no such configuration file"):
        load_settings(tmp_path / "nope.toml", env={})


def test_a_bad_file_value_is_refused_even_when_env_would_override_it(toml: Path) -> None:
    toml.write_text("[server]\nport = 'x'\n")
    with pytest.raises(SettingsError, match=r"\[server\] port"):
        load_settings(toml, env={"PYVIA_SERVER__PORT": "80"})


def test_describe_names_every_source_and_redacts_secrets(toml: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYVIA_SECRET", "hunter2-hunter2")
    import os

    s = load_settings(toml, env=dict(os.environ) | {"PYVIA_LOG__LEVEL": "warning"}, port=1234)
    rows = {key: (value, source) for key, value, source in s.describe()}
    assert rows["app.title"] == ("From the top", f"{toml} title")
    assert rows["log.level"] == ("WARNING", "PYVIA_LOG__LEVEL")
    assert rows["server.port"] == (1234, "keyword argument port")
    assert rows["app.lang"] == ("en", "default")
    assert rows["app.secret"] == (REDACTED, "PYVIA_SECRET (read by the App)")
    assert "hunter2" not in repr(s.describe())
    s2 = load_settings(env={}, secret="from-a-keyword")
    assert dict((k, v) for k, v, _ in s2.describe())["app.secret"] == REDACTED
    assert "from-a-keyword" not in repr(s2)


def test_every_config_field_is_a_setting() -> None:
    import dataclasses

    from pyvia.config import Config

    keys = {k for k, _, _ in load_settings(env={}).describe()}
    assert {f"app.{f.name}" for f in dataclasses.fields(Config)} <= keys


def test_autotune_pins_come_from_the_settings(toml: Path) -> None:
    pins = load_settings(toml, env={}).autotune_pins()
    from pyvia.config import Config

    assert pins == {
        "max_tabs": 5000,
        "memory_budget": 256 << 20,
        "max_stream_buffer": 1 << 20,
        "gc_thresholds": Config().gc_thresholds,
        "defaulted": frozenset({"gc_thresholds"}),
    }
    default = load_settings(env={}).autotune_pins()
    assert default["workers"] == 1 and default["defaulted"] == frozenset({"workers", "gc_thresholds"})


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("4096", 4096),
        ("512KiB", 512 << 10),
        ("64M", 64 << 20),
        ("1.5GiB", 3 << 29),
        ("2g", 2 << 30),
        ("10 MB", 10 << 20),
    ],
)
def test_sizes(text: str, size: int) -> None:
    assert parse_size(text) == size


def test_a_bad_size_is_refused() -> None:
    with pytest.raises(ValueError, match="is not a size"):
        parse_size("lots")
