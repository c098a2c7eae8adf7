"""The probe scheduler: runs the stress probes (kernels/) on idle GPUs and exports the results.

Every `every_s` seconds of wall clock (also under --sim-speed) each GPU is due for a
probe run. Just before a run the GPU must be idle: no compute process and utilisation
below the threshold, asked of the backend (`busy_reason`), or, for a backend that cannot
tell, read from the latest sample. A busy GPU is tried again at the next poll. Results
are kept in memory for /metrics (`ProbeCollector`) and handed to `on_results` (the
service stores them). Each backend brings its runner (`Backend.probe_runner`): real GPUs
kernels.runner's child process per GPU, the sim backend results derived from the
simulated fleet, a replay none (no scheduler).
"""

from __future__ import annotations

import importlib.util
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from collector.backends.base import Backend, GpuInfo, ProbeRunner
from collector.exporter import gpu_labels
from collector.sampler import Snapshot
from core.labels import HOSTNAME
from core.probes import compare_to_peers, is_slow
from core.units import parse_duration
from core.worker import Worker
from kernels import expected as exp
from kernels.runner import CUPY_MISSING, GRACE_S, ProbeResult, run_probes

log = logging.getLogger(__name__)

SAMPLE_FRESH_FACTOR = 3.0
"""The fallback idle check trusts a sample no older than this many sampling intervals."""


class SubprocessProbeRunner:
    """The real runner: the CUDA kernels through CuPy in a child process with a timeout."""

    name = "cuda"

    def __init__(
        self,
        command: Sequence[str] | None = None,
        grace_s: float = GRACE_S,
        inject: bool = False,
        baseline: bool = False,
    ) -> None:
        self.command = list(command) if command else None
        self.grace_s = grace_s
        self.inject = inject
        self.baseline = baseline

    def run(self, gpu: GpuInfo, tests: Sequence[str], budget_s: float) -> list[ProbeResult]:
        return run_probes(
            gpu.index, tests, budget_s, gpu_uuid=gpu.uuid, model_name=gpu.model_name,
            command=self.command, grace_s=self.grace_s, inject=self.inject, baseline=self.baseline,
        )  # fmt: skip


def util_from_snapshot(snap: Snapshot | None, uuid: str, max_age_s: float, now: float) -> float | None:
    """The GPU's utilisation in a snapshot no older than max_age_s; None when unknown."""
    if snap is None or now - snap.taken_at > max_age_s:
        return None
    for r in snap.readings:
        if r.info.uuid == uuid and not r.lost:
            v = r.values.get("gpu_util_pct")
            return None if v is None or v != v else float(v)
    return None


def busy_reason(
    backend: Backend,
    gpu: GpuInfo,
    util_threshold_pct: float,
    fallback_util: Callable[[str], float | None] | None = None,
) -> str | None:
    """Why `gpu` must not be probed now, or None when it is idle; unknown counts as busy."""
    ask = getattr(backend, "busy_reason", None)
    if ask is not None:
        try:
            reason = ask(gpu.uuid, util_threshold_pct)
        except Exception as err:
            return f"idle check failed: {err}"
        return None if reason is None else str(reason)
    util = fallback_util(gpu.uuid) if fallback_util is not None else None
    if util is None:
        return f"the {backend.name} backend cannot tell whether GPU {gpu.index} is idle"
    if util >= util_threshold_pct:
        return f"utilisation {util:g}% >= {util_threshold_pct:g}%"
    return None


@dataclass(frozen=True)
class ProbeConfig:
    """When and what to probe (GPUHEALTH_PROBE_* settings)."""

    every_s: float = 6 * 3600.0
    budget_s: float = 60.0
    tests: tuple[str, ...] = exp.DEFAULT_TESTS
    idle_util_pct: float = 5.0

    @property
    def enabled(self) -> bool:
        return self.every_s > 0

    @classmethod
    def from_settings(cls, s: Any) -> ProbeConfig:
        """From a gpuhealth Settings (probe_every "0" turns probing off); ValueError on bad values."""
        every = 0.0 if str(s.probe_every).strip() == "" else parse_duration(s.probe_every, allow_zero=True)
        budget = parse_duration(s.probe_budget)
        if budget <= 0:
            raise ValueError(f"probe budget must be positive, not {s.probe_budget!r}")
        return cls(every, budget, tuple(exp.parse_tests(s.probe_tests)), float(s.probe_idle_util_pct))


@dataclass
class _State:
    info: GpuInfo
    last_attempt: float | None = None
    busy: str | None = None
    results: dict[str, ProbeResult] = field(default_factory=dict)


