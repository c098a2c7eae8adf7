"""The store's side of a scoring round at fleet size: the write of the round (`Decisions.write_scores`)
and the rounds before (`Decisions.recent_rounds`, as `StoredRounds` reads them), on PostgreSQL.

Usage: python benchmarks/bench_decisions.py [--gpus 10000] [--rounds 24] [--repeat 3] [--pg-url URL]

A store with `--gpus` GPUs (one in a thousand lost) and `--rounds` stored rounds at a 5-minute step
(seeded by COPY), then, `--repeat` times, in turn: one more round written by `write_scores` (the
policy's `decision_changes`, a few GPUs changing decision) through the driver (`store.round_rows`,
as the store does on PostgreSQL), the next as run 5 left that path (one Python list per column,
Core's IN lists; "before"), and the next through SQLAlchemy Core (`store.decisions`' SQLite path,
the PostgreSQL path before 0090's follow-up), each beside a bare COPY of the same rows into a
scratch table; and the stored rounds read back by `recent_rounds` (the risk, as
`StoredRounds.risk_since` does), beside a bare COPY … TO STDOUT of the same rows. Each line prints
the time over the bare driver's. Then the scorer's four questions of the rounds before
(`StoredRounds`), read as columns or, for "core", as `recent_rounds`' tuples through
`replay.stored_run_began`; and the GPUs a round reads: `Gpus.identities` ("driver") or every
GPU's `find` listing (`all_gpus`, as run 5 read them).
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from predictor.conditions import HEAT_COLUMNS
from predictor.policy import decision_changes
from predictor.replay import recently_wore, stored_run_began
from predictor.thresholds import Thresholds
from service.scorer import all_gpus
from service.stored_rounds import StoredRounds
from store import Store, decisions, round_rows
from store.decisions import ScoreRecord
from store.schema import T_GPUS

T0 = datetime(2026, 1, 5, tzinfo=UTC)
STEP = timedelta(minutes=5)


def records(n: int, k: int) -> list[ScoreRecord]:
    """Round `k`'s records for `n` GPUs: mostly ok, one in fifty demoted (which moves with `k`)."""
    out: list[ScoreRecord] = []
    for i in range(n):
        demote = (i + k) % 50 == 0
        out.append(
            {"gpu_uuid": f"GPU-{i:08d}", "hostname": f"node-{i // 8:05d}", "model_name": "NVIDIA H100",
             "risk": 0.9 if demote else (i % 97) / 200, "risk_ecc": 0.01, "risk_thermal": None,
             "risk_pcie": 0.02, "heat_z": (i % 13) / 4 if i % 5 else None, "heat_vs_node_z": 0.5,
             "decision": "demote" if demote else "ok", "reasons": ["risk high"] if demote else [],
             "remedy": None, "remedy_when": None}
        )  # fmt: skip
    return out


def seed(store: Store, n: int, rounds: int) -> None:
    """`rounds` stored rounds of `n` GPUs, copied straight in (the write under test is timed later)."""
    store.decisions.write_scores(records(n, 0), T0, rule=decision_changes)  # the GPUs, the first round
    store.gpus.upsert(
        [
            {"uuid": f"GPU-{i:08d}", "hostname": f"node-{i // 8:05d}", "state": "lost", "seen_at": T0}
            for i in range(0, n, 1000)
        ]
    )  # a few GPUs off the bus: `Gpus.identities` orders them as `find` does
    raw: Any = store.decisions.db.engine.raw_connection()
    try:
        with (
            raw.cursor() as cur,
            cur.copy(
                "COPY risk_scores (gpu_uuid, scored_at, risk, risk_ecc, risk_pcie, heat_z, heat_vs_node_z, decision,"
                " reasons) FROM STDIN"
            ) as copy,
        ):
            for k in range(1, rounds):
                at = T0 + k * STEP
                for r in records(n, k):
                    copy.write_row((r["gpu_uuid"], at, r["risk"], 0.01, 0.02, r["heat_z"], 0.5, r["decision"],
                                    '["risk high"]' if r["decision"] != "ok" else "[]"))  # fmt: skip
        raw.commit()
    finally:
        raw.close()


def bare_write(store: Store, recs: list[ScoreRecord], at: datetime) -> float:
    """The same rows COPYed into a scratch table: what the driver alone costs."""
    raw: Any = store.decisions.db.engine.raw_connection()
    try:
        t = time.perf_counter()
        with raw.cursor() as cur:
            cur.execute("CREATE TEMP TABLE IF NOT EXISTS scratch (LIKE risk_scores INCLUDING DEFAULTS)")
            with cur.copy("COPY scratch (gpu_uuid, scored_at, risk, heat_z, decision, reasons) FROM STDIN") as copy:
                for r in recs:
                    copy.write_row((r["gpu_uuid"], at, r["risk"], r["heat_z"], r["decision"], "[]"))
        raw.commit()
        return time.perf_counter() - t
    finally:
        raw.close()


