"""The node agent's remedies (collector.remediate): tasks from the service, carried out, reported.

Against a fake RemedyService that behaves as the contract says (a task stays open until a report
that is not `refused` moves it on), the NVML test double with its stand-in nvidia-smi, the
simulated backend, and once the HTTP client on a real socket.
"""

from __future__ import annotations

import json
import sys
import textwrap
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pynvml
import pytest
from prometheus_client.registry import CollectorRegistry

from collector.backends.base import GpuInfo
from collector.backends.nvml import NvmlBackend
from collector.backends.sim import SimBackend
from collector.dcgm_diag import DcgmDiagRunner
from collector.probes import ProbeConfig, SubprocessProbeRunner
from collector.remediate import REBOOT_OFF, RemedyAgent, RemedyCollector
from collector.remedy import NOT_ALLOWED
from collector.verify import Verifier, verify_runner
from core.remedies import DETAIL_CHARS, RemedyReport, RemedyTask
from core.service_client import HttpRemedies, ServiceError, ServiceUnavailable
from kernels.runner import PREFIX, ProbeResult
from tests.collector.backends.fake_nvml import FakeNvml
from tests.collector.test_remedy import COMPUTE, REMAP, UUIDS, nvml_resetter
from tests.collector.test_remedy import faulty_h100s as h100s
from tests.core.http_stub import Answer, StubService, closed_port

PROBES = ProbeConfig(60.0, 5.0, ("gemm", "memtest"), 5.0)


@dataclass
class FakeService:
    """The service as the contract describes it, in memory."""

    open: list[RemedyTask] = field(default_factory=list)
    reports: list[tuple[int, RemedyReport]] = field(default_factory=list)
    asked: list[str] = field(default_factory=list)
    down: bool = False
    reports_down: bool = False
    closed: set[int] = field(default_factory=set)
    """Remediations that moved on without this agent (a 409 for their report)."""

    def tasks(self, hostname: str) -> list[RemedyTask]:
        self.asked.append(hostname)
        if self.down:
            raise ServiceUnavailable("http://svc/v1/nodes/x/remedies: cannot connect", url="http://svc")
        return [t for t in self.open if t.hostname == hostname]

    def report(self, remediation_id: int, report: RemedyReport) -> bool:
        if self.reports_down:
            raise ServiceUnavailable("http://svc: no answer within 5s", url="http://svc")
        if remediation_id in self.closed:
            return False
        self.reports.append((remediation_id, report))
        if report.result != "refused":
            self.open = [t for t in self.open if t.remediation_id != remediation_id]
        return True


def task(rid: int, do: str, uuid: str, host: str = "node-01", index: int | None = 0) -> RemedyTask:
    return RemedyTask(rid, host, uuid, index, do, "pending row remap")  # type: ignore[arg-type]


def idle(fake: FakeNvml, index: int) -> None:
    fake.gpu(index).values[("nvmlDeviceGetUtilizationRates",)] = (0, 0)


