"""Fleet scale on PostgreSQL: one scoring round of N GPUs from 31 days of hourly roll-ups.

For each fleet size (default 1,000, 10,000 and 30,000 GPUs, a 5-minute step):

- **pull cycle**: one steady-state `PrometheusPuller.pull_once()` of the whole fleet (one new
  5-minute step of every history field, answered in-process as in bench_pull.py) into the
  PostgreSQL store: validation, the insert, and the roll-up of the new samples into their hour.
- **read (baseline)**: the scorer's SELECT of the 31 days of hour rows, streamed as COPY and
  parsed into one array per column (`store.rawsql.copy_columns`), nothing else.
- **round (ours)**: `Scorer.run_once()`: that read and the raw tail of the current hour, rolled
  up, features, the three heads, rules, policy, decisions, and the scores written back.
- **memory**: the round's peak traced allocation (tracemalloc, a separate untimed round) plus
  pyarrow's pool peak, against the hour rows held in memory as the history frame.

Hour rows are generated inside PostgreSQL (generate_series): plausible gauges and counters that
grow, so every feature computes; the raw tail is the two pulled steps. Targets (issue 15): round
≤ 2× read, peak ≤ 3× the roll-ups in memory, per-round time linear in GPUs. Prints ratios; never
fails on timings.

    python benchmarks/bench_fleet.py [--sizes 1000,10000,30000] [--days 31] [--pg-url URL]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import tracemalloc
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout, installed or not
sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench_pull's in-process Prometheus

import numpy as np
import pandas as pd
import pyarrow as pa
import sqlalchemy as sa
from bench_pull import STEP_S, T0, answers, client

from predictor.score import load_model
from predictor.thresholds import Thresholds
from service.puller import PrometheusPuller
from service.scorer import SCORE_WINDOW, Scorer
from store import Store
from store.rawsql import copy_columns, metric_select
from store.rollup import HOUR_VALUES

GEN_BATCH = 2000
"""GPUs whose hour rows one INSERT … SELECT generates."""


def hour_rows_sql(first: int, last: int, days: float) -> str:
    """Generate `days` of hour rows before T0 for GPUs first..last (their names as bench_pull's)."""
    start = T0 - timedelta(days=days)
    a, b = f"timestamptz '{start.isoformat()}'", f"timestamptz '{(T0 - timedelta(hours=1)).isoformat()}'"
    return f"""
    INSERT INTO samples_hourly (gpu_uuid, hour, n, last_at, gpu_temp_c, memory_temp_c, power_w, gpu_util_pct,
        sm_clock_mhz, mem_clock_mhz, ecc_sbe_volatile, ecc_dbe_volatile, ecc_sbe_aggregate, ecc_dbe_aggregate,
        retired_pages_sbe, retired_pages_dbe, retired_pages_pending, remapped_rows_correctable,
        remapped_rows_uncorrectable, row_remap_pending, row_remap_failure, pcie_replay_count, pcie_link_gen,
        pcie_link_gen_max, pcie_link_width, pcie_link_width_max, clocks_event_reasons, thermal_violation_us,
        power_violation_us, xid, energy_mj, thermal_throttle_share)
    SELECT 'GPU-' || lpad(g::text, 6, '0'), h, 12, h + interval '55 minutes',
        55 + 8 * random(), 60 + 8 * random(), 350 + 300 * random(), 90 * random(), 1700, 2600,
        k * mod(g, 3), 0, k * mod(g, 3), 0, 0, 0, 0, 0, 0, 0, 0, k * mod(g, 5), 5, 5, 16, 16,
        CASE WHEN random() < 0.01 THEN 32 ELSE 0 END, k * 1000, k * 2000, 0, k * 2500,
        CASE WHEN random() < 0.01 THEN 1.0 ELSE 0.0 END
    FROM generate_series({first}, {last}) AS g,
         LATERAL (SELECT h, (extract(epoch FROM h - {a}) / 3600)::bigint AS k
                  FROM generate_series({a}, {b}, interval '1 hour') AS h) AS hours
    """  # fmt: skip


def build(url: str, gpus: int, days: float) -> tuple[Store, float, int]:
    """A store holding the fleet: GPUs from a first pull, `days` of hour rows; returns (store, pull s, rows)."""
    store = Store.open(url)
    bodies = answers(gpus)
    http = client(bodies)
    # First pull (GPUs and nodes created), then the timed steady-state one (one new step).
    for mark, now in ((T0, T0 + timedelta(seconds=STEP_S + 20)), (T0 + timedelta(seconds=STEP_S), None)):
        p = PrometheusPuller(
            store, "http://prom", step_s=STEP_S, backfill=timedelta(hours=1), client=http,
            now=(lambda n=now: n) if now else (lambda: T0 + timedelta(seconds=2 * STEP_S + 20)),
        )  # fmt: skip
        p.state.watermark = mark
        t = time.perf_counter()
        p.pull_once()
        pull_s = time.perf_counter() - t
    http.close()
    engine = sa.create_engine(url.replace("postgresql://", "postgresql+psycopg://", 1))
    for first in range(0, gpus, GEN_BATCH):
        with engine.begin() as conn:
            conn.exec_driver_sql(hour_rows_sql(first, min(first + GEN_BATCH, gpus) - 1, days))
        print(f"  generated hour rows of GPUs {first:,}..{min(first + GEN_BATCH, gpus) - 1:,}", flush=True)
    with engine.connect() as conn:
        conn.execution_options(isolation_level="AUTOCOMMIT").exec_driver_sql("VACUUM ANALYZE samples_hourly")
        rows = conn.exec_driver_sql("SELECT count(*) FROM samples_hourly").scalar_one()
    engine.dispose()
    return store, pull_s, int(rows)


def read_hours(store: Store, until: pd.Timestamp) -> float:
    """The baseline: the scorer's SELECT of the window's hour rows, through the driver into arrays."""
    db = store._db
    since = (until - SCORE_WINDOW).floor("h").to_pydatetime()
    boundary = until.floor("h").to_pydatetime()
    t = time.perf_counter()
    with db.tx() as conn:
        sql, params = metric_select(
            db, "samples_hourly", "hour", ("n", db.ts_us('"last_at"')), since, boundary, None, HOUR_VALUES,
            until_inclusive=False,
        )  # fmt: skip
        names = ["n", "last_at", *HOUR_VALUES]
        codes, _, _, _ = copy_columns(conn, sql, params, names, [np.dtype(np.float64)] * len(names))
    took = time.perf_counter() - t
    assert len(codes), "no hour rows read"
    return took


def one_size(url: str, gpus: int, days: float) -> dict[str, float]:
    print(f"{gpus:,} GPUs: building {days:g} days of hour rows …", flush=True)
    store, pull_s, rows = build(url, gpus, days)
    until = pd.Timestamp(T0 + timedelta(seconds=2 * STEP_S + 30))
    scorer = Scorer(store, load_model(), Thresholds(), 300)
    scorer.run_once(at=until.to_pydatetime())  # warm: imports, the model's first call, plans cached
    reads, rounds = [], []
    for _ in range(2):
        reads.append(read_hours(store, until))
        t = time.perf_counter()
        records = scorer.run_once(at=until.to_pydatetime())
        rounds.append(time.perf_counter() - t)
    assert len(records) == gpus, f"scored {len(records)} of {gpus} GPUs"
    frame = store.samples.scoring_history(since=(until - SCORE_WINDOW).to_pydatetime(), until=until.to_pydatetime())
    frame_bytes = float(frame.memory_usage(deep=True).sum())
    del frame
    parent = pa.default_memory_pool()
    pool = pa.proxy_memory_pool(parent)  # a pool of its own: its peak is this round's
    pa.set_memory_pool(pool)
    tracemalloc.start()
    scorer.run_once(at=until.to_pydatetime())
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    pa.set_memory_pool(parent)
    # pyarrow's buffers are not traced: its pool's peak is added (an upper bound: both peaks
    # need not fall at the same moment).
    peak += pool.max_memory() or 0
    store.close()
    out = {
        "gpus": gpus, "hour_rows": rows, "pull_s": pull_s, "read_s": min(reads), "round_s": min(rounds),
        "frame_mb": frame_bytes / 2**20, "peak_mb": peak / 2**20,
    }  # fmt: skip
    print(
        f"  pull+ingest+roll-up of one 5-min step {pull_s:.2f} s | read {out['read_s']:.1f} s | "
        f"round {out['round_s']:.1f} s | round/read {out['round_s'] / out['read_s']:.2f}x (target <= 2x) | "
        f"peak {out['peak_mb']:.0f} MB vs roll-ups {out['frame_mb']:.0f} MB = "
        f"{out['peak_mb'] / out['frame_mb']:.2f}x (target <= 3x)",
        flush=True,
    )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--sizes", default="1000,10000,30000", help="fleet sizes, comma-separated")
    parser.add_argument("--days", type=float, default=31.0)
    parser.add_argument("--pg-url", default=None, help="an empty database to use (default: a throwaway server)")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        server = None
        if args.pg_url is None:
            from tests.postgres import start_postgres  # a throwaway server, as the tests start it

            server = start_postgres(Path(tmp))
        try:
            for n in sizes:
                url = server.create_database(f"fleet_{n}") if server is not None else args.pg_url
                results.append(one_size(url, n, args.days))
        finally:
            if server is not None:
                server.stop()
    print("\nper-round time by fleet size (linear growth: the per-GPU time stays flat)")
    heads = ("read s", "round s", "ms/GPU", "round/read", "peak/frame")
    print(f"{'GPUs':>8} {'hour rows':>12} " + " ".join(f"{h:>10}" for h in heads))
    for r in results:
        print(
            f"{r['gpus']:>8,} {r['hour_rows']:>12,} {r['read_s']:>8.1f} {r['round_s']:>8.1f} "
            f"{1000 * r['round_s'] / r['gpus']:>8.2f} {r['round_s'] / r['read_s']:>9.2f}x "
            f"{r['peak_mb'] / r['frame_mb']:>9.2f}x"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
