"""The probe scheduler: idle guard, timing, results to /metrics and to the store callback."""

from __future__ import annotations

import logging
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.registry import CollectorRegistry

from collector.backends.base import GpuInfo
from collector.backends.replay import ReplayBackend
from collector.backends.sim import SimBackend, SimProbeRunner
from collector.exporter import render
from collector.probes import (
    ProbeCollector,
    ProbeConfig,
    ProbeScheduler,
    SubprocessProbeRunner,
    build_scheduler,
    busy_reason,
    peer_ratios,
)
from collector.run import build_collector
from core import catalog
from kernels.runner import PREFIX, ProbeResult
from simulator.fleet import FaultMode, FaultSpec, FleetSim
from tests.collector.helpers import ScriptedBackend
from tests.simulator.frames import stepped_history

LABELS = {
    "gpu": "0", "UUID": "GPU-00000000-test", "device": "nvidia0", "modelName": "NVIDIA H100 80GB HBM3",
    "pci_bus_id": "00000000:18:00.0", "Hostname": "node-a",
}  # fmt: skip


class IdleBackend(ScriptedBackend):
    """A scripted node whose GPUs report utilisation and compute processes through busy_reason."""

    def __init__(self, n: int = 2) -> None:
        super().__init__(n)
        self.busy: dict[str, str] = {}
        self.asked: list[str] = []

    def busy_reason(self, uuid: str, util_threshold_pct: float = 5.0) -> str | None:
        self.asked.append(uuid)
        return self.busy.get(uuid)


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def marker_child(tmp_path: Path) -> list[str]:
    """A stand-in probe child that leaves a file per GPU it ran on and reports a pass."""
    script = tmp_path / "child.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import json, sys
            args = dict(zip(sys.argv[1::2], sys.argv[2::2]))
            open({str(tmp_path)!r} + "/ran-" + args["--gpu-index"], "a").write("x")
            for t in args["--tests"].split(","):
                print({PREFIX!r} + json.dumps({{"test": t, "status": "pass", "value": 1.0, "unit": "GB/s"}}),
                      flush=True)
            """
        )
    )
    return [sys.executable, str(script)]


def test_idle_guard_keeps_probes_off_busy_gpus_with_a_real_child(tmp_path: Path) -> None:
    backend = IdleBackend(2)
    backend.busy[backend.infos[1].uuid] = "1 compute process(es) running (pid 4242)"
    runner = SubprocessProbeRunner(command=marker_child(tmp_path))
    clock = Clock()
    sched = ProbeScheduler(backend, runner, ProbeConfig(60, 5, ("pcie",)), monotonic=clock)
    results = sched.run_due()
    assert [(r.gpu_index, r.test, r.status) for r in results] == [(0, "pcie", "pass")]
    assert (tmp_path / "ran-0").exists() and not (tmp_path / "ran-1").exists()
    assert sched.deferred() == {backend.infos[1].uuid: "1 compute process(es) running (pid 4242)"}
    # The busy GPU is asked again at the next poll and probed once it is idle; GPU 0 is not due.
    backend.busy.clear()
    clock.t += 1
    assert [r.gpu_index for r in sched.run_due()] == [1]
    assert (tmp_path / "ran-1").read_text() == "x" and (tmp_path / "ran-0").read_text() == "x"
    # Due again after `every`.
    clock.t += 60
    assert sorted(r.gpu_index for r in sched.run_due()) == [0, 1]


def test_idleness_is_checked_just_before_each_gpu() -> None:
    backend = IdleBackend(2)
    seen: list[str] = []

    class Runner:
        name = "record"

        def run(self, gpu: GpuInfo, tests: Any, budget_s: float) -> list[ProbeResult]:
            seen.append(f"run {gpu.uuid}")
            backend.busy[backend.infos[1].uuid] = "a job started on GPU 1"  # while GPU 0 was probed
            return [ProbeResult("gemm", "pass", value=1.0)]

    sched = ProbeScheduler(backend, Runner(), ProbeConfig(60, 5, ("gemm",)))
    sched.run_due()
    assert seen == [f"run {backend.infos[0].uuid}"]
    assert backend.asked == [backend.infos[0].uuid, backend.infos[1].uuid]


def test_a_backend_that_cannot_tell_falls_back_to_the_sample_or_counts_as_busy() -> None:
    backend = ScriptedBackend(1)  # no busy_reason
    gpu = backend.infos[0]
    assert "cannot tell" in (busy_reason(backend, gpu, 5.0) or "")
    assert busy_reason(backend, gpu, 5.0, lambda uuid: 2.0) is None
    assert busy_reason(backend, gpu, 5.0, lambda uuid: 40.0) == "utilisation 40% >= 5%"


def test_results_go_to_metrics_and_to_the_store_callback() -> None:
    backend = IdleBackend(1)
    stored: list[list[dict[str, Any]]] = []

    class Runner:
        name = "fixed"

        def run(self, gpu: GpuInfo, tests: Any, budget_s: float) -> list[ProbeResult]:
            return [
                ProbeResult("gemm", "pass", value=440.0, unit="TFLOP/s", expected=445.1, ratio=0.989, errors=0,
                            duration_s=20.0, ran_at=1.7e9),
                ProbeResult("memtest", "fail", value=3.0, unit="bit errors", expected=0.0, errors=3, ran_at=1.7e9),
                ProbeResult("pcie", "skipped", details={"reason": "budget"}),
            ]  # fmt: skip

    sched = ProbeScheduler(backend, Runner(), ProbeConfig(60, 60), on_results=stored.append)
    sched.run_due()
    reg = CollectorRegistry(auto_describe=False)
    reg.register(ProbeCollector(sched))
    gemm = {**LABELS, "test": "gemm"}
    assert reg.get_sample_value("gpuhealth_probe_value", {**gemm, "unit": "TFLOP/s"}) == 440.0
    assert reg.get_sample_value("gpuhealth_probe_ratio", gemm) == 0.989
    assert reg.get_sample_value("gpuhealth_probe_passed", gemm) == 1.0
    assert reg.get_sample_value("gpuhealth_probe_duration_seconds", gemm) == 20.0
    assert reg.get_sample_value("gpuhealth_probe_last_run_timestamp_seconds", gemm) == 1.7e9
    mem = {**LABELS, "test": "memtest"}
    assert reg.get_sample_value("gpuhealth_probe_passed", mem) == 0.0
    assert reg.get_sample_value("gpuhealth_probe_errors", mem) == 3.0
    assert reg.get_sample_value("gpuhealth_probe_runs_total", {**mem, "status": "fail"}) == 1.0
    assert reg.get_sample_value("gpuhealth_probe_runs_total", {**LABELS, "test": "pcie", "status": "skipped"}) == 1.0
    assert reg.get_sample_value("gpuhealth_probe_passed", {**LABELS, "test": "pcie"}) is None
    assert reg.get_sample_value("gpuhealth_probe_slow", LABELS) is None  # no peers, no verdict
    (rows,) = stored
    assert [(r["gpu_uuid"], r["test"], r["status"]) for r in rows] == [
        (LABELS["UUID"], "gemm", "pass"), (LABELS["UUID"], "memtest", "fail"), (LABELS["UUID"], "pcie", "skipped"),
    ]  # fmt: skip
    assert rows[0]["ran_at"].tzinfo is not None and rows[1]["details"]["errors"] == 3
    text = render(reg.collect()).decode()
    assert "# TYPE gpuhealth_probe_runs_total counter" in text


def test_a_failing_store_callback_or_runner_does_not_stop_probing() -> None:
    backend = IdleBackend(2)

    class Runner:
        name = "flaky"

        def run(self, gpu: GpuInfo, tests: Any, budget_s: float) -> list[ProbeResult]:
            if gpu.index == 0:
                raise RuntimeError("runner bug")
            return [ProbeResult("gemm", "pass", value=1.0)]

    def store(rows: list[dict[str, Any]]) -> None:
        raise ConnectionError("database down")

    results = ProbeScheduler(backend, Runner(), ProbeConfig(60, 5, ("gemm",)), on_results=store).run_due()
    assert [(r.gpu_index, r.status) for r in results] == [(0, "error"), (1, "pass")]
    assert "runner bug" in results[0].details["reason"]


def test_a_child_with_malformed_results_gives_error_series_not_a_broken_scrape(tmp_path: Path) -> None:
    """Wrong-typed fields and non-object lines become `error` results the scrape and the store take."""
    script = tmp_path / "child.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import json
            print({PREFIX!r} + "[1, 2]")
            print({PREFIX!r} + json.dumps({{"test": "gemm", "status": "pass", "value": "fast", "errors": "0"}}))
            """
        )
    )
    backend = IdleBackend(1)
    stored: list[list[dict[str, Any]]] = []
    runner = SubprocessProbeRunner(command=[sys.executable, str(script)])
    sched = ProbeScheduler(backend, runner, ProbeConfig(60, 5, ("gemm", "pcie")), on_results=stored.append)
    results = sched.run_due()
    assert [(r.test, r.status) for r in results] == [("gemm", "error"), ("pcie", "error")]
    assert "value must be a finite number or null, not 'fast'" in results[0].details["reason"]
    assert "not a JSON object: [1, 2]" in results[1].details["reason"]
    reg = CollectorRegistry(auto_describe=False)
    reg.register(ProbeCollector(sched))
    text = render(reg.collect()).decode()  # the scrape works
    gemm = {**LABELS, "test": "gemm"}
    assert reg.get_sample_value("gpuhealth_probe_passed", gemm) == 0.0
    assert reg.get_sample_value("gpuhealth_probe_value", {**gemm, "unit": ""}) is None
    assert "gpuhealth_probe_runs_total{" in text
    assert [(r["test"], r["status"]) for r in stored[0]] == [("gemm", "error"), ("pcie", "error")]