def child(tmp_path: Path, status: dict[str, str] | None = None) -> list[str]:
    """A stand-in probe child: each test passes unless `status` says otherwise (memtest finds 3 bit errors)."""
    script = tmp_path / "child.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import json, sys
            args = dict(zip(sys.argv[1::2], sys.argv[2::2]))
            for t in args["--tests"].split(","):
                s = {status or {}!r}.get(t, "pass")
                print({PREFIX!r} + json.dumps({{"test": t, "status": s, "value": 3.0 if t == "memtest" else 600.0,
                      "unit": "bit errors" if t == "memtest" else "TFLOP/s", "errors": 3 if s == "fail" else 0}}),
                      flush=True)
            """
        )
    )
    return [sys.executable, str(script)]


def nvml_agent(service: FakeService, fake: FakeNvml, tmp_path: Path, **kw: object) -> RemedyAgent:
    resetter, backend, _ = nvml_resetter(fake, allow=bool(kw.pop("allow", True)))
    runner = SubprocessProbeRunner(command=child(tmp_path, kw.pop("status", None)))  # type: ignore[arg-type]
    return RemedyAgent(service, backend, resetter=resetter, verifier=Verifier(backend, runner, PROBES), **kw)  # type: ignore[arg-type]


def sample(registry: CollectorRegistry, name: str, **labels: str) -> float | None:
    return registry.get_sample_value(name, labels)


# --- reset ----------------------------------------------------------------------------------------------


def test_a_reset_is_refused_while_busy_then_done_when_idle_and_the_task_closes(tmp_path: Path) -> None:
    fake = h100s()
    fake.gpu(0).values[COMPUTE] = [4242]
    service = FakeService([task(7, "reset", UUIDS[0])])
    agent = nvml_agent(service, fake, tmp_path)

    assert agent.run_once() == 1
    (rid, report), = service.reports  # fmt: skip
    assert (rid, report.do, report.result, report.gpu_uuid) == (7, "reset", "refused", UUIDS[0])
    assert report.detail == "1 process(es) on the GPU (pid 4242)"
    assert fake.gpu(0).resets == 0 and service.open  # still open: asked again next round

    fake.gpu(0).values[COMPUTE] = []
    agent.run_once()
    assert service.reports[-1][1].result == "done"
    assert service.reports[-1][1].detail == "GPU 00000000:18:00.0 was successfully reset. All done."
    assert fake.gpu(0).resets == 1 and fake.gpu(0).values[REMAP][2] == 0  # the pending remap applied
    assert agent.run_once() == 0 and len(service.reports) == 2


def test_a_reset_without_allow_reset_is_refused_and_nothing_is_touched(tmp_path: Path) -> None:
    fake = h100s()
    service = FakeService([task(7, "reset", UUIDS[0])])
    nvml_agent(service, fake, tmp_path, allow=False).run_once()
    assert service.reports[0][1].result == "refused" and service.reports[0][1].detail == NOT_ALLOWED
    assert fake.gpu(0).resets == 0


def test_a_gpu_that_is_not_on_this_node_is_refused(tmp_path: Path) -> None:
    service = FakeService([task(7, "reset", "GPU-elsewhere")])
    nvml_agent(service, h100s(), tmp_path).run_once()
    assert service.reports[0][1].result == "refused"
    assert service.reports[0][1].detail == "no GPU GPU-elsewhere on node-01"


# --- verify ---------------------------------------------------------------------------------------------


def test_verify_passes_on_a_healthy_idle_gpu_with_each_probe_in_the_report(tmp_path: Path) -> None:
    fake = h100s()
    idle(fake, 1)
    service = FakeService([task(9, "verify", UUIDS[1], index=1)])
    nvml_agent(service, fake, tmp_path).run_once()
    (_, report), = service.reports  # fmt: skip
    assert (report.do, report.result, report.detail) == ("verify", "done", "gemm, memtest passed")
    assert [(p.probe, p.passed) for p in report.probes] == [("gemm", True), ("memtest", True)]
    assert report.probes[0].detail.startswith("pass, 600 TFLOP/s")
    assert report.duration_s is not None and report.duration_s > 0


def test_verify_fails_when_a_probe_fails(tmp_path: Path) -> None:
    fake = h100s()
    idle(fake, 1)
    service = FakeService([task(9, "verify", UUIDS[1], index=1)])
    nvml_agent(service, fake, tmp_path, status={"memtest": "fail"}).run_once()
    report = service.reports[0][1]
    assert (report.result, report.detail) == ("failed", "memtest did not pass")
    assert [(p.probe, p.passed) for p in report.probes] == [("gemm", True), ("memtest", False)]
    assert report.probes[1].detail == "fail, 3 bit errors, 3 error(s)"


def test_verify_is_refused_while_a_process_runs_and_no_probe_starts(tmp_path: Path) -> None:
    fake = h100s()
    idle(fake, 1)
    fake.gpu(1).values[COMPUTE] = [5150]
    service = FakeService([task(9, "verify", UUIDS[1], index=1)])
    nvml_agent(service, fake, tmp_path, status={"gemm": "fail"}).run_once()
    report = service.reports[0][1]
    assert report.result == "refused" and report.probes == ()
    assert report.detail == "the GPU is not idle: 1 compute process(es) running (pid 5150)"


def test_a_probe_that_did_not_run_is_named_but_no_verdict(tmp_path: Path) -> None:
    class Skips:
        name = "stub"

        def run(self, gpu: GpuInfo, tests: Sequence[str], budget_s: float) -> list[ProbeResult]:
            return [ProbeResult("gemm", "pass", value=500.0, unit="TFLOP/s"), ProbeResult("pcie", "skipped")]

    backend = SimBackend(nodes=1, gpus_per_node=1)
    report = Verifier(backend, Skips(), PROBES).verify(backend.gpus()[0])
    assert (report.result, report.detail) == ("done", "gemm passed; not run: pcie")
    assert [p.probe for p in report.probes] == ["gemm"]
    only_skipped = Verifier(backend, type("S", (), {"name": "s", "run": lambda *_: [ProbeResult("x", "skipped")]})(),
                            PROBES).verify(backend.gpus()[0])  # fmt: skip
    assert (only_skipped.result, only_skipped.detail) == ("failed", "no probe ran; not run: x")


def test_verify_on_the_simulated_fleet_uses_its_runner_and_its_idle_check() -> None:
    backend = SimBackend(nodes=1, gpus_per_node=2, seed=1)
    service = FakeService([task(3, "verify", g.uuid, g.hostname, g.index) for g in backend.gpus()])
    backend.fleet.util[1] = 90.0
    RemedyAgent(service, backend, probes=ProbeConfig(60.0, 5.0, ("gemm", "memtest", "bandwidth"))).run_once()
    (_, ok), (_, busy) = service.reports
    assert ok.result == "done" and [p.probe for p in ok.probes] == ["gemm", "memtest", "bandwidth"]
    assert busy.result == "refused" and busy.detail == "the GPU is not idle: utilisation 90% >= 5%"


def test_verification_on_dcgm_adds_dcgmi_diag_at_level_2() -> None:
    class Dcgm:
        name, host = "dcgm", "hostengine:5555"

        def __init__(self, runner: object) -> None:
            self.runner = runner

        def probe_runner(self) -> object:
            return self.runner

    inner = SubprocessProbeRunner()
    plain = verify_runner(Dcgm(inner))  # type: ignore[arg-type]
    assert isinstance(plain, DcgmDiagRunner) and (plain.inner, plain.level, plain.host) == (inner, 2, "hostengine:5555")
    quick = verify_runner(Dcgm(DcgmDiagRunner(inner, 1, "h", "/opt/dcgmi")))  # type: ignore[arg-type]
    assert isinstance(quick, DcgmDiagRunner) and (quick.level, quick.host, quick.dcgmi) == (2, "h", "/opt/dcgmi")
    sim = SimBackend(nodes=1, gpus_per_node=1)
    assert not isinstance(verify_runner(sim), DcgmDiagRunner)


# --- reboot ---------------------------------------------------------------------------------------------


def test_a_reboot_writes_kureds_sentinel_once(tmp_path: Path) -> None:
    backend = SimBackend(nodes=1, gpus_per_node=2)
    g = backend.gpus()[1]
    service = FakeService([task(5, "reboot", g.uuid, g.hostname, g.index)])
    sentinel = tmp_path / "reboot-required"
    agent = RemedyAgent(service, backend, reboot_sentinel=sentinel)
    agent.run_once()
    report = service.reports[0][1]
    assert (report.do, report.result, report.detail) == (
        "reboot",
        "done",
        f"asked kured for a reboot: wrote {sentinel}",
    )
    line = sentinel.read_text()
    assert line.startswith(f"gpuhealth: reboot asked by gpuhealth collect on {g.hostname} (boot ")
    assert line.endswith(f": GPU 1 ({g.uuid}), remediation 5: pending row remap\n")
    service.open = [task(6, "reboot", g.uuid, g.hostname, g.index)]  # another GPU's reboot before kured came
    agent.run_once()
    assert service.reports[1][1].detail == f"a reboot is asked already: {sentinel} (ours)"
    assert sentinel.read_text() == line


def test_a_reboot_without_a_sentinel_is_refused(tmp_path: Path) -> None:
    backend = SimBackend(nodes=1, gpus_per_node=1)
    g = backend.gpus()[0]
    service = FakeService([task(5, "reboot", g.uuid, g.hostname)])
    RemedyAgent(service, backend, reboot_sentinel="  ").run_once()
    assert (service.reports[0][1].result, service.reports[0][1].detail) == ("refused", REBOOT_OFF)


def test_a_sentinel_that_cannot_be_written_is_a_failed_reboot(tmp_path: Path) -> None:
    backend = SimBackend(nodes=1, gpus_per_node=1)
    g = backend.gpus()[0]
    service = FakeService([task(5, "reboot", g.uuid, g.hostname)])
    RemedyAgent(service, backend, reboot_sentinel=tmp_path / "no-such-dir" / "reboot-required").run_once()
    assert service.reports[0][1].result == "failed" and "is the host's mounted?" in service.reports[0][1].detail


# --- the service: 409, outages, lost reports, many hosts ----------------------------------------------


def test_a_409_drops_the_report_and_nothing_is_kept_or_redone(tmp_path: Path) -> None:
    fake = h100s()
    service = FakeService([task(7, "reset", UUIDS[0])], closed={7})
    agent = nvml_agent(service, fake, tmp_path)
    agent.run_once()
    assert agent.stats().reports == {"dropped": 1} and service.reports == []
    service.open = []  # the service has moved on: the task is not handed out again
    assert agent.run_once() == 0 and fake.gpu(0).resets == 1


def test_an_unreachable_service_leaves_the_agent_running_and_it_picks_up_when_back(tmp_path: Path) -> None:
    fake = h100s()
    service = FakeService([task(7, "reset", UUIDS[0])], down=True)
    agent = nvml_agent(service, fake, tmp_path, poll_s=0.05)
    agent.start()
    try:
        deadline = time.monotonic() + 5
        while agent.stats().errors.get("tasks", 0) < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert agent.stats().errors["tasks"] >= 3 and agent._thread is not None and agent._thread.is_alive()
        assert agent.stats().last_success is None
        service.down = False
        while not service.reports and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        agent.stop()
    assert service.reports[0][1].result == "done" and fake.gpu(0).resets == 1
    assert agent.stats().last_success is not None


def test_a_lost_report_is_sent_again_never_the_reset_done_twice(tmp_path: Path) -> None:
    fake = h100s()
    service = FakeService([task(7, "reset", UUIDS[0])], reports_down=True)
    agent = nvml_agent(service, fake, tmp_path)
    agent.run_once()
    assert fake.gpu(0).resets == 1 and agent.stats().errors == {"report": 1}
    service.reports_down = False
    agent.run_once()  # the task is handed out again: the kept report answers it
    assert fake.gpu(0).resets == 1 and [r.result for _, r in service.reports] == ["done"]
    assert agent.stats().reports == {"unsent": 1, "taken": 1}


def test_one_bad_task_never_stops_the_others(tmp_path: Path) -> None:
    fake = h100s()
    service = FakeService([task(1, "reset", UUIDS[0]), task(2, "reset", UUIDS[1], index=1)])
    agent = nvml_agent(service, fake, tmp_path)
    real = agent.resetter.reset

    def broken(gpu: str | int) -> object:
        if gpu == UUIDS[0]:
            raise RuntimeError("a bug")
        return real(gpu)

    agent.resetter.reset = broken  # type: ignore[assignment,method-assign]
    agent.run_once()
    assert [(rid, r.result) for rid, r in service.reports] == [(2, "done")]
    assert agent.stats().tasks == {("reset", "skipped"): 1, ("reset", "done"): 1}


def test_each_host_of_a_simulated_fleet_is_asked_for_its_own_tasks() -> None:
    backend = SimBackend(nodes=3, gpus_per_node=2, seed=2)
    g = backend.gpus()[4]
    service = FakeService([task(4, "reset", g.uuid, g.hostname, g.index)])
    RemedyAgent(service, backend, allow_reset=True).run_once()
    assert service.asked == sorted({x.hostname for x in backend.gpus()}) and len(service.asked) == 3
    assert [(rid, r.result, r.detail) for rid, r in service.reports] == [(4, "done", "simulated GPU 0 was reset")]


def test_an_outage_stops_the_round_and_a_bad_answer_does_not() -> None:
    backend = SimBackend(nodes=3, gpus_per_node=1)

    class Flaky(FakeService):
        def tasks(self, hostname: str) -> list[RemedyTask]:
            self.asked.append(hostname)
            raise ServiceError(f"not a gpuhealth remedies answer for {hostname}", url="x", status=200)

    flaky = Flaky()
    RemedyAgent(flaky, backend).run_once()
    assert len(flaky.asked) == 3
    down = FakeService(down=True)
    agent = RemedyAgent(down, backend)
    assert agent.run_once() == 0 and len(down.asked) == 1 and agent.stats().errors == {"tasks": 1}


# --- /metrics ---------------------------------------------------------------------------------------------


def test_the_agents_counters_on_metrics(tmp_path: Path) -> None:
    fake = h100s()
    fake.gpu(0).values[COMPUTE] = [1]
    service = FakeService([task(7, "reset", UUIDS[0])])
    agent = nvml_agent(service, fake, tmp_path)
    reg = CollectorRegistry(auto_describe=False)
    reg.register(RemedyCollector(agent))
    assert sample(reg, "gpuhealth_agent_remedy_tasks_total", do="verify", result="done") == 0.0
    assert sample(reg, "gpuhealth_agent_remedy_last_success_timestamp_seconds") == 0.0
    agent.run_once()
    fake.gpu(0).values[COMPUTE] = []
    agent.run_once()
    service.down = True
    agent.run_once()
    assert sample(reg, "gpuhealth_agent_remedy_tasks_total", do="reset", result="refused") == 1.0
    assert sample(reg, "gpuhealth_agent_remedy_tasks_total", do="reset", result="done") == 1.0
    assert sample(reg, "gpuhealth_agent_remedy_reports_total", outcome="taken") == 2.0
    assert sample(reg, "gpuhealth_agent_remedy_service_errors_total", stage="tasks") == 1.0
    assert (sample(reg, "gpuhealth_agent_remedy_last_success_timestamp_seconds") or 0) > 1e9


# --- over HTTP, on a real socket -----------------------------------------------------------------------


def test_the_agent_over_http_resets_reports_and_counts_an_unreadable_task() -> None:
    backend = SimBackend(nodes=1, gpus_per_node=2, seed=4)
    g = backend.gpus()[1]
    with StubService() as stub:
        tasks = [
            task(11, "reset", g.uuid, g.hostname, 1).to_dict(),
            {**task(12, "reflash", g.uuid, g.hostname).to_dict()},
        ]
        stub.answers[f"/v1/nodes/{g.hostname}/remedies"] = Answer(body={"hostname": g.hostname, "tasks": tasks})
        stub.answer = Answer(200, {"remediation": {"id": 11}})
        agent = RemedyAgent(HttpRemedies(stub.url, token="t0k"), backend, allow_reset=True)
        assert agent.run_once() == 1
    posted = [r for r in stub.seen if r.method == "POST"]
    assert [r.path for r in posted] == ["/v1/remediations/11/report"]
    body = json.loads(posted[0].body)
    assert (body["do"], body["result"], body["gpu_uuid"]) == ("reset", "done", g.uuid)
    reg = CollectorRegistry(auto_describe=False)
    reg.register(RemedyCollector(agent))
    assert sample(reg, "gpuhealth_agent_remedy_tasks_total", do="unknown", result="skipped") == 1.0
    assert sample(reg, "gpuhealth_agent_remedy_reports_total", outcome="taken") == 1.0


def test_the_agent_over_http_with_no_service_counts_and_goes_on() -> None:
    backend = SimBackend(nodes=1, gpus_per_node=1)
    agent = RemedyAgent(HttpRemedies(f"http://127.0.0.1:{closed_port()}", timeout_s=1.0), backend)
    assert agent.run_once() == 0 and agent.run_once() == 0
    assert agent.stats().errors == {"tasks": 2}


def test_the_recovery_action_reads_none_after_the_agents_reset(tmp_path: Path) -> None:
    fake = h100s()
    service = FakeService([task(7, "reset", UUIDS[0])])
    nvml_agent(service, fake, tmp_path).run_once()
    key = ("field", pynvml.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION)
    assert fake.gpu(0).values[key][1] == pynvml.NVML_GPU_RECOVERY_ACTION_NONE


def test_a_bad_poll_interval_is_an_error() -> None:
    with pytest.raises(ValueError, match="positive"):
        RemedyAgent(FakeService(), SimBackend(nodes=1, gpus_per_node=1), poll_s=0)


def test_a_runner_that_raises_is_a_failed_verification() -> None:
    class Raises:
        name = "boom"

        def run(self, gpu: GpuInfo, tests: Sequence[str], budget_s: float) -> list[ProbeResult]:
            raise OSError("no /dev/nvidia0")

    backend = SimBackend(nodes=1, gpus_per_node=1)
    report = Verifier(backend, Raises(), PROBES).verify(backend.gpus()[0])
    assert (report.result, report.detail) == ("failed", "the probe runner failed: no /dev/nvidia0")


# --- a real GPU (scripts/device-check.sh runs these) -------------------------------------------------------


@pytest.mark.gpu
def test_real_gpu_verification_through_the_agent_passes_or_says_why_not() -> None:
    """The agent verifies GPU 0 with the real probes (CuPy in a child process); it never resets a real GPU."""
    backend = NvmlBackend("device-check", watch_xid=False)
    try:
        g = backend.gpus()[0]
        service = FakeService([task(1, "verify", g.uuid, g.hostname, g.index)])
        config = ProbeConfig(60.0, 20.0, ("gemm", "memtest", "bandwidth"), 5.0)
        RemedyAgent(service, backend, probes=config).run_once()
        (_, report), = service.reports  # fmt: skip
        print(report)
        if report.result == "refused":  # a job on the GPU, or no CuPy: nothing ran
            assert report.probes == () and report.detail, report
        else:
            assert report.result == "done", report
            assert [p.probe for p in report.probes] == ["gemm", "memtest", "bandwidth"]
            assert all(p.passed for p in report.probes) and "TFLOP/s" in report.probes[0].detail
    finally:
        backend.close()


def test_a_probe_line_is_cut_to_what_the_service_takes() -> None:
    class Rambles:
        name = "stub"

        def run(self, gpu: GpuInfo, tests: Sequence[str], budget_s: float) -> list[ProbeResult]:
            return [ProbeResult("gemm", "error", details={"reason": "CUDA said: " + "x" * 5000})]

    backend = SimBackend(nodes=1, gpus_per_node=1)
    (probe,) = Verifier(backend, Rambles(), PROBES).verify(backend.gpus()[0]).probes
    assert len(probe.detail) == DETAIL_CHARS and probe.detail.startswith("error, CUDA said: xxx")


def test_a_report_that_raises_in_process_is_kept_and_the_next_task_still_runs(tmp_path: Path) -> None:
    class Broken(FakeService):
        def report(self, remediation_id: int, report: RemedyReport) -> bool:
            if remediation_id == 1:
                raise RuntimeError("database is locked")
            return super().report(remediation_id, report)

    fake = h100s()
    service = Broken([task(1, "reset", UUIDS[0]), task(2, "reset", UUIDS[1], index=1)])
    agent = nvml_agent(service, fake, tmp_path)
    agent.run_once()
    assert [(rid, r.result) for rid, r in service.reports] == [(2, "done")]
    assert agent.stats().errors == {"report": 1} and agent.stats().reports == {"unsent": 1, "taken": 1}
