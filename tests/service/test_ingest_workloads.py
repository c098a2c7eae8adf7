"""A small install keeps what runs on each GPU: snapshot → ingest buffer (only changes) → store."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from collector.backends.base import GpuInfo, GpuReading
from collector.records import snapshot_workloads
from collector.sampler import Snapshot
from service.ingest import IngestBuffer
from store import Store
from store.workloads import Workloads


class Counting(Workloads):
    """A real store's workloads that count their writes."""

    writes = 0

    def replace(self, *args: Any, **kw: Any) -> int:
        Counting.writes += 1
        return super().replace(*args, **kw)


def snap(t: float, workloads: dict[Any, Any]) -> Snapshot:
    readings = tuple(GpuReading(GpuInfo(i, f"GPU-{i}", "H100", "node-a"), {"gpu_temp_c": 40.0}) for i in range(2))
    return Snapshot(seq=int(t), taken_at=t, readings=readings, workloads=workloads)


def test_workloads_flow_to_the_store_and_only_changes_are_written(tmp_path: Path) -> None:
    store = Store.open(f"sqlite:///{tmp_path / 'w.db'}")
    store.workloads = Counting(store._db)
    buffer = IngestBuffer(store)
    pod = {"pod": "train-0", "namespace": "ml", "container": "main"}
    try:
        buffer.add_workloads(*snapshot_workloads(snap(1_800_000_000, {("GPU-0", None): (pod,), ("GPU-1", 3): (
            {"hpc_job": "7"},)})))  # fmt: skip
        buffer.flush()
        got = store.workloads.of(["GPU-0", "GPU-1"])
        assert got["GPU-0"]["workloads"] == [pod] and got["GPU-1"]["workloads"] == [{"hpc_job": "7", "GPU_I_ID": "3"}]
        buffer.add_workloads(*snapshot_workloads(snap(1_800_000_010, {("GPU-0", None): (pod,), ("GPU-1", 3): (
            {"hpc_job": "7"},)})))  # fmt: skip
        buffer.flush()
        assert Counting.writes == 1  # nothing changed: nothing written
        buffer.add_workloads(*snapshot_workloads(snap(1_800_000_020, {("GPU-0", None): (pod,)})))
        buffer.flush()
        assert store.workloads.of(["GPU-1"])["GPU-1"]["workloads"] == [] and Counting.writes == 2
    finally:
        store.close()
