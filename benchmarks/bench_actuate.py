"""Time one reconciliation pass of the actuator over a large Kubernetes cluster against listing its nodes.

The cluster is the API server of `tests/kube_api.py` (Kubernetes' semantics), run in a process of
its own as a real API server is, with N nodes (default 10,000) and a GPU pod on each node that will
change. The store (SQLite, a temp file)
holds one GPU per node; in each round a fresh 1 % of the nodes get a decision other than ok (a
mix of watch, demote and drain), the rest stay as they were.

Ours: `Actuator.reconcile_once()` in mode on: read the decisions, LIST the nodes, plan, and for
each changed node read its pods, patch it, evict its GPU pods (drain) and record an Event and the
audit. Baseline: the LIST of the nodes alone, through the same lightkube client
(`list(client.list(Node, chunk_size=500))`). Target: ours ≤ 2× the baseline, which shows that a
pass costs the changes, not one API write per node. Also printed: a pass with nothing to change.
Never fails on timings.

    python benchmarks/bench_actuate.py [--nodes 10000] [--rounds 3] [--changing 0.01]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout, installed or not

from lightkube.resources.core_v1 import Node

from actuate.breaker import BreakerPolicy
from actuate.kubernetes import KubeTarget, client_for
from service.actuator import Actuator, ActuatorConfig
from store import Store
from tests.fleet_decisions import set_decisions

ROOT = Path(__file__).resolve().parents[1]
T0 = datetime(2026, 12, 1, tzinfo=UTC)
KINDS = ("watch", "demote", "drain")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--changing", type=float, default=0.01, help="share of the nodes changing state per round")
    ap.add_argument("--workers", type=int, default=ActuatorConfig.workers, help="nodes changed at once")
    ap.add_argument(
        "--small-nodes", action="store_true", help="minimal node objects instead of GPU Operator-sized ones"
    )
    a = ap.parse_args()
    hosts = [f"gpu-{i:05d}" for i in range(a.nodes)]
    per_round = max(1, round(a.changing * a.nodes))
    t = time.perf_counter()
    server = subprocess.Popen(
        [sys.executable, "-m", "tests.kube_api", "--nodes", str(a.nodes), "--gpu-pods", str(per_round * a.rounds),
         *(["--small"] if a.small_nodes else [])],
        cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert server.stdout is not None and server.stdin is not None
    port = int(server.stdout.readline().split()[1])
    print(f"cluster: {a.nodes:,} nodes in {time.perf_counter() - t:.1f} s; {per_round} change per round")
    try:
        run(a, hosts, per_round, f"http://127.0.0.1:{port}")
    finally:
        server.stdin.close()
        server.wait(10)


def run(a: argparse.Namespace, hosts: list[str], per_round: int, url: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        store = Store.open(f"sqlite:///{Path(tmp) / 'bench.db'}")
        client = client_for(url, timeout_s=60)
        clock = [T0]
        # The breaker is not what is measured here: it would stop a 1 % storm at 5 nodes.
        config = ActuatorConfig(
            mode="on", breaker=BreakerPolicy(max_fraction=1.0, max_nodes=a.nodes), workers=a.workers
        )
        act = Actuator(store, KubeTarget(client), config, now=lambda: clock[0])
        print(f"actuator: {config.workers} worker(s)")
        set_decisions(store, T0, hosts, {}, gpus=1)
        act.reconcile_once()  # warm: connections, the first LIST
        bad: dict[tuple[str, int], str] = {}
        ours, base, idle = [], [], []
        for r in range(a.rounds):
            for i, h in enumerate(hosts[r * per_round : (r + 1) * per_round]):
                bad[(h, 0)] = KINDS[i % len(KINDS)]
            clock[0] = T0 + timedelta(minutes=10 * (r + 1))
            set_decisions(store, clock[0], hosts, bad, gpus=1)
            t = time.perf_counter()
            n = len(list(client.list(Node, chunk_size=500)))
            base.append(time.perf_counter() - t)
            assert n == a.nodes
            t = time.perf_counter()
            report = act.reconcile_once()
            ours.append(time.perf_counter() - t)
            applied = sum(o.result in ("applied", "pending") for o in report.outcomes)
            assert applied == per_round, f"round {r}: {applied} of {per_round} applied"
            t = time.perf_counter()
            assert act.reconcile_once().outcomes == []
            idle.append(time.perf_counter() - t)
            print(f"round {r + 1}: list {base[-1]:.3f} s, pass with {applied} changes {ours[-1]:.3f} s, "
                  f"pass with none {idle[-1]:.3f} s")  # fmt: skip
        store.close()
    summarise(a, per_round, base, ours, idle)


def summarise(a: argparse.Namespace, per_round: int, base: list[float], ours: list[float], idle: list[float]) -> None:
    b, o, i = statistics.median(base), statistics.median(ours), statistics.median(idle)
    print(f"\nlisting {a.nodes:,} nodes: {b:.3f} s (median of {a.rounds})")
    print(f"one pass, {per_round} nodes changing: {o:.3f} s = {o / b:.2f}x the listing (target <= 2x)")
    print(f"one pass, nothing changing: {i:.3f} s = {i / b:.2f}x the listing")


if __name__ == "__main__":
    main()
