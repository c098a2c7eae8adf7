"""Time `Samples.ingest` against a bare driver executemany of the same rows, in the same process.

Ours: `store.samples.ingest(frame)` of a history frame (64 GPUs x N samples, every catalogue column,
a few NaNs): validation, NaN -> NULL, GPU/node upserts, duplicate skipping (SQLite: executemany
with ON CONFLICT DO NOTHING; PostgreSQL: COPY into a scratch table, then INSERT … ON CONFLICT).

Baseline: the driver alone, `cursor.executemany("INSERT INTO samples VALUES (…)", rows)` with
the rows already built as tuples of Python values (its best case), into a table of the same
layout (same DDL, same primary key and index) in a fresh database of the same kind, then commit.
sqlite3 for SQLite, psycopg 3 for PostgreSQL.

PostgreSQL is a throwaway server started like the tests start it (Debian's binaries), or
`--pg-url`. Prints samples/s and the ratio ours/baseline (target >= 0.5x); never fails on timings.

    python benchmarks/bench_ingest.py [--quick] [--gpus 64] [--samples 300] [--pg-url URL | --no-pg]
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout, installed or not

import numpy as np
import pandas as pd
import psycopg
import sqlalchemy as sa
from sqlalchemy.schema import CreateIndex, CreateTable

from core import catalog, history
from store import Store
from store.schema import METRIC_COLUMNS, samples

TARGET_RATIO = 0.5
"""Ours must reach at least half the bare driver's samples/s (issue 5)."""


@dataclass(frozen=True)
class Result:
    """Median seconds per ingest of one frame, ours and the baseline, on one backend."""

    backend: str
    rows: int
    ours: float
    baseline: float


def make_frame(gpus: int, steps: int, seed: int = 1) -> pd.DataFrame:
    """A validated history frame: `gpus` GPUs on 8-GPU nodes, `steps` samples 10 s apart, all columns."""
    rng = np.random.default_rng(seed)
    n = gpus * steps
    t0 = pd.Timestamp("2026-01-01", tz="UTC")
    data: dict[str, Any] = {
        "timestamp": np.repeat(pd.date_range(t0, periods=steps, freq="10s").to_numpy(), gpus),
        "hostname": np.tile([f"node-{i // 8:03d}" for i in range(gpus)], steps),
        "gpu_uuid": np.tile([f"GPU-{i:08x}-0000-4000-8000-{i:012x}" for i in range(gpus)], steps),
        "gpu_index": np.tile(np.arange(gpus) % 8, steps),
        "model_name": "NVIDIA H100 80GB HBM3",
    }
    for name in METRIC_COLUMNS:
        if catalog.BY_NAME[name].kind == "counter":  # cumulative per GPU, as the hardware reports
            values = np.cumsum(rng.integers(0, 3, size=(steps, gpus)), axis=0).ravel().astype(np.float64)
        else:
            values = np.round(rng.uniform(0, 100, size=n), 1)
        values[rng.random(n) < 0.01] = np.nan  # missing readings
        data[name] = values
    return history.validate(pd.DataFrame(data))


def driver_rows(frame: pd.DataFrame, sqlite_text: bool) -> list[tuple[Any, ...]]:
    """The frame as tuples of plain Python values (what the baseline hands its driver, pre-built)."""
    ts = frame["timestamp"].dt.tz_convert("UTC")
    times = (ts.dt.strftime("%Y-%m-%d %H:%M:%S.%f") if sqlite_text else ts.dt.to_pydatetime()).tolist()
    cols = [frame["gpu_uuid"].astype(str).tolist(), times]
    for c in METRIC_COLUMNS:
        v = frame[c].to_numpy(np.float64).astype(object)
        v[pd.isna(frame[c]).to_numpy()] = None
        cols.append(v.tolist())
    return list(zip(*cols, strict=True))


def ddl(dialect: sa.engine.Dialect) -> list[str]:
    """CREATE TABLE samples and its index, as the store's schema defines them."""
    return [
        str(CreateTable(samples).compile(dialect=dialect)),
        *(str(CreateIndex(ix).compile(dialect=dialect)) for ix in samples.indexes),
    ]


