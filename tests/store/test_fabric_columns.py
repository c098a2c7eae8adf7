"""The fabric and rail columns (issue 58) through the store's samples and hours, to the node findings."""

from __future__ import annotations

from datetime import timedelta

import pandas as pd

from predictor.fabric import fabric_findings
from store import Store
from tests.store.conftest import T0, frame


def _rows() -> list[dict[str, object]]:
    """Two GPUs of node-a for 3 hours at 10 minutes: GPU 0's fabric stops at 2 h, GPU 1's rail goes down
    every 15 minutes from the start (4 an hour)."""
    out: list[dict[str, object]] = []
    for k in range(18):
        at = T0 + timedelta(minutes=10 * (k + 1))
        for g in (0, 1):
            out.append({
                "timestamp": at, "gpu_uuid": f"GPU-{g}", "gpu_index": g, "gpu_temp_c": 40.0,
                "nvlink_links_down": 0.0, "gpu_fabric_state": 1.0 if (g == 0 and k >= 12) else 3.0,
                "ib_rail_link_downed": float((10 * (k + 1)) // 15) if g == 1 else 0.0,
            })  # fmt: skip
    return out


def test_the_columns_round_trip_as_samples(store: Store) -> None:
    assert store.samples.ingest(frame(_rows())) == 36
    got = store.samples.history()
    last = got[got["gpu_uuid"].astype(str) == "GPU-1"].iloc[-1]
    assert (last["ib_rail_link_downed"], last["gpu_fabric_state"], last["nvlink_links_down"]) == (12.0, 3.0, 0.0)


def test_hours_keep_the_last_state_and_count_and_the_findings_read_them(store: Store) -> None:
    store.samples.ingest(frame(_rows()))
    until = T0 + timedelta(hours=3)
    hours = store.samples.scoring_history(since=None, until=until)
    gpu0 = hours[hours["gpu_uuid"].astype(str) == "GPU-0"].sort_values("timestamp")
    assert gpu0["gpu_fabric_state"].tolist()[-1] == 1.0  # the state at the hour's end, not a mean
    found = fabric_findings(hours)
    assert found.node["node-a"][0].startswith("fabric not ready on 1 of 2 GPUs of node-a (registration not started)")
    assert found.own["GPU-1"][0].startswith("InfiniBand rail flapping: its rail went down 4 times")
    assert pd.Timestamp(hours["timestamp"].max()) == pd.Timestamp(until)
