"""Issue 59.5: a lost GPU keeps the time it was last really seen, on the local path and in fleet mode.

"Not seen since T" is what a person reads to tell how long a GPU has been off the bus; T must not
move forward with every round that finds it still missing.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from collector.backends.sim import SimBackend
from core import catalog
from predictor.score import load_model
from service.assemble import LoopConfig, build_loops
from simulator.fleet import FaultSpec
from store import Store
from tests.core.test_prom_import import FakePrometheus, gpu_labels
from tests.service.test_puller import Clock, at, ms, puller

STEP_S = 600.0


def _lost_reason(store: Store, uuid: str) -> str:
    (reason,) = [r for r in store.gpus.get(uuid)["reasons"] if r.startswith("GPU lost")]
    return reason


def test_a_gpu_off_the_bus_keeps_its_last_seen_time_across_rounds(tmp_path: Path) -> None:
    """`gpuhealth serve` with the sim backend: GPU 2 falls off the bus within the first simulated hour."""
    store = Store.open(f"sqlite:///{tmp_path / 's.db'}")
    backend = SimBackend(
        nodes=1, gpus_per_node=4, seed=3, step_s=STEP_S, faults=[FaultSpec.parse("2:offbus:1")],
        start=time.time() - 24 * STEP_S,
    )  # fmt: skip
    uuid = [g.uuid for g in backend.gpus()][2]
    loops = build_loops(
        store, load_model(), LoopConfig(fields=list(catalog.select("default")), interval_s=1.0), backend=backend
    )
    assert loops.sampler is not None and loops.buffer is not None and loops.scorer is not None
    last_sample = None
    for _ in range(12):
        loops.sampler.sample_once()
        loops.buffer.flush()
        g = store.gpus.get(uuid)
        if g["state"] == "lost":
            break
        last_sample = g["latest_sample"]
    assert g["state"] == "lost" and last_sample is not None, "the fault never took the GPU off the bus"
    seen = last_sample["timestamp"]
    assert g["last_seen"] == seen
    loops.scorer.run_once()
    reason = _lost_reason(store, uuid)
    assert f"since {seen:%Y-%m-%d %H:%M} UTC" in reason
    for _ in range(3):  # rounds that find it still missing, an hour of simulated time
        loops.sampler.sample_once()
        loops.buffer.flush()
    assert store.gpus.get(uuid)["last_seen"] == seen
    assert store.gpus.get(uuid)["state"] == "lost"
    loops.scorer.run_once()
    assert _lost_reason(store, uuid) == reason
    store.close()


@pytest.mark.parametrize("pulls", [1, 3])
def test_fleet_mode_keeps_the_last_step_a_gpu_was_pulled_at(store: Store, pulls: int) -> None:
    """The puller marks a GPU lost at the end of the window that missed it; its last seen stays its last step."""
    prom = FakePrometheus()
    prom.add("DCGM_FI_DEV_GPU_TEMP", gpu_labels(0), {ms(k): 50.0 for k in range(60)})
    prom.add("DCGM_FI_DEV_GPU_TEMP", gpu_labels(1), {ms(k): 50.0 for k in range(21)})  # falls off at step 21
    clock = Clock(20)
    p = puller(store, prom, clock)
    p.pull_once()
    for k in range(pulls):
        clock.step = 24 + 4 * k
        p.pull_once()
    g = store.gpus.get("GPU-1")
    assert g["state"] == "lost"
    assert g["last_seen"] == at(20)  # its last step, not the pull that missed it (step 24 and on)
    assert store.gpus.get("GPU-0")["last_seen"] == at(20 + 4 * pulls)
