"""A scoring round's score rows on PostgreSQL, through the driver: copied once into a temporary table
that the round's questions ask, the rounds before read without SQLAlchemy's per-row result processing.

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


_STAGED = "gpuhealth_round"
"""The temporary table a round's rows are copied into (`stage_round`), dropped at the commit."""


def stage_round(conn: Connection, rows: Sequence[dict[str, Any]]) -> None:
    """COPY the round's score rows (`store.decisions._score_rows`) into a temporary table dropped
    at the commit, each with its position: the questions of the round ask it, not a Python list of
    10,000 items per column (psycopg's array dumping cost half a second a round, docs/decisions/0090).
    The reasons as the JSON text SQLAlchemy's JSON type writes (`json.dumps`); a float as its exact
    text (NaN and -0 included), as psycopg dumps it anywhere."""
    cols = ", ".join(f"{quote(c)} float8" for c in _VALUES)
    texts = ", ".join(f"{quote(c)} text" for c in _TEXTS)
    with _cursor(conn) as cur:
        cur.execute(f"CREATE TEMPORARY TABLE {_STAGED} (i int4, gpu_uuid text, {cols}, {texts}) ON COMMIT DROP")
        with cur.copy(f"COPY {_STAGED} FROM STDIN") as copy:
            for i, r in enumerate(rows):
                copy.write_row((i, r["gpu_uuid"], *(r[c] for c in _VALUES), r["decision"], json.dumps(r["reasons"]),
                                r["remedy"], r["remedy_when"]))  # fmt: skip


def unknown_gpus(conn: Connection) -> set[str]:
    """The staged round's GPUs the gpus table does not know."""
    with _cursor(conn) as cur:
        cur.execute(
            f"SELECT r.gpu_uuid FROM {_STAGED} AS r WHERE NOT EXISTS (SELECT FROM gpus AS g WHERE g.uuid = r.gpu_uuid)"
        )
        return {str(u) for (u,) in cur.fetchall()}


def insert_staged(conn: Connection, at: datetime) -> None:
    """Insert the staged round's score rows, all scored `at`, with ids assigned in the rows' order (as
    Core's insert of the same rows assigns them), and point each GPU at its new score unless its
    latest stored score is newer. One statement; nothing comes back."""
    names = ("gpu_uuid", *_VALUES, *_TEXTS)
    picked = [f"r.{quote(n)}::json" if n == "reasons" else f"r.{quote(n)}" for n in names]
    stmt = (
        f"WITH ins AS (INSERT INTO risk_scores (scored_at, {', '.join(quote(n) for n in names)}) "
        f"SELECT %(at)s, {', '.join(picked)} FROM {_STAGED} AS r ORDER BY r.i RETURNING id, gpu_uuid) "
        "UPDATE gpus AS g SET latest_score_id = ins.id FROM ins WHERE g.uuid = ins.gpu_uuid AND (g.latest_score_id "
        "IS NULL OR (SELECT s.scored_at FROM risk_scores AS s WHERE s.id = g.latest_score_id) <= %(at)s)"
    )  # the UPDATE sees the table as before the INSERT: a pointer to an older score finds its time
    with _cursor(conn) as cur:
        cur.execute(stmt, {"at": at})


def staged_active_decisions(conn: Connection) -> dict[str, tuple[int, str]]:
    """uuid -> (id, decision) of the staged round's GPUs' active decisions."""
    with _cursor(conn) as cur:
        cur.execute(
            f"SELECT d.id, d.gpu_uuid, d.decision FROM decisions AS d JOIN {_STAGED} AS r ON d.gpu_uuid = r.gpu_uuid "
            "WHERE d.state != 'closed'"
        )  # the literal, as `store.engine.not_closed` writes it: the active-decision index is partial on it
        return {str(u): (int(i), str(d)) for i, u, d in cur.fetchall()}


