"""Fleet scale on PostgreSQL: scoring rounds of N GPUs from 31 days of hourly roll-ups.

For each fleet size (default 1,000, 10,000 and 30,000 GPUs, a 5-minute step):

- **pull cycle**: one steady-state `PrometheusPuller.pull_once()` of the whole fleet (one new
  5-minute step of every history field, answered in-process as in bench_pull.py) into the
  PostgreSQL store: validation, the insert, and the roll-up of the new samples into their hour.
- **read (baseline)**: the SELECT of the 31 days of hour rows, streamed as COPY and parsed into
  one array per column (`store.rawsql.copy_columns`), nothing else.
- **start-up round**: `Scorer.run_once()` of a new scorer: the whole window read into memory
  (`store.window`), the raw tail of the current hour, features, heads, rules, policy, the write.
- **steady round**: the next rounds in the same hour: the raw tail and the rows changed since.
- **hour-closed round**: a round after the hour closed: that hour's rows are read and appended,
  the oldest hour dropped.
- **full re-read round**: the round as it was before the window (`Samples.scoring_history`).
- **memory**: the window's bytes; the peak resident memory of the process over the process before
  the first round (sampled every 20 ms), during a start-up round and up to the steady rounds (the
  process keeps what it freed, `core.memory`, so the steady rounds' resident peak is at least the
  start-up's); and the peak memory in use (glibc's heap and pyarrow's pool) of each round apart.
  Per 10,000 GPUs, and extrapolated to 100,000 GPUs (the slope over the sizes run, or the one
  size's memory per GPU, plus the process before the first round) against a 32 GB machine.

Hour rows are generated inside PostgreSQL (generate_series): plausible gauges and counters that
grow, so every feature computes; the raw tail is the two pulled steps. Targets (issue 60): steady
round at 10,000 GPUs <= 5 s, hour-closed <= 1.5x steady. Prints ratios; never fails on timings.

    python benchmarks/bench_fleet.py [--sizes 1000,10000,30000] [--days 31] [--pg-url URL] [--no-full] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import ctypes
import ctypes.util
import io
import os
import pstats
import sys
import tempfile
import threading
import time
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout, installed or not
sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench_pull's in-process Prometheus

import numpy as np
import pandas as pd
import pyarrow as pa
import sqlalchemy as sa
from bench_pull import STEP_S, T0, answers, client

from core.memory import keep_long_lived, reuse_freed_memory
from predictor.score import load_model
from predictor.thresholds import Thresholds
from service.puller import PrometheusPuller
from service.scorer import SCORE_WINDOW, Scorer
from store import Store
from store.rawsql import copy_columns, metric_select
from store.rollup import HOUR_VALUES

GEN_BATCH = 2000
"""GPUs whose hour rows one INSERT … SELECT generates."""
TARGET_GPUS = 100_000
MACHINE_MB = 32e9 / 2**20
"""Issue 60's replica: 100,000 GPUs on a machine with 32 GB of memory (MiB, as the RSS is counted)."""


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


class PeakRss:
    """The process's peak resident memory and peak memory in use while a block runs, sampled every 20 ms (MB)."""

    def __enter__(self) -> PeakRss:
        self.peak, self.peak_use, self._stop = rss_mb(), use_mb(), threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()
        return self

    def _watch(self) -> None:
        while not self._stop.wait(0.02):
            self.peak, self.peak_use = max(self.peak, rss_mb()), max(self.peak_use, use_mb())

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak, self.peak_use = max(self.peak, rss_mb()), max(self.peak_use, use_mb())


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                               "fsmblks", "uordblks", "fordblks", "keepcost")]  # fmt: skip


def _mallinfo2() -> object | None:
    try:
        fn = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").mallinfo2
    except (OSError, AttributeError):  # not glibc 2.33 or later
        return None
    fn.restype = _Mallinfo2
    return fn


_MALLINFO = _mallinfo2()


def use_mb() -> float:
    """Memory in use now: glibc's heap and mappings in use (what is freed and kept is not counted),
    and pyarrow's pool (the COPY's parse); 0 without glibc's mallinfo2."""
    if _MALLINFO is None:
        return 0.0
    info = _MALLINFO()  # type: ignore[operator]
    return (info.uordblks + info.hblkhd + pa.total_allocated_bytes()) / 2**20


