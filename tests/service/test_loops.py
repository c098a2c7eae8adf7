"""The ingest buffer and the scoring loop against a real SQLite store that can be made to fail."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pandas as pd
import pytest

from service.ingest import IngestBuffer
from service.scorer import decision_counts
from store import Store, StoreUnavailable

T0 = datetime(2026, 3, 1, tzinfo=UTC)


class FlakyStore:
    """A real store whose database can be 'down' (every call raises StoreUnavailable, as the store does)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.down = False
        # The parts the ingest buffer writes to, each through this store's (patchable) methods.
        self.samples = SimpleNamespace(ingest=lambda frame, not_after=None: self.ingest(frame, not_after=not_after))
        self.gpus = SimpleNamespace(upsert=lambda gpus: self.upsert_gpus(gpus))
        self.probes = SimpleNamespace(add=lambda results: self.add_probe_results(results))

    def _check(self) -> None:
        if self.down:
            raise StoreUnavailable("cannot reach the database: connection refused")

    def ingest(self, frame: pd.DataFrame, not_after: datetime | None = None) -> int:
        self._check()
        return self.store.samples.ingest(frame, not_after=not_after)

    def upsert_gpus(self, gpus: Any) -> None:
        self._check()
        self.store.gpus.upsert(gpus)

    def add_probe_results(self, results: Any) -> int:
        self._check()
        return self.store.probes.add(results)


def rows(n: int, start: int = 0, uuid: str = "GPU-a") -> list[dict[str, Any]]:
    return [
        {"timestamp": T0 + timedelta(seconds=10 * i), "hostname": "n1", "gpu_uuid": uuid, "gpu_index": 0,
         "model_name": "NVIDIA H100 80GB HBM3", "gpu_temp_c": 40.0 + i % 7}
        for i in range(start, start + n)
    ]  # fmt: skip


@pytest.fixture
def flaky(tmp_path: Path) -> FlakyStore:
    return FlakyStore(Store.open(f"sqlite:///{tmp_path / 's.db'}"))


def stored(f: FlakyStore) -> int:
    return len(f.store.samples.history())


def test_samples_wait_in_memory_while_the_database_is_down(flaky: FlakyStore) -> None:
    buf = IngestBuffer(flaky, capacity=1000)  # type: ignore[arg-type]
    buf.add(rows(10))
    assert buf.flush() == 10
    flaky.down = True
    buf.add(rows(25, start=10))
    assert buf.flush() == 0
    assert not buf.store_up and len(buf) == 25 and buf.stats.failed_flushes == 1
    flaky.down = False
    assert buf.flush() == 25
    assert buf.store_up and len(buf) == 0
    assert stored(flaky) == 35 and buf.stats.dropped == 0


def test_the_bound_drops_the_oldest_and_counts_them(flaky: FlakyStore) -> None:
    buf = IngestBuffer(flaky, capacity=20)  # type: ignore[arg-type]
    flaky.down = True
    buf.add(rows(50))
    buf.flush()
    assert len(buf) == 20 and buf.stats.dropped == 30
    flaky.down = False
    buf.flush()
    h = flaky.store.samples.history()
    assert len(h) == 20
    assert h["timestamp"].min() == pd.Timestamp(T0 + timedelta(seconds=300))  # the newest 20 were kept


def test_duplicates_are_counted_not_stored_twice(flaky: FlakyStore) -> None:
    buf = IngestBuffer(flaky, capacity=100, batch=7)  # type: ignore[arg-type]
    buf.add(rows(10))
    buf.add(rows(10))
    buf.flush()
    assert stored(flaky) == 10 and buf.stats.duplicates == 10 and buf.stats.written == 10


def test_rows_the_store_rejects_are_dropped_loudly_not_retried_forever(flaky: FlakyStore) -> None:
    buf = IngestBuffer(flaky, capacity=100)  # type: ignore[arg-type]
    bad = rows(3)
    for r in bad:
        r["gpu_temp_c"] = "hot"
    buf.add(bad)
    buf.flush()
    assert len(buf) == 0 and buf.stats.dropped == 3 and "gpu_temp_c" in (buf.stats.last_error or "")
    buf.add(rows(4, start=100))
    assert buf.flush() == 4