def median_time(run: Callable[[], None], reset: Callable[[], None], repeat: int) -> float:
    """Median wall time of `run()` over `repeat` runs, `reset()` (untimed) before each."""
    times = []
    for _ in range(repeat):
        reset()
        t0 = time.perf_counter()
        run()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def bench_sqlite(frame: pd.DataFrame, workdir: Path, repeat: int) -> Result:
    """Ours and sqlite3's executemany, each into its own WAL file with the same pragmas."""
    store = Store.open(f"sqlite:///{workdir / 'ours.db'}")

    def reset_ours() -> None:
        with store._engine.begin() as conn:
            for table in ("samples", "gpus", "nodes"):
                conn.exec_driver_sql(f"DELETE FROM {table}")

    def run_ours() -> None:
        assert store.samples.ingest(frame) == len(frame)

    ours = median_time(run_ours, reset_ours, repeat)
    store.close()

    conn = sqlite3.connect(workdir / "baseline.db", isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")  # what the store sets too
    for stmt in ddl(sa.dialects.sqlite.dialect()):
        conn.execute(stmt)
    rows = driver_rows(frame, sqlite_text=True)
    sql = f"INSERT INTO samples VALUES ({', '.join(['?'] * (len(METRIC_COLUMNS) + 2))})"

    def run_base() -> None:
        conn.execute("BEGIN")
        conn.executemany(sql, rows)
        conn.execute("COMMIT")

    def reset_base() -> None:
        conn.execute("DELETE FROM samples")

    baseline = median_time(run_base, reset_base, repeat)
    conn.close()
    return Result("SQLite", len(frame), ours, baseline)


def bench_postgres(frame: pd.DataFrame, url: str, repeat: int) -> Result:
    """Ours and psycopg's executemany, each into its own database on the same server."""
    admin = sa.engine.make_url(url)
    kw: dict[str, Any] = {"host": admin.host, "port": admin.port, "user": admin.username, "password": admin.password}
    with psycopg.connect(dbname=admin.database, autocommit=True, **kw) as c:
        for name in ("bench_ours", "bench_base"):
            c.execute(f"DROP DATABASE IF EXISTS {name}")
            c.execute(f"CREATE DATABASE {name}")
    store = Store.open(admin.set(drivername="postgresql+psycopg", database="bench_ours").render_as_string(False))

    def reset_ours() -> None:
        with store._engine.begin() as conn:
            conn.exec_driver_sql("TRUNCATE samples, gpus, nodes CASCADE")

    def run_ours() -> None:
        assert store.samples.ingest(frame) == len(frame)

    ours = median_time(run_ours, reset_ours, repeat)
    store.close()

    with psycopg.connect(dbname="bench_base", **kw) as conn:
        for stmt in ddl(sa.dialects.postgresql.dialect()):
            conn.execute(stmt)
        conn.commit()
        rows = driver_rows(frame, sqlite_text=False)
        sql = f"INSERT INTO samples VALUES ({', '.join(['%s'] * (len(METRIC_COLUMNS) + 2))})"

        def run_base() -> None:
            with conn.cursor() as cur:
                cur.executemany(sql, rows)
            conn.commit()

        def reset_base() -> None:
            conn.execute("TRUNCATE samples")
            conn.commit()

        baseline = median_time(run_base, reset_base, repeat)
    return Result("PostgreSQL", len(frame), ours, baseline)


def report(results: list[Result], gpus: int, steps: int, repeat: int) -> None:
    """Print the table and one summary line per backend."""
    print(
        f"ingest of {gpus} GPUs x {steps} samples ({len(METRIC_COLUMNS)} metric columns), "
        f"median of {repeat} runs; baseline = bare driver executemany of pre-built tuples"
    )
    header = f"{'backend':<11} {'rows':>7} {'ours s':>8} {'base s':>8} {'ours/s':>10} {'base/s':>10} {'ratio':>7}"
    print(header)
    print("-" * len(header))
    for r in results:
        print(
            f"{r.backend:<11} {r.rows:>7} {r.ours:>8.3f} {r.baseline:>8.3f} {r.rows / r.ours:>10,.0f} "
            f"{r.rows / r.baseline:>10,.0f} {r.baseline / r.ours:>6.2f}x"
        )
    print()
    for r in results:
        print(
            f"{r.backend}: ours {r.rows / r.ours:,.0f} samples/s, bare executemany {r.rows / r.baseline:,.0f} "
            f"samples/s, ratio {r.baseline / r.ours:.2f}x (target >= {TARGET_RATIO}x)"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="small frame, one run: a smoke run, not a measurement")
    parser.add_argument("--gpus", type=int, default=64, help="GPUs in the frame")
    parser.add_argument("--samples", type=int, default=300, help="samples per GPU")
    parser.add_argument("--repeat", type=int, default=3, help="runs per measurement (the median is reported)")
    parser.add_argument("--pg-url", help="an existing PostgreSQL (superuser; creates bench_ours, bench_base)")
    parser.add_argument("--no-pg", action="store_true", help="SQLite only")
    args = parser.parse_args(argv)
    steps, repeat = (30, 1) if args.quick else (args.samples, args.repeat)
    frame = make_frame(args.gpus, steps)
    with tempfile.TemporaryDirectory(prefix="bench-ingest-") as tmp:
        results = [bench_sqlite(frame, Path(tmp), repeat)]
        if not args.no_pg:
            if args.pg_url:
                results.append(bench_postgres(frame, args.pg_url, repeat))
            else:
                from tests.postgres import start_postgres  # a throwaway server, as the tests start it

                try:
                    server = start_postgres(Path(tmp))
                except BaseException as e:  # pytest.skip/fail outcomes when PostgreSQL is missing
                    print(f"PostgreSQL skipped: {e}", file=sys.stderr)
                else:
                    try:
                        results.append(bench_postgres(frame, server.url, repeat))
                    finally:
                        server.close()
    report(results, args.gpus, steps, repeat)
    return 0


if __name__ == "__main__":
    sys.exit(main())
