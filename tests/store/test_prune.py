"""Retention: raw samples older than the retention are removed, old scores become hourly roll-ups, the rest goes."""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import pandas as pd
import pytest

from predictor.policy import decision_changes
from store import Retention, Store, StoreError
from tests.store.conftest import T0, frame

RETENTION = timedelta(days=1)


def _hour(start: pd.Timestamp, uuid: str, temps: list[float], sbe: list[float], xid: list[float]) -> pd.DataFrame:
    """Samples every 10 minutes from `start`: a gauge, a counter, and xid."""
    rows = [
        {"timestamp": start + pd.Timedelta(minutes=10 * i), "gpu_uuid": uuid, "gpu_temp_c": t,
         "ecc_sbe_aggregate": s, "xid": x}
        for i, (t, s, x) in enumerate(zip(temps, sbe, xid, strict=True))
    ]  # fmt: skip
    return frame(rows)


def test_prune_removes_old_raw_samples_only_and_is_idempotent(store: Store) -> None:
    h0 = pd.Timestamp(T0)
    store.samples.ingest(_hour(h0, "GPU-a", [40, 50, 60, np.nan], [1, 2, 3, np.nan], [0, 79, 0, 0]))
    store.samples.ingest(_hour(h0 + pd.Timedelta(hours=1), "GPU-a", [70, 80], [5, 6], [0, 0]))
    recent = h0 + pd.Timedelta(days=2)
    store.samples.ingest(_hour(recent, "GPU-a", [30], [9], [0]))
    hours = store.counts()["samples_hourly"]

    now = (recent + pd.Timedelta(days=1)).to_pydatetime()  # cutoff = `recent`: the two old hours go
    assert store.pruner.prune_samples(now, RETENTION) == 6
    assert store.pruner.prune_samples(now, RETENTION) == 0
    assert store.counts()["samples"] == 1
    assert store.counts()["samples_hourly"] == hours  # hours are written at ingest; prune leaves them
    assert store.samples.history()["timestamp"].tolist() == [recent]
    # the newest raw sample is still the latest sample
    assert store.gpus.latest_samples()["GPU-a"]["timestamp"] == recent.to_pydatetime()


def test_prune_keeps_the_cutoffs_day_on_postgresql_and_its_whole_hours_on_sqlite(store: Store, backend: str) -> None:
    h0 = pd.Timestamp(T0)  # midnight
    store.samples.ingest(_hour(h0 + pd.Timedelta(minutes=10), "GPU-a", [40], [1], [0]))
    store.samples.ingest(_hour(h0 + pd.Timedelta(hours=12, minutes=10), "GPU-a", [50], [2], [0]))
    store.samples.ingest(_hour(h0 + pd.Timedelta(hours=13), "GPU-a", [60], [3], [0]))
    now = (h0 + pd.Timedelta(days=1, hours=12, minutes=30)).to_pydatetime()  # cutoff: 12:30 on day one
    # SQLite deletes before 12:00 (whole hours); PostgreSQL drops whole days, and this one has not passed
    assert store.pruner.prune_samples(now, RETENTION) == (1 if backend == "sqlite" else 0)
    later = (h0 + pd.Timedelta(days=2)).to_pydatetime()  # cutoff: the day's end
    assert store.pruner.prune_samples(later, RETENTION) == (2 if backend == "sqlite" else 3)
    assert store.counts()["samples"] == 0


def test_prune_refuses_bad_retention(store: Store) -> None:
    with pytest.raises(StoreError, match="retention must be a positive timedelta"):
        store.pruner.prune_samples(T0, timedelta(0))


# -- every table has a retention (issue 12.6) ------------------------------------------------------


def _scores_for(store: Store, times_decisions: list[tuple[pd.Timestamp, str, float]]) -> None:
    from tests.store.test_scores import score

    store.samples.ingest(_hour(pd.Timestamp(T0), "GPU-a", [40], [0], [0]))  # the GPU must exist
    for t, decision, risk in times_decisions:
        store.decisions.write_scores(
            [score("GPU-a", decision, risk, reasons=[f"{decision} at {t:%H:%M}"])],
            t.to_pydatetime(),
            rule=decision_changes,
        )


