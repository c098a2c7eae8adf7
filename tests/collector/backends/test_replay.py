from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from collector.backends.base import Backend, BackendError, GpuReading
from collector.backends.replay import ReplayBackend
from collector.sampler import Sampler
from core import history
from simulator.fleet import FleetSim
from tests.collector.helpers import FakeClock
from tests.simulator.frames import stepped_history

T0 = pd.Timestamp("2026-01-01T00:00:00Z")
HOUR = 3600.0


def sim_history(nodes: int = 1, gpus: int = 8, steps: int = 48, step_s: float = HOUR) -> pd.DataFrame:
    """A validated history frame from stepping the simulated fleet."""
    return stepped_history(FleetSim(nodes=nodes, gpus_per_node=gpus, seed=3), steps, step_s)


def rows(
    uuid: str, hours: Sequence[float], index: int = 0, host: str = "node-a", **metrics: Sequence[object]
) -> pd.DataFrame:
    """Hand-written rows of one GPU at T0 + hours."""
    return pd.DataFrame(
        {
            "timestamp": [T0 + pd.Timedelta(hours=h) for h in hours],
            "hostname": host,
            "gpu_uuid": uuid,
            "gpu_index": index,
            "model_name": "NVIDIA H100 80GB HBM3",
            **{k: list(v) for k, v in metrics.items()},
        }
    )


def frame_of(*parts: pd.DataFrame) -> pd.DataFrame:
    return history.validate(pd.concat(parts, ignore_index=True))


def by_uuid(readings: list[GpuReading]) -> dict[str, GpuReading]:
    return {r.info.uuid: r for r in readings}


def expected_values(frame: pd.DataFrame, uuid: str, at: pd.Timestamp) -> dict[str, float]:
    """The row of `uuid` latest at or before `at`, as the non-NaN metric values."""
    mine = frame[(frame["gpu_uuid"] == uuid) & (frame["timestamp"] <= at)]
    row = mine.iloc[-1]
    return {c: float(row[c]) for c in history.metric_columns(frame) if not np.isnan(row[c])}


def test_is_a_backend_listing_every_gpu() -> None:
    frame = sim_history(gpus=4, steps=3)
    b = ReplayBackend(frame, clock=FakeClock())
    assert isinstance(b, Backend) and b.name == "replay"
    assert b.data_time() == frame["timestamp"].min().timestamp()  # history time, not the wall clock
    assert b.probe_runner() is None  # recorded GPUs cannot be probed
    infos = b.gpus()
    assert [(i.hostname, i.index) for i in infos] == [("sim-node-00", i) for i in range(4)]
    assert {i.uuid for i in infos} == set(frame["gpu_uuid"])
    assert all(i.model_name == "NVIDIA H100 80GB HBM3" and i.pci_bus_id == "" for i in infos)


@pytest.mark.parametrize("clock_s", [0.0, 0.5, 1.0, 1.999, 10.25, 47.0, 60.0])
def test_values_are_the_latest_rows_at_the_replay_time(clock_s: float) -> None:
    frame = sim_history()
    clock = FakeClock()
    b = ReplayBackend(frame, speed=3600, loop=False, clock=clock)
    clock.t += clock_s
    first = frame["timestamp"].min()
    at = min(first + pd.Timedelta(seconds=clock_s * 3600), frame["timestamp"].max())
    got = by_uuid(b.read())
    assert set(got) == set(frame["gpu_uuid"])
    for uuid, r in got.items():
        assert not r.lost
        assert r.values == expected_values(frame, uuid, at)


def test_speed_scales_history_time() -> None:
    frame = frame_of(rows("GPU-a", [0, 1, 2, 3], gpu_temp_c=[40, 41, 42, 43]))
    clock = FakeClock()
    b = ReplayBackend(frame, speed=60, loop=False, clock=clock)  # a minute of history per second
    assert b.read()[0].values["gpu_temp_c"] == 40.0
    clock.t += 59.0
    assert b.read()[0].values["gpu_temp_c"] == 40.0
    clock.t += 1.0
    assert b.read()[0].values["gpu_temp_c"] == 41.0
    assert b.history_time() == T0 + pd.Timedelta(hours=1)
    clock.t += 120.0
    assert b.read()[0].values["gpu_temp_c"] == 43.0


def test_gpu_is_lost_two_intervals_after_its_rows_end() -> None:
    frame = frame_of(
        rows("GPU-a", range(10), index=0, gpu_temp_c=range(10)),
        rows("GPU-b", range(5), index=1, gpu_temp_c=range(100, 105)),
    )
    clock = FakeClock()
    b = ReplayBackend(frame, speed=HOUR, loop=False, clock=clock)
    clock.t += 5.0  # GPU-b's last row (hour 4) plus one interval: one missed sample
    r = by_uuid(b.read())["GPU-b"]
    assert not r.lost and r.values["gpu_temp_c"] == 104.0
    clock.t += 1.0  # exactly two intervals: not yet
    assert not by_uuid(b.read())["GPU-b"].lost
    clock.t += 0.01
    got = by_uuid(b.read())
    assert got["GPU-b"].lost and got["GPU-b"].values == {}
    assert got["GPU-b"].error is not None and "2026-01-01T04:00:00" in got["GPU-b"].error
    assert not got["GPU-a"].lost and got["GPU-a"].values["gpu_temp_c"] == 6.0
    clock.t += 100.0  # held at the end: still lost
    assert by_uuid(b.read())["GPU-b"].lost