def test_gpu_states_survive_an_outage(flaky: FlakyStore) -> None:
    buf = IngestBuffer(flaky, capacity=100)  # type: ignore[arg-type]
    buf.add(rows(2))
    buf.flush()
    flaky.down = True
    gpu = {"uuid": "GPU-a", "hostname": "n1", "gpu_index": 0, "model_name": "NVIDIA H100 80GB HBM3",
           "state": "lost", "seen_at": T0 + timedelta(hours=1)}  # fmt: skip
    buf.add([], [gpu])
    buf.flush()
    flaky.down = False
    buf.flush()
    assert flaky.store.gpus.get("GPU-a")["state"] == "lost"


def probe(i: int, status: str = "pass", uuid: str = "GPU-a") -> dict[str, Any]:
    return {"gpu_uuid": uuid, "ran_at": T0 + timedelta(minutes=i), "test": "gemm", "status": status,
            "value": 300.0 + i, "unit": "TFLOP/s", "duration_s": 2.0}  # fmt: skip


def test_probe_results_wait_in_memory_while_the_database_is_down(flaky: FlakyStore) -> None:
    buf = IngestBuffer(flaky, capacity=100)  # type: ignore[arg-type]
    buf.add(rows(2))
    buf.flush()
    flaky.down = True
    buf.add_probes([probe(1), probe(2)])
    buf.add(rows(2, start=2))
    buf.flush()
    buf.add_probes([probe(3)])
    buf.flush()
    assert buf.probes_held() == 3 and len(buf) == 2 and not buf.store_up
    flaky.down = False
    buf.flush()
    got = flaky.store.probes.of("GPU-a")
    assert [r["value"] for r in got] == [303.0, 302.0, 301.0]  # all three, newest first
    st = buf.stats
    assert (st.probes_received, st.probes_written, st.probes_dropped, buf.probes_held()) == (3, 3, 0, 0)
    assert stored(flaky) == 4


def test_the_probe_bound_drops_the_oldest_and_counts_them(flaky: FlakyStore) -> None:
    buf = IngestBuffer(flaky, capacity=100, probe_capacity=2)  # type: ignore[arg-type]
    buf.add(rows(1))
    buf.flush()
    flaky.down = True
    buf.add_probes([probe(1), probe(2)])
    buf.flush()  # taken out, refused, put back
    buf.add_probes([probe(3)])
    assert buf.probes_held() == 2 and buf.stats.probes_dropped == 1
    flaky.down = False
    buf.flush()
    assert [r["value"] for r in flaky.store.probes.of("GPU-a")] == [303.0, 302.0]


def test_probe_results_the_store_rejects_are_dropped_without_taking_samples(flaky: FlakyStore) -> None:
    buf = IngestBuffer(flaky, capacity=100)  # type: ignore[arg-type]
    buf.add(rows(3))
    buf.add_probes([probe(1, status="melted")])
    assert buf.flush() == 3
    assert stored(flaky) == 3 and buf.stats.dropped == 0
    assert buf.stats.probes_dropped == 1 and "status" in (buf.stats.last_error or "")
    buf.add_probes([probe(2)])
    buf.flush()
    assert [r["value"] for r in flaky.store.probes.of("GPU-a")] == [302.0]


def test_an_unexpected_error_does_not_end_the_writer(flaky: FlakyStore, monkeypatch: pytest.MonkeyPatch) -> None:
    buf = IngestBuffer(flaky, capacity=100, flush_s=0.01)  # type: ignore[arg-type]
    real = flaky.ingest
    calls: list[int] = []

    def once_broken(frame: pd.DataFrame, not_after: datetime | None = None) -> int:
        calls.append(1)
        if len(calls) == 1:
            raise KeyError("a bug, not a database error")
        return real(frame)

    monkeypatch.setattr(flaky, "ingest", once_broken)
    buf.add(rows(5))
    buf.start()
    try:
        deadline = time.monotonic() + 10
        while stored(flaky) < 5 and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        buf.stop()
    assert stored(flaky) == 5 and buf.stats.failed_flushes == 1 and buf.stats.dropped == 0


def test_capacity_must_be_positive(flaky: FlakyStore) -> None:
    with pytest.raises(ValueError, match="at least 1"):
        IngestBuffer(flaky, capacity=0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="at least 1"):
        IngestBuffer(flaky, probe_capacity=0)  # type: ignore[arg-type]


def test_decision_counts_has_every_decision() -> None:
    assert decision_counts([{"decision": "rma"}, {"decision": "ok"}, {"decision": "ok"}]) == {
        "ok": 2, "watch": 0, "demote": 0, "drain": 0, "rma": 1,
    }  # fmt: skip


