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

from core import history, hourly, identity
from core.history import HistoryError
from core.infiniband import RAILS_ATTR, Rails
from store import round_rows
from store.engine import Database, quote
from store.errors import StoreError
from store.gpus import GpuSighting, upsert_gpu_rows
from store.hours import BY_GPU_UP_TO, add_hours
from store.partitions import ensure_for
from store.rawsql import copy_columns, fetch_block, metric_select, where_sql
from store.rollup import HOUR_VALUES, rollup_samples
from store.schema import METRIC_COLUMNS, T_GPUS, samples
from store.validate import text, utc

log = logging.getLogger(__name__)

INGEST_BATCH = 20_000
"""Rows converted to Python objects at a time: bounds ingest memory, big enough to amortise calls."""
HOURS_BATCH = 500_000
"""Rows rolled into hours at a time (a big import: hours split between batches are merged)."""
_METRIC_SET = frozenset(METRIC_COLUMNS)
_IDENTITY_TEXT = (("gpu_uuid", "UUID", identity.UUID_CHARS), ("hostname", "hostname", identity.NAME_CHARS),
                  ("model_name", "model name", identity.NAME_CHARS))  # fmt: skip
"""A history frame's identity text and the store's limit for each (`core.identity`)."""
NAMED_GPUS = 10
"""GPUs an ingest names when it leaves some out (the rest are counted)."""


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
            # A history's -1 is "unknown", which the gpus table holds as NULL (and `_identities` reads back as -1).
            "gpu_index": None if r.gpu_index == identity.UNKNOWN_INDEX else int(r.gpu_index),
            "model_name": str(r.model_name),
            "first_seen": r.first_seen.to_pydatetime(),
            "last_seen": r.last_seen.to_pydatetime(),
        }
        for uuid, r in zip(per_gpu.index, per_gpu.itertuples(index=False), strict=True)  # not iterrows: 10x
    ]


def _unstorable(f: pd.DataFrame) -> tuple[np.ndarray, dict[str, tuple[str, str]]]:
    """Rows of a valid history frame whose identity the store cannot keep (`core.identity`), and for
    each GPU among them the first thing found wrong. Text is checked per category, not per row."""
    bad = np.zeros(len(f), dtype=bool)
    gpus: dict[str, tuple[str, str]] = {}
    uuids = f["gpu_uuid"].cat

    def mark(rows: np.ndarray, found: tuple[str, str]) -> None:
        rows &= ~bad
        for code in np.unique(uuids.codes.to_numpy()[rows]):
            gpus.setdefault(str(uuids.categories[code]), found)
        bad[rows] = True

    for col, what, limit in _IDENTITY_TEXT:
        cats = f[col].cat.categories
        suspect = np.flatnonzero((cats.str.len() > limit) | cats.str.contains("\x00", regex=False))
        codes = f[col].cat.codes.to_numpy()
        for code in suspect:
            found = identity.text_problem(what, str(cats[code]), limit)
            if found is not None:
                mark(codes == code, found)
    index = f["gpu_index"].to_numpy()
    for value in np.unique(index[index < identity.UNKNOWN_INDEX]):
        found = identity.index_problem(int(value))
        if found is not None:
            mark(index == value, found)
    return bad, gpus


def _frame(
    u: np.ndarray,
    ts: np.ndarray,
    v: np.ndarray,
    ident: Mapping[str, tuple[str, int, str, str, str]],
) -> pd.DataFrame:
    """Arrays from the database (values in METRIC_COLUMNS order) as a history frame with validate()'s dtypes."""
    codes, uniques = pd.factorize(u)
    cols = {name: v[:, j] for j, name in enumerate(METRIC_COLUMNS)}  # views: each is copied once, in order
    return _columns_frame(codes, [str(x) for x in uniques], ts, cols, ident)


