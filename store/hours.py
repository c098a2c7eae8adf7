"""Hourly roll-ups of telemetry, kept at ingest: `samples_hourly` is what the scorer reads.

Every batch a writer stores is rolled into its hours (`core.hourly`, the arithmetic the
features use) and merged with the hours already stored (`store.rollup.merge_sample_hours`):
a late sample joins its hour, a repeated one was skipped before it got here. The scorer then
reads 31 days of hour rows and only the raw tail of the hour it scores in
(`Samples.scoring_history`), whatever the sampling interval. Every row written is stamped with
the writing transaction's revision (`store.changes`), so the scorer's window (`store.window`)
re-reads only the earlier hours that changed.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import numpy as np
import pandas as pd
import sqlalchemy as sa
from sqlalchemy.engine import Connection

from store.changes import next_revision
from store.engine import Sql, quote
from store.rawsql import fetch_block, metric_select
from store.rollup import HOUR_VALUES, SAMPLE_HOUR_COLUMNS, merge_sample_hours, rollup_samples

BY_GPU_UP_TO = 500
"""Reading the stored hours a batch merges with: by GPU for up to this many GPUs, else every
GPU's rows in the batch's hours (one range scan instead of a huge IN list)."""
BACKFILL_GPUS = 64


def _dt(us: int) -> datetime:
    """Microseconds since the epoch as an exact aware UTC datetime."""
    return datetime.fromtimestamp(us // 1_000_000, UTC).replace(microsecond=us % 1_000_000)


def stored_hours(sql: Sql, conn: Connection, new: pd.DataFrame) -> pd.DataFrame:
    """The stored hour rows (SAMPLE_HOUR_COLUMNS) that the hour rows `new` may be merged with."""
    if new.empty:
        return pd.DataFrame(columns=list(SAMPLE_HOUR_COLUMNS))
    uuids = sorted(set(new["gpu_uuid"].tolist()))
    lo, hi = _dt(int(new["hour"].min())), _dt(int(new["hour"].max()))
    extra = ("n", sql.ts_us("last_at"))
    q, params = metric_select(
        sql, "samples_hourly", "hour", extra, lo, hi, uuids if len(uuids) <= BY_GPU_UP_TO else None, HOUR_VALUES
    )
    u, ts, v = fetch_block(sql, conn, q, params, 2, stream=False, n_values=len(HOUR_VALUES))
    old = pd.DataFrame(v[:, 2:], columns=list(HOUR_VALUES))
    old.insert(0, "last_at", v[:, 1].astype(np.int64))
    old.insert(0, "n", v[:, 0].astype(np.int64))
    old.insert(0, "hour", ts)
    old.insert(0, "gpu_uuid", u)
    return old


def _stamps(sql: Sql, us: np.ndarray) -> list[Any]:
    """µs since the epoch as the driver takes them: datetimes (psycopg) or SQLite's stored text."""
    if sql.dialect == "postgresql":
        return [_dt(int(x)) for x in us]
    text = np.datetime_as_string(us.astype("datetime64[us]"), unit="us")  # 2026-01-31T12:00:00.000000
    chars = text.view(np.uint32).reshape(len(text), -1)
    chars[:, 10] = ord(" ")  # SQLAlchemy's SQLite DATETIME text has a space
    return text.tolist()


def write_hours(sql: Sql, conn: Connection, hours: pd.DataFrame, *, stamp: bool = True) -> None:
    """Upsert hour rows (SAMPLE_HOUR_COLUMNS): a stored (GPU, hour) is overwritten by its merge.

    One executemany through the driver (psycopg pipelines it), no Python object per value beyond
    the row tuples: ingest does this for every batch. `stamp`: with the transaction's next
    revision (`store.changes`); only migration 0004, older than the column, writes without.
    """
    if hours.empty:
        return
    n = len(hours)
    cols: list[list[Any]] = [
        hours["gpu_uuid"].astype(str).tolist(),
        _stamps(sql, hours["hour"].to_numpy(np.int64)),
        hours["n"].astype(np.int64).tolist(),
        _stamps(sql, hours["last_at"].to_numpy(np.int64)),
    ]
    for c in HOUR_VALUES:
        x = hours[c].to_numpy(np.float64) if c in hours.columns else np.full(n, np.nan)
        obj = x.astype(object)
        obj[np.isnan(x)] = None
        cols.append(obj.tolist())
    names = list(SAMPLE_HOUR_COLUMNS)
    if stamp:
        names.append("revision")
        cols.append([next_revision(conn)] * n)
    quoted = ", ".join(quote(c) for c in names)
    updates = ", ".join(f"{quote(c)} = excluded.{quote(c)}" for c in names[2:])
    stmt = (
        f"INSERT INTO samples_hourly ({quoted}) VALUES ({', '.join([sql.ph] * len(names))}) "
        f"ON CONFLICT (gpu_uuid, hour) DO UPDATE SET {updates}"
    )
    raw: Any = conn.connection.driver_connection
    cur = raw.cursor()
    try:
        cur.executemany(stmt, list(zip(*cols, strict=True)))
    finally:
        cur.close()


def add_hours(
    sql: Sql, conn: Connection, u: np.ndarray, ts_us: np.ndarray, v: np.ndarray, *, stamp: bool = True
) -> int:
    """Roll newly stored samples (uuids, µs, values in METRIC_COLUMNS order) into their stored hours;
    returns the hour rows written (`stamp`: as `write_hours`)."""
    if not len(u):
        return 0
    new = rollup_samples(u, ts_us, v)
    merged = merge_sample_hours(new, stored_hours(sql, conn, new))
    write_hours(sql, conn, merged, stamp=stamp)
    return len(merged)


def backfill_hours(conn: Connection) -> int:
    """Roll every raw sample stored into its hour (migration 0004: before it, hours were made only
    for samples past their retention, so the raw ones still stored have none); returns hours written."""
    sql = Sql(conn.dialect.name)
    gpus = [r[0] for r in conn.execute(sa.text("SELECT DISTINCT gpu_uuid FROM samples"))]
    written = 0
    for start in range(0, len(gpus), BACKFILL_GPUS):
        part = gpus[start : start + BACKFILL_GPUS]
        q, params = metric_select(sql, "samples", "timestamp", (), None, None, part)
        u, ts, v = fetch_block(sql, conn, q, params, 0, stream=False)
        written += add_hours(sql, conn, u, ts, v, stamp=False)  # before migration 0015's column
    return written
