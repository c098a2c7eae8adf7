"""Print PostgreSQL's plans of the store's hot reads at fleet size (docs/store.md, "PostgreSQL at fleet size").

Loads a migrated database with `--gpus` GPUs on 8-GPU nodes: raw samples every `--interval`
seconds for the last `--raw-days` days, one sample per GPU a day for `--sparse-days` days before
them (so `samples` has as many day partitions as a 35-day retention keeps, without 35 days of
rows), and hour rows for `--hourly-days` days. Rows are made with numpy and loaded with binary
COPY (every column filled). Then VACUUM ANALYZE, and EXPLAIN (ANALYZE, BUFFERS) of each query:
what the scorer reads (hours of a window, optionally a replica's hosts; the raw tail of the current
hour), the API's GPU lookup (its compiled statement, also as the generic plan a prepared
statement gets), one GPU's history, ingest's check for stored samples, and the newest sample.

    python benchmarks/pg_plans.py [--gpus 2000] [--raw-days 3] [--pg-url URL] [--query NAME]

Without `--pg-url` a throwaway server is started like the tests start it (Debian's binaries).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout, installed or not

import numpy as np
import pandas as pd
import psycopg
import sqlalchemy as sa

from store import Store
from store.partitions import days_of, ensure_days

NOW = datetime(2026, 11, 30, 14, 7, 30, tzinfo=UTC)
"""The data's "now": the newest raw sample. Not on an hour, so the raw tail is a partial hour."""
GPUS_PER_NODE = 8
CHUNK = 200_000
"""Rows per COPY block."""
_PG_EPOCH_US = 946_684_800_000_000  # 2000-01-01, PostgreSQL's binary timestamp origin, in Unix µs
_BINARY = {"real": ">f4", "double precision": ">f8", "integer": ">i4", "bigint": ">i8"}


def uuid_of(i: np.ndarray | int) -> Any:
    """GPU-00000042: fixed width, so a binary COPY row has a fixed size."""
    return np.char.add("GPU-", np.char.zfill(np.asarray(i).astype(str), 8))


