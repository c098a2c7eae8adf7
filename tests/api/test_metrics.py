"""The service's /metrics from a scoring round held in memory: the per-node cooling finding."""

from __future__ import annotations

from typing import Any, cast

from api.metrics import ApiMetrics
from core.labels import HOSTNAME
from predictor.node import node_reason
from service.scorer import Scorer, ScoreState
from store import Store


class _Store:
    """A store that answers the health ping, and nothing else (a scrape must not query it)."""

    def ping(self) -> None:
        return None


class _Scorer:
    def __init__(self, records: list[dict[str, Any]]) -> None:
        self.state = ScoreState(records=records, runs=1)


def _record(uuid: str, host: str, decision: str, reasons: list[str]) -> dict[str, Any]:
    scores = {"risk": 0.5, "risk_ecc": 0.1, "risk_thermal": 0.5, "risk_pcie": 0.0}
    return {"gpu_uuid": uuid, "hostname": host, "model_name": "NVIDIA H100 80GB HBM3", **scores,
            "decision": decision, "reasons": reasons}  # fmt: skip


def _metrics(records: list[dict[str, Any]], host_label: str = HOSTNAME) -> ApiMetrics:
    return ApiMetrics(cast(Store, _Store()), cast(Scorer, _Scorer(records)), None, host_label)


HOT = node_reason("node-a", 3.7, 6, 8)


def test_node_cooling_suspected_per_scored_node() -> None:
    m = _metrics(
        [
            _record("GPU-a0", "node-a", "watch", [HOT]),
            _record("GPU-a1", "node-a", "drain", ["XID 79 fell off the bus", HOT]),
            _record("GPU-b0", "node-b", "demote", ["risk 0.90 (thermal 0.90): temperature above its power"]),
            _record("GPU-c0", "node-c", "ok", []),
        ]
    )
    get = m.registry.get_sample_value
    assert get("gpuhealth_node_cooling_suspected", {"Hostname": "node-a"}) == 1.0
    assert get("gpuhealth_node_cooling_suspected", {"Hostname": "node-b"}) == 0.0
    assert get("gpuhealth_node_cooling_suspected", {"Hostname": "node-c"}) == 0.0
    # The per-GPU verdicts are unchanged beside it.
    assert get("gpuhealth_decision", {"UUID": "GPU-a0", "Hostname": "node-a", "gpu": "", "modelName":
               "NVIDIA H100 80GB HBM3", "decision": "watch"}) == 1.0  # fmt: skip


def test_node_cooling_follows_the_host_label_and_is_absent_without_scores() -> None:
    m = _metrics([_record("GPU-a0", "node-a", "watch", [HOT])], host_label="hostname")
    assert m.registry.get_sample_value("gpuhealth_node_cooling_suspected", {"hostname": "node-a"}) == 1.0
    empty = _metrics([])
    assert b"gpuhealth_node_cooling_suspected{" not in empty.render()
