from __future__ import annotations

import numpy as np
import pytest

from simulator.fleet import (
    XID_OFF_BUS,
    XID_REMAP,
    XID_REMAP_FAIL,
    XID_SBE_HIGH,
    XID_UNCONTAINED,
    FaultMode,
    FaultSpec,
    FleetSim,
    SimConfig,
)
from simulator.models import MODELS, get_model

COUNTERS = [
    "energy_mj", "ecc_sbe_volatile", "ecc_dbe_volatile", "ecc_sbe_aggregate", "ecc_dbe_aggregate",
    "remapped_rows_correctable", "remapped_rows_uncorrectable", "pcie_replay_count",
    "thermal_violation_us", "power_violation_us", "nvlink_crc_flit_errors",
]  # fmt: skip


def _run(sim: FleetSim, steps: int, dt: float) -> list[dict[str, np.ndarray]]:
    out = []
    for _ in range(steps):
        sim.step(dt)
        out.append(sim.values())
    return out


def test_deterministic_per_seed() -> None:
    a = _run(FleetSim(nodes=2, gpus_per_node=4, seed=3), 5, 60)
    b = _run(FleetSim(nodes=2, gpus_per_node=4, seed=3), 5, 60)
    c = _run(FleetSim(nodes=2, gpus_per_node=4, seed=4), 5, 60)
    for k in a[-1]:
        np.testing.assert_array_equal(a[-1][k], b[-1][k])
    assert not np.array_equal(a[-1]["gpu_temp_c"], c[-1]["gpu_temp_c"])


@pytest.mark.parametrize("model", list(MODELS))
def test_healthy_gpus_stay_inside_model_limits(model: str) -> None:
    m = get_model(model)
    sim = FleetSim(nodes=8, gpus_per_node=8, seed=11, models={model: 1.0})
    for v in _run(sim, 48, 1800):  # a day in half-hour steps
        assert np.all(v["gpu_temp_c"] < m.max_operating_c)
        mem = v["memory_temp_c"]
        seen = ~np.isnan(mem)  # a few sensors read nothing, as in the field
        assert seen.mean() > 0.9
        assert np.all(mem[seen] < m.memory_max_c)
        assert np.all(v["gpu_temp_c"] > 15)
        assert np.all(mem[seen] > v["gpu_temp_c"][seen])
        assert np.all(v["power_w"] <= m.power_limit_w)
        assert np.all(v["fb_used_mib"] + v["fb_free_mib"] + v["fb_reserved_mib"] == m.fb_total_mib)
    assert not sim.lost.any()


def test_load_temperatures_match_reference() -> None:
    """H100 SXM under training: 54-68 C core (REFERENCE.md field statistics)."""
    sim = FleetSim(nodes=16, gpus_per_node=8, seed=5)
    v = _run(sim, 12, 600)[-1]
    training = sim.workload == 0
    assert training.any()
    t = v["gpu_temp_c"][training]
    assert 50 <= np.median(t) <= 70
    assert np.median(v["power_w"][training]) > 600


def test_counters_are_monotonic() -> None:
    sim = FleetSim(nodes=2, gpus_per_node=8, seed=2)
    for g, mode in enumerate([FaultMode.ECC, FaultMode.PCIE, FaultMode.THERMAL]):
        sim.inject(FaultSpec(g, mode, hours=6))
    runs = _run(sim, 40, 600)
    for name in COUNTERS:
        series = np.stack([v[name] for v in runs])
        assert np.all(np.diff(series, axis=0) >= 0), name


