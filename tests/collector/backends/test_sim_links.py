"""The sim backend's NVLink links and fabric (issue 58): what NVML would answer on a simulated node with a
fabric, agreeing with the fleet's `nvlink_links_down`, `gpu_fabric_state` and NVLink error totals; and
a simulated fleet's /metrics carrying them and its kernel log's XIDs, as a live node's does."""

from __future__ import annotations

from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from collector.backends.sim import SimBackend
from collector.exporter import render
from collector.run import build_sampling
from core import catalog
from core.nvlink import FABRIC_STATE, LINK_UP
from simulator.config import FaultSpec


def _fabric_fleet(**kw: object) -> SimBackend:
    faults = [FaultSpec.parse("9:fabric:1"), FaultSpec.parse("11:offbus:0.5")]  # sim-node-01's fabric fails at 1 h
    return SimBackend(nodes=2, gpus_per_node=8, seed=3, step_s=600.0, faults=faults, **kw)  # type: ignore[arg-type]


def test_a_node_without_a_fabric_has_no_links_as_nvml_answers_not_supported() -> None:
    b = SimBackend(nodes=1, gpus_per_node=4, seed=3)
    b.read()
    assert b.read_links() == []


def test_links_and_fabric_agree_with_the_fleets_fields() -> None:
    b = _fabric_fleet()
    for step in range(12):  # two simulated hours: the fabric fails at one, GPU 11 falls off the bus at half
        readings = {r.info.uuid: r for r in b.read()}
        got = b.read_links()
        assert [g.info.hostname for g in got] == ["sim-node-01"] * (8 if step < 2 else 7)  # node 0 has no fabric
        for g in got:
            values = readings[g.info.uuid].values
            assert [r.link for r in g.links] == list(range(18))  # an H100's 18 links, as NVML reports them
            assert sum(not r.up for r in g.links) == values["nvlink_links_down"] == 0
            assert g.fabric is not None and g.fabric.state == values["gpu_fabric_state"]
            assert g.fabric.status == 0 and g.fabric.clique_id == 1
            for name, field in (
                ("NVML_NVLINK_ERROR_DL_CRC_FLIT", "nvlink_crc_flit_errors"),
                ("NVML_NVLINK_ERROR_DL_REPLAY", "nvlink_replay_errors"),
            ):
                assert sum(r.counters[name] for r in g.links) == values[field]
    states = {g.fabric.state for g in got if g.fabric is not None}
    assert states == {1}  # NVML_GPU_FABRIC_STATE_NOT_STARTED: Fabric Manager stopped
    assert len({g.fabric.cluster_uuid for g in got if g.fabric is not None}) == 1  # one domain per node


def _families(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for fam in text_string_to_metric_families(text):
        assert fam.name not in out, f"{fam.name} is exported twice (a scraper rejects the page)"
        out[fam.name] = [(s.labels, s.value) for s in fam.samples]
    return out


def test_a_simulated_fleets_metrics_carry_its_links_fabric_and_kernel_log(tmp_path: Path) -> None:
    b = _fabric_fleet(kernel_log=tmp_path / "kmsg")
    s = build_sampling(b, list(catalog.select("default")), 10.0)
    for _ in range(6):
        s.sampler.sample_once()
    fams = _families(render(s.registry.collect()).decode())
    up = fams[LINK_UP]
    assert len(up) == 7 * 18 and {v for _, v in up} == {1.0}  # GPU 11 is off the bus
    assert {lb["Hostname"] for lb, _ in up} == {"sim-node-01"}
    assert {v for _, v in fams[FABRIC_STATE]} == {1.0}
    xids = fams["gpuhealth_kernel_xid_errors"]
    got = {(lb["Hostname"], lb["pci_bus_id"], lb["err_code"], lb["source"]): v for lb, v in xids if lb}
    bus = b.gpus()[11].pci_bus_id
    assert got == {("sim-node-01", bus, "79", "kmsg"): 1.0}
    assert fams["gpuhealth_kernel_log_readable"] == [({}, 1.0)]  # both nodes' logs read: one series
