"""One declarative schema: each setting's unit, range, section and variable, one validator."""

from __future__ import annotations

import dataclasses

import pytest

from pyvia import ConfigError
from pyvia.config import Config, Limits
from pyvia.ops import settings as ops_settings
from pyvia.ops.settings import SettingsError, load_settings
from pyvia.schema import OutOfRange, Rule, specs, validate
from pyvia.server.http import ServerLimits


def test_every_config_field_declares_its_section_and_variable() -> None:
    for name, spec in specs(Config).items():
        assert spec.section == "app", name
        assert spec.env_name == f"PYVIA_APP__{name.upper()}"
    assert specs(Config)["secret"].rule.env == "PYVIA_SECRET"


def test_durations_are_seconds_and_sizes_bytes() -> None:
    for cls in (Config, Limits):
        for name, spec in specs(cls).items():
            if name.endswith(("_timeout", "_delay", "_window", "_interval", "_idle", "_release")):
                assert spec.unit == "s", name
            if name.endswith("_bytes") or name.endswith("_budget"):
                assert spec.unit == "bytes", name
            if spec.unit in ("s", "bytes"):
                assert spec.rule.low is not None, f"{name}: a duration or size without a range"


def test_one_rule_judges_a_value_wherever_it_comes_from(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = specs(Config)["reconnect_timeout"]
    with pytest.raises(OutOfRange):
        validate(spec, -1)
    with pytest.raises(ConfigError, match=r"reconnect_timeout=-1: must be a number >= 0"):
        Config(reconnect_timeout=-1)
    with pytest.raises(SettingsError, match=r"RECONNECT_TIMEOUT: reconnect_timeout=-1: must be a number >= 0"):
        load_settings(env={"PYVIA_APP__RECONNECT_TIMEOUT": "-1"})
    limit = specs(Limits)["max_streams"]
    with pytest.raises(OutOfRange, match=r"0: must be >= 1"):
        validate(limit, 0)
    with pytest.raises(ValueError, match="max_streams must be positive"):
        ServerLimits(max_streams=0)
    with pytest.raises(SettingsError, match="PYVIA_SERVER__MAX_STREAMS: 0: must be >= 1"):
        load_settings(env={"PYVIA_SERVER__MAX_STREAMS": "0"})


def test_a_further_rule_normalises_the_value() -> None:
    assert Config(base_path="/live").base_path == "/live/"
    assert validate(specs(Config)["base_path"], "/live") == "/live/"


def test_the_server_limits_are_declared_once() -> None:
    assert [f.name for f in dataclasses.fields(Limits)] == list(ops_settings.SERVER_LIMITS)
    assert specs(Limits)["header_timeout"].rule == Rule(unit="s", low=0, above=True, section="server")
    for helper in ("_fits", "_describe_type", "_positive", "_networks", "_hosts", "_paths", "_KIB"):
        assert not hasattr(ops_settings, helper), f"ops.settings still has its own checker {helper}"


def test_range_words() -> None:
    assert Rule(low=0).range_text() == "must be >= 0"
    assert Rule(low=0, above=True).range_text("a number") == "must be a number > 0"
    assert (
        Rule(low=1, high=1000, what="a number of connections").range_text()
        == "must be a number of connections, 1..1000"
    )
    assert Rule(low=1, high=9).range_text() == "must be in 1..9"
