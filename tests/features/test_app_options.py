"""App(...) declares every option in its signature: names, types and defaults are Config's."""

from __future__ import annotations

import ast
import dataclasses
import inspect
from pathlib import Path

import pytest

import pyvia.config
from pyvia import App, ConfigError
from pyvia.config import DB_OPTIONS, Config
from pyvia.ops.settings import load_settings

_PARAMS = {n: p for n, p in inspect.signature(App).parameters.items()}


def test_the_signature_lists_every_config_field_and_the_db_keys_by_keyword_only() -> None:
    assert list(_PARAMS) == [f.name for f in dataclasses.fields(Config)] + list(DB_OPTIONS)
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in _PARAMS.values())


def test_the_signature_has_the_types_and_defaults_of_config() -> None:
    defaults = Config()
    hints = {f.name: f.type for f in dataclasses.fields(Config)}
    for name, param in _PARAMS.items():
        if name in DB_OPTIONS:
            assert param.default == load_settings(env={})[f"db.{name.removeprefix('db_')}"], name
            continue
        assert param.annotation == hints[name], name
        assert param.default == getattr(defaults, name), name


def test_every_config_field_has_a_docstring_comment() -> None:
    source = Path(pyvia.config.__file__).read_text(encoding="utf-8")
    lines = source.splitlines()
    config = next(n for n in ast.parse(source).body if isinstance(n, ast.ClassDef) and n.name == "Config")
    undocumented = [
        n.target.id
        for n in config.body
        if isinstance(n, ast.AnnAssign)
        and isinstance(n.target, ast.Name)
        and not lines[n.lineno - 2].strip().startswith("#:")
    ]
    assert undocumented == []


def test_an_unknown_option_is_a_type_error_naming_the_closest_one() -> None:
    with pytest.raises(TypeError, match=r"unknown option 'keep_alvie'; did you mean 'keep_alive'\?"):
        App(keep_alvie=3)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match=r"unknown option 'zzz'\Z"):
        App(zzz=1)  # type: ignore[call-arg]
    with pytest.raises(ConfigError):  # still a ConfigError too, as it was
        App(titel="x")  # type: ignore[call-arg]


def test_options_are_keyword_only() -> None:
    with pytest.raises(TypeError, match="by keyword only"):
        App("Shop")  # type: ignore[misc]


def test_a_keyword_given_wins_even_when_it_equals_the_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pyvia.toml").write_text('[app]\ntitle = "From file"\ncompression = false\n')
    app = App(title="pyvia")
    assert app.config.title == "pyvia"  # given: wins over the file
    assert app.config.compression is False  # left out: the file's


def test_db_options_are_keywords(tmp_path: Path) -> None:
    app = App(db_url=f"sqlite:///{tmp_path}/app.db", db_pool_size=2)
    assert app.db.config.pool_size == 2
