"""Requests/s and p99 of `GET /v1/gpus/{uuid}` for a 10,000-GPU fleet against a bare FastAPI endpoint.

Ours: the gpuhealth API (`api.app.create_app`) over a SQLite store holding 10,000 GPUs,
each with a latest sample, a risk score and (for some) an open decision.

Baseline: a FastAPI app whose `GET /v1/gpus/{uuid}` returns a constant JSON object from an
`async def` endpoint (no thread-pool hop: the cheapest FastAPI endpoint there is) — what
the framework and server cost alone. The target is judged against it. For reference, the
same constant from a plain `def` endpoint (run in FastAPI's thread pool) is measured too.

Both are served by uvicorn (one worker) on loopback, in turn, and loaded the same way by a
second process: N concurrent keep-alive connections asking for random GPUs for a fixed
time. Runs alternate (ours, bare, ours, bare, …) so drift hits both; medians are reported
as ratios. Target: throughput ≥ 0.5× the bare endpoint's, p99 < 4× its p99. Prints, never fails.

    python benchmarks/bench_api.py [--quick] [--gpus 10000] [--seconds 5] [--concurrency 16]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout, installed or not

import numpy as np
import pandas as pd
import uvicorn
from fastapi import FastAPI

from api.app import ApiConfig, create_app
from core.catalog import HISTORY_COLUMNS, IDENTITY_COLUMNS
from predictor.policy import decision_changes
from store import Store

TARGET_THROUGHPUT = 0.5
TARGET_P99 = 4.0

LOADGEN = r"""
# A lean keep-alive HTTP/1.1 client on asyncio streams: an httpx client tops out near the
# server's own rate on two cores, which would hide the difference being measured.
import asyncio, json, random, sys, time
CRLF = chr(13) + chr(10)

async def worker(host, port, uuids, stop, seed, lat, errors):
    rnd = random.Random(seed)
    reader, writer = await asyncio.open_connection(host, port)
    while time.perf_counter() < stop:
        t0 = time.perf_counter()
        writer.write(("GET /v1/gpus/" + rnd.choice(uuids) + " HTTP/1.1" + CRLF + "Host: bench" + CRLF + CRLF).encode())
        head = await reader.readuntil((CRLF + CRLF).encode())
        status = int(head.split(b" ", 2)[1])
        length = 0
        for line in head.split(CRLF.encode()):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":", 1)[1])
        await reader.readexactly(length)
        lat.append(time.perf_counter() - t0)
        if status != 200:
            errors.append(status)
    writer.close()

async def main(a):
    lat, errors = [], []
    stop = time.perf_counter() + a["seconds"]
    await asyncio.gather(*(worker(a["host"], a["port"], a["uuids"], stop, i, lat, errors)
                           for i in range(a["concurrency"])))
    print(json.dumps({"n": len(lat), "seconds": a["seconds"], "errors": len(errors), "lat": sorted(lat)}))

asyncio.run(main(json.loads(sys.stdin.read())))
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def fill_store(store: Store, n: int) -> list[str]:
    """n GPUs on n/8 nodes, one sample each, one score each; every tenth has a non-ok decision."""
    rng = np.random.default_rng(0)
    now = datetime.now(UTC).replace(microsecond=0)
    uuids = [f"GPU-{i:08x}-bench-{i:06d}" for i in range(n)]
    frame = pd.DataFrame({
        "timestamp": pd.Timestamp(now), "hostname": [f"node-{i // 8:05d}" for i in range(n)], "gpu_uuid": uuids,
        "gpu_index": [i % 8 for i in range(n)], "model_name": "NVIDIA H100 80GB HBM3",
    })  # fmt: skip
    for col in HISTORY_COLUMNS:
        if col not in IDENTITY_COLUMNS:
            frame[col] = rng.uniform(0, 100, n)
    frame["xid"] = 0.0
    store.samples.ingest(frame)
    decisions = np.where(rng.uniform(size=n) < 0.1, "watch", "ok")
    records = [
        {"gpu_uuid": u, "hostname": f"node-{i // 8:05d}", "model_name": "NVIDIA H100 80GB HBM3",
         "risk": float(r), "risk_ecc": float(r) / 2, "risk_thermal": float(r) / 3, "risk_pcie": float(r) / 4,
         "decision": str(d), "reasons": ["SBE rate 340/day, 12x its 7-day average"] if d != "ok" else []}
        for i, (u, r, d) in enumerate(zip(uuids, rng.uniform(size=n), decisions, strict=True))
    ]  # fmt: skip
    store.decisions.write_scores(records, now - timedelta(minutes=1), rule=decision_changes)
    return uuids


