"""Telemetry: history frames in (ingest), history frames out, raw samples as numpy arrays.

Bulk paths use the driver's cursor directly (executemany on SQLite, COPY on PostgreSQL) and
build numpy arrays, never one Python object per sample. `fetch_block` and `metric_select` are
shared with the roll-up of old samples (`store.retention`).
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any

import numpy as np
import pandas as pd
import psycopg
import sqlalchemy as sa
from sqlalchemy.engine import Connection

from core import history
from core.history import HistoryError
from store.engine import Database, quote
from store.errors import StoreError
from store.gpus import GpuSighting, upsert_gpu_rows
from store.schema import METRIC_COLUMNS, T_GPUS, samples
from store.validate import text, utc

log = logging.getLogger(__name__)

INGEST_BATCH = 20_000
"""Rows converted to Python objects at a time: bounds ingest memory, big enough to amortise calls."""
FETCH_BATCH = 50_000
_METRIC_SET = frozenset(METRIC_COLUMNS)


def where_sql(
    db: Database,
    ts_col: str,
    since: datetime | None,
    until: datetime | None,
    uuids: Sequence[str] | None,
    until_inclusive: bool = True,
) -> tuple[str, list[Any]]:
    """A raw-SQL WHERE clause on a time column and GPUs, and its parameters ("" when it has none)."""
    clauses: list[str] = []
    params: list[Any] = []
    if since is not None:
        clauses.append(f"{quote(ts_col)} >= {db.ph}")
        params.append(db.bind_ts(since))
    if until is not None:
        clauses.append(f"{quote(ts_col)} {'<=' if until_inclusive else '<'} {db.ph}")
        params.append(db.bind_ts(until))
    if uuids is not None:
        clauses.append(f"gpu_uuid IN ({', '.join([db.ph] * len(uuids))})")
        params.extend(uuids)
    return (" WHERE " + " AND ".join(clauses) if clauses else ""), params


def metric_select(
    db: Database,
    table: str,
    ts_col: str,
    extra: Sequence[str],
    since: datetime | None,
    until: datetime | None,
    uuids: Sequence[str] | None,
) -> tuple[str, list[Any]]:
    """Raw SQL for (gpu_uuid, time in µs, extra…, metrics…) of `table`, and its parameters."""
    where, params = where_sql(db, ts_col, since, until, uuids)
    cols = ", ".join(quote(c) for c in METRIC_COLUMNS)
    lead = ", ".join(["gpu_uuid", db.ts_us(quote(ts_col)), *extra])
    return f"SELECT {lead}, {cols} FROM {table}{where}", params


def fetch_block(
    db: Database, conn: Connection, sql: str, params: Sequence[Any], n_extra: int, *, stream: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Run `sql` (gpu_uuid, ts_us, extra…, metrics…) through the driver into arrays.

    Returns (uuids as objects, ts_us int64, values float64 of shape (rows, n_extra + metrics)),
    NULL as NaN. Rows are fetched FETCH_BATCH at a time (server-side cursor on PostgreSQL).
    """
    raw: Any = conn.connection.driver_connection
    width = n_extra + len(METRIC_COLUMNS)
    u_parts: list[np.ndarray] = []
    t_parts: list[np.ndarray] = []
    v_parts: list[np.ndarray] = []
    if db.dialect == "postgresql" and stream:
        assert isinstance(raw, psycopg.Connection)
        cur: Any = raw.cursor(name="gpuhealth_fetch")
    else:
        cur = raw.cursor()
    try:
        cur.execute(sql, tuple(params))
        while chunk := cur.fetchmany(FETCH_BATCH):
            a = np.array(chunk, dtype=object)
            u_parts.append(a[:, 0])
            t_parts.append(a[:, 1].astype(np.int64))
            v_parts.append(a[:, 2:].astype(np.float64))  # None -> NaN
    finally:
        cur.close()
    if not u_parts:
        return np.empty(0, dtype=object), np.empty(0, dtype=np.int64), np.empty((0, width))
    return np.concatenate(u_parts), np.concatenate(t_parts), np.concatenate(v_parts)


def _sample_rows(
    f: pd.DataFrame, uuids: np.ndarray, ts: np.ndarray, cols: list[str], sep: str
) -> Iterator[list[tuple[Any, ...]]]:
    """Rows as tuples of plain Python values (NaN -> None), INGEST_BATCH at a time."""
    stamps = np.datetime_as_string(ts, unit="us")  # 2026-01-31T12:00:00.000000, no zone: UTC
    if sep != "T":  # SQLAlchemy's SQLite DATETIME text has a space; swap it in place, vectorised
        chars = stamps.view(np.uint32).reshape(len(stamps), -1)
        chars[:, 10] = ord(sep)
    values = {c: f[c].to_numpy(dtype=np.float64) for c in cols}
    for start in range(0, len(f), INGEST_BATCH):
        stop = start + INGEST_BATCH
        columns: list[list[Any]] = [uuids[start:stop].tolist(), stamps[start:stop].tolist()]
        for c in cols:
            v = values[c][start:stop]
            nan = np.isnan(v)
            if sep != "T" or not nan.any():
                columns.append(v.tolist())  # SQLite stores a bound NaN as NULL by itself
            else:
                obj = v.astype(object)
                obj[nan] = None
                columns.append(obj.tolist())
        yield list(zip(*columns, strict=True))