def test_gpus_whose_rows_reach_the_end_are_never_lost() -> None:
    frame = frame_of(rows("GPU-a", range(4), gpu_temp_c=range(4)))
    clock = FakeClock()
    b = ReplayBackend(frame, speed=HOUR, loop=False, clock=clock)
    clock.t += 1000.0
    (r,) = b.read()
    assert not r.lost and r.values["gpu_temp_c"] == 3.0


def test_each_nonzero_xid_row_crossed_is_one_event() -> None:
    frame = frame_of(
        rows("GPU-a", range(6), index=0, xid=[0, 48, 48, 0, 79, 0]),
        rows("GPU-b", range(6), index=1, xid=[0, 0, 13, 0, 0, 0]),
    )
    clock = FakeClock()
    b = ReplayBackend(frame, speed=HOUR, loop=False, clock=clock)
    b.read()
    assert b.drain_xid_events() == []
    clock.t += 2.5
    got = by_uuid(b.read())
    events = b.drain_xid_events()
    assert [(e.gpu_uuid, e.xid, e.timestamp) for e in events] == [
        ("GPU-a", 48, (T0 + pd.Timedelta(hours=1)).timestamp()),
        ("GPU-a", 48, (T0 + pd.Timedelta(hours=2)).timestamp()),
        ("GPU-b", 13, (T0 + pd.Timedelta(hours=2)).timestamp()),
    ]
    assert got["GPU-a"].values["xid"] == 48.0 and got["GPU-b"].values["xid"] == 13.0
    b.read()
    assert b.drain_xid_events() == [], "a row is counted once"
    clock.t += 0.2
    b.read()
    assert b.drain_xid_events() == []
    clock.t += 10.0
    b.read()
    assert [(e.gpu_uuid, e.xid) for e in b.drain_xid_events()] == [("GPU-a", 79)]
    clock.t += 10.0
    b.read()
    assert b.drain_xid_events() == [], "held at the end, nothing new"


def test_sampler_counts_replayed_xids() -> None:
    frame = frame_of(rows("GPU-a", range(4), xid=[0, 48, 48, 79]))
    clock = FakeClock()
    s = Sampler(ReplayBackend(frame, speed=HOUR, loop=False, clock=clock), 1.0, clock=clock)
    s.sample_once()
    clock.t += 5.0
    snap = s.sample_once()
    assert snap.xid_counts["GPU-a"] == {48: 2, 79: 1}
    assert snap.readings[0].values["xid"] == 79.0


def test_loop_starts_again_and_keeps_counting_xids() -> None:
    frame = frame_of(rows("GPU-a", range(10), gpu_temp_c=range(10), xid=[0, 0, 48] + [0] * 7))
    clock = FakeClock()
    b = ReplayBackend(frame, speed=HOUR, loop=True, clock=clock)
    clock.t += 9.5  # a lap is the 9 h span plus one interval, so the last row holds for 1 h
    assert b.read()[0].values["gpu_temp_c"] == 9.0
    assert len(b.drain_xid_events()) == 1
    clock.t += 0.5
    assert b.read()[0].values["gpu_temp_c"] == 0.0
    assert b.history_time() == T0
    assert b.drain_xid_events() == []
    clock.t += 2.0
    assert b.read()[0].values["gpu_temp_c"] == 2.0
    assert [e.xid for e in b.drain_xid_events()] == [48], "the second lap counts again"
    clock.t += 30.0 + 0.5  # three more laps in one go: each lap's event once
    assert b.read()[0].values["gpu_temp_c"] == 2.0
    assert [e.xid for e in b.drain_xid_events()] == [48, 48, 48]


def test_without_loop_the_last_rows_are_held() -> None:
    frame = frame_of(rows("GPU-a", range(3), gpu_temp_c=[1, 2, 3]))
    clock = FakeClock()
    b = ReplayBackend(frame, speed=HOUR, loop=False, clock=clock)
    clock.t += 1e6
    assert b.read()[0].values["gpu_temp_c"] == 3.0
    assert b.history_time() == T0 + pd.Timedelta(hours=2)


def test_nan_and_unknown_columns_are_absent() -> None:
    frame = frame_of(rows("GPU-a", [0, 1], gpu_temp_c=[40, 41], memory_temp_c=[50, np.nan], not_a_field=[1, 2]))
    clock = FakeClock()
    b = ReplayBackend(frame, speed=HOUR, clock=clock)
    assert b.read()[0].values == {"gpu_temp_c": 40.0, "memory_temp_c": 50.0}
    clock.t += 1.0
    assert b.read()[0].values == {"gpu_temp_c": 41.0}


