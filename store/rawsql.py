"""Raw SQL reads shared by the store's bulk paths: WHERE clauses, metric SELECTs, and running
them through the driver into numpy arrays (never one Python object per sample)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import numpy as np
import psycopg
from sqlalchemy.engine import Connection

from store.engine import Sql, quote
from store.schema import METRIC_COLUMNS

FETCH_BATCH = 50_000


def where_sql(
    db: Sql,
    ts_col: str,
    since: datetime | None,
    until: datetime | None,
    uuids: Sequence[str] | None,
    until_inclusive: bool = True,
    since_inclusive: bool = True,
) -> tuple[str, list[Any]]:
    """A raw-SQL WHERE clause on a time column and GPUs, and its parameters ("" when it has none)."""
    clauses: list[str] = []
    params: list[Any] = []
    if since is not None:
        clauses.append(f"{quote(ts_col)} {'>=' if since_inclusive else '>'} {db.ph}")
        params.append(db.bind_ts(since))
    if until is not None:
        clauses.append(f"{quote(ts_col)} {'<=' if until_inclusive else '<'} {db.ph}")
        params.append(db.bind_ts(until))
    if uuids is not None:
        clauses.append(f"gpu_uuid IN ({', '.join([db.ph] * len(uuids))})")
        params.extend(uuids)
    return (" WHERE " + " AND ".join(clauses) if clauses else ""), params


def metric_select(
    db: Sql,
    table: str,
    ts_col: str,
    extra: Sequence[str],
    since: datetime | None,
    until: datetime | None,
    uuids: Sequence[str] | None,
    columns: Sequence[str] = METRIC_COLUMNS,
    *,
    since_inclusive: bool = True,
    until_inclusive: bool = True,
) -> tuple[str, list[Any]]:
    """Raw SQL for (gpu_uuid, time in µs, extra…, metrics…) of `table`, and its parameters."""
    where, params = where_sql(db, ts_col, since, until, uuids, until_inclusive, since_inclusive)
    cols = ", ".join(quote(c) for c in columns)
    lead = ", ".join(["gpu_uuid", db.ts_us(quote(ts_col)), *extra])
    return f"SELECT {lead}, {cols} FROM {table}{where}", params


def fetch_block(
    db: Sql,
    conn: Connection,
    sql: str,
    params: Sequence[Any],
    n_extra: int,
    *,
    stream: bool,
    n_values: int = len(METRIC_COLUMNS),
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Run `sql` (gpu_uuid, ts_us, extra…, metrics…) through the driver into arrays.

    Returns (uuids as objects, ts_us int64, values float64 of shape (rows, n_extra + metrics)),
    NULL as NaN. Rows are fetched FETCH_BATCH at a time (server-side cursor on PostgreSQL).
    """
    raw: Any = conn.connection.driver_connection
    width = n_extra + n_values
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
