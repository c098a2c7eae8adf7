"""Hour rows as columns, the scorer's window's unit (`store.window`): read, combined, kept, replaced.

A `Rows` holds hour rows (GPU, hour start) with their HOUR_VALUES (or those a round reads:
`values_of`) in the dtype the history frame gives them (`core.history.metric_dtype`: float32 for
gauges), so a frame made from them is the frame `Samples.scoring_history` makes from the same rows,
bit for bit. The reads go through the same SQL and the same driver paths (`store.rawsql`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

import numpy as np
import pandas as pd
from sqlalchemy.engine import Connection

from core import history, hourly
from store.engine import Sql
from store.rawsql import copy_columns, fetch_block, metric_select
from store.rollup import HOUR_VALUES, rollup_samples


def values_of(columns: Iterable[str] | None) -> tuple[str, ...]:
    """The HOUR_VALUES a frame of these columns holds (None: every one), in HOUR_VALUES order."""
    if columns is None:
        return HOUR_VALUES
    wanted = set(columns)
    return tuple(c for c in HOUR_VALUES if c in wanted)


def _dtypes(values: Sequence[str]) -> list[np.dtype]:
    return [history.metric_dtype(c) for c in values]


def row_bytes(values: Sequence[str]) -> int:
    """Memory of one hour row held: its GPU code, its hour, these values."""
    return 4 + 8 + sum(d.itemsize for d in _dtypes(values))


ROW_BYTES = row_bytes(HOUR_VALUES)
"""Memory of one hour row held with every value."""


@dataclass
class Rows:
    """Hour rows as columns: GPU codes into `gpus` (each GPU has a row), hour starts and stamps in µs."""

    codes: np.ndarray
    gpus: list[str]
    start: np.ndarray
    cols: dict[str, np.ndarray]
    """HOUR_VALUES (or some: `values_of`), each in its history dtype."""
    stamp: np.ndarray | None = None
    """The frame's timestamp of each row; None: the hour's end (every whole hour)."""

    def __len__(self) -> int:
        return len(self.codes)

    @property
    def row_bytes(self) -> int:
        """Memory of one row: its GPU code, its hour, its stamp if it has one, its values."""
        return 12 + (0 if self.stamp is None else 8) + sum(v.itemsize for v in self.cols.values())

    @property
    def nbytes(self) -> int:
        return len(self.codes) * self.row_bytes

    def stamps(self) -> np.ndarray:
        return self.start + hourly.HOUR_US if self.stamp is None else self.stamp


def no_rows(values: Sequence[str] = HOUR_VALUES) -> Rows:
    """Rows with no row (of these values)."""
    cols = {c: np.empty(0, d) for c, d in zip(values, _dtypes(values), strict=True)}
    return Rows(np.empty(0, np.int32), [], np.empty(0, np.int64), cols)


def read_hours(
    db: Sql,
    conn: Connection,
    lo: datetime,
    hi: datetime,
    ids: Sequence[str] | None,
    values: Sequence[str] = HOUR_VALUES,
    *,
    after: int | None = None,
) -> Rows:
    """The stored hour rows of [lo, hi) (of `ids`; None: every GPU), as `scoring_history` reads them, with
    these values; `after`: only those stamped with a later revision (`store.changes`)."""
    if ids is not None and not ids:
        return no_rows(values)
    # No count or newest sample: a whole hour's row is stamped at its end (`scoring_history`).
    sql, params = metric_select(db, "samples_hourly", "hour", (), lo, hi, ids, values, until_inclusive=False)
    if after is not None:
        sql += f" AND revision > {db.ph}"  # the WHERE always has the hour bounds
        params.append(after)
    dtypes = _dtypes(values)
    if db.dialect == "postgresql":
        codes, gpus, start, cols = copy_columns(conn, sql, params, values, dtypes)
    else:
        hu, start, hv = fetch_block(db, conn, sql, params, 0, stream=True, n_values=len(values))
        codes, uniq = pd.factorize(hu)
        gpus = [str(x) for x in uniq]
        cols = {c: hv[:, k].astype(d) for k, (c, d) in enumerate(zip(values, dtypes, strict=True))}
    return Rows(codes.astype(np.int32), gpus, start.astype(np.int64), cols)


def hour_gpus(db: Sql, conn: Connection) -> list[str]:
    """Every GPU with a stored hour row, in uuid order: one probe of the key's index per GPU (a loose
    index scan), not a pass over the rows."""
    sql = (
        "WITH RECURSIVE u(id) AS (SELECT min(gpu_uuid) FROM samples_hourly UNION ALL "
        "SELECT (SELECT min(gpu_uuid) FROM samples_hourly WHERE gpu_uuid > u.id) FROM u WHERE u.id IS NOT NULL) "
        "SELECT id FROM u WHERE id IS NOT NULL"
    )
    return sorted(str(r[0]) for r in conn.exec_driver_sql(sql))


def read_tail(
    db: Sql,
    conn: Connection,
    boundary: datetime,
    until: datetime,
    ids: Sequence[str] | None,
    values: Sequence[str] = HOUR_VALUES,
) -> Rows:
    """The raw samples of (boundary, until] rolled up as the stored hours were, stamped as
    `scoring_history` stamps them: at the hour's end if it is over by `until`, else at its newest sample."""
    sql, params = metric_select(db, "samples", "timestamp", (), boundary, until, ids, since_inclusive=False)
    ru, rts, rv = fetch_block(db, conn, sql, params, 0, stream=True)
    if not len(ru):
        return no_rows(values)
    tail = rollup_samples(ru, rts, rv)
    codes, uniq = pd.factorize(tail["gpu_uuid"].to_numpy(dtype=object))
    start = tail["hour"].to_numpy(np.int64)
    cols = {c: tail[c].to_numpy(np.float64).astype(d) for c, d in zip(values, _dtypes(values), strict=True)}
    last_at = tail["last_at"].to_numpy(np.float64).astype(np.int64)
    end = start + hourly.HOUR_US
    until_us = int(until.timestamp()) * 1_000_000 + until.microsecond
    stamp = np.where(end <= until_us, end, last_at)
    return Rows(codes.astype(np.int32), [str(x) for x in uniq], start, cols, stamp)


