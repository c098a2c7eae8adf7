"""get_gpu, the API's hottest read: one statement, float32 gauges, SQLite's per-thread read connections."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import numpy as np
import pytest

from predictor.policy import decision_changes
from store import Store, StoreError
from store.gpus import float32_values
from store.schema import METRIC_COLUMNS
from tests.store.conftest import T0, frame
from tests.store.test_scores import score


def test_get_gpu_is_its_list_item_plus_the_newest_sample(store: Store) -> None:
    store.samples.ingest(frame([
        {"timestamp": T0 + timedelta(minutes=m), "gpu_uuid": u, "gpu_temp_c": 40.0 + m, "ecc_sbe_aggregate": float(m)}
        for m in (0, 20, 10) for u in ("GPU-a", "GPU-b")
    ]))  # fmt: skip
    store.decisions.write_scores([score("GPU-a", "watch", 0.5), score("GPU-b", "ok")], T0, rule=decision_changes)
    (watch,) = store.decisions.write_scores(
        [score("GPU-a", "demote", 0.7)], T0 + timedelta(minutes=5), rule=decision_changes
    )  # closes the watch
    items = {g["uuid"]: g for g in store.gpus.find()[0]}
    for uuid in ("GPU-a", "GPU-b"):
        g = store.gpus.get(uuid)
        latest = g.pop("latest_sample")
        assert g == items[uuid]
        assert (latest["timestamp"], latest["gpu_temp_c"], latest["ecc_sbe_aggregate"]) == (
            T0 + timedelta(minutes=20), 60.0, 20.0)  # fmt: skip
        assert list(latest) == ["timestamp", *METRIC_COLUMNS]  # catalogue order
    a = store.gpus.get("GPU-a")
    assert (a["decision"], a["decision_id"], a["risk"]) == ("demote", watch["id"], 0.7)


def test_the_active_decision_condition_is_written_into_the_sql(store: Store) -> None:
    # The active-decision index is partial on `state != 'closed'`. Bound as a parameter, the value
    # makes SQLite re-prepare the statement on every run (45 µs instead of 8 for a lookup).
    sql = store.gpus.get_compiled.sql
    assert "state != 'closed'" in sql
    assert sql.count("?") + sql.count("%(") == 1  # the UUID is the only parameter


def test_float32_values_are_the_shortest_decimals() -> None:
    rng = np.random.default_rng(0)
    x = (rng.uniform(-1, 1, 20_000) * 10.0 ** rng.integers(-30, 30, 20_000)).astype(np.float32)
    widened = [float(v) for v in x]  # as SQLite hands them back
    assert float32_values(widened) == [float(str(v)) for v in x]
    assert float32_values([0.10000000149011612, None, float("nan"), float("inf"), 3.0]) == [0.1, None, None, None, 3.0]


@pytest.fixture
def sqlite_store(tmp_path: Path) -> Iterator[Store]:
    s = Store.open(f"sqlite:///{tmp_path / 'g.db'}")
    try:
        yield s
    finally:
        s.close()  # again, where the test closed it already: harmless


def test_sqlite_reads_see_new_writes_and_hold_no_snapshot(sqlite_store: Store, tmp_path: Path) -> None:
    s = sqlite_store
    s.samples.ingest(frame([{"timestamp": T0, "gpu_uuid": "GPU-a", "gpu_temp_c": 40.0}]))
    assert s.gpus.get("GPU-a")["latest_sample"]["gpu_temp_c"] == 40.0
    s.samples.ingest(frame([{"timestamp": T0 + timedelta(minutes=1), "gpu_uuid": "GPU-a", "gpu_temp_c": 41.0}]))
    assert s.gpus.get("GPU-a")["latest_sample"]["gpu_temp_c"] == 41.0  # the held connection is not stale
    # Between reads the connection holds no read transaction, so a checkpoint can empty the WAL.
    other = sqlite3.connect(tmp_path / "g.db")
    try:
        busy, log_frames, done = other.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
    finally:
        other.close()
    assert (busy, log_frames, done) == (0, 0, 0)
    s.close()


def test_sqlite_read_connections_are_per_thread_closed_with_the_store(sqlite_store: Store) -> None:
    s = sqlite_store
    s.samples.ingest(frame([{"timestamp": T0, "gpu_uuid": "GPU-a"}]))
    errors: list[BaseException] = []

    def read() -> None:
        try:
            for _ in range(20):
                assert s.gpus.get("GPU-a")["uuid"] == "GPU-a"
        except BaseException as err:  # reported below
            errors.append(err)

    threads = [threading.Thread(target=read) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    readers = list(s._db.readers)
    assert len(readers) == 3
    assert s._engine.pool.checkedout() == 0  # type: ignore[attr-defined]  # outside the pool
    s.close()
    for raw in readers:
        with pytest.raises(sqlite3.ProgrammingError):
            raw.execute("SELECT 1")


def test_a_broken_sqlite_read_connection_is_replaced(sqlite_store: Store) -> None:
    s = sqlite_store
    s.samples.ingest(frame([{"timestamp": T0, "gpu_uuid": "GPU-a"}]))
    s.gpus.get("GPU-a")
    (raw,) = s._db.readers
    raw.close()  # e.g. closed behind our back
    with pytest.raises(StoreError):
        s.gpus.get("GPU-a")
    assert s.gpus.get("GPU-a")["uuid"] == "GPU-a"
    assert len(s._db.readers) == 1 and s._db.readers[0] is not raw
    s.close()
