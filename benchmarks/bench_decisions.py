"""The store's side of a scoring round at fleet size: the write of the round (`Decisions.write_scores`)
and the rounds before (`Decisions.recent_rounds`, as `StoredRounds` reads them), on PostgreSQL.

Usage: python benchmarks/bench_decisions.py [--gpus 10000] [--rounds 24] [--repeat 3] [--pg-url URL]

A store with `--gpus` GPUs and `--rounds` stored rounds at a 5-minute step (seeded by COPY), then,
`--repeat` times, alternating: one more round written by `write_scores` (the policy's
`decision_changes`, a few GPUs changing decision) through the driver (`store.round_rows`, as the
store does on PostgreSQL) and the next through SQLAlchemy Core (`store.decisions`' SQLite path, the
PostgreSQL path before 0090's follow-up), each beside a bare COPY of the same rows into a scratch
table; and the stored rounds read back by `recent_rounds` (the risk, as `StoredRounds.risk_since`
does) both ways, beside a bare COPY … TO STDOUT of the same rows. Each line prints the time over
the bare driver's. Last, the scorer's four questions of the rounds before (`StoredRounds`), read
as columns (after) or as `recent_rounds`' tuples through `replay.stored_run_began` (before).
"""

from __future__ import annotations

import argparse
import io
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from predictor.conditions import HEAT_COLUMNS
from predictor.policy import decision_changes
from predictor.replay import recently_wore, stored_run_began
from predictor.thresholds import Thresholds
from service.stored_rounds import StoredRounds
from store import Store, decisions, round_rows
from store.decisions import ScoreRecord

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


@contextmanager
def core_path(on: bool) -> Iterator[None]:
    """With `on`: `write_scores` and `recent_rounds` go through SQLAlchemy Core on PostgreSQL too."""
    saved = round_rows.insert_scores, round_rows.point_latest, round_rows.read_rounds
    if on:
        round_rows.insert_scores = lambda conn, rows, at: (decisions._insert_scores_core(conn, rows, at), [])[1]
        round_rows.point_latest = lambda *_: None
        round_rows.read_rounds = decisions._rounds_core  # type: ignore[assignment]
    try:
        yield
    finally:
        round_rows.insert_scores, round_rows.point_latest, round_rows.read_rounds = saved


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
            times: dict[str, list[float]] = {"driver": [], "core": []}
            reads: dict[str, list[float]] = {"driver": [], "core": []}
            before: dict[str, list[float]] = {"driver": [], "core": []}
            for j in range(2 * args.repeat):
                k, way = args.rounds + j, ("driver", "core")[j % 2]
                at = T0 + k * STEP
                recs = records(args.gpus, k)
                with core_path(way == "core"):
                    t = time.perf_counter()
                    store.decisions.write_scores(recs, at, rule=decision_changes)
                    w = time.perf_counter() - t
                    t = time.perf_counter()
                    got = store.decisions.recent_rounds(uuids, T0, at + STEP, of=("risk",))
                    r = time.perf_counter() - t
                    b = rounds_before(store, uuids, pd.Timestamp(at + STEP), tuples=way == "core")
                times[way].append(w)
                reads[way].append(r)
                bw, br = bare_write(store, recs, at), bare_read(store, T0, at + STEP)
                before[way].append(b)
                print(f"round {j} ({way:>6}): write {w:.2f} s ({w / bw:.1f}x COPY), read {len(got):,} rows"
                      f" {r:.2f} s ({r / br:.1f}x COPY out), the rounds before {b:.2f} s", flush=True)  # fmt: skip
            store.close()
        finally:
            if server is not None:
                server.stop()
    for way in ("driver", "core"):
        w, r, b = (statistics.median(x[way]) for x in (times, reads, before))
        print(f"median, {way:>6}: write_scores {w:.2f} s, recent_rounds {r:.2f} s, the rounds before {b:.2f} s"
              f" ({args.gpus:,} GPUs)")  # fmt: skip
    w = statistics.median(times["driver"]) / statistics.median(times["core"])
    r = statistics.median(reads["driver"]) / statistics.median(reads["core"])
    b = statistics.median(before["driver"]) / statistics.median(before["core"])
    print(f"driver over core: write {w:.2f}x, read {r:.2f}x, the rounds before (columns over tuples) {b:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