def combine(parts: Sequence[Rows]) -> Rows:
    """The rows of every part in one (a GPU in several parts gets one code)."""
    parts = [p for p in parts if len(p)]
    if not parts:
        return no_rows()
    if len(parts) == 1:
        return parts[0]
    code_of: dict[str, int] = {}
    codes = []
    for p in parts:
        local = np.array([code_of.setdefault(g, len(code_of)) for g in p.gpus], dtype=np.int32)
        codes.append(local[p.codes])
    stamped = any(p.stamp is not None for p in parts)
    return Rows(
        np.concatenate(codes),
        list(code_of),
        np.concatenate([p.start for p in parts]),
        {c: np.concatenate([p.cols[c] for p in parts]) for c in parts[0].cols},
        np.concatenate([p.stamps() for p in parts]) if stamped else None,
    )


def join_sorted(parts: list[Rows], values: Sequence[str] = HOUR_VALUES) -> Rows:
    """Sorted whole hours (`sort_rows`), each part's GPUs after the part before's (uuid order), as one,
    in order without a sort. Each column is joined and its parts let go before the next (memory: the
    rows and one column more, not twice the rows): the parts give up their values."""
    parts = [p for p in parts if len(p)]
    if len(parts) <= 1:
        return parts[0] if parts else no_rows(values)
    if any(p.stamp is not None for p in parts):
        raise ValueError("join_sorted joins whole hours, not a tail")
    first = np.cumsum([0] + [len(p.gpus) for p in parts[:-1]])
    codes = np.concatenate([p.codes + np.int32(k) for p, k in zip(parts, first.tolist(), strict=True)])
    gpus = [g for p in parts for g in p.gpus]
    start = np.concatenate([p.start for p in parts])
    cols = {c: np.concatenate([p.cols.pop(c) for p in parts]) for c in list(parts[0].cols)}
    return Rows(codes, gpus, start, cols)


def keep(rows: Rows, mask: np.ndarray, *, give_up: bool = False) -> Rows:
    """The rows where `mask` is true, in their order; GPUs left without a row are forgotten.
    `give_up`: `rows` lets go of each of its values once taken (memory: the rows and one column more)."""
    if mask.all():
        return rows
    at = np.flatnonzero(mask)  # a take by index: several times a boolean mask's speed on millions of rows
    codes = rows.codes.take(at)
    gpus = rows.gpus
    present = np.bincount(codes, minlength=len(gpus)) > 0
    if not present.all():
        codes = (np.cumsum(present, dtype=np.int32) - 1).take(codes)
        gpus = [g for g, p in zip(gpus, present.tolist(), strict=True) if p]
    return Rows(
        codes.astype(np.int32, copy=False),
        gpus,
        rows.start.take(at),
        {c: (rows.cols.pop(c) if give_up else rows.cols[c]).take(at) for c in list(rows.cols)},
        None if rows.stamp is None else rows.stamp.take(at),
    )


def of_gpus(rows: Rows, gpus: set[str] | frozenset[str]) -> np.ndarray:
    """A mask of the rows of these GPUs."""
    hit = np.array([g in gpus for g in rows.gpus], dtype=bool)
    return hit[rows.codes] if len(hit) else np.zeros(len(rows), dtype=bool)


def replace(rows: Rows, new: Rows) -> Rows:
    """`rows` with each (GPU, hour) of `new` replaced by (or added as) its row in `new`."""
    if not len(new):
        return rows
    code_of = {g: k for k, g in enumerate(rows.gpus)}
    mapped = np.array([code_of.get(g, -1) for g in new.gpus], dtype=np.int64)[new.codes]
    hour = hourly.HOUR_US
    keys = rows.codes.astype(np.int64) * (1 << 24) + rows.start // hour % (1 << 24)
    new_keys = mapped * (1 << 24) + new.start // hour % (1 << 24)
    stale = np.isin(keys, new_keys[mapped >= 0])
    return combine([keep(rows, ~stale), new])


