"""Faults a GPU reset cures, the reset, and the remedied GPUs whose fault comes back (simulator.remedies)."""

from __future__ import annotations

import inspect
from dataclasses import replace

import numpy as np
import pytest

from simulator.config import (
    HOUR,
    XID_GSP_TIMEOUT,
    XID_REMAP,
    FaultMode,
    FaultSpec,
    SimConfig,
)
from simulator.fleet import FleetSim
from simulator.remedies import REMAP_SBES

STEP = 600.0
REMAP_COLUMNS = {"row_remap_pending", "remapped_rows_correctable", "ecc_sbe_volatile", "ecc_sbe_aggregate", "xid"}
"""What a `remap` fault changes on its GPU, and nothing else."""
GSP_COLUMNS = {"recovery_action", "xid", "gpu_util_pct", "power_w", "energy_mj", "sm_clock_mhz", "fb_used_mib",
               "fb_free_mib", "mem_copy_util_pct", "prof_gr_engine_active", "prof_sm_active",
               "prof_pipe_tensor_active", "prof_dram_active", "nvlink_bandwidth_mbps", "pcie_tx_kbps",
               "pcie_rx_kbps", "pcie_tx_bytes_per_s", "pcie_rx_bytes_per_s", "gpu_temp_c", "memory_temp_c",
               "clocks_event_reasons", "power_violation_us", "thermal_violation_us"}  # fmt: skip
"""What a `gsp-reset` fault changes on its GPU: its XID, the driver's ask, and its work gone (load, heat)."""


def fleet(*faults: FaultSpec, seed: int = 4, nodes: int = 1, **kw: float) -> FleetSim:
    f = FleetSim(SimConfig(nodes=nodes, gpus_per_node=8, seed=seed, **kw))  # type: ignore[arg-type]
    f.workload[:] = 0  # training: busy GPUs, so a hung GPU's lost work shows
    for fault in faults:
        f.inject(fault)
    return f


def run(f: FleetSim, hours: float) -> list[tuple[int, int, float]]:
    """Step `hours` of simulated time; the XID events seen meanwhile."""
    events = []
    for _ in range(round(hours * HOUR / STEP)):
        f.step(STEP)
        events += f.drain_events()
    return events


def moved(a: dict[str, np.ndarray], b: dict[str, np.ndarray], gpu: int) -> set[str]:
    """The columns in which `gpu` differs between two fleets' values (NaN equal to NaN)."""
    return {k for k in a if not np.array_equal(a[k][gpu], b[k][gpu], equal_nan=True)}


def test_a_remap_fault_is_a_pending_remap_alone_and_nothing_else_moves() -> None:
    f, twin = fleet(FaultSpec(3, FaultMode.REMAP, hours=2)), fleet()
    before = run(f, 1.5)
    run(twin, 1.5)
    assert f.values()["row_remap_pending"][3] == 0 and before == []
    events = run(f, 1.0)
    run(twin, 1.0)
    v, w = f.values(), twin.values()
    assert [(g, x) for g, x, _ in events] == [(3, XID_REMAP)]
    assert v["row_remap_pending"][3] == 1 and v["remapped_rows_correctable"][3] == w["remapped_rows_correctable"][3] + 1
    assert v["remapped_rows_uncorrectable"][3] == 0 and v["row_remap_failure"][3] == 0
    assert v["recovery_action"][3] == 0  # from correctable errors alone: the driver asks nothing
    sbe = v["ecc_sbe_volatile"][3] - w["ecc_sbe_volatile"][3]
    assert REMAP_SBES[0] <= sbe <= REMAP_SBES[1] and v["ecc_dbe_volatile"][3] == 0
    assert moved(v, w, 3) == REMAP_COLUMNS
    assert all(moved(v, w, g) == set() for g in range(8) if g != 3)
    assert f.failures == [] and not f.lost[3] and not f.failed[3]


def test_a_gsp_fault_asks_for_a_reset_and_loses_the_gpus_work() -> None:
    f, twin = fleet(FaultSpec(5, FaultMode.GSP_RESET, hours=1)), fleet()
    events = run(f, 2.0)
    run(twin, 2.0)
    v, w = f.values(), twin.values()
    assert [(g, x) for g, x, _ in events] == [(5, XID_GSP_TIMEOUT)]
    assert v["recovery_action"][5] == 1 and v["xid"][5] == XID_GSP_TIMEOUT
    assert v["gpu_util_pct"][5] == 0 and w["gpu_util_pct"][5] > 80
    assert v["row_remap_pending"][5] == 0 and v["ecc_sbe_volatile"][5] == w["ecc_sbe_volatile"][5]
    assert moved(v, w, 5) <= GSP_COLUMNS
    assert all(moved(v, w, g) == set() for g in range(8) if g != 5)
    assert f.failures == [] and not f.lost[5] and not f.failed[5]