IDLE, TRAINING = 2, 0
"""simulator.fleet's workload codes: 2 is an idle gap between jobs, 0 training."""


def sim_node(*faults: FaultSpec, seed: int = 7, workload: int = IDLE) -> SimBackend:
    b = SimBackend(gpus_per_node=8, seed=seed, step_s=600, faults=faults)
    b.fleet.workload[:] = workload  # pinned: the next job starts (or ends) only after hours
    for _ in range(6):  # an hour of simulated time: the faults are under way
        b.read()
    return b


def test_sim_runner_is_deterministic_and_shows_faults() -> None:
    def run() -> dict[tuple[int, str], ProbeResult]:
        b = sim_node(FaultSpec(5, FaultMode.THERMAL, 3), FaultSpec(2, FaultMode.ECC, 3))
        sched = ProbeScheduler(b, b.probe_runner(seed=7), ProbeConfig(60, 60))
        return {(r.gpu_index, r.test): r for r in sched.run_due()}

    first, second = run(), run()
    assert {k: (r.value, r.status) for k, r in first.items()} == {k: (r.value, r.status) for k, r in second.items()}
    assert len(first) == 8 * 4
    healthy = [first[(i, "gemm")].value for i in (0, 1, 3, 4, 6, 7)]
    assert all(v is not None for v in healthy)
    assert first[(5, "gemm")].value is not None and first[(5, "gemm")].value < 0.9 * min(healthy)  # type: ignore[operator]
    assert first[(2, "memtest")].status == "fail" and (first[(2, "memtest")].errors or 0) > 0
    assert all(first[(i, "memtest")].errors == 0 for i in (0, 1, 3, 4, 5, 6, 7))
    assert all(r.duration_s > 0 and r.unit for r in first.values())