def sort_rows(rows: Rows) -> Rows:
    """The rows in (uuid, hour) order, GPU codes in uuid order (what `_columns_frame` makes)."""
    by_name = np.argsort(np.asarray(rows.gpus, dtype=object))
    rank = np.empty(len(by_name), dtype=np.int32)
    rank[by_name] = np.arange(len(by_name), dtype=np.int32)
    codes = rank[rows.codes]
    order = np.lexsort((rows.start, codes))
    return Rows(
        codes[order],
        [rows.gpus[k] for k in by_name],
        rows.start[order],
        {c: v[order] for c, v in rows.cols.items()},
        None if rows.stamp is None else rows.stamp[order],
    )


def _places(rows: Rows, later: Rows) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(GPU names, `rows`' codes into them, sorted `later`'s codes, where each of `later`'s rows goes
    in `rows`: `np.insert`'s positions)."""
    names = np.asarray(sorted(set(rows.gpus) | set(later.gpus)), dtype=object)
    codes = rows.codes
    if len(names) > len(rows.gpus):  # GPUs new to the rows: the codes move up past them
        codes = np.searchsorted(names, np.asarray(rows.gpus, dtype=object)).astype(np.int32)[codes]
    extra = np.searchsorted(names, np.asarray(later.gpus, dtype=object)).astype(np.int32)[later.codes]
    return names, codes, extra, np.searchsorted(codes, extra, side="right")


def append_later(rows: Rows, later: Rows, *, give_up: bool = False) -> Rows:
    """Sorted `rows` with `later`'s rows put in order, each after its GPU's rows (a later hour):
    one copy of each column, no sort of the whole. `give_up`: `rows` lets go of each of its values
    once copied (memory: the rows and one column more, not twice the rows)."""
    if not len(later):
        return rows
    later = sort_rows(later)
    names, codes, extra, at = _places(rows, later)
    stamped = rows.stamp is not None or later.stamp is not None
    return Rows(
        np.insert(codes, at, extra),
        names.tolist(),
        np.insert(rows.start, at, later.start),
        {c: np.insert(rows.cols.pop(c) if give_up else rows.cols[c], at, later.cols[c]) for c in list(rows.cols)},
        np.insert(rows.stamps(), at, later.stamps()) if stamped else None,
    )


def with_tail(rows: Rows, tail: Rows) -> tuple[Rows, np.ndarray, np.ndarray]:
    """`append_later(rows, tail)` of whole hours and a tail, giving up `rows`' values column by column
    (memory: the rows and one column more, not twice the rows); the whole hours' stamps are their
    ends, so the tail's rows are said apart: (rows, where the tail's rows are, their stamps)."""
    if not len(tail):
        return rows, np.empty(0, np.int64), np.empty(0, np.int64)
    if rows.stamp is not None:
        raise ValueError("with_tail puts a tail after whole hours, not after another tail")
    later = sort_rows(tail)
    names, codes, extra, at = _places(rows, later)
    cols = {c: np.insert(rows.cols.pop(c), at, later.cols[c]) for c in list(rows.cols)}
    out = Rows(np.insert(codes, at, extra), names.tolist(), np.insert(rows.start, at, later.start), cols)
    return out, at + np.arange(len(at)), later.stamps()


def slide(rows: Rows, lo_us: int, closed: Rows, *, give_up: bool = False) -> Rows | None:
    """`append_later(keep(rows, rows.start >= lo_us), closed)` in one contiguous copy of each column, when an
    hour closed as it does in a steady fleet: each GPU held loses its one oldest row and gains one row of
    `closed` (the same GPUs). None when the rows are not so (the caller takes the general path).
    `give_up`: a slide lets go of `rows`' values column by column (memory: the rows and one column more)."""
    n_gpus = len(rows.gpus)
    if not len(rows) or len(closed) != n_gpus or rows.stamp is not None or closed.stamp is not None:
        return None
    later = sort_rows(closed)
    if later.gpus != rows.gpus:
        return None
    dropped = rows.start < lo_us
    counts = np.bincount(rows.codes, minlength=n_gpus)
    if np.count_nonzero(dropped) != n_gpus or not (counts > 0).all():
        return None
    ends = np.cumsum(counts) - 1  # each GPU's last row; its first is ends - counts + 1
    if not dropped[ends - counts + 1].all() or not (later.codes == np.arange(n_gpus)).all():
        return None  # not exactly each GPU's oldest row, or not one closed row per GPU

    def shifted(v: np.ndarray, last: np.ndarray) -> np.ndarray:
        out = np.empty_like(v)
        out[:-1] = v[1:]  # each GPU's rows move up by one: its oldest goes, its next GPU's oldest ...
        out[ends] = last  # ... lands on its last row, which is the hour that closed
        return out

    cols = {c: shifted(rows.cols.pop(c) if give_up else rows.cols[c], later.cols[c]) for c in list(rows.cols)}
    return Rows(rows.codes, rows.gpus, shifted(rows.start, later.start), cols)