def timed_round(scorer: Scorer, at: pd.Timestamp, gpus: int) -> tuple[float, float, float]:
    """(seconds, peak RSS MB, peak memory in use MB) of one scoring round."""
    with PeakRss() as mem:
        t = time.perf_counter()
        records = scorer.run_once(at=at.to_pydatetime())
        took = time.perf_counter() - t
    assert len(records) == gpus, f"scored {len(records)} of {gpus} GPUs"
    return took, mem.peak, mem.peak_use


def profiled(scorer: Scorer, at: pd.Timestamp) -> None:
    """Print where one more steady round spends its time (cProfile, by cumulative time)."""
    prof = cProfile.Profile()
    prof.runcall(scorer.run_once, at=at.to_pydatetime())
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("cumulative").print_stats(45)
    print(out.getvalue(), flush=True)


def one_size(url: str, gpus: int, days: float, full: bool, profile: bool = False) -> dict[str, float]:
    print(f"{gpus:,} GPUs: building {days:g} days of hour rows …", flush=True)
    store, pull_s, rows = build(url, gpus, days)
    until = pd.Timestamp(T0 + timedelta(seconds=2 * STEP_S + 30))
    out: dict[str, float] = {"gpus": gpus, "hour_rows": rows, "pull_s": pull_s}
    base_mb, base_use = rss_mb(), use_mb()
    out["base_mb"] = base_mb
    warm = Scorer(store, load_model(), Thresholds(), 300)
    _, start_peak, start_use = timed_round(warm, until, gpus)  # a first start-up: imports, the model's first call
    keep_long_lived()  # as the service's scoring loop does after its first round (once per process)
    out["start_mb"] = start_peak - base_mb  # the memory a start-up round takes, window included
    out["start_use_mb"] = start_use - base_use
    del warm
    out["read_s"] = min(read_hours(store, until) for _ in range(2))
    scorer = Scorer(store, load_model(), Thresholds(), 300)
    out["start_s"], _, _ = timed_round(scorer, until, gpus)  # start-up: the whole window read
    out["window_mb"] = scorer.window.stats.bytes / 2**20
    steady = [timed_round(scorer, until + pd.Timedelta(seconds=30 * k), gpus) for k in (1, 2)]
    out["steady_s"], out["steady_mb"] = min(s for s, _, _ in steady), max(m for _, m, _ in steady) - base_mb
    out["steady_use_mb"] = max(u for _, _, u in steady) - base_use
    closed = until.floor("h") + pd.Timedelta(hours=1, seconds=30)  # the pulled hour closed: read it
    out["closed_s"], closed_peak, closed_use = timed_round(scorer, closed, gpus)
    out["closed_mb"], out["closed_use_mb"] = closed_peak - base_mb, closed_use - base_use
    if profile:
        profiled(scorer, closed + pd.Timedelta(seconds=30))
    del scorer
    if full:  # the round before the window: the whole window read every round
        old = Scorer(store, load_model(), Thresholds(), 300)
        old.window.frame = lambda *, until, hostnames=None: store.samples.scoring_history(  # type: ignore[method-assign]
            since=until - SCORE_WINDOW, until=until, hostnames=hostnames
        )
        old.run_once(at=until.to_pydatetime())
        out["full_s"], _, _ = timed_round(old, until + pd.Timedelta(seconds=30), gpus)
        del old
    store.close()
    print(
        f"  pull+ingest+roll-up of one 5-min step {pull_s:.2f} s | read of 31 d {out['read_s']:.1f} s | "
        + (f"full re-read round {out['full_s']:.1f} s | " if full else "")
        + f"start-up {out['start_s']:.1f} s | steady {out['steady_s']:.2f} s | hour closed {out['closed_s']:.2f} s "
        f"= {out['closed_s'] / out['steady_s']:.2f}x steady (target <= 1.5x) | window {out['window_mb']:.0f} MB, "
        f"peak RSS over the process before: start-up {out['start_mb']:.0f} MB, steady {out['steady_mb']:.0f} MB | "
        f"peak in use: start-up {out['start_use_mb']:.0f} MB, steady {out['steady_use_mb']:.0f} MB, "
        f"hour closed {out['closed_use_mb']:.0f} MB",
        flush=True,
    )
    return out


