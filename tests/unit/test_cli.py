"""``pyvia run MODULE:ATTR`` and ``pyvia reload``: finding the app, what the supervisor is asked
for, and the one-line errors when it cannot."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from pyvia.cli import main
from pyvia.server.supervisor import Supervisor, SupervisorConfig


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A project folder as the current directory; modules imported from it are forgotten after."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    before = set(sys.modules)
    yield tmp_path
    for name in set(sys.modules) - before:
        del sys.modules[name]


def run_cli(argv: list[str]) -> int:
    with pytest.raises(SystemExit) as stopped:
        main(argv)
    return int(stopped.value.code or 0)


def supervised(monkeypatch: pytest.MonkeyPatch) -> list[SupervisorConfig]:
    """What ``pyvia run`` asks its supervisor for, without starting one."""
    configs: list[SupervisorConfig] = []

    def run(self: Supervisor) -> int:
        configs.append(self.config)
        return 0

    monkeypatch.setattr(Supervisor, "run", run)
    return configs


def test_run_finds_the_app_in_the_current_directory_and_passes_the_options(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (project / "cli_demo_app.py").write_text("from pyvia import App\n\napp = App()\n")
    configs = supervised(monkeypatch)
    status = run_cli(
        [
            "run",
            "cli_demo_app:app",
            "--host",
            "0.0.0.0",
            "--port",
            "4001",
            "--cert",
            "c.pem",
            "--key",
            "k.pem",
            "--pid-file",
            "run.pid",
            "--reload-spread",
            "5",
        ]
    )
    assert status == 0
    assert "cli_demo_app" in sys.modules  # imported once here, so a wrong reference fails at once
    (config,) = configs
    assert (config.app, config.host, config.port, config.certfile, config.keyfile) == (
        "cli_demo_app:app",
        "0.0.0.0",
        4001,
        "c.pem",
        "k.pem",
    )
    assert (config.pid_file, config.reload_spread, config.dev, config.watch) == ("run.pid", 5.0, False, ())


def test_one_worker_is_supervised_too(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (project / "cli_demo_defaults.py").write_text("from pyvia import App\n\nholder = type('H', (), {'app': App()})\n")
    configs = supervised(monkeypatch)
    assert run_cli(["run", "cli_demo_defaults:holder.app"]) == 0
    (config,) = configs
    assert (config.host, config.port, config.certfile, config.keyfile) == ("127.0.0.1", 3000, None, None)
    assert (config.workers, config.engine_url, config.pid_file, config.graceful_timeout) == (1, None, None, 3.0)


def test_dev_mode_watches_the_apps_package_and_starts_even_when_it_does_not_import(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (project / "shop").mkdir()
    (project / "shop" / "__init__.py").write_text("")
    (project / "shop" / "web.py").write_text("raise RuntimeError('half-edited')\n")
    configs = supervised(monkeypatch)
    assert run_cli(["run", "shop.web:app", "--dev"]) == 0
    (config,) = configs
    assert config.dev and config.watch == (str(project / "shop"),)


def test_the_pid_file_comes_from_pyvia_toml(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (project / "cli_demo_toml.py").write_text("from pyvia import App\n\napp = App()\n")
    (project / "pyvia.toml").write_text('[server]\npid_file = "run/pyvia.pid"\n')
    configs = supervised(monkeypatch)
    assert run_cli(["run", "cli_demo_toml:app"]) == 0
    assert configs[0].pid_file == str(project / "run" / "pyvia.pid")  # relative to the file's folder


def test_reload_without_a_target_says_how_to_name_one(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli(["reload"]) == 2
    assert "give --pid-file FILE" in capsys.readouterr().err


def test_reload_refuses_a_stale_pid_file(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (project / "old.pid").write_text("999999999\n")  # above pid_max: no such process
    assert run_cli(["reload", "--pid-file", "old.pid"]) == 1
    assert "process 999999999 is not a running pyvia (a stale pid file?)" in capsys.readouterr().err
    (project / "bad.pid").write_text("pyvia\n")
    assert run_cli(["reload", "--pid-file", "bad.pid"]) == 1
    assert "cannot read the pid file bad.pid" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("nocolon", "expected MODULE:ATTR, such as 'myapp:app', got 'nocolon'"),
        (":app", "expected MODULE:ATTR"),
        ("cli_demo_missing_module:app", "no module named 'cli_demo_missing_module'"),
        ("cli_demo_plain:nothing", "module 'cli_demo_plain' has no attribute 'nothing'"),
        ("cli_demo_plain:value", "'cli_demo_plain:value' is 'int', not a pyvia App"),
    ],
)
def test_a_bad_app_reference_gets_one_clear_line(
    project: Path, capsys: pytest.CaptureFixture[str], spec: str, message: str
) -> None:
    (project / "cli_demo_plain.py").write_text("value = 42\n")
    assert run_cli(["run", spec]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert err.count("\n") == 1


def test_an_import_error_inside_the_app_module_keeps_its_traceback(project: Path) -> None:
    (project / "cli_demo_broken.py").write_text("import cli_demo_not_installed\n")
    with pytest.raises(ModuleNotFoundError, match="cli_demo_not_installed"):
        main(["run", "cli_demo_broken:app"])


def test_cert_without_key_is_refused(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli(["run", "x:app", "--cert", "c.pem"]) == 2
    assert "--cert and --key go together" in capsys.readouterr().err


def test_a_command_is_required(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli([]) == 2
    assert "COMMAND" in capsys.readouterr().err
