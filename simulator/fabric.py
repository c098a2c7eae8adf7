"""Faults of what a node's GPUs share: the NVLink fabric and an InfiniBand rail (issue 58).

Two injected faults, both the node's and neither a GPU failure (no label, every GPU keeps answering):

- `fabric`: Fabric Manager stops on the GPU's node: from its time on, every GPU of the node reports its
  fabric registration not started (`gpu_fabric_state` 1, NVML_GPU_FABRIC_STATE_NOT_STARTED), as a node
  whose nvidia-fabricmanager died does; multi-GPU work there hangs while each GPU looks healthy.
- `rail-flap`: the InfiniBand port on the GPU's rail (the two GPUs behind one PCIe switch, slots 2k and
  2k+1, as on an HGX board with one NIC per switch) starts to flap: one link down every 15 minutes, four
  an hour (`ib_rail_link_downed` on both GPUs of the rail). The node's NICs are named as mlx5 names
  them, one per switch: the rail of slots 2k and 2k+1 is `mlx5_k`, port 1 (`Fabric.rails`).

A default fleet has neither an NVSwitch fabric nor IB ports: the three fields are absent (NaN), as
NVML and sysfs answer on such a node, so its readings and history stay what they were. A node given
one of these faults has them on every GPU from the start (fabric registered, links up, no flaps) until
the fault's time. Both persist: nothing here restarts Fabric Manager or replaces a cable. Nothing is
drawn from the fleet's generator: a seed's fleet is the same with or without them.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from simulator.config import HOUR, FaultMode, FaultSpec

if TYPE_CHECKING:
    from simulator.fleet import FleetSim

NODE_MODES = (FaultMode.FABRIC, FaultMode.RAIL_FLAP)
"""Faults of the node's shared parts, injected here rather than into a GPU's fault slot."""
FLAP_EVERY_S = 15 * 60.0
"""A flapping rail goes down once every 15 minutes: four an hour, over the alert's three."""
GPUS_PER_RAIL = 2
"""GPUs behind one PCIe switch and its NIC: two per switch, as on an HGX H100 board's four switches."""
FABRIC_COMPLETED, FABRIC_NOT_STARTED = 3.0, 1.0
"""NVML_GPU_FABRIC_STATE_COMPLETED and _NOT_STARTED (core.nvlink.FABRIC_STATES)."""
CLIQUE_ID = 1
"""Each simulated node is its own NVLink domain (an HGX board): one clique, its cluster named by the node."""


@dataclass(frozen=True)
class GpuFabric:
    """One GPU's NVLink links and fabric registration on a node with a fabric (the sim backend's read_links)."""

    state: int
    """NVML_GPU_FABRIC_STATE_*, the `gpu_fabric_state` field's value."""
    up: list[bool]
    """Per link 0..n-1 (the model's NVLink count): up; as many down as `nvlink_links_down` says."""
    crc_flit: list[int]
    """Per link: CRC flit errors, the GPU's `nvlink_crc_flit_errors` split over its links."""
    clique_id: int
    cluster_uuid: str


class Fabric:
    """Per GPU: whether its node has a fabric and rails, and when its fabric fails or its rail flaps."""

    def __init__(self, n: int) -> None:
        self.has_fabric = np.zeros(n, dtype=bool)
        self.fabric_at = np.full(n, np.inf)
        self.has_rail = np.zeros(n, dtype=bool)
        self.rail_at = np.full(n, np.inf)

    def inject(self, fleet: FleetSim, fault: FaultSpec) -> None:
        """The node of GPU `fault.gpu` gains the fabric or rails; the fault begins `fault.hours` from now."""
        node = fleet.node == fleet.node[fault.gpu]
        at = fleet.time + fault.hours * HOUR
        if fault.mode == FaultMode.FABRIC:
            self.has_fabric |= node
            self.fabric_at[node] = np.minimum(self.fabric_at[node], at)
            return
        self.has_rail |= node
        rail = node & (fleet.slot // GPUS_PER_RAIL == fleet.slot[fault.gpu] // GPUS_PER_RAIL)
        self.rail_at[rail] = np.minimum(self.rail_at[rail], at)

    def rails(self, fleet: FleetSim) -> list[str]:
        """Per GPU, its rail's port as `device/port` ("mlx5_2/1"), or "" on a node without rails."""
        return [
            f"mlx5_{int(s) // GPUS_PER_RAIL}/1" if r else "" for s, r in zip(fleet.slot, self.has_rail, strict=True)
        ]

    def values(self, fleet: FleetSim) -> dict[str, np.ndarray]:
        """The catalogue fields of the fabric and the rails, NaN on GPUs whose node has none."""
        t = fleet.time
        with np.errstate(invalid="ignore"):  # inf - inf on rails that never flap
            flaps = np.where(t >= self.rail_at, np.floor((t - self.rail_at) / FLAP_EVERY_S) + 1.0, 0.0)
        return {
            "nvlink_links_down": np.where(self.has_fabric, 0.0, np.nan),
            "gpu_fabric_state": np.where(
                self.has_fabric, np.where(t >= self.fabric_at, FABRIC_NOT_STARTED, FABRIC_COMPLETED), np.nan
            ),
            "ib_rail_link_downed": np.where(self.has_rail, flaps, np.nan),
        }

    def links(self, fleet: FleetSim) -> list[GpuFabric | None]:
        """Per GPU its links and fabric registration, as `values` gives their fields now; None on a node
        without a fabric (NVML answers NOT_SUPPORTED there). The other three NVLink counters stay 0, as
        the fleet's per-GPU totals do."""
        vals = self.values(fleet)
        out: list[GpuFabric | None] = []
        for i in range(len(self.has_fabric)):
            if not self.has_fabric[i]:
                out.append(None)
                continue
            n, down, crc = int(fleet.m["nvlinks"][i]), int(vals["nvlink_links_down"][i]), int(fleet.nvlink_crc[i])
            cluster = str(uuid.uuid5(uuid.NAMESPACE_DNS, f"node-{int(fleet.node[i])}.fabric.sim"))
            out.append(
                GpuFabric(
                    state=int(vals["gpu_fabric_state"][i]),
                    up=[k >= down for k in range(n)],
                    crc_flit=[crc // n + (1 if k < crc % n else 0) for k in range(n)],
                    clique_id=CLIQUE_ID,
                    cluster_uuid=cluster,
                )
            )
        return out
