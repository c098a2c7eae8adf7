"""Time one scrape of the exporter against prometheus_client's own, in the same process.

Ours: `render(registry.collect())` of the registry `build_collector` assembles for a
simulated node with the default catalogue (GpuCollector + SelfCollector), timed two ways:

- cached: the snapshot has not changed since the last scrape, so GpuCollector reuses the
  families it built for it and render() only formats text;
- first render: a new snapshot was just published (cache miss), so the families are built
  first. This is what a scrape right after a sample costs; with a scrape interval close to
  the sampling interval it is what most scrapes cost.

Baseline: `prometheus_client.generate_latest` of a `CollectorRegistry` holding plain
`Gauge`s with the same names, label names, label values and number of series, which is
how an exporter written with prometheus_client's instrumentation API would look.
prometheus_client builds the families on every scrape, so it has no cached case.

Both are also timed once through HTTP (GET /metrics on loopback, new connection per
request) to show what the server adds. Prints ratios only; never fails on timings.

    python benchmarks/bench_exporter.py [--quick] [--gpus 8 16]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
import timeit
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout, installed or not

from prometheus_client import CollectorRegistry, Gauge, generate_latest, start_http_server
from prometheus_client.core import Metric

from collector.backends.sim import SimBackend
from collector.exporter import render
from collector.run import RunningCollector, build_collector
from core import catalog

TARGET_RATIO = 1.5
"""Our scrape may cost at most 1.5x prometheus_client's for the same series (project target)."""


@dataclass(frozen=True)
class Plan:
    """How many calls per run and how many runs; the median run is reported."""

    number: int
    repeat: int
    http_number: int
    http_repeat: int


FULL = Plan(number=200, repeat=7, http_number=50, http_repeat=5)
QUICK = Plan(number=20, repeat=3, http_number=10, http_repeat=3)


@dataclass(frozen=True)
class Result:
    """Seconds per scrape (median of runs) for one node size."""

    gpus: int
    series: int
    body_bytes: int
    ours_cached: float
    ours_first: float
    baseline: float
    http_ours: float
    http_baseline: float


def per_call(fn: Callable[[], object], plan: Plan) -> float:
    """Median over `plan.repeat` runs of the mean time of `plan.number` calls (timeit, GC off)."""
    runs = timeit.Timer(fn).repeat(repeat=plan.repeat, number=plan.number)
    return statistics.median(runs) / plan.number


def per_call_after(setup: Callable[[], object], fn: Callable[[], object], plan: Plan) -> float:
    """Like `per_call`, but runs untimed `setup()` before every timed `fn()`."""
    runs = []
    enabled = gc.isenabled()
    gc.disable()  # as timeit does, so a collection does not land in one run only
    try:
        for _ in range(plan.repeat):
            total = 0.0
            for _ in range(plan.number):
                setup()
                t0 = time.perf_counter()
                fn()
                total += time.perf_counter() - t0
            runs.append(total / plan.number)
    finally:
        if enabled:
            gc.enable()
    return statistics.median(runs)


def sample_lines(text: bytes) -> int:
    """Number of samples in a text exposition."""
    return sum(1 for line in text.splitlines() if line and not line.startswith(b"#"))


def mirror_as_gauges(families: Iterable[Metric]) -> CollectorRegistry:
    """A registry of plain Gauges with the same sample names, labels and values as `families`."""
    registry = CollectorRegistry(auto_describe=False)
    for fam in families:
        if not fam.samples:
            continue
        name = fam.samples[0].name  # counters: the `_total` name the samples carry
        label_names = list(fam.samples[0].labels)
        gauge = Gauge(name, fam.documentation, label_names, registry=registry)
        for s in fam.samples:
            (gauge.labels(**s.labels) if label_names else gauge).set(s.value)
    return registry


def http_get(url: str) -> bytes:
    """Body of a GET on a new connection."""
    with urllib.request.urlopen(url, timeout=10) as resp:
        return bytes(resp.read())