def bare_read(store: Store, since: datetime, until: datetime) -> float:
    """The same rounds COPYed out as text: what the driver alone costs."""
    raw: Any = store.decisions.db.engine.raw_connection()
    try:
        t = time.perf_counter()
        buf = io.BytesIO()
        with (
            raw.cursor() as cur,
            cur.copy(
                "COPY (SELECT gpu_uuid, scored_at, risk FROM risk_scores WHERE scored_at >= %s AND scored_at < %s"
                " ORDER BY gpu_uuid, scored_at) TO STDOUT",
                (since, until),
            ) as copy,
        ):
            for block in copy:
                buf.write(block)
        raw.rollback()
        return time.perf_counter() - t
    finally:
        raw.close()


def rounds_before(store: Store, uuids: list[str], cutoff: pd.Timestamp, *, tuples: bool) -> float:
    """Seconds for the scorer's four questions of the rounds before (`StoredRounds`: risk, heat,
    ECC runs and the remap drains), or with `tuples` as they were asked before 0090's follow-up:
    `recent_rounds`' tuples through `replay.stored_run_began` / `recently_wore`."""
    th = Thresholds()
    t = time.perf_counter()
    if not tuples:
        asked = StoredRounds(store, th)
        asked.risk_since(uuids, cutoff), asked.heat_since(uuids, cutoff), asked.ecc_since(uuids, cutoff)
        asked.drained(uuids, cutoff)
        return time.perf_counter() - t
    hold = pd.Timedelta(seconds=th.remap_hold_for_s)
    clear = pd.Timedelta(seconds=th.remap_hold_clear_s) + hold
    for span, of in [
        (th.longest_wait, ("risk",)),
        (th.heat_hold, HEAT_COLUMNS),
        (hold, ("risk_ecc",)),
        (clear, ("risk_ecc",)),
    ]:
        lo = (cutoff - span - pd.Timedelta(hours=1)).to_pydatetime()
        stored = store.decisions.recent_rounds(uuids, lo, cutoff.to_pydatetime(), of=of)
        values = np.array([[np.nan if v is None else v for v in r[2]] for r in stored], dtype=float)
        values = values.reshape(len(stored), len(of))
        if span is clear:
            recently_wore([r[:2] for r in stored], values[:, 0], cutoff, th)
        else:
            with np.errstate(invalid="ignore"):
                stored_run_began([r[:2] for r in stored], values[:, 0] >= th.demote, uuids, cutoff)
    return time.perf_counter() - t


def _before_store_round(db: Any, conn: Any, rows: list[dict[str, Any]], at: datetime) -> dict[str, tuple[int, str]]:
    """`decisions._store_round` on PostgreSQL as run 5 left it: the known GPUs and the active decisions
    asked through Core's IN lists of every GPU, the rows sent as one Python list per column."""
    uuids = [r["gpu_uuid"] for r in rows]
    known = {x[0] for x in conn.execute(sa.select(T_GPUS.c.uuid).where(T_GPUS.c.uuid.in_(uuids)))}
    decisions._add_unknown_gpus(db, conn, rows, set(uuids) - known, at)
    names = ("gpu_uuid", *round_rows._VALUES, *round_rows._TEXTS)
    arrays: list[list[Any]] = [[r["gpu_uuid"] for r in rows]]
    arrays += [[r[c] for r in rows] for c in round_rows._VALUES]
    arrays += [[r["decision"] for r in rows], [json.dumps(r["reasons"]) for r in rows]]
    arrays += [[r["remedy"] for r in rows], [r["remedy_when"] for r in rows]]
    casts = ["text[]", *["float8[]"] * len(round_rows._VALUES), *["text[]"] * len(round_rows._TEXTS)]
    alias = [f"c{i}" for i in range(len(names))]
    picked = [f"{a}::json" if n == "reasons" else a for a, n in zip(alias, names, strict=True)]
    insert = (
        f"INSERT INTO risk_scores (scored_at, {', '.join(names)}) SELECT %s, {', '.join(picked)} "
        f"FROM unnest({', '.join(f'%s::{c}' for c in casts)}) WITH ORDINALITY AS t({', '.join(alias)}, i) "
        "ORDER BY i RETURNING id, gpu_uuid"
    )
    point = (
        "UPDATE gpus AS g SET latest_score_id = t.sid FROM unnest(%s::text[], %s::int8[]) AS t(u, sid) "
        "WHERE g.uuid = t.u AND (g.latest_score_id IS NULL OR "
        "(SELECT s.scored_at FROM risk_scores AS s WHERE s.id = g.latest_score_id) <= %s)"
    )
    with conn.connection.driver_connection.cursor() as cur:
        cur.execute(insert, [at, *arrays])
        by_uuid = dict((u, i) for i, u in cur.fetchall())
        cur.execute(point, [uuids, [by_uuid[u] for u in uuids], at])
    return decisions._active_decisions(conn, uuids)