def per_gpu_fit(results: list[dict[str, float]], key: str) -> tuple[float, float]:
    """(MB per GPU, MB at no GPU) of `key` over the sizes run: a least-squares line through two sizes or
    more, the one size's memory per GPU (nothing fixed) through one."""
    x = np.array([r["gpus"] for r in results], dtype=np.float64)
    y = np.array([r[key] for r in results], dtype=np.float64)
    slope, fixed = np.polyfit(x, y, 1) if len(set(x.tolist())) > 1 else (0.0, 0.0)
    if slope <= 0 or fixed < 0:  # one size, or sizes too small to tell apart: all of it per GPU
        return float(y[-1] / x[-1]), 0.0
    return float(slope), float(fixed)


def print_memory(results: list[dict[str, float]]) -> None:
    """Memory per 10,000 GPUs for each size, and 100,000 GPUs against a 32 GB machine."""
    print("\nmemory per 10,000 GPUs (MB, over the process before the first round)")
    heads = ("window", "start RSS", "steady RSS", "start in use", "steady in use", "closed in use")
    keys = ("window_mb", "start_mb", "steady_mb", "start_use_mb", "steady_use_mb", "closed_use_mb")
    print(f"{'GPUs':>8} " + " ".join(f"{h:>14}" for h in heads))
    for r in results:
        print(f"{r['gpus']:>8,} " + " ".join(f"{r[k] * 10_000 / r['gpus']:>14,.0f}" for k in keys))
    base = max(r["base_mb"] for r in results)
    for r in results:
        r["peak_mb"] = max(r["start_mb"], r["steady_mb"], r["closed_mb"])
    slope, fixed = per_gpu_fit(results, "peak_mb")
    need = base + fixed + slope * TARGET_GPUS
    verdict = "fits" if need <= MACHINE_MB else "does not fit"
    print(
        f"{TARGET_GPUS:,} GPUs: the process before the first round {base:,.0f} MB + {fixed:,.0f} MB fixed + "
        f"{slope * 10_000:,.0f} MB per 10,000 GPUs (the peak RSS of any round) x 10 = {need:,.0f} MB: {verdict} in "
        f"32 GB ({MACHINE_MB:,.0f} MiB)",
        flush=True,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--sizes", default="1000,10000,30000", help="fleet sizes, comma-separated")
    parser.add_argument("--days", type=float, default=31.0)
    parser.add_argument("--pg-url", default=None, help="an empty database to use (default: a throwaway server)")
    parser.add_argument("--no-full", action="store_true", help="leave out the round that re-reads the whole window")
    parser.add_argument("--profile", action="store_true", help="print a cProfile listing of one more steady round")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    reuse_freed_memory()  # as every `gpuhealth` command runs (core.memory)
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        server = None
        if args.pg_url is None:
            from tests.postgres import start_postgres  # a throwaway server, as the tests start it

            server = start_postgres(Path(tmp))
        try:
            for n in sizes:
                url = server.create_database(f"fleet_{n}") if server is not None else args.pg_url
                results.append(one_size(url, n, args.days, full=not args.no_full, profile=args.profile))
        finally:
            if server is not None:
                server.stop()
    print("\nper-round time by fleet size (the window: a round reads the raw tail and what changed)")
    heads = ("read s", "full s", "start s", "steady s", "closed s", "steady/read", "closed/steady", "window MB",
             "start MB", "MB/10k GPUs")  # fmt: skip
    print(f"{'GPUs':>8} {'hour rows':>12} " + " ".join(f"{h:>13}" for h in heads))
    for r in results:
        cells = (
            f"{r['read_s']:.1f}", f"{r['full_s']:.1f}" if "full_s" in r else "-", f"{r['start_s']:.1f}",
            f"{r['steady_s']:.2f}", f"{r['closed_s']:.2f}", f"{r['steady_s'] / r['read_s']:.2f}x",
            f"{r['closed_s'] / r['steady_s']:.2f}x", f"{r['window_mb']:.0f}", f"{r['start_mb']:.0f}",
            f"{r['window_mb'] * 10_000 / r['gpus']:.0f}",
        )  # fmt: skip
        print(f"{r['gpus']:>8,} {r['hour_rows']:>12,} " + " ".join(f"{c:>13}" for c in cells))
    print_memory(results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