class ProbeScheduler(Worker):
    """Probes each idle GPU every `every_s` seconds on a background thread."""

    thread_name = "gpuhealth-probes"
    stop_timeout_s = 5.0

    def __init__(
        self,
        backend: Backend,
        runner: ProbeRunner,
        config: ProbeConfig,
        *,
        on_results: Callable[[list[dict[str, Any]]], None] | None = None,
        fallback_util: Callable[[str], float | None] | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        poll_s: float | None = None,
    ) -> None:
        if config.budget_s <= 0:
            raise ValueError("probe budget must be positive")
        self.backend = backend
        self.runner = runner
        self.config = config
        self.on_results = on_results
        self.fallback_util = fallback_util
        self.monotonic = monotonic
        # Poll often enough that a GPU falling idle is caught soon, rarely enough to be free.
        self.poll_s = poll_s if poll_s is not None else min(60.0, max(1.0, config.every_s / 6))
        self._lock = threading.Lock()
        self._gpus: dict[str, _State] = {}
        self._runs: Counter[tuple[str, str, str]] = Counter()
        super().__init__()

    # --- running ----------------------------------------------------------------------------

    def run_due(self) -> list[ProbeResult]:
        """Probe every GPU that is due and idle now; the results of this pass."""
        done: list[ProbeResult] = []
        for info in self.backend.gpus():
            if self._stop.is_set():
                break
            with self._lock:
                st = self._gpus.setdefault(info.uuid, _State(info))
                st.info = info
                due = st.last_attempt is None or self.monotonic() - st.last_attempt >= self.config.every_s
            if not due:
                continue
            reason = busy_reason(self.backend, info, self.config.idle_util_pct, self.fallback_util)
            if reason is not None:
                with self._lock:
                    st.busy = reason
                log.debug("probe of GPU %d deferred: %s", info.index, reason)
                continue
            started = self.monotonic()
            try:
                results = self.runner.run(info, self.config.tests, self.config.budget_s)
            except Exception as err:  # a runner bug must not end the loop
                log.exception("probe runner %s failed on GPU %d", self.runner.name, info.index)
                results = [
                    ProbeResult(t, "error", details={"reason": f"runner failed: {err}"}) for t in self.config.tests
                ]
            for r in results:
                r.gpu_index, r.gpu_uuid, r.model_name = info.index, info.uuid, r.model_name or info.model_name
            with self._lock:
                st.last_attempt = started
                st.busy = None
                for r in results:
                    st.results[r.test] = r
                    self._runs[(info.uuid, r.test, r.status)] += 1
            bad = [f"{r.test} {r.status}" for r in results if r.status in ("fail", "error")]
            log.log(
                logging.WARNING if bad else logging.INFO, "probed GPU %d (%s): %s", info.index, info.uuid,
                ", ".join(bad) or "all passed",
            )  # fmt: skip
            done += results
            if self.on_results is not None and results:
                try:
                    self.on_results([r.store_row() for r in results])
                except Exception:  # storing is the caller's business; probing goes on
                    log.exception("handing probe results of GPU %d on failed", info.index)
        return done

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.run_due()
            except Exception:  # the backend's gpus() failing, say: try again next poll
                log.exception("probe scheduling pass failed")
            self._stop.wait(self.poll_s)

    # --- reading ----------------------------------------------------------------------------

    def latest(self) -> list[tuple[GpuInfo, ProbeResult]]:
        """The latest result of each (GPU, test)."""
        with self._lock:
            return [(st.info, r) for st in self._gpus.values() for r in st.results.values()]

    def run_counts(self) -> dict[tuple[str, str, str], int]:
        """Probe runs so far by (GPU UUID, test, status)."""
        with self._lock:
            return dict(self._runs)

    def deferred(self) -> dict[str, str]:
        """GPUs waiting for idleness: UUID -> why they are busy."""
        with self._lock:
            return {u: st.busy for u, st in self._gpus.items() if st.busy}

    def infos(self) -> dict[str, GpuInfo]:
        with self._lock:
            return {u: st.info for u, st in self._gpus.items()}


def peer_ratios(latest: Sequence[tuple[GpuInfo, ProbeResult]], test: str = "gemm") -> dict[str, float]:
    """GPU UUID -> its `test` value over the median of its same-model peers (others only),
    for GPUs with enough peers: core.probes' rule, as predictor.probes.slow_gpus applies it."""
    by_model: dict[str, dict[str, float]] = {}
    for info, r in latest:
        if r.test == test and r.value is not None and r.status in ("pass", "fail"):
            by_model.setdefault(info.model_name, {})[info.uuid] = r.value
    return {
        uuid: c.ratio
        for values in by_model.values()
        for uuid, c in compare_to_peers(values).items()
        if c.ratio is not None
    }