def test_sim_runner_respects_the_idle_guard() -> None:
    b = sim_node(workload=TRAINING)  # utilisation ~95 %
    sched = ProbeScheduler(b, SimProbeRunner(b.fleet, 0), ProbeConfig(60, 60))
    assert sched.run_due() == []
    assert all("utilisation" in why for why in sched.deferred().values()) and len(sched.deferred()) == 8


def test_each_backend_brings_its_runner_and_a_replay_gets_no_scheduler(caplog: pytest.LogCaptureFixture) -> None:
    sched = build_scheduler(sim_node(seed=7), ProbeConfig(60, 60))
    assert sched is not None and isinstance(sched.runner, SimProbeRunner) and sched.runner.seed == 7
    replay = ReplayBackend(stepped_history(FleetSim(nodes=1, gpus_per_node=2, seed=3), 3, 600.0))
    with caplog.at_level(logging.INFO, logger="collector.probes"):
        assert build_scheduler(replay, ProbeConfig()) is None
    assert "probes are off: the replay backend's GPUs cannot be probed" in caplog.text


def test_peer_comparison_flags_a_gpu_more_than_ten_percent_slow() -> None:
    def res(i: int, v: float, model: str = "NVIDIA H100 80GB HBM3") -> tuple[GpuInfo, ProbeResult]:
        return GpuInfo(i, f"GPU-{i}", model, "n"), ProbeResult("gemm", "pass", value=v)

    latest = [
        res(0, 400),
        res(1, 410),
        res(2, 395),
        res(3, 355),
        res(4, 900, "NVIDIA H200"),
        res(5, 1000, "NVIDIA H200"),
    ]
    ratios = peer_ratios(latest)
    assert set(ratios) == {"GPU-0", "GPU-1", "GPU-2", "GPU-3"}  # the H200s have one peer each
    assert ratios["GPU-3"] == pytest.approx(355 / 400) and ratios["GPU-3"] < 0.9
    assert all(ratios[u] > 0.9 for u in ("GPU-0", "GPU-1", "GPU-2"))