def test_a_reset_cures_both_and_nothing_comes_back_without_refaults() -> None:
    f = fleet(FaultSpec(3, FaultMode.REMAP, 1), FaultSpec(5, FaultMode.GSP_RESET, 1), refault_share=0.0)
    run(f, 2.0)
    f.dbe_vol[3] = 1.0  # a volatile counter the reset restarts too
    corr, agg = f.values()["remapped_rows_correctable"][3], f.values()["ecc_sbe_aggregate"][3]
    f.reset(3)
    f.reset(5)
    v = f.values()
    assert v["row_remap_pending"][3] == 0 and v["ecc_sbe_volatile"][3] == 0 and v["ecc_dbe_volatile"][3] == 0
    assert v["remapped_rows_correctable"][3] == corr and v["ecc_sbe_aggregate"][3] == agg  # lifetime counts stay
    assert v["recovery_action"][5] == 0
    assert run(f, 0.2) == [] and f.values()["gpu_util_pct"][5] > 80  # its work is back
    assert run(f, 24 * 10) == []
    assert list(f.values()["recovery_action"]) == [0.0] * 8 and f.failures == []


def test_a_reboot_cures_them_too() -> None:
    f = fleet(FaultSpec(5, FaultMode.GSP_RESET, 1), refault_share=0.0)
    run(f, 2.0)
    assert f.values()["recovery_action"][5] == 1
    f.next_reboot[:] = f.time  # the node reboots at the next step
    run(f, 1.0)
    assert f.values()["recovery_action"][5] == 0 and not f.remedies.hung[5]


def test_a_gpu_off_the_bus_cannot_be_reset() -> None:
    f = fleet(FaultSpec(2, FaultMode.OFFBUS, 1))
    run(f, 2.0)
    with pytest.raises(ValueError, match="off the bus: a GPU reset cannot reach it"):
        f.reset(2)


def test_a_reset_does_not_cure_a_fault_that_persists() -> None:
    f, twin = fleet(FaultSpec(1, FaultMode.ECC, 30)), fleet(FaultSpec(1, FaultMode.ECC, 30))
    run(f, 20)
    run(twin, 20)
    f.reset(1)
    assert f.fault_mode[1] == twin.fault_mode[1] != 0 and f.fault_at[1] == twin.fault_at[1]
    run(f, 20)
    assert [x.fault for x in f.failures] == [FaultMode.ECC] and f.remedies.refaults == 0


def refaulted(seed: int, share: float = 0.14, gpus: int = 2000) -> np.ndarray:
    """Per GPU of a fleet where each had a `remap` fault and was reset: did it fault again within 7 days?"""
    nodes = gpus // 8
    f = fleet(*(FaultSpec(g, FaultMode.REMAP, 1) for g in range(gpus)), seed=seed, nodes=nodes, refault_share=share)
    f.next_reboot[:] = np.inf  # only the resets remedy
    run(f, 1.5)
    assert f.remedies.open.all()
    for g in range(gpus):
        f.reset(g)
    again = np.zeros(gpus, dtype=bool)
    for g, code, _ in run(f, 24 * 7 + 1):
        assert code == XID_REMAP
        again[g] = True
    assert int(again.sum()) == f.remedies.refaults  # each drawn refault happened within the window
    return again


def test_the_refault_share_is_the_configured_one_and_deterministic_per_seed() -> None:
    first, second, other = refaulted(11), refaulted(11), refaulted(12)
    # 2000 GPUs at 14 %: the standard error is 0.78 points, so 3 points is about four of them.
    assert abs(first.mean() - 0.14) < 0.03 and abs(other.mean() - 0.14) < 0.03
    assert np.array_equal(first, second) and not np.array_equal(first, other)
    assert abs(refaulted(11, share=0.5, gpus=800).mean() - 0.5) < 0.06
    assert not refaulted(11, share=0.0, gpus=80).any()


def test_the_default_refault_share_is_the_traces() -> None:
    assert SimConfig().refault_share == 0.14 and SimConfig().refault_days == 7.0
    with pytest.raises(ValueError, match="refault share"):
        replace(SimConfig(), refault_share=1.5)


def test_the_demos_two_reset_cured_gpus_do_not_fault_again_in_the_first_week() -> None:
    from gpuhealth.cli import serve

    seed = inspect.signature(serve.demo).parameters["seed"].default
    faults = [FaultSpec.parse(s) for s in serve.DEMO_FAULTS]
    cured = {x.gpu for x in faults if x.mode in (FaultMode.REMAP, FaultMode.GSP_RESET)}
    assert len(cured) == 2
    cfg = SimConfig(
        nodes=serve.DEMO_NODES, gpus_per_node=serve.DEMO_GPUS, seed=seed, spare_nodes=serve.DEMO_SPARE_NODES
    )
    f = FleetSim(cfg)
    for x in faults:
        f.inject(x)
    ripe = max(x.hours for x in faults if x.gpu in cured)
    while f.time - cfg.start < ripe * HOUR + STEP:
        f.step(serve.DEMO_STEP_S)
    assert {int(g) for g in np.flatnonzero(f.remedies.open)} == cured
    for g in cured:
        f.reset(g)
    f.drain_events()
    later = run(f, 24 * 7)
    assert f.remedies.refaults == 0 and not f.remedies.open.any()
    assert [e for e in later if e[0] in cured] == []
