"""The simulated node faults of issue 58: a fabric whose Fabric Manager stops, a flapping IB rail."""

from __future__ import annotations

import numpy as np

from simulator.config import HOUR, FaultMode, FaultSpec, SimConfig
from simulator.fabric import FLAP_EVERY_S
from simulator.fleet import FleetSim

FIELDS = ("nvlink_links_down", "gpu_fabric_state", "ib_rail_link_downed")


def fleet(*faults: str) -> FleetSim:
    f = FleetSim(SimConfig(nodes=2, seed=3))
    for text in faults:
        f.inject(FaultSpec.parse(text))
    return f


def test_a_default_fleet_has_no_fabric_and_no_rails() -> None:
    f = fleet()
    f.step(600.0)
    v = f.values()
    assert all(np.isnan(v[k]).all() for k in FIELDS)


def test_the_fabric_fault_unregisters_every_gpu_of_its_node_at_its_time() -> None:
    f = fleet("11:fabric:1")
    f.step(1800.0)
    v = f.values()
    assert list(v["gpu_fabric_state"][8:]) == [3.0] * 8 and np.isnan(v["gpu_fabric_state"][:8]).all()
    assert list(v["nvlink_links_down"][8:]) == [0.0] * 8
    f.step(HOUR)
    assert list(f.values()["gpu_fabric_state"][8:]) == [1.0] * 8  # Fabric Manager stopped: not started
    assert not f.failed.any() and f.fault_mode[11] == 0  # the node's fault, never a GPU's failure


def test_the_rail_flap_counts_four_link_downs_an_hour_on_the_two_gpus_of_its_rail() -> None:
    f = fleet("5:rail-flap:0.5")
    f.step(0.5 * HOUR)
    f.step(HOUR - 1.0)
    downs = f.values()["ib_rail_link_downed"]
    assert list(downs[4:6]) == [4.0, 4.0]  # GPUs 4 and 5 share the switch and its NIC
    assert list(downs[:4]) == [0.0] * 4 and list(downs[6:8]) == [0.0] * 2 and np.isnan(downs[8:]).all()
    assert FLAP_EVERY_S * 4 == HOUR


def test_node_faults_draw_nothing_from_the_fleets_generator() -> None:
    a, b = fleet(), fleet("3:fabric:1", "12:rail-flap:1")
    for _ in range(12):
        a.step(600.0)
        b.step(600.0)
    va, vb = a.values(), b.values()
    assert all(np.array_equal(va[k], vb[k], equal_nan=True) for k in va if k not in FIELDS)
    assert FaultSpec.parse("3:rail-flap").mode == FaultMode.RAIL_FLAP


def test_the_demos_fabric_and_rail_faults_demote_their_nodes_within_its_first_minutes() -> None:
    """The demo's node faults ripen minutes after its warm-up (one wall second is DEMO_STEP_S simulated)
    and the findings of predictor.fabric name them on the readings the sim backend gives."""
    import pandas as pd

    from collector.backends.sim import SimBackend
    from gpuhealth.cli import serve
    from predictor.fabric import with_node_findings

    faults = [FaultSpec.parse(s) for s in serve.DEMO_FAULTS]
    node_faults = [x for x in faults if x.mode in (FaultMode.FABRIC, FaultMode.RAIL_FLAP)]
    assert {x.mode for x in node_faults} == {FaultMode.FABRIC, FaultMode.RAIL_FLAP}
    warm_h = serve.DEMO_WARMUP_STEPS * serve.DEMO_STEP_S / HOUR
    wall_s = (max(x.hours for x in node_faults) + 1.5 - warm_h) * HOUR / serve.DEMO_STEP_S
    assert wall_s <= 120  # within the demo's first two minutes
    b = SimBackend(nodes=serve.DEMO_NODES, gpus_per_node=serve.DEMO_GPUS, step_s=serve.DEMO_STEP_S, faults=faults,
                   spare_nodes=serve.DEMO_SPARE_NODES)  # fmt: skip
    rows = []
    while b.fleet.time - b.fleet.cfg.start < (max(x.hours for x in node_faults) + 1.5) * HOUR:
        for r in b.read():
            rows.append({"timestamp": pd.Timestamp(b.data_time(), unit="s", tz="UTC"), "hostname": r.info.hostname,
                         "gpu_uuid": r.info.uuid, "gpu_index": r.info.index, **r.values})  # fmt: skip
    frame = pd.DataFrame(rows)
    recs = [{"gpu_uuid": u, "hostname": h, "decision": "ok", "reasons": []}
            for u, h in frame[["gpu_uuid", "hostname"]].drop_duplicates().itertuples(index=False)]  # fmt: skip
    by_host: dict[str, set[str]] = {}
    for r in with_node_findings(recs, frame):
        by_host.setdefault(r["hostname"], set()).update(x.split(":")[0] for x in r["reasons"])
        assert r["decision"] == ("demote" if r["reasons"] else "ok")
    fabric = "fabric not ready on 8 of 8 GPUs of sim-node-00 (registration not started)"
    assert by_host == {
        "sim-node-00": {fabric},
        "sim-node-01": set(),
        "sim-node-02": {"InfiniBand rail flapping"},
        "sim-node-03": set(),
    }