def measure(gpus: int, plan: Plan) -> Result:
    """Time ours and the baseline for one simulated node of `gpus` GPUs."""
    running: RunningCollector = build_collector(
        SimBackend(nodes=1, gpus_per_node=gpus, seed=7, step_s=10.0),
        catalog.select("default"),
        interval_s=10.0,
        host="127.0.0.1",
        port=0,
    )
    registry, sampler = running.registry, running.sampler
    sampler.sample_once()
    ours_body = render(registry.collect())
    baseline_registry = mirror_as_gauges(registry.collect())
    base_body = generate_latest(baseline_registry)
    if sample_lines(ours_body) != sample_lines(base_body):
        print(
            f"warning: {gpus} GPUs: ours has {sample_lines(ours_body)} samples, "
            f"baseline {sample_lines(base_body)}: the comparison is not like for like",
            file=sys.stderr,
        )

    ours_cached = per_call(lambda: render(registry.collect()), plan)
    baseline = per_call(lambda: generate_latest(baseline_registry), plan)
    ours_first = per_call_after(sampler.sample_once, lambda: render(registry.collect()), plan)

    # Through HTTP: our ExporterServer (sampler not started: the snapshot stays put, so after
    # the first request these are cached renders) and prometheus_client's own server.
    running.server.start()
    base_httpd, base_thread = start_http_server(0, addr="127.0.0.1", registry=baseline_registry)
    try:
        ours_url = f"http://127.0.0.1:{running.server.port}/metrics"
        base_url = f"http://127.0.0.1:{base_httpd.server_port}/metrics"
        http_plan = Plan(plan.http_number, plan.http_repeat, 0, 0)
        http_get(ours_url), http_get(base_url)  # warm up both
        http_ours = per_call(lambda: http_get(ours_url), http_plan)
        http_baseline = per_call(lambda: http_get(base_url), http_plan)
    finally:
        base_httpd.shutdown()
        base_httpd.server_close()
        base_thread.join(5)
        running.stop()
    return Result(
        gpus=gpus,
        series=sample_lines(ours_body),
        body_bytes=len(ours_body),
        ours_cached=ours_cached,
        ours_first=ours_first,
        baseline=baseline,
        http_ours=http_ours,
        http_baseline=http_baseline,
    )


def ms(seconds: float) -> str:
    """Seconds as milliseconds for the table."""
    return f"{seconds * 1e3:.3f}"


def report(results: list[Result], plan: Plan) -> None:
    """Print the table and one summary line per node size."""
    print(
        f"scrape = render of the whole /metrics (default catalogue, simulated node); "
        f"median of {plan.repeat} runs x {plan.number} calls, "
        f"HTTP {plan.http_repeat} x {plan.http_number}; times in ms"
    )
    header = (
        f"{'GPUs':>4} {'series':>6} {'bytes':>7} {'ours cached':>11} {'ours 1st':>9} "
        f"{'baseline':>9} {'cached/base':>11} {'1st/base':>9} {'HTTP ours':>9} {'HTTP base':>9} "
        f"{'HTTP ratio':>10}"
    )
    print(header)
    print("-" * len(header))
    for r in results:
        print(
            f"{r.gpus:>4} {r.series:>6} {r.body_bytes:>7} {ms(r.ours_cached):>11} {ms(r.ours_first):>9} "
            f"{ms(r.baseline):>9} {r.ours_cached / r.baseline:>10.2f}x {r.ours_first / r.baseline:>8.2f}x "
            f"{ms(r.http_ours):>9} {ms(r.http_baseline):>9} {r.http_ours / r.http_baseline:>9.2f}x"
        )
    print()
    for r in results:
        print(
            f"{r.gpus} GPUs: ours {r.ours_cached * 1e3:.2f} ms, baseline {r.baseline * 1e3:.2f} ms, "
            f"ratio {r.ours_cached / r.baseline:.2f}x (target <= {TARGET_RATIO}x); "
            f"first render after a sample {r.ours_first * 1e3:.2f} ms, "
            f"ratio {r.ours_first / r.baseline:.2f}x"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="few repeats: a smoke run, not a measurement")
    parser.add_argument("--gpus", type=int, nargs="+", default=[8, 16], help="node sizes to time")
    args = parser.parse_args(argv)
    plan = QUICK if args.quick else FULL
    report([measure(n, plan) for n in args.gpus], plan)
    return 0


if __name__ == "__main__":
    sys.exit(main())
