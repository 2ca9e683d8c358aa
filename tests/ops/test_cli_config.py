"""``pyvia config``: the effective configuration with each value's source, secrets redacted."""

from __future__ import annotations

from pathlib import Path

import pytest

from pyvia.cli import main


def run_cli(argv: list[str]) -> int:
    with pytest.raises(SystemExit) as stopped:
        main(argv)
    return int(stopped.value.code or 0)


def rows(out: str) -> dict[str, tuple[str, str]]:
    found = {}
    for line in out.splitlines():
        if line.startswith("#"):
            continue
        key, value, source = line.split(maxsplit=2)
        found[key] = (value, source)
    return found


def test_config_prints_every_value_with_its_source(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "site.toml"
    path.write_text('[app]\ntitle = "Shop"\nsecret = "file-secret-value"\n[server]\nport = 8000\n')
    monkeypatch.setenv("PYVIA_SERVER__PORT", "8100")
    monkeypatch.setenv("PYVIA_LOG__FORMAT", "json")
    assert run_cli(["config", "--file", str(path)]) == 0
    out = capsys.readouterr().out
    found = rows(out)
    assert found["app.title"] == ('"Shop"', f"{path} [app] title")
    assert found["server.port"] == ("8100", "PYVIA_SERVER__PORT")
    assert found["log.format"] == ('"json"', "PYVIA_LOG__FORMAT")
    assert found["app.lang"] == ('"en"', "default")
    assert found["app.secret"] == ('"<redacted>"', f"{path} [app] secret")
    assert "file-secret-value" not in out
    assert out.splitlines()[0].startswith(f"# pyvia configuration (file: {path}")
    assert out.splitlines()[-1].startswith("# autotune: cpu ")


def test_config_reads_pyvia_toml_in_the_current_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pyvia.toml").write_text("[server]\nworkers = 3\n")
    assert run_cli(["config"]) == 0
    out = capsys.readouterr().out
    assert rows(out)["server.workers"][0] == "3"
    assert "workers=3* [pinned]" in out


def test_config_shows_pyvia_secret_redacted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYVIA_SECRET", "env-secret-value")
    assert run_cli(["config"]) == 0
    out = capsys.readouterr().out
    assert rows(out)["app.secret"] == ('"<redacted>"', "PYVIA_SECRET (read by the App)")
    assert "env-secret-value" not in out


def test_a_bad_setting_is_one_line_naming_its_source(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYVIA_SERVER__PROT", "80")
    assert run_cli(["config"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (
        "pyvia config: error: PYVIA_SERVER__PROT: unknown key 'PROT' in [server]; did you mean 'port'?\n"
    )


def test_a_missing_file_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert run_cli(["config", "--file", "missing.toml"]) == 2
    assert capsys.readouterr().err == "pyvia config: error: missing.toml: no such configuration file\n"
