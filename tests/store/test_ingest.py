"""Ingest and read back telemetry: round trips, duplicates, order, NaN, bad input."""

from __future__ import annotations

import logging
from datetime import timedelta

import numpy as np
import pandas as pd
import pytest

from core import history
from store import Store, StoreError
from tests.store.conftest import T0, frame


def _expected(h: pd.DataFrame) -> pd.DataFrame:
    """What history() returns for `h`: sorted by (gpu_uuid, timestamp), all-NaN columns left out."""
    key = h.assign(_u=h["gpu_uuid"].astype(str))  # by UUID text, whatever order the categories have
    out = h.loc[key.sort_values(["_u", "timestamp"], kind="stable").index].reset_index(drop=True)
    empty = [c for c in history.metric_columns(out) if out[c].isna().all()]
    return out.drop(columns=empty)


def _comparable(h: pd.DataFrame) -> pd.DataFrame:
    """Categoricals compared by value (their category sets may differ between the two frames)."""
    out = h.copy()
    for c in ("hostname", "gpu_uuid", "model_name"):
        out[c] = out[c].astype(str)
    return out


def test_ingest_round_trips_through_history(store: Store, sim_history: pd.DataFrame) -> None:
    assert store.samples.ingest(sim_history) == len(sim_history)
    got = store.samples.history()
    expected = _expected(sim_history)
    assert list(got.columns) == list(expected.columns)
    pd.testing.assert_frame_equal(got, expected, check_categorical=False)
    # the dtypes are validate()'s: categorical identity strings, float32 gauges, float64 counters
    assert got.dtypes.equals(history.validate(got).dtypes)
    assert got["power_w"].isna().sum() == sim_history["power_w"].isna().sum() > 0


def test_ingest_skips_repeated_samples_and_accepts_any_order(store: Store, sim_history: pd.DataFrame) -> None:
    first, second = sim_history.iloc[:150], sim_history.iloc[100:]
    assert store.samples.ingest(first) == 150
    shuffled = second.sample(frac=1.0, random_state=1)
    assert store.samples.ingest(shuffled) == len(sim_history) - 150  # 50 rows overlapped
    assert store.samples.ingest(sim_history) == 0
    pd.testing.assert_frame_equal(store.samples.history(), _expected(sim_history), check_categorical=False)


def test_ingest_later_sample_before_earlier(store: Store) -> None:
    late = frame([{"timestamp": T0 + timedelta(minutes=10), "gpu_uuid": "GPU-a", "gpu_temp_c": 50.0}])
    early = frame([{"timestamp": T0, "gpu_uuid": "GPU-a", "gpu_temp_c": 40.0}])
    assert store.samples.ingest(late) == 1
    assert store.samples.ingest(early) == 1
    got = store.samples.history()
    assert got["gpu_temp_c"].tolist() == [40.0, 50.0]
    g = store.gpus.get("GPU-a")
    assert (g["first_seen"], g["last_seen"]) == (T0, T0 + timedelta(minutes=10))
    assert g["latest_sample"]["gpu_temp_c"] == 50.0


def test_nan_is_stored_as_null(store: Store) -> None:
    store.samples.ingest(frame([{"timestamp": T0, "gpu_uuid": "GPU-a", "gpu_temp_c": np.nan, "power_w": 0.1}]))
    latest = store.gpus.latest_samples()["GPU-a"]
    assert latest["gpu_temp_c"] is None
    assert latest["power_w"] == 0.1  # a float32 gauge reads back as the number that was sent
    assert latest["ecc_sbe_aggregate"] is None  # a column the frame did not have
    assert latest["timestamp"] == T0


def test_identity_follows_the_newest_sample(store: Store) -> None:
    store.samples.ingest(frame([{"timestamp": T0, "gpu_uuid": "GPU-a", "hostname": "old-host", "gpu_index": 3}]))
    store.samples.ingest(frame([{"timestamp": T0 + timedelta(hours=1), "gpu_uuid": "GPU-a", "hostname": "new-host"}]))
    store.samples.ingest(frame([{"timestamp": T0 - timedelta(hours=1), "gpu_uuid": "GPU-a", "hostname": "older-host"}]))
    g = store.gpus.get("GPU-a")
    assert (g["hostname"], g["gpu_index"], g["state"]) == ("new-host", 0, "active")
    assert g["first_seen"] == T0 - timedelta(hours=1)
    assert store.gpus.node("old-host")["first_seen"] == T0
    assert store.samples.history()["hostname"].astype(str).unique().tolist() == ["new-host"]


