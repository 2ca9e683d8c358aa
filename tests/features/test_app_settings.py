"""App options come from keywords, PYVIA_APP__* variables and ./pyvia.toml, in that order."""

from __future__ import annotations

from pathlib import Path

import pytest

from pyvia import App, ConfigError


def test_file_then_environment_then_keywords(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pyvia.toml").write_text('[app]\ntitle = "From file"\nconnect_timeout = 12\nkeep_alive = 9\n')
    monkeypatch.setenv("PYVIA_APP__CONNECT_TIMEOUT", "20")
    app = App(keep_alive=3)
    assert app.config.title == "From file"
    assert app.config.connect_timeout == 20
    assert app.config.keep_alive == 3


def test_bad_values_name_their_source(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYVIA_APP__CONNECT_TIMEOUT", "-5")
    with pytest.raises(ConfigError, match="PYVIA_APP__CONNECT_TIMEOUT"):
        App()
    monkeypatch.delenv("PYVIA_APP__CONNECT_TIMEOUT")
    with pytest.raises(ConfigError, match="conect_timeout"):
        App(conect_timeout=5)


def test_server_options_given_to_the_app_are_refused() -> None:
    with pytest.raises(ConfigError, match="port: not App options"):
        App(port=8000)
