"""The typed records the store returns carry exactly their TypedDict's keys, in its order.

TypedDicts are plain dicts at run time, so nothing else checks that a record and its type
agree; API answers are built from these records.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import sqlalchemy as sa

from predictor.policy import decision_changes
from store import Alert, Decision, Failure, GpuDetail, GpuItem, Node, ProbeResult, ScorePoint, Store
from store.schema import T_ALERTS, T_FAILURES, T_PROBES
from tests.store.conftest import T0, frame
from tests.store.test_scores import score


def keys(typed: Any) -> list[str]:
    """A TypedDict's keys, in declaration order (a subclass's after its base's)."""
    return list(typed.__annotations__)


def test_row_records_have_their_tables_columns() -> None:
    """Failures, alerts and probe results are handed over as read: their type must be the table's row."""
    tables: list[tuple[Any, sa.Table]] = [(Failure, T_FAILURES), (Alert, T_ALERTS), (ProbeResult, T_PROBES)]
    for typed, table in tables:
        assert keys(typed) == [c.name for c in table.columns], typed.__name__


def test_returned_records_match_their_types(store: Store) -> None:
    store.samples.ingest(frame([{"timestamp": T0, "gpu_uuid": "GPU-a", "gpu_temp_c": 40.0}]))
    (opened,) = store.decisions.write_scores([score("GPU-a", "watch", 0.4)], T0, rule=decision_changes)
    store.labels.add_failure(gpu_uuid="GPU-a", failed_at=T0, mode="ecc")
    store.labels.add_alertmanager({"alerts": [{"status": "firing", "labels": {"UUID": "GPU-a"}, "startsAt": T0}]}, T0)
    store.probes.add([{"gpu_uuid": "GPU-a", "ran_at": T0, "test": "gemm", "status": "pass"}])

    assert list(store.gpus.find()[0][0]) == keys(GpuItem)
    assert list(store.gpus.get("GPU-a")) == keys(GpuDetail) == [*keys(GpuItem), "latest_sample"]
    assert list(store.gpus.node("node-a")) == keys(Node)
    assert list(opened) == keys(Decision)
    assert list(store.decisions.find()[0][0]) == keys(Decision)
    assert list(store.decisions.ack(opened["id"], "ops", T0 + timedelta(minutes=1))) == keys(Decision)
    assert list(store.decisions.risk_history("GPU-a")[0]) == keys(ScorePoint)
    assert list(store.labels.failures()[0]) == keys(Failure)
    assert list(store.labels.alerts()[0][0]) == keys(Alert)
    assert list(store.probes.of("GPU-a")[0]) == keys(ProbeResult)
    assert list(store.probes.recent(T0)[0]) == keys(ProbeResult)
