"""PostgreSQL: raw samples in one partition per UTC day, made at ingest, dropped whole by retention."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta

import pandas as pd
import pytest
import sqlalchemy as sa
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

from store import Retention, Store, StoreError
from store.engine import Database, alembic_config
from store.partitions import create_sql, days_of, ensure_days, include_object, list_partitions
from store.schema import metadata
from tests.postgres import PostgresServer
from tests.store.conftest import T0, TEMPLATE, frame

pytestmark = pytest.mark.integration
MIDNIGHT = datetime(2026, 1, 6, tzinfo=UTC)


@pytest.fixture
def pg(pg_template: PostgresServer, request: pytest.FixtureRequest) -> Iterator[Store]:
    """A Store on a fresh, migrated PostgreSQL database."""
    name = f"part_{request.node.name.replace('[', '_').replace(']', '')}"[:60]
    s = Store.open(pg_template.create_database(name, template=TEMPLATE))
    try:
        yield s
    finally:
        s.close()
        pg_template.drop_database(name)


def _samples(*times: datetime, uuid: str = "GPU-a") -> pd.DataFrame:
    return frame([{"timestamp": t, "gpu_uuid": uuid, "gpu_temp_c": 40.0 + i} for i, t in enumerate(times)])


def _where(s: Store) -> list[tuple[str, datetime]]:
    """(partition, timestamp) of every stored sample."""
    with s._db.tx() as conn:
        rows = conn.exec_driver_sql('SELECT tableoid::regclass::text, "timestamp" FROM samples ORDER BY 2')
        return [(r[0], r[1]) for r in rows]


def _names(s: Store) -> list[str]:
    with s._db.tx() as conn:
        return [p.name for p in list_partitions(conn)]


def test_ingest_makes_the_days_partitions_and_midnight_opens_a_day(pg: Store) -> None:
    before, after = MIDNIGHT - timedelta(minutes=5), MIDNIGHT + timedelta(minutes=5)
    assert pg.samples.ingest(_samples(before, MIDNIGHT, after)) == 3
    assert _names(pg) == ["samples_p20260105", "samples_p20260106"]
    assert _where(pg) == [("samples_p20260105", before), ("samples_p20260106", MIDNIGHT),
                          ("samples_p20260106", after)]  # fmt: skip
    assert pg.samples.ingest(_samples(before, MIDNIGHT, after)) == 0  # repeated samples are still skipped
    assert pg.samples.ingest(_samples(MIDNIGHT, uuid="GPU-b")) == 1
    assert pg.counts()["samples"] == 4
    with pg._db.tx() as conn:
        (p,) = [p for p in list_partitions(conn) if p.name == "samples_p20260106"]
    assert (p.start, p.end) == (MIDNIGHT, MIDNIGHT + timedelta(days=1))


def test_a_sample_far_in_the_past_or_future_makes_only_its_day(pg: Store) -> None:
    past, future = datetime(1700, 3, 1, 23, 59, 59, tzinfo=UTC), datetime(2261, 12, 31, 12, tzinfo=UTC)
    assert pg.samples.ingest(_samples(past, T0, future)) == 3
    assert _names(pg) == ["samples_p17000301", "samples_p20260105", "samples_p22611231"]
    assert [t for _, t in _where(pg)] == [past, T0, future]
    assert pg.samples.history()["timestamp"].tolist() == [pd.Timestamp(t) for t in (past, T0, future)]


def test_bad_timestamps_are_clear_errors(pg: Store) -> None:
    bad = frame([{"timestamp": "yesterday-ish", "gpu_uuid": "GPU-a", "gpu_temp_c": 40.0}])
    with pytest.raises(StoreError, match="unparseable timestamp 'yesterday-ish' in row 0"):
        pg.samples.ingest(bad)
    with pytest.raises(StoreError, match="timezone-aware"):
        days_of(pd.Series(pd.to_datetime(["2026-01-05"])))
    with pytest.raises(StoreError, match="no timestamp"):
        days_of(pd.Series(pd.to_datetime(["2026-01-05", None], utc=True)))
    with pytest.raises(StoreError, match="outside years 1 to 9999"):
        create_sql(date(9999, 12, 31))
    assert days_of(pd.Series(pd.to_datetime(["1969-12-31 23:59:59.999", "1970-01-01 00:00:00.000"], utc=True))) == [
        date(1969, 12, 31), date(1970, 1, 1)]  # fmt: skip
    assert days_of(pd.DatetimeIndex([MIDNIGHT]).as_unit("us")) == [date(2026, 1, 6)]  # any resolution


def test_ensure_days_creates_once_and_rechecks_days_before_today(pg: Store) -> None:
    db, day = pg._db, date(2026, 3, 1)
    assert ensure_days(db, [day], today=day) == 1
    assert ensure_days(db, [day, day], today=day) == 0  # seen: no query
    with db.tx(write=True) as conn:
        conn.exec_driver_sql("DROP TABLE samples_p20260301")  # another process's prune
    assert ensure_days(db, [day], today=day + timedelta(days=1)) == 1  # a past day is looked up again
    assert pg.samples.ingest(_samples(datetime(2026, 3, 1, 8, tzinfo=UTC))) == 1


def test_prune_drops_exactly_the_days_wholly_before_the_cutoff(pg: Store) -> None:
    days = [T0 + timedelta(days=i) for i in range(4)]  # Jan 5..8
    for d in days:
        pg.samples.ingest(_samples(d, d + timedelta(hours=6), d + timedelta(hours=23, minutes=59), uuid="GPU-a"))
        pg.samples.ingest(_samples(d + timedelta(hours=12), uuid="GPU-b"))
    hourly = pg.counts()["samples_hourly"]
    cutoff = days[2] + timedelta(hours=12)  # Jan 7 12:00: Jan 5 and 6 end before it, Jan 7 does not
    assert pg.pruner.prune_samples(cutoff + timedelta(days=1), timedelta(days=1)) == 8
    assert _names(pg) == ["samples_p20260107", "samples_p20260108"]
    assert min(t for _, t in _where(pg)) == days[2]  # the cutoff's day stays whole, before the cutoff too
    assert pg.counts()["samples"] == 8
    assert pg.counts()["samples_hourly"] == hourly  # prune only removes raw samples
    assert pg.pruner.prune_samples(cutoff + timedelta(days=1), timedelta(days=1)) == 0
    # a cutoff on midnight: the day that ends there goes
    out = pg.pruner.apply(days[3] + timedelta(days=35), Retention(samples=timedelta(days=35)))
    assert out["samples_deleted"] == 4
    assert _names(pg) == ["samples_p20260108"]
    assert pg.samples.ingest(_samples(days[0] + timedelta(hours=1))) == 1  # a pruned day can be written again


def _race(jobs: list[tuple[Store, str]], day: datetime) -> tuple[list[int], list[Exception]]:
    """Each (store, GPU) ingests two samples of `day`, all starting at once; (inserted counts, errors)."""
    barrier = threading.Barrier(len(jobs))
    results: list[int] = []
    errors: list[Exception] = []

    def run(s: Store, uuid: str) -> None:
        barrier.wait()
        try:
            results.append(s.samples.ingest(_samples(day, day + timedelta(minutes=5), uuid=uuid)))
        except Exception as err:
            errors.append(err)

    threads = [threading.Thread(target=run, args=job) for job in jobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return results, errors


def test_concurrent_ingests_of_new_days_both_succeed(pg: Store) -> None:
    other = Store.open(pg.url)  # as a second process: its own engine and partition cache
    try:
        for i in range(4):
            day = datetime(2026, 2, 1 + i, 0, 30, tzinfo=UTC)
            assert _race([(pg, "GPU-a"), (other, "GPU-b")], day) == ([2, 2], [])
    finally:
        other.close()
    assert _names(pg) == [f"samples_p202602{d:02d}" for d in range(1, 5)]
    assert pg.counts()["samples"] == 16


def test_migration_from_0004_keeps_every_row_and_partitions_samples(pg_template: PostgresServer) -> None:
    url = pg_template.create_database("part_migration")
    db = Database(url)
    try:
        with db.tx(write=True) as conn:
            command.upgrade(alembic_config(conn), "0004")
        times = [MIDNIGHT - timedelta(microseconds=1), MIDNIGHT, MIDNIGHT + timedelta(hours=30),
                 datetime(1999, 12, 31, 23, tzinfo=UTC)]  # fmt: skip
        rows = [{"gpu_uuid": f"GPU-{g}", "timestamp": t, "gpu_temp_c": float(g)} for g in range(3) for t in times]
        with db.tx(write=True) as conn:
            conn.execute(sa.insert(metadata.tables["samples"]), rows)
        with db.tx(write=True) as conn:
            command.upgrade(alembic_config(conn), "0005")
            kind = conn.exec_driver_sql("SELECT relkind FROM pg_class WHERE relname = 'samples'").scalar_one()
            parts = [p.name for p in list_partitions(conn)]
            got = conn.exec_driver_sql('SELECT gpu_uuid, "timestamp", gpu_temp_c FROM samples').all()
            diff = compare_metadata(
                MigrationContext.configure(conn, opts={"compare_type": True, "include_object": include_object}),
                metadata,
            )
        assert kind == "p"
        assert parts == ["samples_p19991231", "samples_p20260105", "samples_p20260106", "samples_p20260107"]
        assert sorted(got) == sorted((r["gpu_uuid"], r["timestamp"], r["gpu_temp_c"]) for r in rows)
        # The partitions are not a difference; the sample columns later revisions add are (0008: the rest
        # of dcgm-exporter's defaults), and the hour rows' revision with its index (0015: the change log).
        script = ScriptDirectory.from_config(alembic_config())
        later = {n for rev in script.iterate_revisions("head", "0005") for n, _ in getattr(rev.module, "METRICS", ())}
        later.add("revision")
        added = [d for d in diff if d[0] == "add_column" and d[3].name in later]
        added += [d for d in diff if d[0] == "add_index" and {c.name for c in d[1].columns} <= later]
        assert [d for d in diff if "samples" in str(d) and not any(d is a for a in added)] == []
        with db.tx(write=True) as conn:
            command.downgrade(alembic_config(conn), "0004")
            kind = conn.exec_driver_sql("SELECT relkind FROM pg_class WHERE relname = 'samples'").scalar_one()
            assert conn.exec_driver_sql("SELECT count(*) FROM samples").scalar_one() == len(rows)
            assert conn.exec_driver_sql("SELECT count(*) FROM pg_class WHERE relname ~ '^samples_p[0-9]'").scalar() == 0
        assert kind == "r"
    finally:
        db.close()
        pg_template.drop_database("part_migration")


def test_a_drop_that_waits_too_long_for_its_lock_is_left_for_the_next_prune(
    pg: Store, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr("store.partitions.DROP_LOCK_TIMEOUT_MS", 50)
    pg.samples.ingest(_samples(T0, T0 + timedelta(days=3)))
    now, keep = T0 + timedelta(days=3), timedelta(days=1)
    with pg._db.tx() as reader:  # a long read of samples holds its lock
        reader.exec_driver_sql("SELECT count(*) FROM samples").scalar_one()
        assert pg.pruner.prune_samples(now, keep) == 0
        assert "samples_p20260105 is in use" in caplog.text
    assert pg.pruner.prune_samples(now, keep) == 1
    assert _names(pg) == ["samples_p20260108"]