@contextmanager
def way_of(way: str) -> Iterator[None]:
    """ "core": `write_scores` and `recent_rounds` through SQLAlchemy Core on PostgreSQL too; "before":
    `write_scores` as run 5 left it (`_before_store_round`); "driver": as the store does now."""
    saved = decisions._store_round, round_rows.read_rounds
    if way == "core":
        decisions._store_round = decisions._store_round_core
        round_rows.read_rounds = decisions._rounds_core  # type: ignore[assignment]
    elif way == "before":
        decisions._store_round = _before_store_round
    try:
        yield
    finally:
        decisions._store_round, round_rows.read_rounds = saved


def gpus_read(store: Store, way: str) -> float:
    """Seconds to read the GPUs a round needs: `Gpus.identities` now, `all_gpus` (`find`) before."""
    t = time.perf_counter()
    got = store.gpus.identities() if way == "driver" else all_gpus(store)
    took = time.perf_counter() - t
    assert len(got) == store.gpus.find(limit=1)[1]
    return took


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--gpus", type=int, default=10000)
    parser.add_argument("--rounds", type=int, default=24)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--pg-url", default=None, help="an empty database to use (default: a throwaway server)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        server = None
        url = args.pg_url
        if url is None:
            from tests.postgres import start_postgres  # a throwaway server, as the tests start it

            server = start_postgres(Path(tmp))
            url = server.create_database("decisions")
        try:
            store = Store.open(url)
            seed(store, args.gpus, args.rounds)
            uuids = [f"GPU-{i:08d}" for i in range(args.gpus)]
            ways = ("driver", "before", "core")
            times: dict[str, list[float]] = {w: [] for w in ways}
            reads: dict[str, list[float]] = {w: [] for w in ways}
            before: dict[str, list[float]] = {w: [] for w in ways}
            gpus: dict[str, list[float]] = {w: [] for w in ways}
            for j in range(len(ways) * args.repeat):
                k, way = args.rounds + j, ways[j % len(ways)]
                at = T0 + k * STEP
                recs = records(args.gpus, k)
                with way_of(way):
                    t = time.perf_counter()
                    store.decisions.write_scores(recs, at, rule=decision_changes)
                    w = time.perf_counter() - t
                    t = time.perf_counter()
                    got = store.decisions.recent_rounds(uuids, T0, at + STEP, of=("risk",))
                    r = time.perf_counter() - t
                    b = rounds_before(store, uuids, pd.Timestamp(at + STEP), tuples=way == "core")
                    g = gpus_read(store, way)
                times[way].append(w)
                reads[way].append(r)
                gpus[way].append(g)
                bw, br = bare_write(store, recs, at), bare_read(store, T0, at + STEP)
                before[way].append(b)
                print(f"round {j} ({way:>6}): write {w:.2f} s ({w / bw:.1f}x COPY), read {len(got):,} rows"
                      f" {r:.2f} s ({r / br:.1f}x COPY out), the rounds before {b:.2f} s, the GPUs {g:.3f} s",
                      flush=True)  # fmt: skip
            store.close()
        finally:
            if server is not None:
                server.stop()
    for way in ways:
        w, r, b, g = (statistics.median(x[way]) for x in (times, reads, before, gpus))
        print(f"median, {way:>6}: write_scores {w:.2f} s, recent_rounds {r:.2f} s, the rounds before {b:.2f} s,"
              f" the GPUs {g:.3f} s ({args.gpus:,} GPUs)")  # fmt: skip
    m = {way: [statistics.median(x[way]) for x in (times, reads, before, gpus)] for way in ways}
    print(f"driver over core: write {m['driver'][0] / m['core'][0]:.2f}x, read {m['driver'][1] / m['core'][1]:.2f}x,"
          f" the rounds before (columns over tuples) {m['driver'][2] / m['core'][2]:.2f}x")  # fmt: skip
    print(f"now over run 5 (before): write {m['driver'][0] / m['before'][0]:.2f}x,"
          f" the GPUs (identities over all_gpus) {m['driver'][3] / m['before'][3]:.2f}x")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