def _insert_samples(db: Database, conn: Connection, f: pd.DataFrame, cols: list[str]) -> int:
    """Bulk insert through the driver; (gpu_uuid, timestamp) already stored are skipped."""
    uuids = np.asarray(f["gpu_uuid"].cat.categories, dtype=object)[f["gpu_uuid"].cat.codes.to_numpy()]
    ts = f["timestamp"].to_numpy(dtype="datetime64[us]")
    names = ", ".join(quote(c) for c in ["gpu_uuid", "timestamp", *cols])
    raw = conn.connection.driver_connection
    inserted = 0
    if db.dialect == "postgresql":
        assert isinstance(raw, psycopg.Connection)
        with raw.cursor() as cur:
            # COPY into a scratch table, then one INSERT … ON CONFLICT DO NOTHING: far fewer
            # round trips than executemany, and repeated samples are skipped by the database.
            cur.execute("CREATE TEMP TABLE _gpuhealth_ingest (LIKE samples) ON COMMIT DROP")
            with cur.copy(f"COPY _gpuhealth_ingest ({names}) FROM STDIN") as copy:
                for rows in _sample_rows(f, uuids, ts, cols, sep="T"):
                    for row in rows:
                        copy.write_row(row)
            cur.execute(f"INSERT INTO samples ({names}) SELECT {names} FROM _gpuhealth_ingest ON CONFLICT DO NOTHING")
            inserted = max(cur.rowcount, 0)
            cur.execute("DROP TABLE _gpuhealth_ingest")
    else:
        assert isinstance(raw, sqlite3.Connection)
        sql = f"INSERT INTO samples ({names}) VALUES ({', '.join(['?'] * (len(cols) + 2))}) ON CONFLICT DO NOTHING"
        scur = raw.cursor()
        try:
            for rows in _sample_rows(f, uuids, ts, cols, sep=" "):
                scur.executemany(sql, rows)
                inserted += max(scur.rowcount, 0)
        finally:
            scur.close()
    return inserted


def _sightings(f: pd.DataFrame) -> list[GpuSighting]:
    """Each GPU of a valid history frame: its newest identity and the span of its samples."""
    per_gpu = f.groupby("gpu_uuid", observed=True, sort=False).agg(
        first_seen=("timestamp", "min"),
        last_seen=("timestamp", "max"),
        hostname=("hostname", "last"),  # the frame is in time order: last = newest
        gpu_index=("gpu_index", "last"),
        model_name=("model_name", "last"),
    )
    return [
        {
            "uuid": str(uuid),
            "hostname": str(r.hostname),
            "gpu_index": int(r.gpu_index),
            "model_name": str(r.model_name),
            "first_seen": r.first_seen.to_pydatetime(),
            "last_seen": r.last_seen.to_pydatetime(),
        }
        for uuid, r in zip(per_gpu.index, per_gpu.itertuples(index=False), strict=True)  # not iterrows: 10x
    ]


def _frame(u: np.ndarray, ts: np.ndarray, v: np.ndarray, ident: Mapping[str, tuple[str, int, str]]) -> pd.DataFrame:
    """Arrays from the database as a history frame with validate()'s dtypes."""
    if len(u) == 0:
        return history.empty(())
    codes, uniques = pd.factorize(u, sort=True)
    order = np.lexsort((ts, codes))
    codes = codes[order]
    info = [ident.get(x, ("unknown", -1, "unknown")) for x in uniques]

    def category(values: list[str]) -> pd.Categorical:
        c, cats = pd.factorize(np.asarray(values, dtype=object), sort=True)
        return pd.Categorical.from_codes(c[codes], categories=pd.Index(cats, dtype=str))

    data: dict[str, Any] = {
        "timestamp": pd.to_datetime(ts[order], unit="us", utc=True).astype("datetime64[ns, UTC]"),
        "hostname": category([i[0] for i in info]),
        "gpu_uuid": pd.Categorical.from_codes(codes, categories=pd.Index(list(uniques), dtype=str)),
        "gpu_index": np.asarray([i[1] for i in info], dtype=np.int32)[codes],
        "model_name": category([i[2] for i in info]),
    }
    v = v[order]
    for j, name in enumerate(METRIC_COLUMNS):
        col = v[:, j]
        if not np.isnan(col).all():
            data[name] = col.astype(history.metric_dtype(name))
    return pd.DataFrame(data, index=pd.RangeIndex(len(codes)), copy=False)


