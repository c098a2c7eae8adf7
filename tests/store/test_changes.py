"""The change log of hour rows (store.changes): each writing transaction stamps the rows it writes
with the next revision, and on PostgreSQL a second writer takes its revision only after the first
committed, so a reader that saw revision R has seen every row stamped R or less."""

from __future__ import annotations

import threading

import pandas as pd
import pytest
import sqlalchemy as sa

from simulator.fleet import SimConfig
from simulator.run import simulate
from store import Store
from store.changes import current_revision, next_revision


def _revisions(store: Store) -> pd.DataFrame:
    with store.samples.db.tx() as conn:
        rows = conn.execute(sa.text("SELECT gpu_uuid, hour, revision FROM samples_hourly")).all()
    return pd.DataFrame(rows, columns=["gpu_uuid", "hour", "revision"])


def test_each_write_stamps_its_hour_rows_with_the_next_revision(store: Store) -> None:
    frame, _ = simulate(SimConfig(nodes=1, gpus_per_node=2, seed=4), days=0.25, interval_s=600)
    ts = frame["timestamp"]
    late = (ts > ts.min() + pd.Timedelta(hours=1, minutes=5)) & (ts < ts.min() + pd.Timedelta(hours=1, minutes=25))
    store.samples.ingest(frame[~late].reset_index(drop=True))
    first = _revisions(store)
    with store.samples.db.tx() as conn:
        assert current_revision(conn) == 1
    assert (first["revision"] == 1).all() and len(first) > 8
    store.samples.ingest(frame[late].reset_index(drop=True))  # late samples: their past hour only
    second = _revisions(store)
    with store.samples.db.tx() as conn:
        assert current_revision(conn) == 2
    changed = second[second["revision"] == 2]
    assert len(changed) == 2 and changed["gpu_uuid"].nunique() == 2  # one hour of each GPU
    assert len(second) == len(first)


@pytest.mark.integration
@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)  # SQLite has one writer at a time anyway
def test_a_second_writer_takes_its_revision_after_the_first_commits(store: Store) -> None:
    db = store.samples.db
    took: list[int] = []
    with db.tx(write=True) as first:
        mine = next_revision(first)
        second = threading.Thread(target=lambda: took.append(_take(store)))
        second.start()
        second.join(timeout=1.0)
        assert second.is_alive() and not took  # waits on the counter's row lock
        with db.tx() as reader:
            assert current_revision(reader) == mine - 1  # not committed: not seen
    second.join(timeout=10.0)
    assert took == [mine + 1]


def _take(store: Store) -> int:
    with store.samples.db.tx(write=True) as conn:
        return next_revision(conn)
