"""``--workers N|auto``, ``--engine URL`` and ``--cluster-address``: how many workers, and the one-line errors."""

from __future__ import annotations

import pytest

from pyvia.cli import main
from pyvia.config import Config, cluster_host_port
from pyvia.errors import ConfigError
from pyvia.ops.autotune import derive_profile, read_limits
from pyvia.server.supervisor import Supervisor, SupervisorConfig, resolve_workers


def test_workers_take_a_positive_number_or_auto() -> None:
    assert resolve_workers("3") == (3, "given")
    count, source = resolve_workers("auto")
    assert count == derive_profile(read_limits()).workers  # one rule for auto: pyvia.ops.autotune's
    assert source.startswith("auto: ")
    for bad in ("0", "-1", "many", ""):
        with pytest.raises(ValueError, match="positive number or 'auto'"):
            resolve_workers(bad)


def run_cli(argv: list[str]) -> int:
    with pytest.raises(SystemExit) as stopped:
        main(argv)
    return int(stopped.value.code or 0)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--workers", "0"], "--workers takes a positive number or 'auto', got '0'"),
        (["--workers", "2", "--engine", "memory://"], "the memory engine lives in one process"),
        (["--engine", "ftp://x"], "must start with memory://, nats://"),
    ],
)
def test_bad_worker_and_engine_options_get_one_line(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_cli(["run", "examples.counter:app", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_one_worker_with_an_engine_is_supervised_and_the_engine_goes_to_the_worker(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    configs: list[SupervisorConfig] = []
    monkeypatch.setattr(Supervisor, "run", lambda self: configs.append(self.config) or 0)
    assert run_cli(["run", "examples.counter:app", "--engine", "nats://10.1.2.3:4222"]) == 0
    (config,) = configs
    assert (config.workers, config.engine_url) == (1, "nats://10.1.2.3:4222")  # in the worker's environment


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--engine", "nats://x", "--cluster-address", "0.0.0.0"], "not 0.0.0.0 or ::"),
        (["--engine", "nats://x", "--cluster-address", "10.0.0.5:http"], "expected HOST or HOST:PORT"),
        (["--cluster-address", "10.0.0.5"], "give --engine nats://... or redis://..."),
    ],
)
def test_a_bad_cluster_address_gets_one_line(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli(["run", "examples.counter:app", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_the_cluster_address_goes_to_the_workers(monkeypatch: pytest.MonkeyPatch) -> None:
    configs: list[SupervisorConfig] = []
    monkeypatch.setattr(Supervisor, "run", lambda self: configs.append(self.config) or 0)
    assert run_cli(["run", "examples.counter:app", "--engine", "nats://x", "--cluster-address", "[fd00::5]:7700"]) == 0
    assert configs[0].cluster_address == "[fd00::5]:7700"  # in the worker's environment, PYVIA_CLUSTER_ADDRESS


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("10.0.0.5", ("10.0.0.5", 0)),
        ("10.0.0.5:7700", ("10.0.0.5", 7700)),
        ("node-1.lan:9", ("node-1.lan", 9)),
        ("[fd00::5]:7700", ("fd00::5", 7700)),
        ("fd00::5", ("fd00::5", 0)),
    ],
)
def test_a_cluster_address_is_a_host_and_an_optional_port(value: str, expected: tuple[str, int]) -> None:
    assert cluster_host_port(value) == expected
    assert Config(cluster_address=value).cluster_address == value


@pytest.mark.parametrize("value", ["", "0.0.0.0", "[::]:80", "a b", "h:", "h:99999", "x::y", "[::1]x"])
def test_a_bad_cluster_address_is_refused_when_the_app_is_made(value: str) -> None:
    with pytest.raises(ConfigError, match="cluster_address"):
        Config(cluster_address=value)
