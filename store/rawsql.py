"""Raw SQL reads shared by the store's bulk paths: WHERE clauses, metric SELECTs, and running
them through the driver into numpy arrays (never one Python object per sample)."""

from __future__ import annotations

import io
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import numpy as np
import psycopg
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pv_csv
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


class _CopyStream(io.RawIOBase):
    """A COPY … TO STDOUT as a readable byte stream (for pyarrow's CSV reader), in big reads."""

    def __init__(self, copy: Any) -> None:
        self._copy = copy
        self._rest = b""

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        want = len(b)
        parts: list[Any] = [self._rest] if self._rest else []
        have = len(self._rest)
        while have < want:
            block = self._copy.read()
            if not block:
                break
            parts.append(block)
            have += len(block)
        data = b"".join(parts)
        n = min(want, len(data))
        b[:n] = data[:n]
        self._rest = data[n:]
        return n


def copy_columns(
    conn: Connection, sql: str, params: Sequence[Any], names: Sequence[str], dtypes: Sequence[np.dtype]
) -> tuple[np.ndarray, list[str], np.ndarray, dict[str, np.ndarray]]:
    """PostgreSQL: `sql` (gpu_uuid, ts_us, then `names`) streamed as COPY … TO STDOUT (CSV) and parsed
    by pyarrow a block at a time, straight into one array per column in its final dtype.

    Returns (GPU codes int32 into `uuids`, uuids, ts_us int64, {name: values}) in the database's
    row order, NULL as NaN. Memory: the result plus one block, never a row of Python objects.
    """
    raw: Any = conn.connection.driver_connection
    assert isinstance(raw, psycopg.Connection)
    read = pv_csv.ReadOptions(column_names=["gpu_uuid", "ts", *names], block_size=1 << 22)
    types = {"gpu_uuid": pa.string(), "ts": pa.int64(), **dict.fromkeys(names, pa.float64())}
    convert = pv_csv.ConvertOptions(column_types=types)
    code_of: dict[str, int] = {}
    codes: list[np.ndarray] = []
    stamps: list[np.ndarray] = []
    parts: dict[str, list[np.ndarray]] = {n: [] for n in names}
    with raw.cursor() as cur, cur.copy(f"COPY ({sql}) TO STDOUT WITH (FORMAT csv)", tuple(params)) as copy:
        stream = io.BufferedReader(_CopyStream(copy), 1 << 22)
        empty = not stream.peek(1)  # no row at all: pyarrow refuses an empty CSV
        for batch in [] if empty else pv_csv.open_csv(stream, read_options=read, convert_options=convert):
            uuid = batch.column(0)
            seen = pc.unique(uuid)
            local = np.array([code_of.setdefault(str(x), len(code_of)) for x in seen.to_pylist()], dtype=np.int32)
            codes.append(local[pc.index_in(uuid, value_set=seen).to_numpy()])
            stamps.append(batch.column(1).to_numpy().copy())
            for j, (name, dtype) in enumerate(zip(names, dtypes, strict=True)):
                col = batch.column(j + 2).to_numpy(zero_copy_only=False)  # nulls -> NaN
                parts[name].append(col.astype(dtype, copy=True))  # a copy: the batch's buffers go with it
    cols = {}
    for name in names:  # one column at a time: the parts of a column go as it is joined
        cols[name] = np.concatenate(parts.pop(name)) if codes else np.empty(0, dtype=np.float64)
    return (
        np.concatenate(codes) if codes else np.empty(0, dtype=np.int32),
        list(code_of),
        np.concatenate(stamps) if stamps else np.empty(0, dtype=np.int64),
        cols,
    )
