"""--dcgm-address and GPUHEALTH_DCGM_ADDRESS reach DcgmOptions.host: the GPU Operator's nv-hostengine
runs in its own pod (service nvidia-dcgm, port 5555), not on the collector's localhost."""

from __future__ import annotations

from typing import Any

import pytest
import typer

from collector.backends import factory
from collector.backends.base import Backend, CommonOptions
from collector.backends.dcgm import DcgmOptions, parse_address
from core.settings import Settings
from gpuhealth.cli.backend import BackendFlags, open_from_flags

OPERATOR = "nvidia-dcgm.gpu-operator.svc:5555"


@pytest.fixture
def opened(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The options the dcgm backend is opened with (nothing is opened: there is no DCGM here)."""
    seen: list[Any] = []

    def opener(options: DcgmOptions, common: CommonOptions) -> Backend:
        seen.append(options)
        raise factory.BackendUnavailable("not here")

    monkeypatch.setitem(factory._REGISTRY, "dcgm", factory.Registered(DcgmOptions, opener))
    return seen


def test_the_flag_reaches_dcgm_options_host(opened: list[Any]) -> None:
    with pytest.raises(typer.Exit):
        open_from_flags(BackendFlags(backend="dcgm", dcgm_address=OPERATOR), Settings())
    assert opened == [DcgmOptions(host=OPERATOR)]


def test_the_environment_variable_reaches_it_and_the_flag_wins(
    opened: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUHEALTH_DCGM_ADDRESS", "10.0.0.7:5555")
    monkeypatch.setenv("GPUHEALTH_BACKEND", "dcgm")
    for flags in (BackendFlags(), BackendFlags(dcgm_address=OPERATOR)):
        with pytest.raises(typer.Exit):
            open_from_flags(flags, Settings())
    assert [o.host for o in opened] == ["10.0.0.7:5555", OPERATOR]


def test_no_address_keeps_the_local_default(opened: list[Any]) -> None:
    with pytest.raises(typer.Exit):
        open_from_flags(BackendFlags(backend="dcgm"), Settings())
    assert opened == [DcgmOptions()] and opened[0].host == "localhost"


@pytest.mark.parametrize(
    "good", ["nvidia-dcgm", OPERATOR, "10.0.0.7:5555", "[fd00::7]:5555", "[fd00::7]", "host:1", "host:65535"]
)
def test_good_addresses_pass_unchanged(good: str) -> None:
    assert parse_address(good) == good


@pytest.mark.parametrize(
    ("bad", "why"),
    [
        ("", "must be HOST or HOST:PORT"),
        (":5555", "must be HOST or HOST:PORT"),
        ("http://nvidia-dcgm:5555", "no URL scheme"),
        ("nvidia-dcgm:dcgm", "port must be 1-65535"),
        ("nvidia-dcgm:0", "port must be 1-65535"),
        ("nvidia-dcgm:70000", "port must be 1-65535"),
        ("nvidia dcgm:5555", "must be HOST or HOST:PORT"),
        ("fd00::7", "an IPv6 address goes in brackets"),
        ("[fd00::7]5555", "must be HOST or HOST:PORT"),
    ],
)
def test_bad_addresses_are_one_clear_line(bad: str, why: str) -> None:
    with pytest.raises(ValueError, match=r"e\.g\. nvidia-dcgm\.gpu-operator:5555") as err:
        parse_address(bad)
    assert why in str(err.value) and "\n" not in str(err.value)


def test_the_cli_refuses_a_bad_address_or_another_backend(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(typer.Exit) as ex:
        open_from_flags(BackendFlags(backend="dcgm", dcgm_address="nvidia-dcgm:99999"), Settings())
    assert ex.value.exit_code == 2
    with pytest.raises(typer.Exit):
        open_from_flags(BackendFlags(backend="auto", dcgm_address=OPERATOR), Settings())
    lines = capsys.readouterr().err.splitlines()
    assert "the port must be 1-65535" in lines[0]
    assert "--dcgm-address (GPUHEALTH_DCGM_ADDRESS) needs --backend dcgm, not auto" in lines[1]


def test_the_diagnostic_level_setting_reaches_dcgm_options(opened: list[Any], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUHEALTH_PROBE_DCGM_DIAG", "2")
    with pytest.raises(typer.Exit):
        open_from_flags(BackendFlags(backend="dcgm", dcgm_address=OPERATOR), Settings())
    assert opened == [DcgmOptions(host=OPERATOR, diag_level=2)]
    monkeypatch.setenv("GPUHEALTH_PROBE_DCGM_DIAG", "3")
    with pytest.raises(ValueError, match="less than or equal to 2"):
        Settings()