def test_the_scoring_loop_applies_the_retention(tmp_path: Path) -> None:
    from predictor.score import load_model
    from predictor.thresholds import Thresholds
    from service.scorer import Scorer
    from store import Retention

    store = Store.open(f"sqlite:///{tmp_path / 'r.db'}")
    frame = pd.DataFrame(rows(6 * 360 * 18))  # 18 h at 10 s
    store.samples.ingest(frame)
    scorer = Scorer(store, load_model(), Thresholds(), 300, retention=Retention(samples=timedelta(hours=6)))
    end = T0 + timedelta(hours=18)
    scorer.run_once(at=end)
    kept = store.samples.history()
    assert kept["timestamp"].min() >= pd.Timestamp(end - timedelta(hours=7))
    with_hourly = store.samples.scoring_history(since=None, until=end)
    assert with_hourly["timestamp"].min() == pd.Timestamp(T0)  # older data lives on as hourly rows
    assert len(with_hourly) < len(frame)


def test_a_rejected_chunk_takes_no_good_rows_queued_after_it(flaky: FlakyStore) -> None:
    buf = IngestBuffer(flaky, capacity=100)  # type: ignore[arg-type]
    bad = rows(3)
    for r in bad:
        r["gpu_temp_c"] = "hot"
    buf.add(bad)
    original = flaky.ingest

    def ingest_then_more_arrive(frame: pd.DataFrame, not_after: datetime | None = None) -> int:
        buf.add(rows(5, start=200))  # the sampler goes on while the store works
        flaky.ingest = original  # type: ignore[method-assign]
        return original(frame)

    flaky.ingest = ingest_then_more_arrive  # type: ignore[method-assign]
    buf.flush()
    assert buf.stats.dropped == 3
    assert len(buf) == 5 and buf.flush() == 5


def test_samples_arriving_during_a_write_are_not_counted_as_dropped(flaky: FlakyStore) -> None:
    """The chunk being written no longer counts against the bound (issue 12: 15 in, 15 written, 5 'dropped')."""
    buf = IngestBuffer(flaky, capacity=10)  # type: ignore[arg-type]
    buf.add(rows(10))
    original = flaky.ingest

    def ingest_while_more_arrive(frame: pd.DataFrame, not_after: datetime | None = None) -> int:
        flaky.ingest = original  # type: ignore[method-assign]
        buf.add(rows(5, start=100))  # the sampler goes on while the store works
        return original(frame)

    flaky.ingest = ingest_while_more_arrive  # type: ignore[method-assign]
    assert buf.flush() == 15
    st = buf.stats
    assert (st.received, st.written, st.dropped) == (15, 15, 0)
    assert stored(flaky) == 15 and len(buf) == 0


def test_a_chunk_that_could_not_be_written_goes_back_in_front_within_the_bound(flaky: FlakyStore) -> None:
    buf = IngestBuffer(flaky, capacity=10, batch=8)  # type: ignore[arg-type]
    buf.add(rows(8))
    original = flaky.ingest

    def down_while_more_arrive(frame: pd.DataFrame, not_after: datetime | None = None) -> int:
        buf.add(rows(6, start=100))
        flaky.ingest = original  # type: ignore[method-assign]
        raise StoreUnavailable("cannot reach the database: connection refused")

    flaky.ingest = down_while_more_arrive  # type: ignore[method-assign]
    assert buf.flush() == 0
    # 8 in flight went back in front of the 6 that came meanwhile: 14 > 10, the 4 oldest really go
    assert len(buf) == 10 and buf.stats.dropped == 4
    assert buf.flush() == 10
    kept = flaky.store.samples.history()["timestamp"]
    assert kept.min() == pd.Timestamp(T0 + timedelta(seconds=40)) and stored(flaky) == 10


def test_with_a_wall_clock_samples_from_the_future_are_refused(flaky: FlakyStore) -> None:
    buf = IngestBuffer(flaky, clock=lambda: T0 + timedelta(seconds=50))  # type: ignore[arg-type]
    buf.add(rows(5) + rows(3, start=60))  # 0..40 s, then 600..620 s: past the clock and its 5 min skew
    assert buf.flush() == 5
    assert flaky.store.samples.newest_time() == T0 + timedelta(seconds=40)
