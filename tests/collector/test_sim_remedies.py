"""The sim backend's faults a reset cures: what its samples show, its reset, its probes (collector.backends.sim)."""

from __future__ import annotations

import pytest

from collector.backends.base import GpuLostError, GpuReading
from collector.backends.sim import SIM_PID, SimBackend
from collector.remedy import Resetter
from simulator.config import XID_GSP_TIMEOUT, XID_REMAP, FaultMode, FaultSpec

PROBES = ["gemm", "memtest", "bandwidth", "pcie"]
REMAP, GSP, ECC, OFFBUS = 1, 2, 4, 6
"""GPU indices of the node below."""


def node(refault_share: float | None = 0.0) -> SimBackend:
    """One idle node, an hour into four faults (a pending remap, a GSP timeout, wearing HBM, off the bus)."""
    b = SimBackend(
        gpus_per_node=8, seed=5, step_s=600.0, refault_share=refault_share,
        faults=[FaultSpec(REMAP, FaultMode.REMAP, 0.5), FaultSpec(GSP, FaultMode.GSP_RESET, 0.5),
                FaultSpec(ECC, FaultMode.ECC, 6.0), FaultSpec(OFFBUS, FaultMode.OFFBUS, 0.5)],
    )  # fmt: skip
    b.fleet.workload[:] = 2  # an idle gap between jobs: no process holds up a reset or a probe
    return b


def read(b: SimBackend, steps: int) -> list[GpuReading]:
    out: list[GpuReading] = []
    for _ in range(steps):
        out = b.read()
    return out


def test_samples_show_a_pending_remap_and_a_gsp_timeout() -> None:
    b = node()
    first = read(b, 1)
    assert first[REMAP].values["row_remap_pending"] == 0 and first[GSP].values["recovery_action"] == 0
    r = read(b, 5)
    events = {(e.gpu_uuid, e.xid) for e in b.drain_xid_events()}
    remap, gsp = r[REMAP].values, r[GSP].values
    assert (remap["row_remap_pending"], remap["recovery_action"], remap["remapped_rows_uncorrectable"]) == (1, 0, 0)
    assert remap["ecc_sbe_volatile"] > 0 and (r[REMAP].info.uuid, XID_REMAP) in events
    assert (gsp["recovery_action"], gsp["xid"], gsp["row_remap_pending"]) == (1, XID_GSP_TIMEOUT, 0)
    assert (r[GSP].info.uuid, XID_GSP_TIMEOUT) in events
    assert not r[REMAP].lost and not r[GSP].lost and r[OFFBUS].lost
    assert all(r[i].values["recovery_action"] == 0 for i in (0, 3, 5, 7))


def test_a_reset_clears_them_and_no_new_xid_follows() -> None:
    b = node()
    read(b, 6)
    b.drain_xid_events()
    resetter = Resetter(b, allow=True)
    assert [resetter.reset(i).result for i in (REMAP, GSP)] == ["done", "done"]
    r = read(b, 12)
    for i in (REMAP, GSP):
        v = r[i].values
        assert (v["row_remap_pending"], v["recovery_action"], v["ecc_sbe_volatile"], v["ecc_dbe_volatile"]) == (0,) * 4
    assert {e.gpu_uuid for e in b.drain_xid_events()} & {r[REMAP].info.uuid, r[GSP].info.uuid} == set()


def test_a_busy_gpu_is_refused_and_an_off_the_bus_one_cannot_be_reset() -> None:
    b = node()
    r = read(b, 6)
    b.fleet.util[REMAP] = 90.0  # a job runs on it
    busy = Resetter(b, allow=True).reset(REMAP)
    assert (busy.result, busy.reason) == ("refused", f"1 process(es) on the GPU (pid {SIM_PID + REMAP})")
    assert b.read()[REMAP].values["row_remap_pending"] == 1  # nothing touched
    lost = Resetter(b, allow=True).reset(OFFBUS)
    assert lost.result == "refused" and lost.reason.startswith("the GPU has fallen off the bus")
    with pytest.raises(GpuLostError, match="fallen off the bus"):
        b.reset_gpu(r[OFFBUS].info)


def test_probes_error_on_a_hung_gpu_pass_once_reset_and_fail_where_the_fault_persists() -> None:
    b = node()
    r = read(b, 18)  # 3 of its 6 hours: the wearing HBM is well under way
    probes = b.probe_runner(seed=3)
    assert {x.status for x in probes.run(r[GSP].info, PROBES, 60.0)} == {"error"}
    assert {x.status for x in probes.run(r[REMAP].info, PROBES, 60.0)} == {"pass"}  # unaffected work goes on
    for i in (REMAP, GSP, ECC):
        b.reset_gpu(r[i].info)
    r = read(b, 1)
    for i in (REMAP, GSP):
        assert {x.test: x.status for x in probes.run(r[i].info, PROBES, 60.0)} == dict.fromkeys(PROBES, "pass")
    ecc = {x.test: x for x in probes.run(r[ECC].info, PROBES, 60.0)}
    assert ecc["memtest"].status == "fail" and (ecc["memtest"].errors or 0) > 0


def test_the_refault_share_is_a_constructor_argument() -> None:
    assert node(None).fleet.cfg.refault_share == 0.14  # the trace's default
    b = node(1.0)
    read(b, 6)
    for i in (REMAP, GSP):
        b.reset_gpu(b.gpus()[i])
    read(b, 7 * 24 * 6 + 1)
    assert b.fleet.remedies.refaults == 2 and b.fleet.remedies.open[[REMAP, GSP]].all()