def bare_app(sync: bool = False) -> FastAPI:
    """The baseline: a constant from an `async def` endpoint, or (sync=True) a plain `def` one."""
    app = FastAPI()
    constant = {"uuid": "GPU-0", "hostname": "node-0", "risk": 0.1, "decision": "ok", "reasons": []}

    if sync:

        @app.get("/v1/gpus/{uuid}")
        def gpu_sync(uuid: str) -> dict[str, Any]:
            return constant

    else:

        @app.get("/v1/gpus/{uuid}")
        async def gpu(uuid: str) -> dict[str, Any]:
            return constant

    return app


class Served:
    """uvicorn on a free loopback port, in a thread of this process."""

    def __init__(self, app: FastAPI) -> None:
        self.port = free_port()
        self.server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="error", access_log=False)
        )
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.05)
        return f"http://127.0.0.1:{self.port}"

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(10)


def load(base: str, uuids: list[str], seconds: float, concurrency: int) -> dict[str, float]:
    host, port = base.removeprefix("http://").rsplit(":", 1)
    arg = json.dumps({"host": host, "port": int(port), "uuids": uuids, "seconds": seconds, "concurrency": concurrency})
    out = subprocess.run([sys.executable, "-c", LOADGEN], input=arg, capture_output=True, text=True, check=True)
    r = json.loads(out.stdout)
    lat = r["lat"]
    return {
        "rps": r["n"] / r["seconds"],
        "p50": lat[len(lat) // 2],
        "p99": lat[min(len(lat) - 1, int(len(lat) * 0.99))],
        "errors": r["errors"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gpus", type=int, default=10_000)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="2 s runs, 2 rounds")
    args = ap.parse_args()
    if args.quick:
        args.seconds, args.rounds = 2.0, 2
    with tempfile.TemporaryDirectory() as tmp:
        store = Store.open(f"sqlite:///{os.path.join(tmp, 'bench.db')}")
        t0 = time.perf_counter()
        uuids = fill_store(store, args.gpus)
        print(f"store: {args.gpus} GPUs filled in {time.perf_counter() - t0:.1f}s (SQLite)")
        ours_app = create_app(store, ApiConfig(token="bench"))
        results: dict[str, list[dict[str, float]]] = {"ours": [], "bare": [], "bare-sync": []}
        with Served(ours_app) as ours_url, Served(bare_app()) as bare_url, Served(bare_app(sync=True)) as sync_url:
            urls = {"ours": ours_url, "bare": bare_url, "bare-sync": sync_url}
            for url in urls.values():  # warm up
                load(url, uuids, 0.5, args.concurrency)
            for _ in range(args.rounds):
                for name, url in urls.items():
                    results[name].append(load(url, uuids, args.seconds, args.concurrency))
        store.close()
    med = {k: {m: statistics.median(r[m] for r in v) for m in ("rps", "p50", "p99", "errors")}
           for k, v in results.items()}  # fmt: skip
    print(f"GET /v1/gpus/{{uuid}}, {args.gpus} GPUs, {args.concurrency} connections, "
          f"{args.rounds} x {args.seconds:g}s each (medians)")  # fmt: skip
    for k in ("ours", "bare", "bare-sync"):
        m = med[k]
        print(f"  {k:9s} {m['rps']:8.0f} req/s   p50 {m['p50'] * 1e3:6.2f} ms   p99 {m['p99'] * 1e3:6.2f} ms"
              f"   errors {m['errors']:.0f}")  # fmt: skip
    for base, what in (("bare", "async def constant (the target)"), ("bare-sync", "def constant")):
        thr = med["ours"]["rps"] / med[base]["rps"]
        p99 = med["ours"]["p99"] / med[base]["p99"]
        print(f"against the {what}:")
        print(f"  throughput ratio {thr:.2f}x (target >= {TARGET_THROUGHPUT}x): "
              f"{'ok' if thr >= TARGET_THROUGHPUT else 'MISS'}")  # fmt: skip
        print(f"  p99 ratio        {p99:.2f}x (target < {TARGET_P99}x): {'ok' if p99 < TARGET_P99 else 'MISS'}")


if __name__ == "__main__":
    main()
