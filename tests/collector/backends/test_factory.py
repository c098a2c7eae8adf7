"""The backend registry: each backend opens from its own options dataclass."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from collector.backends import factory
from collector.backends.base import Backend, BackendError, CommonOptions
from collector.backends.replay import ReplayOptions
from collector.backends.sim import SimBackend, SimOptions, SimProbeRunner
from core import catalog
from simulator.fleet import FaultSpec
from tests.collector.helpers import ScriptedBackend

COMMON = CommonOptions("node-a", catalog.select(), 10.0)


def test_names_are_auto_and_the_built_ins_in_the_cli_order() -> None:
    assert factory.names() == ("auto", "nvml", "dcgm", "sim", "replay")


def test_sim_options_shape_the_fleet_and_speed_scales_the_step() -> None:
    opts = SimOptions(nodes=2, gpus_per_node=2, seed=3, model="NVIDIA H200", speed=60.0, spare_nodes=1,
                      faults=(FaultSpec.parse("1:ecc:40"),), start=1_780_000_000.0)  # fmt: skip
    b = factory.open_backend("sim", opts, COMMON)
    assert isinstance(b, SimBackend) and isinstance(b, Backend)
    assert b.step_s == 600.0
    assert [(g.hostname, g.model_name) for g in b.gpus()] == [(f"sim-node-0{n}", "NVIDIA H200") for n in (0, 0, 1, 1)]
    before = b.data_time()
    b.read()
    assert b.data_time() == before + 600.0  # the simulated clock, not the wall clock
    assert isinstance(b.probe_runner(seed=7), SimProbeRunner)


def test_no_options_means_the_backend_defaults() -> None:
    b = factory.open_backend("sim", None, COMMON)
    assert isinstance(b, SimBackend)
    assert len(b.gpus()) == 8 and b.step_s == 10.0
    assert {g.model_name for g in b.gpus()} == {"NVIDIA H100 80GB HBM3"}


def test_options_of_another_backend_are_refused() -> None:
    with pytest.raises(TypeError, match="the sim backend takes SimOptions, not ReplayOptions"):
        factory.open_backend("sim", ReplayOptions(), COMMON)


def test_unknown_backend_names_the_choices() -> None:
    with pytest.raises(BackendError) as err:
        factory.open_backend("quantum", None, COMMON)
    assert str(err.value) == "unknown backend 'quantum'; choose one of auto, nvml, dcgm, sim, replay"


def test_replay_needs_a_readable_history(tmp_path: Path) -> None:
    with pytest.raises(BackendError, match=r"^the replay backend needs a history file \(--history\)$"):
        factory.open_backend("replay", None, COMMON)
    with pytest.raises(BackendError):
        factory.open_backend("replay", ReplayOptions(history=tmp_path / "missing.parquet"), COMMON)


def test_a_registered_backend_opens_with_its_own_options(monkeypatch: pytest.MonkeyPatch) -> None:
    @dataclass(frozen=True)
    class ScriptedOptions:
        gpus: int = 1

    def open_scripted(options: ScriptedOptions, common: CommonOptions) -> Backend:
        return ScriptedBackend(options.gpus)

    monkeypatch.setattr(factory, "_REGISTRY", dict(factory._REGISTRY))
    factory.register("scripted", ScriptedOptions, open_scripted)
    assert factory.names()[-1] == "scripted"
    assert len(factory.open_backend("scripted", ScriptedOptions(gpus=3), COMMON).gpus()) == 3
    assert len(factory.open_backend("scripted", None, COMMON).gpus()) == 1