def test_build_collector_serves_probe_series_from_the_sim_backend() -> None:
    b = sim_node(FaultSpec(5, FaultMode.THERMAL, 3))
    running = build_collector(b, catalog.select("default"), 1.0, "127.0.0.1", 0, probes=ProbeConfig(30, 60))
    try:
        assert running.probes is not None
        running.sampler.sample_once()
        running.probes.run_due()
        text = render(running.registry.collect()).decode()
    finally:
        running.server.server_close() if hasattr(running.server, "server_close") else running.server.stop()
    for name in ("value", "ratio", "passed", "duration_seconds", "last_run_timestamp_seconds", "errors", "slow"):
        assert f"\ngpuhealth_probe_{name}{{" in text, name
    assert "gpuhealth_probe_runs_total{" in text
    slow = [ln for ln in text.splitlines() if ln.startswith("gpuhealth_probe_slow{") and ln.endswith(" 1.0")]
    assert len(slow) == 1 and 'gpu="5"' in slow[0]


def test_build_collector_without_probes_is_unchanged() -> None:
    b = SimBackend(gpus_per_node=1, seed=7)
    running = build_collector(b, catalog.select("default"), 1.0, "127.0.0.1", 0)
    try:
        assert running.probes is None
        running.sampler.sample_once()
        assert "gpuhealth_probe" not in render(running.registry.collect()).decode()
    finally:
        running.server.stop()


def test_real_gpus_without_cupy_get_no_scheduler(caplog: pytest.LogCaptureFixture) -> None:
    import importlib.util

    if importlib.util.find_spec("cupy") is not None:
        pytest.skip("CuPy is installed here")
    running = build_collector(IdleBackend(1), catalog.select("default"), 1.0, "127.0.0.1", 0, probes=ProbeConfig())
    try:
        assert running.probes is None
        assert "CuPy not installed" in caplog.text
    finally:
        running.server.stop()


def test_probe_config_from_settings() -> None:
    from core.settings import Settings

    cfg = ProbeConfig.from_settings(Settings(probe_every="30s", probe_budget="1m", probe_tests="gemm,pcie"))
    assert (cfg.every_s, cfg.budget_s, cfg.tests, cfg.enabled) == (30.0, 60.0, ("gemm", "pcie"), True)
    assert not ProbeConfig.from_settings(Settings(probe_every="0")).enabled
    with pytest.raises(ValueError, match="unknown probe test"):
        ProbeConfig.from_settings(Settings(probe_tests="gemm,burn"))


def test_nvml_busy_reason_reads_processes_and_utilisation() -> None:
    pynvml = pytest.importorskip("pynvml")
    from collector.backends.nvml import NvmlBackend
    from tests.collector.backends.fake_nvml import FakeGpu, FakeNvml

    gpus = [FakeGpu(uuid=f"GPU-{i}") for i in range(3)]
    gpus[0].values[("nvmlDeviceGetComputeRunningProcesses",)] = []
    gpus[0].values[("nvmlDeviceGetUtilizationRates",)] = (1, 0)
    gpus[1].values[("nvmlDeviceGetComputeRunningProcesses",)] = [4242]
    gpus[2].values[("nvmlDeviceGetComputeRunningProcesses",)] = []
    gpus[2].values[("nvmlDeviceGetUtilizationRates",)] = (87, 40)
    backend = NvmlBackend("node", nvml=FakeNvml(gpus), watch_xid=False)  # type: ignore[arg-type]
    try:
        assert backend.busy_reason("GPU-0", 5.0) is None
        assert backend.busy_reason("GPU-1", 5.0) == "1 compute process(es) running (pid 4242)"
        assert backend.busy_reason("GPU-2", 5.0) == "utilisation 87% >= 5%"
        gpus[0].errors["nvmlDeviceGetComputeRunningProcesses"] = pynvml.NVML_ERROR_UNKNOWN
        assert "cannot tell" in (backend.busy_reason("GPU-0", 5.0) or "")
        assert "unknown" in (backend.busy_reason("GPU-9", 5.0) or "")
    finally:
        backend.close()


def test_sim_backend_busy_reason_follows_simulated_utilisation() -> None:
    idle, busy = sim_node(), sim_node(workload=TRAINING)
    assert idle.busy_reason(idle.gpus()[0].uuid, 5.0) is None
    assert (busy.busy_reason(busy.gpus()[0].uuid, 5.0) or "").startswith("utilisation")