def test_replacement_gpu_shows_up_only_after_its_first_row() -> None:
    frame = frame_of(
        rows("GPU-keep", range(10), index=0, gpu_temp_c=range(10)),
        rows("GPU-old", range(4), index=1, gpu_temp_c=[50] * 4),
        rows("GPU-new", range(6, 10), index=1, gpu_temp_c=[30] * 4),
    )
    clock = FakeClock()
    b = ReplayBackend(frame, speed=HOUR, loop=False, clock=clock)
    assert [i.uuid for i in b.gpus()] == ["GPU-keep", "GPU-old", "GPU-new"]
    assert set(by_uuid(b.read())) == {"GPU-keep", "GPU-old"}
    clock.t += 5.999
    assert set(by_uuid(b.read())) == {"GPU-keep", "GPU-old"}
    clock.t += 0.001
    got = by_uuid(b.read())
    assert got["GPU-new"].values == {"gpu_temp_c": 30.0} and got["GPU-old"].lost


def test_unsorted_frame_is_replayed_in_time_order() -> None:
    frame = rows("GPU-a", [2, 0, 1], gpu_temp_c=[42, 40, 41])
    clock = FakeClock()
    b = ReplayBackend(frame, speed=HOUR, loop=False, clock=clock)
    assert b.read()[0].values["gpu_temp_c"] == 40.0
    clock.t += 1.0
    assert b.read()[0].values["gpu_temp_c"] == 41.0


@pytest.mark.parametrize(
    ("make", "kw", "message"),
    [
        (lambda: history.empty(), {}, "history has no rows"),
        (lambda: rows("GPU-a", [0], gpu_temp_c=[1]), {"speed": 0}, "replay speed must be a positive"),
        (lambda: rows("GPU-a", [0], gpu_temp_c=[1]), {"speed": float("nan")}, "replay speed must be"),
        (lambda: rows("GPU-a", [0]).drop(columns="hostname"), {}, "missing identity column(s) hostname"),
        (lambda: rows("GPU-a", [0], gpu_temp_c=["hot"]), {}, "column 'gpu_temp_c' must be numeric"),
    ],
)
def test_constructor_errors_are_one_line(make: Callable[[], pd.DataFrame], kw: dict[str, Any], message: str) -> None:
    with pytest.raises(BackendError) as info:
        ReplayBackend(make(), **kw)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_from_file(tmp_path: Path) -> None:
    frame = frame_of(rows("GPU-a", [0, 1], gpu_temp_c=[40, 41]))
    path = history.write(frame, tmp_path / "h.parquet")
    clock = FakeClock()
    b = ReplayBackend.from_file(path, speed=HOUR, clock=clock)
    clock.t += 1.0
    assert b.read()[0].values == {"gpu_temp_c": 41.0}
    with pytest.raises(BackendError, match="no such file"):
        ReplayBackend.from_file(tmp_path / "missing.parquet")


def test_a_large_fleet_reads_fast() -> None:
    gpus, steps = 512, 2880
    n = gpus * steps
    rng = np.random.default_rng(0)
    g = np.tile(np.arange(gpus), steps)
    frame = pd.DataFrame(
        {
            "timestamp": T0 + pd.to_timedelta(np.repeat(np.arange(steps), gpus), unit="h"),
            "hostname": np.array([f"node-{i // 8:03d}" for i in range(gpus)])[g],
            "gpu_uuid": np.array([f"GPU-{i:05d}" for i in range(gpus)])[g],
            "gpu_index": g % 8,
            "model_name": "NVIDIA H100 80GB HBM3",
            **{c: rng.normal(50, 5, n) for c in ("gpu_temp_c", "memory_temp_c", "power_w", "gpu_util_pct")},
            "ecc_sbe_volatile": np.floor(rng.exponential(1, n)),
            "xid": np.where(rng.random(n) < 1e-4, 48.0, 0.0),
        }
    )
    clock = FakeClock()
    b = ReplayBackend(frame, speed=HOUR, clock=clock)
    clock.t += 1234.5
    t = time.perf_counter()
    readings = b.read()
    took = time.perf_counter() - t
    assert len(readings) == gpus and len(readings[0].values) == 6
    assert 0 < len(b.drain_xid_events()) < 1000
    # ~3 ms here; a budget well under the usual 1-10 s sampling interval.
    assert took < 0.5, f"read() took {took:.3f}s"
    want = frame[(frame["gpu_uuid"] == "GPU-00007") & (frame["timestamp"] == T0 + pd.Timedelta(hours=1234))]
    assert by_uuid(readings)["GPU-00007"].values["ecc_sbe_volatile"] == float(want["ecc_sbe_volatile"].iloc[0])