def test_ecc_fault_unfolds_to_dbe_and_remap_failure() -> None:
    sim = FleetSim(nodes=1, gpus_per_node=8, seed=1)
    sim.inject(FaultSpec(4, FaultMode.ECC, hours=24))
    runs = _run(sim, 25, 3600)
    sbe = np.array([v["ecc_sbe_volatile"][4] for v in runs])
    early, late = np.diff(sbe[:8]).sum(), np.diff(sbe[-8:]).sum()
    assert late > 100 * max(early, 1), "the SBE rate climbs by orders of magnitude"
    assert runs[-1]["row_remap_failure"][4] == 1
    assert runs[-1]["remapped_rows_correctable"][4] > 0
    assert runs[-1]["row_remap_pending"][4] == 1, "remaps wait for a reset"
    codes = [c for g, c, _ in sim.drain_events() if g == 4]
    assert XID_REMAP in codes and XID_SBE_HIGH in codes
    assert codes[-1] in (XID_REMAP_FAIL, XID_UNCONTAINED)
    assert sim.failed[4] and not sim.lost[4], "a failed remap leaves the GPU answering"
    assert all(runs[-1]["ecc_sbe_volatile"][g] < 5 for g in range(8) if g != 4)


def test_thermal_fault_heats_throttles_then_drops() -> None:
    sim = FleetSim(nodes=1, gpus_per_node=8, seed=1)
    sim.workload[:] = 0  # training: the fault shows under load
    sim.inject(FaultSpec(2, FaultMode.THERMAL, hours=10))
    runs = _run(sim, 11, 3600)
    temps = [v["gpu_temp_c"][2] for v in runs[:-1]]
    assert temps[-1] > temps[0] + 15
    assert max(v["thermal_violation_us"][2] for v in runs) > 0
    assert sim.lost[2] and not sim.lost[[0, 1, 3]].any()
    (failure,) = sim.failures
    assert failure.mode == "thermal" and failure.gpu_uuid == sim.gpus[2].uuid
    assert failure.xid in (0, XID_OFF_BUS), "it shuts down or falls off the bus"


def test_pcie_fault_downtrains_link() -> None:
    sim = FleetSim(nodes=1, gpus_per_node=8, seed=1)
    sim.inject(FaultSpec(6, FaultMode.PCIE, hours=10))
    runs = _run(sim, 8, 3600)
    assert runs[0]["pcie_link_width"][6] == 16 and runs[-1]["pcie_link_width"][6] == 8
    assert runs[-1]["pcie_replay_count"][6] > 10 * max(runs[0]["pcie_replay_count"][6], 1)
    assert not sim.lost[6]
    sim.step(3 * 3600)
    assert sim.lost[6]


def test_fault_spec_parse() -> None:
    assert FaultSpec.parse("3:ecc:12") == FaultSpec(3, FaultMode.ECC, 12.0)
    assert FaultSpec.parse("0:offbus") == FaultSpec(0, FaultMode.OFFBUS, 24.0)
    for bad in ["3", "x:ecc", "1:melt", "1:ecc:-2", "1:ecc:2:3"]:
        with pytest.raises(ValueError, match="fault"):
            FaultSpec.parse(bad)


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="at least one node"):
        FleetSim(nodes=0, gpus_per_node=8)
    with pytest.raises(ValueError, match="unknown GPU model 'V100'"):
        FleetSim(nodes=1, gpus_per_node=1, models={"V100": 1.0})
    with pytest.raises(ValueError, match="positive"):
        FleetSim(nodes=1, gpus_per_node=1).step(0)


def test_a_gpu_fails_once() -> None:
    sim = FleetSim(nodes=1, gpus_per_node=2, seed=1)
    sim.inject(FaultSpec(0, FaultMode.ECC, hours=1))
    _run(sim, 10, 1800)
    codes = [c for g, c, _ in sim.drain_events() if g == 0]
    assert codes.count(XID_UNCONTAINED) + codes.count(XID_REMAP_FAIL) == 1


def test_spare_nodes_stay_idle_and_the_rest_keep_working() -> None:
    sim = FleetSim(SimConfig(nodes=4, gpus_per_node=4, seed=5, spare_nodes=1))
    busy = np.zeros(16)
    for _ in range(200):  # 200 simulated hours: jobs start and end on the other nodes
        sim.step(3600)
        assert (sim.util[12:] < 5).all()
        busy += sim.util > 50
    assert (busy[:12] > 0).any()


def test_spare_nodes_must_fit_the_fleet() -> None:
    with pytest.raises(ValueError, match="spare nodes"):
        SimConfig(nodes=2, spare_nodes=3)
