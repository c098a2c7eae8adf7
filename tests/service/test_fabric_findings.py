"""The scoring loop applies the fabric and rail findings (predictor.fabric) to a round's records."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from predictor.score import load_model
from predictor.thresholds import Thresholds
from service.scorer import Scorer
from store import Store
from tests.store.conftest import T0, frame
from tests.store.test_fabric_columns import _rows


def test_a_round_demotes_the_node_whose_fabric_stopped_and_says_why(tmp_path: Path) -> None:
    store = Store.open(f"sqlite:///{tmp_path / 'f.db'}")
    try:
        store.samples.ingest(frame(_rows()))
        records = Scorer(store, load_model(), Thresholds(), 300).run_once(at=T0 + timedelta(hours=3))
    finally:
        store.close()
    by_gpu = {str(r["gpu_uuid"]): r for r in records}
    assert {r["decision"] for r in by_gpu.values()} == {"demote"}
    assert any(x.startswith("fabric not ready on 1 of 2 GPUs of node-a") for x in by_gpu["GPU-0"]["reasons"])
    assert any(x.startswith("InfiniBand rail flapping: its rail went down") for x in by_gpu["GPU-1"]["reasons"])
    assert any(
        x.startswith("InfiniBand rail flapping: the rail of GPU 1 of node-a") for x in by_gpu["GPU-0"]["reasons"]
    )
