"""Retention: raw samples older than the retention become hourly roll-ups."""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import pandas as pd
import pytest

from store import Store, StoreError
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


def test_prune_rolls_up_hours_and_is_idempotent(store: Store) -> None:
    h0 = pd.Timestamp(T0)
    store.ingest(_hour(h0, "GPU-a", [40, 50, 60, np.nan], [1, 2, 3, np.nan], [0, 79, 0, 0]))
    store.ingest(_hour(h0 + pd.Timedelta(hours=1), "GPU-a", [70, 80], [5, 6], [0, 0]))
    recent = h0 + pd.Timedelta(days=2)
    store.ingest(_hour(recent, "GPU-a", [30], [9], [0]))

    now = (recent + pd.Timedelta(days=1)).to_pydatetime()  # cutoff = `recent`: the two old hours go
    assert store.prune(now, RETENTION) == (2, 6)
    assert store.prune(now, RETENTION) == (0, 0)
    assert store.counts()["samples"] == 1
    assert store.counts()["samples_hourly"] == 2

    raw = store.history()
    assert raw["timestamp"].tolist() == [recent]
    h = store.history(include_hourly=True)
    assert h["timestamp"].tolist() == [h0, h0 + pd.Timedelta(hours=1), recent]
    assert h["gpu_temp_c"].tolist() == [50.0, 75.0, 30.0]  # gauges: mean of the non-null values
    assert h["ecc_sbe_aggregate"].tolist() == [3.0, 6.0, 9.0]  # counters: the last value in the hour
    assert h["xid"].tolist() == [79.0, 0.0, 0.0]  # xid: the largest code
    assert h["gpu_index"].tolist() == [0, 0, 0] and h["hostname"].astype(str).unique().tolist() == ["node-a"]
    # the newest raw sample is still the latest sample
    assert store.latest_samples()["GPU-a"]["timestamp"] == recent.to_pydatetime()


def test_late_samples_merge_into_their_hour(store: Store) -> None:
    h0 = pd.Timestamp(T0)
    store.ingest(_hour(h0, "GPU-a", [40, 50], [1, 2], [0, 0]))  # :00 and :10
    now = (h0 + pd.Timedelta(days=2)).to_pydatetime()
    assert store.prune(now, RETENTION) == (1, 2)
    late = _hour(h0 + pd.Timedelta(minutes=20), "GPU-a", [70, np.nan], [4, 5], [13, 0])  # :20 and :30 arrive late
    store.ingest(late)
    assert store.prune(now, RETENTION) == (1, 2)
    h = store.history(include_hourly=True)
    assert len(h) == 1
    assert h["gpu_temp_c"].iloc[0] == pytest.approx((40 + 50 + 70) / 3, rel=1e-6)
    assert h["ecc_sbe_aggregate"].iloc[0] == 5.0
    assert h["xid"].iloc[0] == 13.0

    # a sample earlier in the hour than the rolled-up ones must not replace the counter's last value
    store.ingest(_hour(h0 + pd.Timedelta(minutes=5), "GPU-a", [np.nan], [3], [0]))
    store.prune(now, RETENTION)
    assert store.history(include_hourly=True)["ecc_sbe_aggregate"].iloc[0] == 5.0


def test_prune_refuses_bad_retention(store: Store) -> None:
    with pytest.raises(StoreError, match="retention must be a positive timedelta"):
        store.prune(T0, timedelta(0))