def _identities(conn: Connection, uuids: list[str]) -> dict[str, tuple[str, int, str]]:
    """uuid -> (hostname, gpu_index or -1, model_name or "unknown") from the GPUs' current records."""
    out: dict[str, tuple[str, int, str]] = {}
    g = T_GPUS.c
    for start in range(0, len(uuids), 1000):
        part = uuids[start : start + 1000]
        for row in conn.execute(sa.select(g.uuid, g.hostname, g.gpu_index, g.model_name).where(g.uuid.in_(part))):
            out[row.uuid] = (
                row.hostname,
                -1 if row.gpu_index is None else int(row.gpu_index),
                row.model_name or "unknown",
            )
    return out


class Samples:
    """Raw telemetry: history frames in and out."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self._warned: set[str] = set()
        """Columns outside the catalogue already warned about (once per store, not per batch)."""

    def ingest(self, frame: pd.DataFrame, *, not_after: datetime | None = None) -> int:
        """Store a history frame; returns the rows newly inserted (repeated samples are skipped).

        Rows dated after `not_after` (the caller's clock plus its skew; None for simulated and
        replayed time) are refused and logged: one sample from the future would otherwise
        become every later reader's idea of "newest" (the fleet-mode watermark).
        """
        if not isinstance(frame, pd.DataFrame):
            raise StoreError(f"ingest needs a history frame (pandas DataFrame), got {type(frame).__name__}")
        try:
            f = history.validate(frame, source="ingest")
        except HistoryError as err:
            raise StoreError(str(err)) from None
        if not_after is not None and len(f):
            f = self._refuse_future(f, utc(not_after, "not_after"))
        if len(f) == 0:
            return 0
        unknown = [c for c in history.metric_columns(f) if c not in _METRIC_SET]
        new_unknown = [c for c in unknown if c not in self._warned]
        if new_unknown:
            self._warned.update(new_unknown)
            log.warning("ingest: ignoring column(s) not in the catalogue: %s", ", ".join(new_unknown))
        cols = [c for c in METRIC_COLUMNS if c in f.columns]
        gpus = _sightings(f)
        with self.db.tx(write=True) as conn:
            upsert_gpu_rows(self.db, conn, gpus, explicit_state=False)
            return _insert_samples(self.db, conn, f, cols)

    @staticmethod
    def _refuse_future(f: pd.DataFrame, not_after: datetime) -> pd.DataFrame:
        """The frame without rows dated after `not_after`; those are logged."""
        ahead = (f["timestamp"] > pd.Timestamp(not_after)).to_numpy()
        if not ahead.any():
            return f
        log.warning(
            "ingest: refused %d sample(s) dated after %s (up to %s, GPU %s): a clock is wrong",
            int(ahead.sum()), not_after.isoformat(),
            f["timestamp"][ahead].max().isoformat(), f["gpu_uuid"][ahead].iloc[0],
        )  # fmt: skip
        return f[~ahead].reset_index(drop=True)

    def history(
        self,
        *,
        since: datetime | None = None,
        until: datetime | None = None,
        uuids: Sequence[str] | None = None,
        include_hourly: bool = False,
    ) -> pd.DataFrame:
        """Stored telemetry as a valid history frame, sorted by (gpu_uuid, timestamp).

        Identity columns come from the GPU's current record; metric columns that are NULL in
        every returned row are left out. `include_hourly` adds the hourly roll-ups older than
        each GPU's first raw sample (timestamp = start of the hour).
        """
        t0 = None if since is None else utc(since, "since")
        t1 = None if until is None else utc(until, "until")
        ids = None if uuids is None else [text(u, "uuid", max_len=64) for u in uuids]
        if ids is not None and not ids:
            return history.empty(())
        db = self.db
        with db.tx() as conn:
            sql, params = metric_select(db, "samples", "timestamp", (), t0, t1, ids)
            u, ts, v = fetch_block(db, conn, sql, params, 0, stream=True)
            if include_hourly:
                sql, params = metric_select(db, "samples_hourly", "hour", (), t0, t1, ids)
                hu, hts, hv = fetch_block(db, conn, sql, params, 0, stream=True)
                if len(hu):
                    first_raw = pd.Series(ts).groupby(u).min() if len(u) else pd.Series(dtype=np.int64)
                    limit = pd.Series(hu).map(first_raw).to_numpy(dtype=np.float64, na_value=np.inf)
                    keep = hts < limit
                    u = np.concatenate([u, hu[keep]])
                    ts = np.concatenate([ts, hts[keep]])
                    v = np.concatenate([v, hv[keep]])
            ident = _identities(conn, sorted(set(u.tolist())))
        return _frame(u, ts, v, ident)

    def newest_sample_time(self, until: datetime | None = None) -> datetime | None:
        """The timestamp of the newest raw sample of any GPU, at or before `until` if given (None when none)."""
        q = sa.select(sa.func.max(samples.c.timestamp))
        if until is not None:
            q = q.where(samples.c.timestamp <= utc(until, "until"))
        with self.db.tx() as conn:
            t = conn.execute(q).scalar_one()
        return None if t is None else utc(t, "newest sample")
