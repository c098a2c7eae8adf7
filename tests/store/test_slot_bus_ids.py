"""The GPUs' PCI bus ids, from the store's records to the frames the scorer reads (decision 0089)."""

from __future__ import annotations

from datetime import timedelta

from core.history import BUS_IDS_ATTR
from store import Store
from tests.store.conftest import T0, frame


def test_the_scoring_frame_carries_the_bus_ids_the_records_hold(store: Store) -> None:
    """The collector's records hold a bus id (local mode); a GPU pulled from Prometheus or imported from
    a file has none (its slot is then its index)."""
    rows = [{"timestamp": T0 + timedelta(minutes=10 * k), "gpu_uuid": g, "gpu_index": i, "gpu_temp_c": 40.0}
            for k in range(1, 7) for i, g in enumerate(("GPU-a", "GPU-b"))]  # fmt: skip
    store.samples.ingest(frame(rows))
    store.gpus.upsert([{"uuid": "GPU-a", "hostname": "node-a", "gpu_index": 0, "model_name": "H100",
                        "pci_bus_id": "00000000:41:00.0", "seen_at": T0 + timedelta(hours=1)}])  # fmt: skip
    hours = store.samples.scoring_history(since=None, until=T0 + timedelta(hours=1, minutes=5))
    assert hours.attrs[BUS_IDS_ATTR] == {"GPU-a": "00000000:41:00.0"}
    assert store.samples.history().attrs[BUS_IDS_ATTR] == {"GPU-a": "00000000:41:00.0"}


def test_the_bus_ids_are_shared_by_every_frame_taken_from_it(store: Store) -> None:
    """pandas deep-copies attrs into every frame and column taken from a frame: the ids are one object."""
    rows = [{"timestamp": T0 + timedelta(minutes=10 * k), "gpu_uuid": "GPU-a", "gpu_temp_c": 40.0} for k in range(1, 4)]
    store.samples.ingest(frame(rows))
    store.gpus.upsert([{"uuid": "GPU-a", "hostname": "node-a", "gpu_index": 0, "model_name": "H100",
                        "pci_bus_id": "00000000:41:00.0", "seen_at": T0 + timedelta(hours=1)}])  # fmt: skip
    got = store.samples.history()
    assert got["gpu_temp_c"].attrs[BUS_IDS_ATTR] is got.attrs[BUS_IDS_ATTR]
    assert got.iloc[:2].attrs[BUS_IDS_ATTR] is got.attrs[BUS_IDS_ATTR]
