"""The native server's limits in the one strict configuration: ``[server]`` in pyvia.toml,
``PYVIA_SERVER__*``, ``pyvia run --set`` and ``app.run()`` keywords, all checked the same way."""

from __future__ import annotations

import dataclasses
import socket
import subprocess
import sys
import typing
from pathlib import Path
from typing import Any

import pytest

from pyvia import App, ConfigError
from pyvia.cli import main
from pyvia.ops.settings import SERVER_LIMITS, SettingsError, load_settings
from pyvia.server.http import ServerLimits
from pyvia.server.options import limits_for, serve_options

LIMITS_TOML = """\
[server]
port = 8000
max_body = "1MiB"
header_timeout = 4
max_streams_per_ip = 64
allowed_hosts = ["shop.example", "*.shop.example"]
"""


def test_every_server_limit_is_a_setting_with_the_same_type_and_default() -> None:
    fields = {f.name: f for f in dataclasses.fields(ServerLimits)}
    hints = typing.get_type_hints(ServerLimits)
    assert set(SERVER_LIMITS) == set(fields) - {"sweep_interval"}  # a precision, and an App key's name
    defaults = ServerLimits()
    for name, (tp, default, _check) in SERVER_LIMITS.items():
        assert default == getattr(defaults, name), name
        assert tp == hints[name], name
    # with nothing set, the settings give exactly the server's defaults
    assert limits_for(load_settings(env={})) == defaults


def test_file_env_and_command_line_make_the_limits_each_with_its_source(tmp_path: Path) -> None:
    path = tmp_path / "pyvia.toml"
    path.write_text(LIMITS_TOML)
    settings = load_settings(
        path,
        env={"PYVIA_SERVER__MAX_STREAMS_PER_IP": "32", "PYVIA_SERVER__PER_IP_EXEMPT": '["127.0.0.0/8", "10.2.0.0/16"]'},
        command_line=["header_timeout=2.5", "server.max_connections=5000"],
    )
    limits = limits_for(settings, trusted_proxies=["192.0.2.7"])
    assert limits.max_body == 1 << 20 and limits.header_timeout == 2.5 and limits.max_streams_per_ip == 32
    assert limits.max_connections == 5000 and limits.allowed_hosts == ("shop.example", "*.shop.example")
    assert limits.per_ip_exempt == ("127.0.0.0/8", "10.2.0.0/16", "192.0.2.7")  # the App's proxy is exempt too
    sources = {name: where for name, _, where in settings.describe()}
    assert sources["server.max_body"] == f"{path} [server] max_body"
    assert sources["server.max_streams_per_ip"] == "PYVIA_SERVER__MAX_STREAMS_PER_IP"
    assert sources["server.header_timeout"] == "--set header_timeout=2.5"
    assert sources["server.max_in_flight"] == "default"


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ({"env": {"PYVIA_SERVER__MAX_STREAMS": "0"}}, "PYVIA_SERVER__MAX_STREAMS: 0: must be >= 1"),
        ({"env": {"PYVIA_SERVER__HEADER_TIMEOUT": "-1"}}, "PYVIA_SERVER__HEADER_TIMEOUT: -1: must be > 0"),
        (
            {"env": {"PYVIA_SERVER__MAX_STREMS": "3"}},
            "PYVIA_SERVER__MAX_STREMS: unknown key 'MAX_STREMS' in [server]; did you mean 'max_streams'?",
        ),
        (
            {"env": {"PYVIA_SERVER__ALLOWED_HOSTS": "shop.example"}},
            "PYVIA_SERVER__ALLOWED_HOSTS: 'shop.example' is not valid JSON; "
            "expected a list of strings or nothing (null)",
        ),
        (
            {"env": {"PYVIA_SERVER__ALLOWED_HOSTS": '["shop.example:443"]'}},
            "PYVIA_SERVER__ALLOWED_HOSTS: allowed_hosts pattern 'shop.example:443': expected a host name without port",
        ),
        (
            {"env": {"PYVIA_SERVER__PER_IP_EXEMPT": '["caddy"]'}},
            "PYVIA_SERVER__PER_IP_EXEMPT: per_ip_exempt entry 'caddy': not an address or network",
        ),
        (
            {"env": {"PYVIA_SERVER__SHED_EXEMPT": '["_health"]'}},
            "PYVIA_SERVER__SHED_EXEMPT: '_health': a request path, starting with '/'",
        ),
        (
            {"command_line": ["max_body=lots"]},
            "--set max_body=lots: 'lots' is not a size such as 4096, '512KiB', '64MiB' or '2GiB'",
        ),
        (
            {"command_line": ["max_strems=3"]},
            "--set max_strems=3: unknown setting 'max_strems'; did you mean 'max_streams'?",
        ),
        ({"command_line": ["log.max_body=3"]}, "--set log.max_body=3: 'max_body' belongs in [server], not [log]"),
        ({"command_line": ["max_body"]}, "--set max_body: expected KEY=VALUE, such as max_streams_per_ip=64"),
        (
            {"command_line": ["title=Shop"]},
            "--set title=Shop: 'title' is read when the App is made, so set it in pyvia.toml or PYVIA_APP__TITLE",
        ),
        (
            {"command_line": ["db.url=sqlite:///x.db"]},
            "--set db.url=sqlite:///x.db: 'url' is read when the App is made, so set it in pyvia.toml or PYVIA_DB__URL",
        ),
        ({"command_line": ["log.port=1"]}, "--set log.port=1: 'port' belongs in [server], not [log]"),
        ({"max_pipelined": True}, "keyword argument max_pipelined: expected an integer, got True (bool)"),
    ],
)
def test_bad_server_limits_are_refused_naming_the_key_and_its_source(source: dict[str, Any], message: str) -> None:
    env = source.pop("env", {})
    with pytest.raises(SettingsError) as refused:
        load_settings(env=env, **source)
    assert str(refused.value) == message


