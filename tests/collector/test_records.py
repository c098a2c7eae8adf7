"""What the in-process collector stores: each interval's XID, not DCGM's last-seen gauge the readings hold."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from collector.backends.sim import SimBackend
from core import catalog
from predictor.score import load_model
from service.assemble import LoopConfig, build_loops, warm_up
from simulator.fleet import FaultSpec
from store import Store

STEP_S = 600.0


def test_one_xid_event_is_stored_once_while_the_gauge_keeps_showing_it(tmp_path: Path) -> None:
    backend = SimBackend(nodes=1, gpus_per_node=2, seed=3, step_s=STEP_S, faults=[FaultSpec.parse("1:gsp-reset:2")],
                         start=time.time() - 48 * STEP_S)  # fmt: skip
    store = Store.open(f"sqlite:///{tmp_path / 'x.db'}")
    try:
        loops = build_loops(store, load_model(), LoopConfig(fields=list(catalog.select("default")), interval_s=1.0),
                            backend=backend)  # fmt: skip
        warm_up(loops, 48)
        assert loops.sampler is not None and loops.sampler.latest is not None
        gpu = backend.gpus()[1]
        gauge = next(r for r in loops.sampler.latest.readings if r.info.uuid == gpu.uuid).values["xid"]
        assert gauge == 119.0  # what /metrics shows: the last XID seen, still
        f = store.samples.history(uuids=[gpu.uuid])
        xid = f["xid"].to_numpy(dtype=np.float64)
        assert len(xid) > 30 and int(np.count_nonzero(xid == 119.0)) == 1, np.unique(xid, return_counts=True)
        assert set(np.unique(xid)) <= {0.0, 119.0}
    finally:
        store.close()


def test_the_fabric_and_rail_fields_are_stored_and_the_round_demotes_their_nodes(tmp_path: Path) -> None:
    """The in-process collector stores the columns the node findings read (issue 58), so a round says why."""
    faults = [FaultSpec.parse(f) for f in ("1:fabric:2", "3:rail-flap:2")]
    backend = SimBackend(nodes=2, gpus_per_node=2, seed=3, step_s=STEP_S, faults=faults,
                         start=time.time() - 48 * STEP_S)  # fmt: skip
    store = Store.open(f"sqlite:///{tmp_path / 'f.db'}")
    try:
        loops = build_loops(store, load_model(), LoopConfig(fields=list(catalog.select("default")), interval_s=1.0),
                            backend=backend)  # fmt: skip
        warm_up(loops, 48)
        f = store.samples.history()
        states = f.groupby("hostname", observed=True)["gpu_fabric_state"].min()
        assert states["sim-node-00"] == 1.0 and np.isnan(states["sim-node-01"])  # no fabric there: absent
        assert f["ib_rail_link_downed"].max() >= 4.0
        assert loops.scorer is not None
        records = loops.scorer.run_once()
        reasons = {(r["hostname"], x.split(":")[0]) for r in records for x in r["reasons"]}
        assert ("sim-node-00", "fabric not ready on 2 of 2 GPUs of sim-node-00 (registration not started)") in reasons
        assert ("sim-node-01", "InfiniBand rail flapping") in reasons
        assert {r["decision"] for r in records} == {"demote"}
        # The GPU on the rail names its port (the sim's NIC of slots 0 and 1: mlx5_0, port 1).
        on_rail = next(r for r in records if r["gpu_uuid"] == backend.gpus()[3].uuid)
        assert any(x.startswith("InfiniBand rail flapping: its rail mlx5_0/1 went down") for x in on_rail["reasons"])
    finally:
        store.close()