def host_of(i: np.ndarray | int) -> Any:
    return np.char.add("node-", np.char.zfill((np.asarray(i) // GPUS_PER_NODE).astype(str), 5))


def columns(cur: psycopg.Cursor[Any], table: str) -> list[tuple[str, str]]:
    cur.execute(
        "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = %s ORDER BY ordinal_position",
        (table,),
    )
    return [(r[0], r[1]) for r in cur.fetchall()]


def binary_rows(cols: list[tuple[str, str]], uuids: np.ndarray, times: dict[str, np.ndarray], seed: int) -> bytes:
    """Rows in COPY's binary format (no header): uuid text, timestamps (µs since the Unix epoch), random numbers."""
    n = len(uuids)
    rng = np.random.default_rng(seed)
    fields: list[tuple[str, str]] = [("nf", ">i2")]
    values: dict[str, Any] = {"nf": len(cols)}
    for name, kind in cols:
        if kind == "character varying":
            data: Any = np.char.encode(uuids.astype(str))
            fmt = f"S{data.dtype.itemsize}"
        elif kind == "timestamp with time zone":
            data, fmt = times[name] - _PG_EPOCH_US, ">i8"
        elif kind in _BINARY:
            fmt = _BINARY[kind]
            data = rng.integers(1, 360, n) if "i" in fmt else rng.random(n) * 100
        else:
            raise SystemExit(f"pg_plans: no generator for column {name} of type {kind}")
        fields += [(f"l_{name}", ">i4"), (f"v_{name}", fmt)]
        values[f"l_{name}"] = np.dtype(fmt).itemsize
        values[f"v_{name}"] = data
    arr = np.empty(n, dtype=np.dtype(fields))
    for k, v in values.items():
        arr[k] = v
    return arr.tobytes()


def copy_binary(
    conn: psycopg.Connection[Any], table: str, blocks: Iterator[tuple[np.ndarray, dict[str, np.ndarray]]]
) -> int:
    """Binary COPY of generated rows into `table`; returns the rows."""
    with conn.cursor() as cur:
        cols = columns(cur, table)
        names = ", ".join(f'"{c}"' for c, _ in cols)
        total = 0
        with cur.copy(f"COPY {table} ({names}) FROM STDIN (FORMAT BINARY)") as copy:
            copy.write(b"PGCOPY\n\xff\r\n\x00" + (0).to_bytes(4, "big") + (0).to_bytes(4, "big"))
            for i, (uuids, times) in enumerate(blocks):
                copy.write(binary_rows(cols, uuids, times, seed=i))
                total += len(uuids)
            copy.write((-1).to_bytes(2, "big", signed=True))
    conn.commit()
    return total


def us(t: datetime) -> int:
    return int(t.timestamp()) * 1_000_000 + t.microsecond


def raw_blocks(
    gpus: int, start: datetime, end: datetime, interval_s: int
) -> Iterator[tuple[np.ndarray, dict[str, np.ndarray]]]:
    """Every GPU every interval_s in (start, end], in time order, CHUNK rows at a time."""
    steps = np.arange(us(end), us(start), -interval_s * 1_000_000)[::-1]
    per = max(1, CHUNK // gpus)
    for i in range(0, len(steps), per):
        t = np.repeat(steps[i : i + per], gpus)
        yield uuid_of(np.tile(np.arange(gpus), len(t) // gpus)), {"timestamp": t}


def sparse_blocks(gpus: int, first: datetime, days: int) -> Iterator[tuple[np.ndarray, dict[str, np.ndarray]]]:
    """One sample per GPU at noon of each of `days` days from `first`."""
    for d in range(days):
        t = np.full(gpus, us(first + timedelta(days=d, hours=12)))
        yield uuid_of(np.arange(gpus)), {"timestamp": t}


def hour_blocks(gpus: int, start: datetime, hours: int) -> Iterator[tuple[np.ndarray, dict[str, np.ndarray]]]:
    per = max(1, CHUNK // gpus)
    for h in range(0, hours, per):
        hs = us(start) + np.arange(h, min(h + per, hours)) * 3_600_000_000
        t = np.repeat(hs, gpus)
        yield uuid_of(np.tile(np.arange(gpus), len(hs))), {"hour": t, "last_at": t + 3_595_000_000}


def load(store: Store, conn: psycopg.Connection[Any], args: argparse.Namespace) -> None:
    t0 = time.perf_counter()
    gpus = args.gpus
    idx = np.arange(gpus)
    with conn.cursor() as cur:
        first = NOW - timedelta(days=args.raw_days + args.sparse_days + 1)
        with cur.copy("COPY nodes (hostname, first_seen, last_seen) FROM STDIN") as copy:
            for h in sorted(set(host_of(idx).tolist())):
                copy.write_row((h, first, NOW))
        with cur.copy(
            "COPY gpus (uuid, hostname, gpu_index, model_name, first_seen, last_seen, state) FROM STDIN"
        ) as copy:
            for i, u, h in zip(idx.tolist(), uuid_of(idx).tolist(), host_of(idx).tolist(), strict=True):
                copy.write_row((u, h, i % GPUS_PER_NODE, "NVIDIA H100 80GB HBM3", first, NOW, "active"))
    conn.commit()
    raw_start = NOW - timedelta(days=args.raw_days)
    sparse_first = (raw_start - timedelta(days=args.sparse_days)).replace(hour=0, minute=0, second=0, microsecond=0)
    span = pd.date_range(sparse_first, NOW, freq="D", tz=UTC)
    ensure_days(store._db, days_of(pd.Series(span.append(pd.DatetimeIndex([NOW])))))
    raw = copy_binary(conn, "samples", raw_blocks(gpus, raw_start, NOW, args.interval))
    sparse = copy_binary(conn, "samples", sparse_blocks(gpus, sparse_first, args.sparse_days))
    hour0 = NOW.replace(minute=0, second=0, microsecond=0) - timedelta(days=args.hourly_days)
    hourly = copy_binary(conn, "samples_hourly", hour_blocks(gpus, hour0, args.hourly_days * 24))
    t1 = time.perf_counter()
    conn.autocommit = True
    conn.execute("VACUUM (ANALYZE) samples, samples_hourly, gpus, nodes")
    conn.autocommit = False
    with conn.cursor() as cur:
        cur.execute("SELECT count(*) FROM pg_inherits WHERE inhparent = 'samples'::regclass")
        parts = cur.fetchone()
        cur.execute("SELECT pg_size_pretty(pg_total_relation_size('samples_hourly'))")
        hsize = cur.fetchone()
        cur.execute(
            "SELECT pg_size_pretty(sum(pg_total_relation_size(inhrelid))) FROM pg_inherits"
            " WHERE inhparent = 'samples'::regclass"
        )
        rsize = cur.fetchone()
    print(
        f"# {gpus:,} GPUs; samples: {raw:,} raw rows ({args.raw_days} d every {args.interval} s) + {sparse:,} sparse"
        f" ({args.sparse_days} d, 1/GPU/day) in {parts[0] if parts else '?'} day partitions, "
        f"{rsize[0] if rsize else '?'}; samples_hourly: {hourly:,} rows ({args.hourly_days} d), "
        f"{hsize[0] if hsize else '?'}; loaded in {t1 - t0:.0f} s, VACUUM ANALYZE {time.perf_counter() - t1:.0f} s"
    )


def metric_list(conn: psycopg.Connection[Any], table: str, skip: tuple[str, ...]) -> str:
    with conn.cursor() as cur:
        return ", ".join(f'"{c}"' for c, _ in columns(cur, table) if c not in skip)


def queries(store: Store, conn: psycopg.Connection[Any], gpus: int) -> dict[str, str]:
    """The reads to explain, as the store writes them (literal values in place of parameters)."""
    boundary = NOW.replace(minute=0, second=0, microsecond=0)
    month = boundary - timedelta(days=30)
    hv = metric_list(conn, "samples_hourly", ("gpu_uuid", "hour", "n", "last_at"))
    sv = metric_list(conn, "samples", ("gpu_uuid", "timestamp"))
    share = ", ".join(f"'{u}'" for u in uuid_of(np.arange(gpus // 4)).tolist())  # a replica's quarter
    one = f"'{uuid_of(gpus // 2)}'"

    def ts(t: datetime) -> str:
        return f"'{t.isoformat()}'"

    hours = "SELECT gpu_uuid, (EXTRACT(EPOCH FROM hour) * 1000000)::bigint, n, last_at, {hv} FROM samples_hourly"
    hours = hours.format(hv=hv)
    raw = f'SELECT gpu_uuid, (EXTRACT(EPOCH FROM "timestamp") * 1000000)::bigint, {sv} FROM samples'
    get_gpu = store.gpus.get_compiled.sql
    return {
        "scorer_hours_30d": f"{hours} WHERE hour >= {ts(month)} AND hour < {ts(boundary)}",
        "scorer_hours_1h": f"{hours} WHERE hour >= {ts(boundary - timedelta(hours=1))} AND hour < {ts(boundary)}",
        "scorer_hours_30d_replica": f"{hours} WHERE hour >= {ts(month)} AND hour < {ts(boundary)}"
        f" AND gpu_uuid IN ({share})",
        "scorer_hours_1h_replica": f"{hours} WHERE hour >= {ts(boundary - timedelta(hours=1))}"
        f" AND hour < {ts(boundary)} AND gpu_uuid IN ({share})",
        "scorer_raw_tail": f'{raw} WHERE "timestamp" > {ts(boundary)} AND "timestamp" <= {ts(NOW)}',
        "scorer_raw_tail_replica": f'{raw} WHERE "timestamp" > {ts(boundary)} AND "timestamp" <= {ts(NOW)}'
        f" AND gpu_uuid IN ({share})",
        "api_get_gpu": get_gpu.replace("%(uuid)s", one),
        "api_get_gpu_generic": get_gpu,
        "gpu_history_raw_1d": f'{raw} WHERE "timestamp" >= {ts(NOW - timedelta(days=1))} AND gpu_uuid IN ({one})',
        "gpu_history_hours_30d": f"{hours} WHERE hour >= {ts(month)} AND gpu_uuid IN ({one})",
        "ingest_stored_check": 'SELECT gpu_uuid, (EXTRACT(EPOCH FROM "timestamp") * 1000000)::bigint FROM samples'
        f' WHERE "timestamp" >= {ts(NOW - timedelta(minutes=5))} AND "timestamp" <= {ts(NOW)}',
        "newest_sample": f'SELECT max("timestamp") FROM samples WHERE "timestamp" <= {ts(NOW)}',
    }


def explain(conn: psycopg.Connection[Any], name: str, sql: str, one: str) -> None:
    opts = "ANALYZE, BUFFERS, COSTS OFF"
    with conn.cursor() as cur:
        if name.endswith("_generic"):  # what a prepared statement runs after psycopg's 5th execution
            cur.execute("SET plan_cache_mode = force_generic_plan")
            cur.execute(f"PREPARE q AS {sql.replace('%(uuid)s', '$1')}")
            cur.execute(f"EXPLAIN ({opts}) EXECUTE q({one})")
            lines = [r[0] for r in cur.fetchall()]
            cur.execute("DEALLOCATE q")
            cur.execute("RESET plan_cache_mode")
        else:
            cur.execute(f"EXPLAIN ({opts}) {sql}")
            lines = [r[0] for r in cur.fetchall()]
    conn.rollback()
    print(f"\n## {name}\n")
    for line in lines:
        print(line)


def time_calls(store: Store, gpus: int, n: int = 2000) -> None:
    """What the API's lookup costs through the store, end to end (psycopg prepares it from its 6th run)."""
    rng = np.random.default_rng(0)
    for name, call in (
        ("Gpus.get", lambda u: store.gpus.get(u)),
        ("Samples.newest_time", lambda u: store.samples.newest_time(NOW)),
    ):
        took = []
        for u in uuid_of(rng.integers(0, gpus, n)).tolist():
            t = time.perf_counter()
            call(u)
            took.append(time.perf_counter() - t)
        ms = np.asarray(took[10:]) * 1e3  # past the first runs, prepared
        first = np.asarray(took[:5]) * 1e3
        print(
            f"\n# {name}: {n} calls, median {np.median(ms):.2f} ms, p99 {np.percentile(ms, 99):.2f} ms;"
            f" first 5 (planned each time) median {np.median(first):.2f} ms"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--gpus", type=int, default=2000)
    parser.add_argument("--raw-days", type=int, default=3)
    parser.add_argument("--interval", type=int, default=300, help="seconds between raw samples")
    parser.add_argument("--sparse-days", type=int, default=32, help="older days with one sample per GPU")
    parser.add_argument("--hourly-days", type=int, default=31)
    parser.add_argument("--pg-url", help="an existing PostgreSQL (superuser; creates gpuhealth_plans)")
    parser.add_argument("--query", action="append", help="only these queries (by name)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="pg-plans-") as tmp:
        server = None
        url = args.pg_url
        if url is None:
            from tests.postgres import start_postgres  # a throwaway server, as the tests start it

            server = start_postgres(Path(tmp))
            url = server.url
        try:
            run(url, args)
        finally:
            if server is not None:
                server.close()
    return 0


def run(url: str, args: argparse.Namespace) -> None:
    admin = sa.engine.make_url(url)
    kw: dict[str, Any] = {"host": admin.host, "port": admin.port, "user": admin.username, "password": admin.password}
    with psycopg.connect(dbname=admin.database, autocommit=True, **kw) as c:
        c.execute("DROP DATABASE IF EXISTS gpuhealth_plans")
        c.execute("CREATE DATABASE gpuhealth_plans")
    store = Store.open(admin.set(drivername="postgresql+psycopg", database="gpuhealth_plans").render_as_string(False))
    try:
        with psycopg.connect(dbname="gpuhealth_plans", **kw) as conn:
            with conn.cursor() as cur:
                cur.execute("SHOW server_version")
                version = cur.fetchone()
            print(f"# PostgreSQL {version[0] if version else '?'}")
            load(store, conn, args)
            one = f"'{uuid_of(args.gpus // 2)}'"
            for name, sql in queries(store, conn, args.gpus).items():
                if not args.query or name in args.query:
                    explain(conn, name, sql, one)
        time_calls(store, args.gpus)
    finally:
        store.close()


if __name__ == "__main__":
    sys.exit(main())
