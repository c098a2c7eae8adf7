"""Time one fleet-mode pull (`serve --source prometheus`) of N GPUs against reading the same answers.

Ours: `PrometheusPuller.pull_once()` into a fresh SQLite store: one range query per history
field (the DCGM names) and one instant query for the workloads on each GPU, the answers
joined per GPU and step, validated, stored, and the fleet checked for lost GPUs; a
steady-state pull (the overlap step and one new step).

Baseline: the same HTTP requests through the same httpx client, each answer parsed with
`json.loads` and nothing else: what any client of Prometheus must do to see the data.

Prometheus is an in-process httpx transport serving pre-built answers (N series per field,
like dcgm-exporter's labels), so neither side waits on a server. Prints the times and the
ratio ours/baseline; there is no target, it shows where a large fleet's pull time goes.

    python benchmarks/bench_pull.py [--quick] [--gpus 10000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout, installed or not

import httpx

from core import catalog
from core.labels import HOSTNAME
from service.puller import PrometheusPuller
from store import Store

STEP_S = 300
T0 = datetime(2026, 1, 1, tzinfo=UTC)
FIELDS = [f.metric_name for f in catalog.FIELDS if f.name in catalog.HISTORY_COLUMNS]
WORKLOADS = "workloads"
"""The answer to the pull's one instant query, which labels each GPU with its workload (`prom_import.workloads_at`)."""


def answers(gpus: int) -> dict[str, bytes]:
    """Each field's range-query answer: every GPU at the two steps a steady-state pull asks for."""
    steps = [(T0 + timedelta(seconds=k * STEP_S)).timestamp() for k in (1, 2)]
    out = {}
    for j, name in enumerate(FIELDS):
        result = [
            {"metric": {"UUID": f"GPU-{i:06d}", "gpu": str(i % 8), "modelName": "NVIDIA H100 80GB HBM3",
                        HOSTNAME: f"node-{i // 8:05d}"},
             "values": [[t, str(40 + (i + j) % 50)] for t in steps]}
            for i in range(gpus)
        ]  # fmt: skip
        out[name] = json.dumps({"status": "success", "data": {"resultType": "matrix", "result": result}}).encode()
    # The pull's instant query for the workloads on each GPU: a pod on every GPU, as dcgm-exporter labels it.
    pods = [
        {"metric": {"UUID": f"GPU-{i:06d}", HOSTNAME: f"node-{i // 8:05d}", "pod": f"train-{i // 64}",
                    "namespace": "ml", "container": "trainer"},
         "value": [steps[-1], "1"]}
        for i in range(gpus)
    ]  # fmt: skip
    out[WORKLOADS] = json.dumps({"status": "success", "data": {"resultType": "vector", "result": pods}}).encode()
    return out


def client(bodies: dict[str, bytes]) -> httpx.Client:
    names = json.dumps({"status": "success", "data": FIELDS}).encode()

    def handler(req: httpx.Request) -> httpx.Response:
        if req.url.path.endswith("/values"):
            body = names
        elif req.url.params["query"].startswith("group by"):
            body = bodies[WORKLOADS]
        else:
            body = bodies[req.url.params["query"].rsplit("(", 1)[1].rstrip(")")]
        return httpx.Response(200, content=body, headers={"content-type": "application/json"})

    return httpx.Client(transport=httpx.MockTransport(handler))


def ours(bodies: dict[str, bytes]) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        store = Store.open(f"sqlite:///{tmp}/pull.db")
        http = client(bodies)
        p = PrometheusPuller(
            store, "http://prom", step_s=STEP_S, backfill=timedelta(hours=1), client=http,
            now=lambda: T0 + timedelta(seconds=2 * STEP_S + 20),
        )  # fmt: skip
        p.state.watermark = T0 + timedelta(seconds=STEP_S)  # steady state: the previous pull ended here
        t = time.perf_counter()
        p.pull_once()
        took = time.perf_counter() - t
        http.close()
        store.close()
    return took


def baseline(bodies: dict[str, bytes]) -> float:
    http = client(bodies)
    t = time.perf_counter()
    http.get("http://prom/api/v1/label/__name__/values").json()
    for name in FIELDS:
        json.loads(http.get("http://prom/api/v1/query_range", params={"query": f"max by (UUID) ({name})"}).content)
    json.loads(http.get("http://prom/api/v1/query", params={"query": "group by (UUID) (x)"}).content)
    took = time.perf_counter() - t
    http.close()
    return took


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gpus", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="1,000 GPUs, 2 rounds")
    args = ap.parse_args()
    if args.quick:
        args.gpus, args.rounds = 1_000, 2
    bodies = answers(args.gpus)
    mb = sum(len(b) for b in bodies.values()) / 1e6
    print(f"{args.gpus} GPUs, {len(FIELDS)} fields, 2 steps each: {mb:.0f} MB of answers")
    ours_s, base_s = [], []
    for _ in range(args.rounds):  # alternate, so drift hits both
        ours_s.append(ours(bodies))
        base_s.append(baseline(bodies))
    o, b = statistics.median(ours_s), statistics.median(base_s)
    print(f"  pull (query, join, validate, store, lost check): {o:6.2f} s")
    print(f"  requests + json.loads only:                      {b:6.2f} s")
    print(f"  ratio ours/baseline {o / b:.1f}x; {args.gpus / o:,.0f} GPUs/s per pull")


if __name__ == "__main__":
    main()
