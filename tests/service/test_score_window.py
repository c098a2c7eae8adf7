"""The scorer's window kept between rounds gives every round exactly what a full re-read gives.

A day of rounds every 30 minutes, at :07 and :37 (an hour closes every other round), over a
window of two days that slides past the oldest hours, on SQLite and on PostgreSQL. Between
rounds the fleet's samples arrive as they are taken, and: samples of a past hour arrive late
(round 8), a GPU is replaced by a new one on the same host (round 20), `db import` brings past
hours of a GPU that had a gap and of a GPU never seen before (round 30), and a host moves from
one replica's share to the other's (round 36). Each round's frame is compared with
`Samples.scoring_history`'s of the columns a round reads (`ROUND_COLUMNS`, all the window holds),
and the records a scorer stores with those of a scorer that reads the whole window with every
column (a second store with the same events); a window capped below the fleet's size (the rest
read per round) is compared too, and windows read a few GPUs at a time. Without the change log
the comparison fails.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from itertools import count
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from prometheus_client import CollectorRegistry

from core import history
from predictor.thresholds import Thresholds
from service.scorer import ROUND_COLUMNS, ModelMetrics, Scorer
from simulator.fleet import SimConfig
from simulator.run import simulate
from store import Retention, Store, StoreUnavailable
from store.hourrows import Rows, row_bytes, values_of
from store.window import HourWindow
from tests.postgres import postgres_server  # noqa: F401  (session fixture)
from tests.service.tiny_model import tiny_model
from tests.store.conftest import TEMPLATE, backend, pg_template  # noqa: F401  (fixtures)

SPAN = timedelta(days=2)
STEP = timedelta(minutes=30)
ROUNDS = 48
LATE, REPLACED, IMPORTED, MOVED = 8, 20, 30, 36
_names = count()
ROUND_ROW_BYTES = row_bytes(values_of(ROUND_COLUMNS))
"""An hour row as the scorer's window holds it."""


@dataclass
class Scenario:
    """The samples stored before the first round, and those stored before each round."""

    first: pd.DataFrame
    rounds: list[datetime]
    before: dict[int, list[pd.DataFrame]] = field(default_factory=dict)


def _ts(frame: pd.DataFrame) -> pd.Series:
    return frame["timestamp"]


def scenario() -> Scenario:
    """Three nodes of two GPUs, four days at 10 minutes; rounds on the last day."""
    sim, _ = simulate(SimConfig(nodes=3, gpus_per_node=2, seed=11), days=4, interval_s=600)
    f = history.validate(sim).copy()
    for c in ("gpu_uuid", "hostname", "model_name"):
        f[c] = f[c].astype(str)
    t0 = _ts(f).min().to_pydatetime()
    start = t0.replace(minute=7, second=0, microsecond=0) + timedelta(days=3)
    rounds = [start + k * STEP for k in range(ROUNDS)]
    gpus = sorted(f["gpu_uuid"].unique())
    late_gpu, gap_gpu, old_gpu = gpus[1], gpus[2], gpus[4]
    held = pd.Series(False, index=f.index)
    # late: three hours of one GPU, stored only before round LATE
    late_at = pd.Timestamp(rounds[LATE])
    late = (
        (f["gpu_uuid"] == late_gpu)
        & (_ts(f) > late_at - pd.Timedelta(hours=6))
        & (_ts(f) <= late_at - pd.Timedelta(hours=3))
    )
    held |= late
    # db import: a day-long gap of one GPU (inside the window at round IMPORTED)
    imp_at = pd.Timestamp(rounds[IMPORTED])
    gap = (
        (f["gpu_uuid"] == gap_gpu)
        & (_ts(f) > imp_at - pd.Timedelta(hours=40))
        & (_ts(f) <= imp_at - pd.Timedelta(hours=20))
    )
    held |= gap
    # a GPU replaced: from round REPLACED its host reports a new UUID in its place
    swap = (f["gpu_uuid"] == old_gpu) & (_ts(f) > pd.Timestamp(rounds[REPLACED]) - STEP)
    f.loc[swap, "gpu_uuid"] = "GPU-replacement-0001"
    # a GPU never seen before, on a new host: three days of it imported at round IMPORTED
    newcomer = f[f["gpu_uuid"] == gpus[0]].copy()
    newcomer["gpu_uuid"], newcomer["hostname"] = "GPU-imported-0001", "sim-node-99"
    newcomer = newcomer[_ts(newcomer) <= imp_at]
    first = f[~held & (_ts(f) <= pd.Timestamp(start) - STEP)]
    sc = Scenario(first=first, rounds=rounds)
    for k, t in enumerate(rounds):
        prev = pd.Timestamp(t - STEP)
        due = [f[~held & (_ts(f) > prev) & (_ts(f) <= pd.Timestamp(t))]]
        if k == LATE:
            due.append(f[late])
        if k == IMPORTED:
            due += [f[gap], newcomer]
        sc.before[k] = due
    return sc