def test_a_bad_limit_in_the_file_is_refused_naming_the_file_and_key(tmp_path: Path) -> None:
    path = tmp_path / "pyvia.toml"
    path.write_text("[server]\nkeep_alive_timeout = 0\n")
    with pytest.raises(SettingsError) as refused:
        load_settings(path, env={})
    assert str(refused.value) == f"{path} [server] keep_alive_timeout: 0: must be > 0"
    path.write_text("max_streams = 10\n")  # a server key at the top level, where App options go
    with pytest.raises(SettingsError, match=r"'max_streams' belongs in \[server\]"):
        load_settings(path, env={})


def test_an_app_refuses_server_limits_as_its_options() -> None:
    with pytest.raises(ConfigError, match="max_streams: not App options"):
        App(max_streams=10)


def test_app_run_keywords_are_limits_checked_like_the_rest(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYVIA_SERVER__MAX_BODY", "2MiB")
    options = serve_options({"max_streams_per_ip": 8, "graceful_timeout": 2.0}, trusted_proxies=["10.0.0.0/8"])
    limits = options.pop("limits")
    assert options == {"graceful_timeout": 2.0}
    assert (limits.max_streams_per_ip, limits.max_body) == (8, 2 << 20)  # the keyword and the variable
    assert limits.per_ip_exempt[-1] == "10.0.0.0/8"
    with pytest.raises(
        SettingsError, match="keyword argument max_strems: unknown setting 'max_strems'; did you mean 'max_streams'"
    ):
        serve_options({"max_strems": 8})
    with pytest.raises(ConfigError, match="title: not options of the native server"):
        serve_options({"title": "Shop"})
    with pytest.raises(ConfigError, match="limits= and max_body given together"):
        serve_options({"limits": ServerLimits(), "max_body": 10})
    given = ServerLimits(max_body=10)  # a whole ServerLimits is taken as it is, proxies added
    assert serve_options({"limits": given}, trusted_proxies=["10.0.0.0/8"])["limits"] == dataclasses.replace(
        given, per_ip_exempt=(*given.per_ip_exempt, "10.0.0.0/8")
    )


def test_app_run_passes_the_configured_limits_to_the_server(monkeypatch: pytest.MonkeyPatch) -> None:
    import pyvia.server.runner as runner

    served: list[dict[str, Any]] = []
    monkeypatch.setattr(runner, "run", lambda app, **options: served.append(options))
    monkeypatch.setenv("PYVIA_SERVER__MAX_HEADER_COUNT", "20")
    App(trusted_proxies=["192.0.2.1"]).run(port=0, retry_after=5)
    limits = served[0]["limits"]
    assert (limits.max_header_count, limits.retry_after) == (20, 5)
    assert "192.0.2.1" in limits.per_ip_exempt


def run_cli(argv: list[str]) -> int:
    with pytest.raises(SystemExit) as stopped:
        main(argv)
    return int(stopped.value.code or 0)


def test_pyvia_config_prints_the_limits_with_their_sources(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pyvia.toml").write_text(LIMITS_TOML)
    monkeypatch.setenv("PYVIA_SERVER__SHED_AFTER", "null")
    assert run_cli(["config"]) == 0
    lines = {
        line.split()[0]: line.split(maxsplit=2)[1:]
        for line in capsys.readouterr().out.splitlines()
        if not line.startswith("#")
    }
    assert lines["server.max_body"] == ["1048576", "pyvia.toml [server] max_body"]
    assert lines["server.allowed_hosts"] == ['["shop.example","*.shop.example"]', "pyvia.toml [server] allowed_hosts"]
    assert lines["server.shed_after"] == ["null", "PYVIA_SERVER__SHED_AFTER"]
    assert lines["server.max_in_flight"] == ["1024", "default"]


def test_pyvia_config_refuses_a_bad_limit_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYVIA_SERVER__MAX_IN_FLIGHT", "-4")
    assert run_cli(["config"]) == 2
    assert capsys.readouterr().err == "pyvia config: error: PYVIA_SERVER__MAX_IN_FLIGHT: -4: must be >= 1\n"


def test_pyvia_run_refuses_a_bad_set_before_importing_the_app(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert run_cli(["run", "not_imported:app", "--set", "max_streams_per_ip=none"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("pyvia run: error: --set max_streams_per_ip=none: ") and "Traceback" not in err


def test_pyvia_run_on_a_port_another_server_holds_says_which_port_in_one_line() -> None:
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    port = holder.getsockname()[1]
    try:
        done = subprocess.run(
            [sys.executable, "-m", "pyvia", "run", "examples.counter:app", "--host", "127.0.0.1", "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=Path(__file__).parents[2],
        )
    finally:
        holder.close()
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("pyvia run: error: ") and f"cannot listen on 127.0.0.1:{port}" in last
    assert "give --port" in last and "Traceback" not in done.stderr