class ProbeCollector(Collector):
    """gpuhealth_probe_* series from the scheduler's latest results (labels as the GPU series)."""

    def __init__(self, scheduler: ProbeScheduler, hostname_label: str = HOSTNAME) -> None:
        self._scheduler = scheduler
        self._host_label = hostname_label

    def _labels(self, info: GpuInfo) -> dict[str, str]:
        return gpu_labels(info.index, info.uuid, info.model_name, info.pci_bus_id, info.hostname, self._host_label)

    def collect(self) -> Iterator[Metric]:
        latest = self._scheduler.latest()
        fams = {
            "value": Metric("gpuhealth_probe_value", "Value the probe measured (see the unit label).", "gauge"),
            "ratio": Metric("gpuhealth_probe_ratio", "Probe value over the value expected for the GPU model.", "gauge"),
            "passed": Metric(
                "gpuhealth_probe_passed", "1 when the probe passed, 0 when it failed or errored.", "gauge"
            ),
            "duration": Metric("gpuhealth_probe_duration_seconds", "Duration of the probe's last run.", "gauge"),
            "last": Metric("gpuhealth_probe_last_run_timestamp_seconds", "Unix time the probe last ran.", "gauge"),
            "errors": Metric(
                "gpuhealth_probe_errors", "Mismatches or bit errors the probe found in its last run.", "gauge"
            ),
        }
        for info, r in sorted(latest, key=lambda x: (x[0].index, x[0].uuid, x[1].test)):
            base = {**self._labels(info), "test": r.test}
            if r.status != "skipped":
                fams["passed"].add_sample("gpuhealth_probe_passed", base, 1.0 if r.status == "pass" else 0.0)
                fams["duration"].add_sample("gpuhealth_probe_duration_seconds", base, r.duration_s)
                fams["last"].add_sample("gpuhealth_probe_last_run_timestamp_seconds", base, r.ran_at)
            if r.value is not None:
                fams["value"].add_sample("gpuhealth_probe_value", {**base, "unit": r.unit}, r.value)
            if r.ratio is not None:
                fams["ratio"].add_sample("gpuhealth_probe_ratio", base, r.ratio)
            if r.errors is not None:
                fams["errors"].add_sample("gpuhealth_probe_errors", base, float(r.errors))
        yield from (f for f in fams.values() if f.samples)
        infos = self._scheduler.infos()
        slow = GaugeMetricFamily(
            "gpuhealth_probe_slow", "1 when the GPU's GEMM TFLOP/s is more than 10% below its same-model peers."
        )
        for uuid, ratio in sorted(peer_ratios(latest).items()):
            slow.add_sample("gpuhealth_probe_slow", self._labels(infos[uuid]), 1.0 if is_slow(ratio) else 0.0)
        if slow.samples:
            yield slow
        runs = Metric("gpuhealth_probe_runs", "Probe runs since the collector started, by test and status.", "counter")
        for (uuid, test, status), n in sorted(self._scheduler.run_counts().items()):
            labels = {**self._labels(infos[uuid]), "test": test, "status": status}
            runs.add_sample("gpuhealth_probe_runs_total", labels, float(n))
        if runs.samples:
            yield runs


def build_scheduler(
    backend: Backend,
    config: ProbeConfig,
    *,
    runner: ProbeRunner | None = None,
    on_results: Callable[[list[dict[str, Any]]], None] | None = None,
    latest: Callable[[], Snapshot | None] | None = None,
    interval_s: float = 10.0,
) -> ProbeScheduler | None:
    """A scheduler for `backend` with its own runner (`Backend.probe_runner`); the latest
    sample backs the idle check of backends that cannot tell by themselves (DCGM). None when
    the backend's GPUs cannot be probed (replay), or, with a warning, when real GPUs would need
    CuPy and it is not installed: no probe series rather than an `error` result on every GPU
    every run."""
    runner = runner or backend.probe_runner()
    if runner is None:
        log.info("probes are off: the %s backend's GPUs cannot be probed", backend.name)
        return None
    if (
        isinstance(runner, SubprocessProbeRunner)
        and runner.command is None
        and importlib.util.find_spec("cupy") is None
    ):
        log.warning("probes are off: %s", CUPY_MISSING)
        return None
    fallback = snapshot_util(latest, interval_s) if latest is not None else None
    return ProbeScheduler(backend, runner, config, on_results=on_results, fallback_util=fallback)


def snapshot_util(latest: Callable[[], Snapshot | None], interval_s: float) -> Callable[[str], float | None]:
    """A GPU's utilisation from the latest sample, if it is fresh: the idle check of backends that cannot
    tell by themselves (DCGM), for the scheduler and the node agent's verification."""
    max_age = SAMPLE_FRESH_FACTOR * interval_s

    def util(uuid: str) -> float | None:
        return util_from_snapshot(latest(), uuid, max_age, time.time())

    return util