def test_old_scores_roll_up_into_hours_and_the_risk_history_keeps_them(store: Store) -> None:
    h0 = pd.Timestamp(T0)
    m = pd.Timedelta(minutes=1)
    _scores_for(store, [(h0 + 5 * m, "ok", 0.1), (h0 + 20 * m, "demote", 0.8), (h0 + 40 * m, "watch", 0.5),
                        (h0 + 65 * m, "ok", 0.2), (h0 + pd.Timedelta(days=3), "ok", 0.05)])  # fmt: skip
    keep = Retention(samples=timedelta(days=30), scores=timedelta(days=1))
    now = (h0 + pd.Timedelta(days=3, minutes=30)).to_pydatetime()
    done = store.pruner.apply(now, keep)
    assert (done["scores_rolled_up"], done["score_hours_written"]) == (4, 2)
    assert store.counts()["risk_scores"] == 1
    assert store.pruner.apply(now, keep)["scores_rolled_up"] == 0  # idempotent
    points = store.decisions.risk_history("GPU-a")
    assert [p["scored_at"] for p in points] == [h0.to_pydatetime(), (h0 + 60 * m).to_pydatetime(),
                                                (h0 + pd.Timedelta(days=3)).to_pydatetime()]  # fmt: skip
    first = points[0]
    assert first["risk"] == 0.8 and first["decision"] == "demote"  # the hour's highest risk and worst decision
    assert first["reasons"] == ["demote at 00:20"]
    assert points[1]["decision"] == "ok" and points[2]["risk"] == 0.05
    assert [p["scored_at"] for p in store.decisions.risk_history("GPU-a", limit=1)] == [points[-1]["scored_at"]]


def test_a_late_score_merges_into_its_rolled_up_hour(store: Store) -> None:
    h0 = pd.Timestamp(T0)
    _scores_for(store, [(h0 + pd.Timedelta(minutes=10), "watch", 0.4)])
    keep = Retention(scores=timedelta(days=1))
    now = (h0 + pd.Timedelta(days=2)).to_pydatetime()
    store.pruner.apply(now, keep)
    _scores_for(store, [(h0 + pd.Timedelta(minutes=50), "ok", 0.6)])
    store.pruner.apply(now, keep)
    (p,) = store.decisions.risk_history("GPU-a")
    assert (p["risk"], p["decision"]) == (0.6, "watch")


def test_closed_decisions_alerts_probes_actions_and_hourly_rows_go_when_old(store: Store) -> None:
    from tests.store.test_scores import score

    h0 = pd.Timestamp(T0)
    store.samples.ingest(_hour(h0, "GPU-a", [40], [0], [0]))
    store.samples.ingest(_hour(h0, "GPU-b", [40], [0], [0]))
    t0 = h0.to_pydatetime()
    store.decisions.write_scores(
        [score("GPU-a", "watch", 0.4), score("GPU-b", "drain", 0.9)], t0, rule=decision_changes
    )
    store.decisions.write_scores(
        [score("GPU-a", "ok", 0.1), score("GPU-b", "drain", 0.9)], t0 + timedelta(hours=1), rule=decision_changes
    )
    store.labels.add_failure(gpu_uuid="GPU-a", failed_at=t0, mode="ecc")
    store.probes.add([{"gpu_uuid": "GPU-a", "ran_at": t0, "test": "gemm", "status": "pass"}])
    store.labels.add_alertmanager(
        {"version": "4", "status": "firing", "alerts": [
            {"status": "firing", "labels": {"alertname": "X"}, "startsAt": "2026-01-05T00:00:00Z"}]},
        received_at=t0,
    )  # fmt: skip
    drained = {"at": t0, "target": "slurm", "mode": "on", "hostname": "node-a", "action": "drain",
               "from_state": "ok", "to_state": "drain", "why": "GPU 0 drain", "result": "applied"}  # fmt: skip
    store.actuation.record([drained])
    keep = Retention(samples=timedelta(days=1), scores=timedelta(days=1), hourly=timedelta(days=5),
                     decisions=timedelta(days=3), alerts=timedelta(days=3), probes=timedelta(days=3),
                     actions=timedelta(days=3))  # fmt: skip
    early = store.pruner.apply(t0 + timedelta(days=2), keep)
    assert (early["decisions_deleted"], early["alerts_deleted"], early["probes_deleted"]) == (0, 0, 0)
    assert early["actions_deleted"] == 0
    late = store.pruner.apply(t0 + timedelta(days=6), keep)
    assert (late["decisions_deleted"], late["alerts_deleted"], late["probes_deleted"]) == (1, 1, 1)
    assert late["actions_deleted"] == 1 and store.actuation.actions()[1] == 0
    assert late["sample_hours_deleted"] == 2 and late["score_hours_deleted"] == 4  # 2 GPUs x 2 hours
    c = store.counts()
    assert (c["alerts"], c["probe_results"], c["samples_hourly"], c["risk_scores"]) == (0, 0, 0, 0)
    (active,), _ = store.decisions.find(state="active")
    assert active["gpu_uuid"] == "GPU-b" and active["decision"] == "drain"  # open decisions are never deleted
    assert len(store.labels.failures()) == 1  # failures are training labels: kept for good


def test_retention_settings_are_checked() -> None:
    with pytest.raises(StoreError, match="scores retention must be a positive timedelta"):
        Retention(scores=timedelta(0))
    with pytest.raises(StoreError, match=r"hourly retention \(1 day, 0:00:00\) must be at least the sample"):
        Retention(hourly=timedelta(days=1))
