"""Simulation speed and memory against writing the same frame with pyarrow, in one process.

Simulates 512 GPUs (64 nodes x 8) for 120 days at 1-hour samples (about 1.45 M rows),
then times pyarrow writing that frame to Parquet, and prints rows/s and the ratio of
the two. A second simulation runs under tracemalloc to measure the peak memory it
allocates, against the size of the frame it returns. Targets (issue 3): simulate time
<= 5x the write time, peak memory <= 3x the frame. Prints ratios; never fails on them.

    python benchmarks/bench_simulate.py [--quick]
"""

from __future__ import annotations

import argparse
import gc
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout, installed or not

import pyarrow.parquet as pq

from core import history
from simulator.fleet import SimConfig
from simulator.run import simulate

TIME_TARGET = 5.0
MEMORY_TARGET = 3.0
MIX = {"NVIDIA A100-SXM4-80GB": 0.3, "NVIDIA H100 80GB HBM3": 0.5, "NVIDIA H200": 0.2}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="16 nodes x 30 days instead of 64 x 120")
    args = ap.parse_args()
    nodes, days = (16, 30) if args.quick else (64, 120)
    cfg = SimConfig(nodes=nodes, gpus_per_node=8, seed=7, models=MIX, random_failures=True)

    gc.collect()
    t0 = time.perf_counter()
    frame, failures = simulate(cfg, days)
    sim_s = time.perf_counter() - t0
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        pq.write_table(history.to_arrow(frame), Path(tmp) / "fleet.parquet", compression="zstd")
        write_s = time.perf_counter() - t0
    frame_bytes = int(frame.memory_usage(deep=True).sum())
    rows = len(frame)
    del frame, failures
    gc.collect()

    tracemalloc.start()
    simulate(cfg, days)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()

    print(f"fleet: {nodes * 8} GPUs x {days} days hourly = {rows:,} rows, frame {frame_bytes / 2**20:.0f} MiB")
    print(f"simulate: {sim_s:.2f} s ({rows / sim_s:,.0f} rows/s)")
    print(f"pyarrow write (zstd Parquet): {write_s:.2f} s")
    print(f"ratio simulate/write: {sim_s / write_s:.2f}x (target <= {TIME_TARGET:g}x)")
    print(
        f"peak memory of simulate: {peak / 2**20:.0f} MiB = {peak / frame_bytes:.2f}x the frame "
        f"(target <= {MEMORY_TARGET:g}x)"
    )


if __name__ == "__main__":
    main()