_NS_US = (pd.Timestamp.min.value // 1000 + 1, pd.Timestamp.max.value // 1000)
"""The µs since the epoch a datetime64[ns] holds."""


def utc_ns(ts: np.ndarray) -> pd.DatetimeIndex:
    """µs since the epoch (int64) as datetime64[ns, UTC]: `pd.to_datetime(ts, unit="us", utc=True)` cast to ns,
    in one multiply where every time fits (a round's 7 M stamps: 0.03 s instead of 0.18); past 2262 (or
    before 1677) the cast's OutOfBoundsDatetime, as before."""
    ts = np.asarray(ts, dtype=np.int64)
    if len(ts) and _NS_US[0] <= int(ts.min()) and int(ts.max()) <= _NS_US[1]:
        return pd.DatetimeIndex((ts * 1000).view("M8[ns]")).tz_localize("UTC")
    return pd.to_datetime(ts, unit="us", utc=True).astype("datetime64[ns, UTC]")


def _columns_frame(
    codes: np.ndarray,
    gpus: list[str],
    ts: np.ndarray,
    cols: dict[str, np.ndarray],
    ident: Mapping[str, tuple[str, int, str, str, str]],
    *,
    ordered: bool = False,
) -> pd.DataFrame:
    """Rows from the database (GPU codes into `gpus`, µs, one array per metric) as a history frame
    with validate()'s dtypes, in (GPU, time) order; `cols` is emptied as each column is placed.
    `ordered`: the rows are in (uuid, time) order already (the scorer's window), and the frame
    takes the arrays as they are."""
    if len(codes) == 0:
        return history.empty(())
    rank = np.argsort(np.argsort(np.asarray(gpus, dtype=object)))  # codes in uuid order: GPUs sorted
    sorted_codes = rank[codes].astype(np.int64)
    order = None if ordered else np.lexsort((ts, sorted_codes))
    codes = sorted_codes if order is None else sorted_codes[order]
    names = sorted(gpus)
    info = [ident.get(x, ("unknown", -1, "unknown", "", "")) for x in names]

    def category(values: list[str]) -> pd.Categorical:
        c, cats = pd.factorize(np.asarray(values, dtype=object), sort=True)
        return pd.Categorical.from_codes(c[codes], categories=pd.Index(cats, dtype=str))

    data: dict[str, Any] = {
        "timestamp": utc_ns(ts if order is None else ts[order]),
        "hostname": category([i[0] for i in info]),
        "gpu_uuid": pd.Categorical.from_codes(codes, categories=pd.Index(names, dtype=str)),
        "gpu_index": np.asarray([i[1] for i in info], dtype=np.int32)[codes],
        "model_name": category([i[2] for i in info]),
    }
    for name in list(cols):
        col = cols.pop(name)
        col = (col if order is None else np.take(col, order)).astype(history.metric_dtype(name), copy=False)
        if not history.all_nan(col):
            data[name] = col
    frame = pd.DataFrame(data, index=pd.RangeIndex(len(codes)), copy=False)
    frame.attrs[RAILS_ATTR] = Rails((x, i[3]) for x, i in zip(names, info, strict=True) if i[3])  # the rail findings'
    frame.attrs[history.BUS_IDS_ATTR] = history.BusIds((x, i[4]) for x, i in zip(names, info, strict=True) if i[4])
    return frame


def _identities(conn: Connection, uuids: list[str]) -> dict[str, tuple[str, int, str, str, str]]:
    """uuid -> (hostname, gpu_index or -1, model_name or "unknown", its IB/RoCE ports or "", its PCI bus id
    or "") from the GPUs' current records; the ports and bus ids ride as the frame's `RAILS_ATTR` and
    `history.BUS_IDS_ATTR` (`_columns_frame`), not as columns."""
    out: dict[str, tuple[str, int, str, str, str]] = {}
    g = T_GPUS.c
    if conn.dialect.name == "postgresql":  # one query through the driver: Core's 10 IN lists took 0.28 s a round
        rows = round_rows.gpu_identities(conn, uuids)
    else:
        rows = []
        for start in range(0, len(uuids), 1000):
            part = uuids[start : start + 1000]
            q = sa.select(g.uuid, g.hostname, g.gpu_index, g.model_name, g.ib_rail, g.pci_bus_id).where(
                g.uuid.in_(part)
            )
            rows += [tuple(r) for r in conn.execute(q)]
    for uuid, hostname, index, model, rail, bus in rows:
        out[uuid] = (hostname, -1 if index is None else int(index), model or "unknown", rail or "", bus or "")
    return out


def _arrays(f: pd.DataFrame, cols: list[str]) -> tuple[np.ndarray, np.ndarray, pd.DataFrame]:
    """(uuids, µs since the epoch, the metric columns as float64) of a valid history frame."""
    u = f["gpu_uuid"].astype(str).to_numpy(dtype=object)
    ts = f["timestamp"].to_numpy(dtype="datetime64[us]").astype(np.int64)
    return u, ts, pd.DataFrame({c: f[c].to_numpy(np.float64, na_value=np.nan) for c in cols})


def _not_stored(db: Database, conn: Connection, f: pd.DataFrame) -> pd.DataFrame:
    """The rows of a valid history frame whose (GPU, time) is not stored yet: a repeated sample is
    skipped before it reaches the table or its hour (it would count twice there)."""
    u, ts, _ = _arrays(f, [])
    lo, hi = f["timestamp"].min().to_pydatetime(), f["timestamp"].max().to_pydatetime()
    ids = sorted(set(u.tolist()))
    where, params = where_sql(db, "timestamp", lo, hi, ids if len(ids) <= BY_GPU_UP_TO else None)
    raw: Any = conn.connection.driver_connection
    cur = raw.cursor()
    try:
        cur.execute(f"SELECT gpu_uuid, {db.ts_us(quote('timestamp'))} FROM samples{where}", tuple(params))
        stored = cur.fetchall()
    finally:
        cur.close()
    if not stored:
        return f
    have = pd.MultiIndex.from_tuples([(str(a), int(b)) for a, b in stored])
    seen = pd.MultiIndex.from_arrays([u, ts]).isin(have)
    return f[~seen].reset_index(drop=True) if seen.any() else f


def _uuids_on(conn: Connection, hostnames: list[str]) -> list[str]:
    """The GPUs whose current record names one of these hosts."""
    g = T_GPUS.c
    out: list[str] = []
    for start in range(0, len(hostnames), 1000):
        part = hostnames[start : start + 1000]
        out.extend(r[0] for r in conn.execute(sa.select(g.uuid).where(g.hostname.in_(part))))
    return sorted(out)


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
        if len(f):
            f = self._refuse_unstorable(f)
        if len(f) == 0:
            return 0
        unknown = [c for c in history.metric_columns(f) if c not in _METRIC_SET]
        new_unknown = [c for c in unknown if c not in self._warned]
        if new_unknown:
            self._warned.update(new_unknown)
            log.warning("ingest: ignoring column(s) not in the catalogue: %s", ", ".join(new_unknown))
        cols = [c for c in METRIC_COLUMNS if c in f.columns]
        gpus = _sightings(f)
        ensure_for(self.db, f["timestamp"])  # PostgreSQL: the days' partitions, in a transaction of their own
        with self.db.tx(write=True) as conn:
            upsert_gpu_rows(self.db, conn, gpus, explicit_state=False)
            f = _not_stored(self.db, conn, f)
            inserted = _insert_samples(self.db, conn, f, cols) if len(f) else 0
            # Their hours in the same transaction: the scorer's roll-ups never miss a stored sample.
            for start in range(0, len(f), HOURS_BATCH):
                part = f.iloc[start : start + HOURS_BATCH]
                add_hours(self.db, conn, *_arrays(part, cols))
            return inserted

    @staticmethod
    def _refuse_unstorable(f: pd.DataFrame) -> pd.DataFrame:
        """The frame without rows whose GPU identity the store cannot keep; those GPUs are logged.

        One such GPU would otherwise make PostgreSQL refuse the whole frame (SQLite would keep it):
        both now keep every other GPU, alike.
        """
        bad, gpus = _unstorable(f)
        if not bad.any():
            return f
        named = "; ".join(f"GPU {identity.shown(u)}: {why} ({reason})" for u, (reason, why) in
                          list(gpus.items())[:NAMED_GPUS])  # fmt: skip
        more = f"; and {len(gpus) - NAMED_GPUS} more" if len(gpus) > NAMED_GPUS else ""
        log.warning("ingest: left out %d sample(s) of %d GPU(s) the store cannot keep: %s%s",
                    int(bad.sum()), len(gpus), named, more)  # fmt: skip
        return f[~bad].reset_index(drop=True)

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
    ) -> pd.DataFrame:
        """Stored raw telemetry as a valid history frame, sorted by (gpu_uuid, timestamp).

        Identity columns come from the GPU's current record; metric columns that are NULL in
        every returned row are left out. Hour rows: `scoring_history`.
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
            ident = _identities(conn, sorted(set(u.tolist())))
        return _frame(u, ts, v, ident)

    def scoring_history(
        self,
        *,
        since: datetime | None,
        until: datetime,
        hostnames: Sequence[str] | None = None,
        uuids: Sequence[str] | None = None,
        columns: Sequence[str] | None = None,
    ) -> pd.DataFrame:
        """What the scorer reads: the stored hours of (since, until] and the raw tail of the hour
        `until` falls in rolled up the same way, as a history frame of hour rows (`core.hourly`).

        A whole hour is stamped at its end, the tail at its newest sample. `hostnames`: only the
        GPUs whose current record names one of them (a replica's share); `uuids`: only these
        GPUs (training reads a fleet in batches); `columns`: only these metric columns (the
        identity columns always), the frame of every column without the others. Reads GPUs × hours
        rows, not GPUs × samples: the cost does not grow with the sampling rate.
        """
        t0, t1 = None if since is None else utc(since, "since"), utc(until, "until")
        boundary = t1.replace(minute=0, second=0, microsecond=0)  # hours before it are whole
        db = self.db
        with db.tx() as conn:
            ids = None if uuids is None else [text(u, "uuid", max_len=64) for u in uuids]
            if hostnames is not None:
                on_hosts = _uuids_on(conn, [text(h, "hostname") for h in hostnames])
                ids = on_hosts if ids is None else sorted(set(ids) & set(on_hosts))
            if ids is not None and not ids:
                return history.empty(())
            lo = None if t0 is None else t0.replace(minute=0, second=0, microsecond=0)
            extra = ("n", db.ts_us(quote("last_at")))
            values = HOUR_VALUES if columns is None else tuple(c for c in HOUR_VALUES if c in set(columns))
            sql, params = metric_select(
                db, "samples_hourly", "hour", extra, lo, boundary, ids, values, until_inclusive=False
            )
            names = ["n", "last_at", *values]
            dtypes = [np.dtype(np.float64)] * 2 + [history.metric_dtype(c) for c in values]
            if db.dialect == "postgresql":  # fleet size: COPY parsed by pyarrow, column by column
                codes, gpus, start, cols = copy_columns(conn, sql, params, names, dtypes)
            else:
                hu, start, hv = fetch_block(db, conn, sql, params, 2, stream=True, n_values=len(values))
                codes, uniq = pd.factorize(hu)
                codes, gpus = codes.astype(np.int32), [str(x) for x in uniq]
                cols = {c: hv[:, k] for k, c in enumerate(names)}  # views: _columns_frame casts each once
            sql, params = metric_select(db, "samples", "timestamp", (), boundary, t1, ids, since_inclusive=False)
            ru, rts, rv = fetch_block(db, conn, sql, params, 0, stream=True)
            ident = _identities(conn, sorted(set(gpus) | set(ru.tolist())))
        if len(ru):  # the current hour so far, rolled up as the stored hours were
            tail = rollup_samples(ru, rts, rv)
            code_of = {g: k for k, g in enumerate(gpus)}
            tail_codes = np.array([code_of.setdefault(str(g), len(code_of)) for g in tail["gpu_uuid"]], np.int32)
            gpus = list(code_of)
            codes = np.concatenate([codes, tail_codes])
            start = np.concatenate([start, tail["hour"].to_numpy(np.int64)])
            for c, d in zip(names, dtypes, strict=True):
                cols[c] = np.concatenate([cols[c], tail[c].to_numpy(np.float64).astype(d)])
        end = start + hourly.HOUR_US
        last_at = cols.pop("last_at").astype(np.int64)
        cols.pop("n")
        until_us = int(t1.timestamp()) * 1_000_000 + t1.microsecond
        frame = _columns_frame(codes, gpus, np.where(end <= until_us, end, last_at), cols, ident)
        frame.attrs[hourly.HOURLY_ATTR] = True
        return frame

    def newest_time(self, until: datetime | None = None) -> datetime | None:
        """The timestamp of the newest raw sample of any GPU, at or before `until` if given (None when none)."""
        q = sa.select(sa.func.max(samples.c.timestamp))
        if until is not None:
            q = q.where(samples.c.timestamp <= utc(until, "until"))
        with self.db.tx() as conn:
            t = conn.execute(q).scalar_one()
        return None if t is None else utc(t, "newest sample")
