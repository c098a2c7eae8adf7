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