def test_history_filters(store: Store, sim_history: pd.DataFrame) -> None:
    store.samples.ingest(sim_history)
    uuid = str(sim_history["gpu_uuid"].iloc[0])
    t0 = sim_history["timestamp"].min() + pd.Timedelta(hours=2)
    t1 = t0 + pd.Timedelta(hours=1)
    got = store.samples.history(since=t0.to_pydatetime(), until=t1.to_pydatetime(), uuids=[uuid])
    want = sim_history[
        (sim_history["gpu_uuid"] == uuid) & (sim_history["timestamp"] >= t0) & (sim_history["timestamp"] <= t1)
    ]
    assert len(got) == len(want) == 7
    assert got["timestamp"].tolist() == want["timestamp"].tolist()
    assert len(store.samples.history(uuids=[])) == 0
    assert len(store.samples.history(uuids=["GPU-nobody"])) == 0


def test_unknown_columns_are_ignored_with_a_warning(store: Store, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="store.samples"):
        n = store.samples.ingest(frame([{"timestamp": T0, "gpu_uuid": "GPU-a", "gpu_temp_c": 40.0, "my_metric": 1.0}]))
    assert n == 1
    assert "my_metric" in caplog.text
    assert "my_metric" not in store.samples.history().columns


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (frame([{"timestamp": T0, "gpu_temp_c": 1.0}]), "missing identity column(s) gpu_uuid"),
        (frame([{"timestamp": "yesterday", "gpu_uuid": "GPU-a"}]), "unparseable timestamp 'yesterday'"),
        (frame([{"timestamp": T0, "gpu_uuid": "GPU-a", "gpu_temp_c": "hot"}]), "column 'gpu_temp_c' must be numeric"),
        ([{"timestamp": T0}], "ingest needs a history frame (pandas DataFrame), got list"),
    ],
)
def test_bad_frames_are_refused_clearly(store: Store, bad: object, message: str) -> None:
    with pytest.raises(StoreError) as err:
        store.samples.ingest(bad)
    assert message in str(err.value)
    assert "\n" not in str(err.value)
    assert store.counts()["samples"] == 0


def test_empty_frame_ingests_nothing(store: Store) -> None:
    assert store.samples.ingest(history.empty()) == 0
    assert store.counts()["gpus"] == 0


def test_upsert_gpus(store: Store) -> None:
    store.gpus.upsert(
        [
            {
                "uuid": "GPU-a",
                "hostname": "n1",
                "gpu_index": 2,
                "model_name": "H100",
                "serial": "123",
                "pci_bus_id": "00000000:1B:00.0",
                "seen_at": T0,
            }
        ]
    )
    for hours in (1, 2):  # every round that finds it missing says so again
        store.gpus.upsert(
            [{"uuid": "GPU-a", "hostname": "n1", "state": "lost", "seen_at": T0 + timedelta(hours=hours)}]
        )
    g = store.gpus.get("GPU-a")
    assert (g["serial"], g["pci_bus_id"], g["state"], g["gpu_index"]) == ("123", "00000000:1B:00.0", "lost", 2)
    assert g["last_seen"] == T0  # issue 59.5: the last time it was seen, not the last time it was found missing
    assert g["latest_sample"] is None
    # telemetry up to its last sighting (a backfill, a replica re-pulling a window) does not bring it back
    store.samples.ingest(frame([{"timestamp": T0 - timedelta(minutes=30), "gpu_uuid": "GPU-a", "hostname": "n1"}]))
    store.samples.ingest(frame([{"timestamp": T0, "gpu_uuid": "GPU-a", "hostname": "n1"}]))
    assert store.gpus.get("GPU-a")["state"] == "lost"
    assert store.gpus.get("GPU-a")["last_seen"] == T0
    # telemetry from a lost GPU after that brings it back
    store.samples.ingest(
        frame([{"timestamp": T0 + timedelta(hours=2), "gpu_uuid": "GPU-a", "hostname": "n1", "gpu_index": 2}])
    )
    assert store.gpus.get("GPU-a")["state"] == "active"
    with pytest.raises(StoreError, match="unknown GPU 0: state 'gone'"):
        store.gpus.upsert([{"uuid": "GPU-b", "hostname": "n1", "state": "gone", "seen_at": T0}])
    with pytest.raises(StoreError, match="GPU 0: seen_at must be a datetime"):
        store.gpus.upsert([{"uuid": "GPU-b", "hostname": "n1"}])


def test_newest_sample_time(store: Store) -> None:
    assert store.samples.newest_time() is None
    store.samples.ingest(
        frame([{"timestamp": T0 + timedelta(minutes=m), "gpu_uuid": u} for m, u in ((5, "GPU-a"), (9, "GPU-b"))])
    )
    store.samples.ingest(frame([{"timestamp": T0, "gpu_uuid": "GPU-c"}]))  # an older sample arriving later
    assert store.samples.newest_time() == T0 + timedelta(minutes=9)