@pytest.fixture(scope="module")
def events() -> Scenario:
    return scenario()


@pytest.fixture
def two_stores(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[tuple[Store, Store]]:  # noqa: F811
    """Two empty, migrated databases of the backend under test."""
    urls, names = [], []
    if backend == "sqlite":
        urls = [f"sqlite:///{tmp_path / f'{x}.db'}" for x in "ab"]
    else:
        server = request.getfixturevalue("pg_template")
        names = [f"w{next(_names)}_{x}" for x in "ab"]
        urls = [server.create_database(n, template=TEMPLATE) for n in names]
    stores = [Store.open(u) for u in urls]
    try:
        yield stores[0], stores[1]
    finally:
        for s in stores:
            s.close()
        for n in names:
            request.getfixturevalue("pg_template").drop_database(n)


def store_events(store: Store, frames: list[pd.DataFrame]) -> None:
    for f in frames:
        if len(f):
            store.samples.ingest(f.reset_index(drop=True))  # what ingest, the puller and `db import` call


def full_read(store: Store, columns: tuple[str, ...] | None = None) -> Callable[..., pd.DataFrame]:
    """What the scorer read before the window: the whole window every round (every column: None)."""

    def read(*, until: datetime, hostnames: list[str] | None = None) -> pd.DataFrame:
        return store.samples.scoring_history(since=until - SPAN, until=until, hostnames=hostnames, columns=columns)

    return read


def bit_for_bit(got: pd.DataFrame, want: pd.DataFrame) -> None:
    pd.testing.assert_frame_equal(got, want, check_exact=True)
    assert got.attrs == want.attrs
    for c in got.columns:  # float32 stays float32, NaN where NaN, bit for bit
        a, b = got[c].to_numpy(), want[c].to_numpy()
        if a.dtype.kind == "f":
            assert a.tobytes() == b.tobytes(), c


def same_frame(window: HourWindow, store: Store, at: datetime, hostnames: list[str] | None = None) -> None:
    """The window's frame is the full read's of the columns it holds."""
    bit_for_bit(
        window.frame(until=at, hostnames=hostnames), full_read(store, window.values)(until=at, hostnames=hostnames)
    )


def play(stores: list[Store], sc: Scenario, each_round: Callable[[int, datetime], None]) -> None:
    for s in stores:
        store_events(s, [sc.first])
    for k, t in enumerate(sc.rounds):
        for s in stores:
            store_events(s, sc.before[k])
        each_round(k, t)


def shares(k: int) -> tuple[list[str], list[str]]:
    """Two replicas' hosts; at round MOVED sim-node-01 moves from b's share to a's."""
    a, b = ["sim-node-00", "sim-node-99"], ["sim-node-01", "sim-node-02"]
    return ([*a, "sim-node-01"], b[1:]) if k >= MOVED else (a, b)


def test_every_round_is_the_full_reads_frame_and_records(two_stores: tuple[Store, Store], events: Scenario) -> None:
    a, b = two_stores
    model = tiny_model()
    # The kept window's scorer computes its features in two threads (`score_lanes`), the full read's in one.
    kept, full = (
        Scorer(s, model, Thresholds(), STEP.total_seconds(), window_mb=None, lanes=n) for s, n in ((a, 2), (b, 1))
    )
    kept.window.span, kept.window.read_gpus = SPAN, 3  # the whole window read three GPUs at a time
    assert kept.window.values == values_of(ROUND_COLUMNS) and len(kept.window.values) < len(values_of(None))
    full.window.frame = full_read(b)  # type: ignore[method-assign]  # every column: the decisions are the same
    replicas = [HourWindow(a.samples.db, SPAN, columns=ROUND_COLUMNS, read_gpus=g) for g in (1, 2)]
    capped = HourWindow(a.samples.db, SPAN, max_bytes=int(2.5 * 48 * ROUND_ROW_BYTES), columns=ROUND_COLUMNS)
    over: list[int] = []  # the cap above: 2.5 GPUs of 48 hours

    def each_round(k: int, t: datetime) -> None:
        if k % 12 == 0:  # the columns a round reads are the full frame's, bit for bit
            whole = full_read(a)(until=t)
            bit_for_bit(full_read(a, ROUND_COLUMNS)(until=t), whole[[c for c in whole if c in ROUND_COLUMNS]])
        same_frame(capped, a, t)
        over.append(capped.stats.read_gpus)
        for w, hosts in zip(replicas, shares(k), strict=True):
            same_frame(w, a, t, hosts)
        got, want = kept.run_once(t), full.run_once(t)
        assert len(got) > 0
        assert repr(got) == repr(want), f"round {k} at {t}"

    play([a, b], events, each_round)
    assert kept.window.stats.full_reads == 1  # the rest from memory and what changed
    assert kept.window.stats.held_gpus == 8
    assert min(over) > 0 and capped.stats.held_gpus >= 2  # the cap held some GPUs, read the others


def test_the_comparison_fails_without_the_change_log(
    tmp_path: Path, events: Scenario, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A window that ignores the store's revisions keeps the hour rows as they were before the late samples."""
    import store.window as window_module

    real = window_module.read_hours

    def no_changes(*args: Any, after: int | None = None, **kw: Any) -> Rows:
        rows = real(*args, **kw)
        return rows if after is None else window_module.no_rows()

    monkeypatch.setattr(window_module, "read_hours", no_changes)
    store = Store.open(f"sqlite:///{tmp_path / 'a.db'}")
    window = HourWindow(store.samples.db, SPAN)
    failed: list[int] = []

    def each_round(k: int, t: datetime) -> None:
        try:
            same_frame(window, store, t)
        except AssertionError:
            failed.append(k)

    try:
        play([store], events, each_round)
    finally:
        store.close()
    assert failed and failed[0] == LATE, failed


def test_a_window_past_its_cap_reads_the_rest_every_round(tmp_path: Path, events: Scenario) -> None:
    """Nothing fits: every GPU is read per round, and the frames are still the full read's."""
    store = Store.open(f"sqlite:///{tmp_path / 'a.db'}")
    window = HourWindow(store.samples.db, SPAN, max_bytes=0)
    try:
        play(
            [store],
            Scenario(events.first, events.rounds[:12], events.before),
            lambda k, t: same_frame(window, store, t),
        )
    finally:
        store.close()
    assert window.stats.held_gpus == 0 and window.stats.read_gpus == 6 and window.stats.bytes == 0


def test_a_round_reads_only_what_closed_or_changed(
    tmp_path: Path, events: Scenario, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Start-up reads the window; a round in the same hour reads no hour row; one after an hour
    closed reads that hour, one row per GPU; a late sample's hour is read again, alone."""
    import store.window as window_module

    real, reads = window_module.read_hours, []

    def counted(*args: Any, **kw: Any) -> Rows:
        rows = real(*args, **kw)
        reads.append(len(rows))
        return rows

    monkeypatch.setattr(window_module, "read_hours", counted)
    store = Store.open(f"sqlite:///{tmp_path / 'a.db'}")
    window = HourWindow(store.samples.db, SPAN)
    t = events.rounds[0]  # :07
    try:
        store_events(store, [events.first, *events.before[0]])
        window.frame(until=t)
        held = window.stats.bytes // row_bytes(window.values)  # the hour rows held (the frame's tail is not)
        assert reads == [held] and held > 5 * 48  # two days of six GPUs (less the gaps held back)
        reads.clear()
        window.frame(until=t + timedelta(minutes=20))
        assert reads == [0]  # what changed before this hour: nothing
        reads.clear()
        store_events(store, events.before[1] + events.before[2])
        window.frame(until=t + timedelta(hours=1))
        assert reads == [0, 5]  # nothing changed; the hour that closed (five GPUs: one is in its gap)
        reads.clear()
        late = events.first[events.first["gpu_uuid"] == events.first["gpu_uuid"].iloc[0]].iloc[-3:].copy()
        late["timestamp"] -= pd.Timedelta(minutes=5)  # between stored samples: new ones, in a past hour
        store_events(store, [late])
        window.frame(until=t + timedelta(hours=1, minutes=5))
        assert reads == [1]  # that hour only
    finally:
        store.close()


def test_the_cap_is_said_once_in_the_log_and_in_metrics(
    tmp_path: Path, events: Scenario, caplog: pytest.LogCaptureFixture
) -> None:
    store = Store.open(f"sqlite:///{tmp_path / 'a.db'}")
    scorer = Scorer(store, tiny_model(), Thresholds(), STEP.total_seconds(), window_mb=2.5 * 48 * ROUND_ROW_BYTES / 1e6)
    scorer.window.span = SPAN
    reg = CollectorRegistry()
    reg.register(ModelMetrics(scorer))
    try:
        store_events(store, [events.first, *events.before[0]])
        with caplog.at_level(logging.WARNING, logger="store.window"):
            scorer.run_once(events.rounds[0])
            scorer.run_once(events.rounds[0] + timedelta(minutes=5))
    finally:
        store.close()
    said = [r.getMessage() for r in caplog.records if "read every round" in r.getMessage()]
    assert len(said) == 1 and said[0].startswith("score window: 2 GPUs held in memory"), said
    assert reg.get_sample_value("gpuhealth_score_window_gpus", {"held": "memory"}) == 2
    assert reg.get_sample_value("gpuhealth_score_window_gpus", {"held": "read"}) == 4
    assert reg.get_sample_value("gpuhealth_score_window_bytes") == scorer.window.stats.bytes > 0
    assert reg.get_sample_value("gpuhealth_score_window_full_reads_total") == 1


def test_a_round_cut_short_leaves_no_half_updated_window(
    tmp_path: Path, events: Scenario, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The database goes away while a share grows: the next round reads the window again."""
    import store.window as window_module

    real = window_module.read_hours

    def gone(*args: Any, **kw: Any) -> Rows:
        if kw.get("after") is None:  # the GPUs newly held
            raise StoreUnavailable("cannot reach the database: gone")
        return real(*args, **kw)

    store = Store.open(f"sqlite:///{tmp_path / 'a.db'}")
    window = HourWindow(store.samples.db, SPAN)
    t = events.rounds[0]
    a, b = shares(0)
    try:
        store_events(store, [events.first, *events.before[0]])
        same_frame(window, store, t, a)
        monkeypatch.setattr(window_module, "read_hours", gone)
        with pytest.raises(StoreUnavailable):
            window.frame(until=t + timedelta(minutes=5), hostnames=a + b)
        monkeypatch.setattr(window_module, "read_hours", real)
        same_frame(window, store, t + timedelta(minutes=10), a + b)
    finally:
        store.close()


def test_hours_the_retention_deleted_leave_the_window(tmp_path: Path, events: Scenario) -> None:
    """An hourly retention shorter than the window: the hours it deleted are gone from the next round."""
    store = Store.open(f"sqlite:///{tmp_path / 'a.db'}")
    window = HourWindow(store.samples.db, SPAN)
    t = events.rounds[0]
    short = timedelta(hours=30)
    try:
        store_events(store, [events.first, *events.before[0]])
        same_frame(window, store, t)
        done = store.pruner.apply(t, Retention(samples=short, scores=short, hourly=short))
        assert done["sample_hours_deleted"] > 0
        same_frame(window, store, t + timedelta(minutes=5))
    finally:
        store.close()


def test_a_window_read_in_parts_is_the_window_read_at_once(
    tmp_path: Path, events: Scenario, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Start-up reads two GPUs at a time (three reads of six GPUs): the same rows, in the same order, as one read."""
    import store.window as window_module

    real, reads = window_module.read_hours, []

    def counted(*args: Any, **kw: Any) -> Rows:
        rows = real(*args, **kw)
        reads.append(len(rows.gpus))
        return rows

    store = Store.open(f"sqlite:///{tmp_path / 'a.db'}")
    at_once, in_parts = (HourWindow(store.samples.db, SPAN, columns=ROUND_COLUMNS, read_gpus=g) for g in (10_000, 2))
    t = events.rounds[0]
    try:
        store_events(store, [events.first, *events.before[0]])
        want = at_once.frame(until=t)
        monkeypatch.setattr(window_module, "read_hours", counted)
        got = in_parts.frame(until=t)
    finally:
        store.close()
    assert reads == [2, 2, 2]
    bit_for_bit(got, want)
    a, b = in_parts._rows, at_once._rows
    assert a.gpus == b.gpus and a.codes.tobytes() == b.codes.tobytes() and a.start.tobytes() == b.start.tobytes()
    assert list(a.cols) == list(b.cols) == list(values_of(ROUND_COLUMNS))
    assert all(a.cols[c].tobytes() == b.cols[c].tobytes() for c in a.cols)


def test_the_frame_takes_the_windows_rows_and_cannot_change_them(tmp_path: Path, events: Scenario) -> None:
    """The window keeps the frame's arrays (its rows are held once during a round): they are read-only, so
    a write to the frame raises instead of changing the next round's rows."""
    store = Store.open(f"sqlite:///{tmp_path / 'a.db'}")
    window = HourWindow(store.samples.db, SPAN, columns=ROUND_COLUMNS)
    t = events.rounds[0]
    try:
        store_events(store, [events.first, *events.before[0]])
        frame = window.frame(until=t)
        temp = frame["gpu_temp_c"].to_numpy()
        assert np.shares_memory(temp, window._rows.cols["gpu_temp_c"]) and not temp.flags.writeable
        with pytest.raises(ValueError, match="read-only"):
            frame.loc[0, "gpu_temp_c"] = 1.0
        same_frame(window, store, t + timedelta(minutes=5))  # the tail let go and read again
        same_frame(window, store, t + timedelta(hours=1))
    finally:
        store.close()


def test_a_steady_round_writes_the_new_tail_over_the_last(tmp_path: Path, events: Scenario) -> None:
    """In a round of the same hour whose tail has the same GPUs as the last round's, the tail's values are
    written over the last tail's rows in place: no column of the window is copied, and the frame is still
    the full read's. A tail with a GPU more, or an hour closed, takes the copy again."""
    store = Store.open(f"sqlite:///{tmp_path / 'a.db'}")
    window = HourWindow(store.samples.db, SPAN, columns=ROUND_COLUMNS)
    t = events.rounds[1]  # :37, the tail (:00, :37] of every GPU
    try:
        store_events(store, [events.first, *events.before[0], *events.before[1]])
        frame = window.frame(until=t)
        temp = frame["gpu_temp_c"].to_numpy()
        at = window._tail_at.copy()
        before = temp[at].copy()
        store_events(store, events.before[2])  # (:37, :07]: two samples more of each GPU in this hour
        later = t + timedelta(minutes=15)
        bit_for_bit(window.frame(until=later), full_read(store, window.values)(until=later))
        assert np.shares_memory(temp, window._rows.cols["gpu_temp_c"])  # the same arrays, not a copy
        assert np.array_equal(window._tail_at, at) and not np.array_equal(temp[at], before, equal_nan=True)
        same_frame(window, store, t + timedelta(minutes=30))  # the hour closed: the general path
        assert not np.shares_memory(temp, window._rows.cols["gpu_temp_c"])
    finally:
        store.close()