def json_list(values: Sequence[Any]) -> str:
    """A list as one JSON text parameter, for `json_array_elements(_text)`: psycopg dumps a Python list as
    an array in Python, element by element (a text array through a regular expression each), which cost
    a third of a second a round at 10,000 GPUs (decision 0090, run 8); json.dumps is C. Any string
    survives the trip exactly (a NUL is refused, as PostgreSQL's text refuses it anyway)."""
    return json.dumps(list(values))


def any_of_json(param: str, cast: str = "") -> str:
    """`ANY(…)` of the values of a `json_list` parameter (`cast`: e.g. "::int8"), as an array built once
    (an initplan), so `col = any_of_json(…)` keeps the index scan an array parameter had."""
    return f"ANY(ARRAY(SELECT json_array_elements_text({param}::json){cast}))"


def gpu_identities(conn: Connection, uuids: Sequence[str]) -> list[tuple[Any, ...]]:
    """(uuid, hostname, gpu_index, model_name, ib_rail, pci_bus_id) of these GPUs in the gpus table, as
    stored (NULL as None), in no order: `store.samples._identities`' read, in one statement."""
    if not uuids:
        return []
    with _cursor(conn) as cur:
        cur.execute(
            "SELECT uuid, hostname, gpu_index, model_name, ib_rail, pci_bus_id FROM gpus "
            f"WHERE uuid = {any_of_json('%s')}",
            [json_list(uuids)],
        )
        return list(cur.fetchall())


def close_decisions(conn: Connection, ids: Sequence[int], at: datetime) -> None:
    """Close the decisions `ids` at `at` (one statement)."""
    if ids:
        with _cursor(conn) as cur:
            cur.execute(
                "UPDATE decisions SET state = 'closed', closed_at = %(t)s, updated_at = %(t)s "
                f"WHERE id = {any_of_json('%(i)s', '::int8')}",
                {"t": at, "i": json_list([int(i) for i in ids])},
            )


def refresh_decisions(conn: Connection, refresh: Sequence[tuple[int, Sequence[str]]], at: datetime) -> None:
    """Give the decisions their new reasons (id, reasons), updated `at` (one statement); the reasons as
    the JSON text SQLAlchemy's JSON type writes (`json.dumps`), as `stage_round` copies them, each passed
    as a string (so the stored text is that text, whatever the server would make of a JSON value)."""
    if refresh:
        with _cursor(conn) as cur:
            cur.execute(
                "UPDATE decisions AS d SET reasons = (v.value ->> 1)::json, updated_at = %(t)s "
                "FROM json_array_elements(%(v)s::json) AS v WHERE d.id = (v.value ->> 0)::int8",
                {"t": at, "v": json_list([(int(i), json.dumps(list(r))) for i, r in refresh])},
            )


def read_rounds(
    conn: Connection, uuids: Sequence[str], lo: datetime, hi: datetime, of: Sequence[str]
) -> list[tuple[str, datetime, tuple[float | None, ...]]]:
    """(gpu_uuid, scored_at, values of `of`) of the GPUs' rounds in [lo, hi), ordered by GPU and time
    (the caller bounds `uuids`); scored_at an aware datetime in `datetime.UTC`, as Core returns it."""
    cols = ", ".join(quote(c) for c in of)
    stmt = (
        f"SELECT gpu_uuid, scored_at, {cols} FROM risk_scores "
        f"WHERE gpu_uuid = {any_of_json('%s')} AND scored_at >= %s AND scored_at < %s "
        "ORDER BY gpu_uuid, scored_at"
    )
    with _cursor(conn) as cur:
        cur.execute(stmt, [json_list(uuids), lo, hi])
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
        "FROM risk_scores AS s JOIN json_array_elements_text(%s::json) WITH ORDINALITY AS q(u, k) ON s.gpu_uuid = q.u "
        "WHERE s.scored_at >= %s AND s.scored_at < %s"
    )
    with _cursor(conn) as cur:
        cur.execute(stmt, [json_list(part), lo, hi])
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
