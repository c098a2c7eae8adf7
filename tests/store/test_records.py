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
    store.ingest(frame([{"timestamp": T0, "gpu_uuid": "GPU-a", "gpu_temp_c": 40.0}]))
    (opened,) = store.write_scores([score("GPU-a", "watch", 0.4)], T0, rule=decision_changes)
    store.add_failure(gpu_uuid="GPU-a", failed_at=T0, mode="ecc")
    store.add_alertmanager({"alerts": [{"status": "firing", "labels": {"UUID": "GPU-a"}, "startsAt": T0}]}, T0)
    store.add_probe_results([{"gpu_uuid": "GPU-a", "ran_at": T0, "test": "gemm", "status": "pass"}])

    assert list(store.list_gpus()[0][0]) == keys(GpuItem)
    assert list(store.get_gpu("GPU-a")) == keys(GpuDetail) == [*keys(GpuItem), "latest_sample"]
    assert list(store.get_node("node-a")) == keys(Node)
    assert list(opened) == keys(Decision)
    assert list(store.decisions()[0][0]) == keys(Decision)
    assert list(store.ack_decision(opened["id"], "ops", T0 + timedelta(minutes=1))) == keys(Decision)
    assert list(store.risk_history("GPU-a")[0]) == keys(ScorePoint)
    assert list(store.failures()[0]) == keys(Failure)
    assert list(store.alerts()[0][0]) == keys(Alert)
    assert list(store.probe_results("GPU-a")[0]) == keys(ProbeResult)
    assert list(store.recent_probe_results(T0)[0]) == keys(ProbeResult)
