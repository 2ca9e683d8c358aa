"""``pyvia run MODULE:ATTR``: finding the app, and the one-line errors when it cannot."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pyvia import App
from pyvia.cli import main


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


def test_run_finds_the_app_in_the_current_directory_and_passes_the_options(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (project / "cli_demo_app.py").write_text("from pyvia import App\n\napp = App()\n")
    calls: list[tuple[App, dict[str, Any]]] = []
    monkeypatch.setattr(App, "run", lambda self, **kw: calls.append((self, kw)))
    status = run_cli(["run", "cli_demo_app:app", "--host", "0.0.0.0", "--port", "4001",
                      "--cert", "c.pem", "--key", "k.pem"])
    assert status == 0
    app, options = calls[0]
    assert app is sys.modules["cli_demo_app"].app
    assert options == {"host": "0.0.0.0", "port": 4001, "certfile": "c.pem", "keyfile": "k.pem"}


def test_defaults_are_loopback_port_3000_without_tls(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (project / "cli_demo_defaults.py").write_text("from pyvia import App\n\nholder = type('H', (), {'app': App()})\n")
    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(App, "run", lambda self, **kw: calls.append(kw))
    assert run_cli(["run", "cli_demo_defaults:holder.app"]) == 0
    assert calls == [{"host": "127.0.0.1", "port": 3000, "certfile": None, "keyfile": None}]


@pytest.mark.parametrize(("spec", "message"), [
    ("nocolon", "expected MODULE:ATTR, such as 'myapp:app', got 'nocolon'"),
    (":app", "expected MODULE:ATTR"),
    ("cli_demo_missing_module:app", "no module named 'cli_demo_missing_module'"),
    ("cli_demo_plain:nothing", "module 'cli_demo_plain' has no attribute 'nothing'"),
    ("cli_demo_plain:value", "'cli_demo_plain:value' is 'int', not a pyvia App"),
])
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
