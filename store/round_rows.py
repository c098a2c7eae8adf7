"""A scoring round's score rows on PostgreSQL, through the driver: written as one statement over
arrays, the rounds before read without SQLAlchemy's per-row result processing.

`store.decisions` stores and reads the same rows through SQLAlchemy Core on SQLite; these give
PostgreSQL the same rows, ids and order at a fleet's size (10,000 GPUs a round), where Core's
insert-many-values statement (split again by psycopg in Python) and its per-row result types cost
seconds a round (docs/decisions/0090).
"""

from __future__ import annotations

import io
import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.csv as pv_csv
from sqlalchemy.engine import Connection

from store.engine import Sql, quote

_VALUES = ("risk", "risk_ecc", "risk_thermal", "risk_pcie", "heat_z", "heat_vs_node_z")
_TEXTS = ("decision", "reasons", "remedy", "remedy_when")


def _cursor(conn: Connection) -> Any:
    """A cursor of the driver's connection, in the transaction `conn` is in."""
    raw: Any = conn.connection.driver_connection
    return raw.cursor()


def insert_scores(conn: Connection, rows: Sequence[dict[str, Any]], at: datetime) -> list[int]:
    """Insert the round's score rows (`store.decisions._score_rows`), all scored `at`; returns their
    ids in the rows' order, assigned in that order (as Core's insert of the same rows assigns them).

    One INSERT … SELECT over one array per column, the reasons as the JSON text SQLAlchemy's JSON
    type writes (`json.dumps`)."""
    names = ("gpu_uuid", *_VALUES, *_TEXTS)
    arrays: list[list[Any]] = [[r["gpu_uuid"] for r in rows]]
    arrays += [[r[c] for r in rows] for c in _VALUES]
    arrays += [[r["decision"] for r in rows], [json.dumps(r["reasons"]) for r in rows]]
    arrays += [[r["remedy"] for r in rows], [r["remedy_when"] for r in rows]]
    casts = ["text[]", *["float8[]"] * len(_VALUES), *["text[]"] * len(_TEXTS)]
    alias = [f"c{i}" for i in range(len(names))]
    picked = [f"{a}::json" if n == "reasons" else a for a, n in zip(alias, names, strict=True)]
    stmt = (
        f"INSERT INTO risk_scores (scored_at, {', '.join(quote(n) for n in names)}) "
        f"SELECT %s, {', '.join(picked)} "
        f"FROM unnest({', '.join(f'%s::{c}' for c in casts)}) WITH ORDINALITY AS t({', '.join(alias)}, i) "
        "ORDER BY i RETURNING id, gpu_uuid"
    )
    with _cursor(conn) as cur:
        cur.execute(stmt, [at, *arrays])
        by_uuid = dict((u, i) for i, u in cur.fetchall())
    return [int(by_uuid[r["gpu_uuid"]]) for r in rows]


def point_latest(conn: Connection, uuids: Sequence[str], ids: Sequence[int], at: datetime) -> None:
    """Point each GPU at its score `ids` (scored `at`) unless its latest stored score is newer."""
    stmt = (
        "UPDATE gpus AS g SET latest_score_id = t.sid FROM unnest(%s::text[], %s::int8[]) AS t(u, sid) "
        "WHERE g.uuid = t.u AND (g.latest_score_id IS NULL OR "
        "(SELECT s.scored_at FROM risk_scores AS s WHERE s.id = g.latest_score_id) <= %s)"
    )
    with _cursor(conn) as cur:
        cur.execute(stmt, [list(uuids), list(ids), at])


def read_rounds(
    conn: Connection, uuids: Sequence[str], lo: datetime, hi: datetime, of: Sequence[str]
) -> list[tuple[str, datetime, tuple[float | None, ...]]]:
    """(gpu_uuid, scored_at, values of `of`) of the GPUs' rounds in [lo, hi), ordered by GPU and time
    (the caller bounds `uuids`); scored_at an aware datetime in `datetime.UTC`, as Core returns it."""
    cols = ", ".join(quote(c) for c in of)
    stmt = (
        f"SELECT gpu_uuid, scored_at, {cols} FROM risk_scores "
        "WHERE gpu_uuid = ANY(%s::text[]) AND scored_at >= %s AND scored_at < %s ORDER BY gpu_uuid, scored_at"
    )
    with _cursor(conn) as cur:
        cur.execute(stmt, [list(uuids), lo, hi])
        return [(r[0], r[1].astimezone(UTC), tuple(r[2:])) for r in cur.fetchall()]


def read_round_columns(
    conn: Connection, uuids: Sequence[str], lo: datetime, hi: datetime, of: Sequence[str]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`read_rounds`' rows as columns: the GPUs (objects), the times (naive UTC datetime64[us]) and
    the values (float64, one column per `of`, NaN where null), in the same order.

    The server joins the rows into one CSV text (a GPU's position in `uuids`, µs, the values as
    float8's exact text) that pyarrow parses: one value over the wire, not one message a row."""
    part = list(dict.fromkeys(uuids))  # an IN list's semantics: a GPU named twice is read once
    values = ", ".join(f"coalesce(s.{quote(c)}::text, '')" for c in of)
    stmt = (
        f"SELECT string_agg(concat_ws(',', q.k, {Sql('postgresql').ts_us('s.scored_at')}, {values}), E'\\n' "
        "ORDER BY s.gpu_uuid, s.scored_at) "
        "FROM risk_scores AS s JOIN unnest(%s::text[]) WITH ORDINALITY AS q(u, k) ON s.gpu_uuid = q.u "
        "WHERE s.scored_at >= %s AND s.scored_at < %s"
    )
    with _cursor(conn) as cur:
        cur.execute(stmt, [part, lo, hi])
        text = cur.fetchone()[0]
    if not text:
        return np.empty(0, dtype=object), np.empty(0, dtype="datetime64[us]"), np.empty((0, len(of)))
    names = ["k", "ts", *of]
    table = pv_csv.read_csv(
        io.BytesIO(text.encode()),
        read_options=pv_csv.ReadOptions(column_names=names),
        convert_options=pv_csv.ConvertOptions(column_types={"k": pa.int64(), "ts": pa.int64()}
                                              | dict.fromkeys(of, pa.float64())),
    )  # fmt: skip
    k = table.column("k").to_numpy() - 1
    gpu = np.asarray(part, dtype=object)[k]
    at = table.column("ts").to_numpy().astype("datetime64[us]")
    vals = np.column_stack([table.column(c).to_numpy(zero_copy_only=False) for c in of]).astype(np.float64)
    return gpu, at, vals
