"""The node agent's remedies: ask the service what to do to this node's GPUs, do it, say how it went.

Every `poll_s` the agent asks the service (`core.remedies.RemedyService`: over HTTP,
`core.service_client.HttpRemedies`; in the small install's own process, the service's
`LocalRemedies`) for the open tasks of each host its backend's GPUs carry (a real node: one; the
simulated fleet: many), carries each out in turn and reports it:

    reset   `collector.remedy.Resetter`: refused unless allowed (--allow-reset) and the GPU is idle
    reboot  kured's sentinel (`collector.reboot`): refused unless GPUHEALTH_REBOOT_SENTINEL names it
    verify  the verified probes on that GPU now (`collector.verify`): refused while the GPU is busy

A task is level-triggered: the service hands it out until a report moves it on, so a refused task
(a busy GPU) is simply tried again at the next ask. A report that does not reach the service is
kept and sent again when the same task comes back, instead of doing the remedy twice; a report the
service answers 409 (the task is no longer open) is dropped. One bad task never stops the others,
and a service that does not answer leaves the agent asking, every `poll_s`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from collector.backends.base import Backend, GpuInfo
from collector.probes import ProbeConfig
from collector.reboot import RebootSentinel, RebootSentinelError
from collector.remedy import Resetter, resettable
from collector.verify import Verifier, verify_runner
from core.remedies import REPORT_RESULTS, TASK_KINDS, RemedyReport, RemedyService, RemedyTask
from core.service_client import HttpRemedies, ServiceError, ServiceUnavailable
from core.worker import Worker

log = logging.getLogger(__name__)

DEFAULT_POLL_S = 30.0
"""How often the service is asked: a task waits at most this long for the agent (one GET per host)."""
SKIPPED = "skipped"
"""A task's result when the agent could not carry it out (a bug in the agent, a task it cannot read)."""
TASK_RESULTS = (*REPORT_RESULTS, SKIPPED)
REPORT_OUTCOMES = ("taken", "dropped", "unsent")
"""taken: the service took the report; dropped: 409, the task was no longer open; unsent: no answer (kept)."""
STAGES = ("tasks", "report")
MAX_UNSENT = 1000
"""Reports kept for a service that does not answer: far more tasks than a node ever has open."""
REBOOT_OFF = (
    "node reboot is off: no kured sentinel is set (GPUHEALTH_REBOOT_SENTINEL, e.g. /run/gpuhealth/reboot-required)"
)


@dataclass(frozen=True)
class AgentStats:
    tasks: dict[tuple[str, str], int]
    """Tasks carried out by (do, result); result `skipped`: not carried out (do `unknown`: unreadable)."""
    reports: dict[str, int]
    errors: dict[str, int]
    """Failures to reach the service (or to read its answer), by stage (`STAGES`)."""
    last_success: float | None


class RemedyAgent(Worker):
    """Every `poll_s`, asks `service` for the tasks of `backend`'s hosts and carries each out on its GPU."""

    thread_name = "gpuhealth-remedies"
    stop_timeout_s = 10.0

    def __init__(
        self,
        service: RemedyService,
        backend: Backend,
        *,
        allow_reset: bool = False,
        reboot_sentinel: str | Path | None = None,
        probes: ProbeConfig | None = None,
        poll_s: float = DEFAULT_POLL_S,
        resetter: Resetter | None = None,
        verifier: Verifier | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """`resetter` and `verifier` default to the backend's own (`allow_reset`; `probes`: the scheduler's
        tests, budget and idle threshold); `reboot_sentinel` None or "": reboots refused."""
        if poll_s <= 0:
            raise ValueError(f"remedy poll interval must be positive, got {poll_s}")
        super().__init__()
        self.service = service
        self.backend = backend
        self.resetter = resetter or Resetter(resettable(backend), allow=allow_reset)
        self.verifier = verifier or Verifier(backend, verify_runner(backend), probes or ProbeConfig())
        self.reboot_sentinel = Path(reboot_sentinel) if reboot_sentinel and str(reboot_sentinel).strip() else None
        self.poll_s = poll_s
        self._clock = clock
        self._lock = threading.Lock()
        self._tasks: Counter[tuple[str, str]] = Counter()
        self._reports: Counter[str] = Counter()
        self._errors: Counter[str] = Counter()
        self._last_success: float | None = None
        self._unsent: dict[int, RemedyReport] = {}
        """Reports the service did not answer, by remediation: sent again when their task comes back."""
        self._failing: str | None = None

    # --- one round ----------------------------------------------------------------------------

    def run_once(self) -> int:
        """Ask for every host's tasks and carry each out; the number of tasks handled (reports resent too)."""
        gpus = self.backend.gpus()
        hosts = sorted({g.hostname for g in gpus})
        handled, reached = 0, True
        for host in hosts:
            if self._stop.is_set():
                break
            try:
                tasks = self.service.tasks(host)
            except ServiceUnavailable as err:  # no answer: the other hosts would wait out the same deadline
                self._failed("tasks", err)
                return handled
            except ServiceError as err:
                self._failed("tasks", err)
                reached = False
                continue
            self._forget_unsent(host, tasks, gpus)
            for task in tasks:
                handled += 1
                self._handle(task, gpus)
        if reached:
            with self._lock:
                self._last_success = self._clock()
            if self._failing is not None:
                log.info("remedies: the service answers again")
                self._failing = None
        return handled

    def _handle(self, task: RemedyTask, gpus: list[GpuInfo]) -> None:
        """Carry out one task (or resend its kept report) and report it; never raises."""
        report = self._unsent.get(task.remediation_id)
        if report is None or report.do != task.do:
            try:
                report = self._carry_out(task, gpus)
            except Exception:  # one bad task never stops the others
                log.exception("remediation %d: %s of GPU %s failed in the agent", task.remediation_id, task.do,
                              task.gpu_uuid)  # fmt: skip
                self._count_task(task.do, SKIPPED)
                return
            self._count_task(task.do, report.result)
            log.info("remediation %d: %s of GPU %s (%s): %s: %s", task.remediation_id, task.do, task.gpu_uuid,
                     task.why, report.result, report.detail)  # fmt: skip
        self._send(task.remediation_id, report)

    def _carry_out(self, task: RemedyTask, gpus: list[GpuInfo]) -> RemedyReport:
        gpu = next((g for g in gpus if g.uuid == task.gpu_uuid and g.hostname == task.hostname), None)
        if gpu is None:
            return RemedyReport(task.do, "refused", f"no GPU {task.gpu_uuid} on {task.hostname}", task.gpu_uuid)
        if task.do == "reset":
            out = self.resetter.reset(gpu.uuid)
            return RemedyReport("reset", out.result, out.reason, gpu.uuid, out.duration_s)
        if task.do == "verify":
            return self.verifier.verify(gpu)
        if task.do == "reboot":
            return self._reboot(task, gpu)
        raise ValueError(f"unknown task {task.do!r}")  # HttpRemedies leaves these out; another service may not

    def _reboot(self, task: RemedyTask, gpu: GpuInfo) -> RemedyReport:
        """Ask kured for a reboot through its sentinel: done once it is asked (by us now, or already)."""
        if self.reboot_sentinel is None:
            return RemedyReport("reboot", "refused", REBOOT_OFF, gpu.uuid)
        sentinel = RebootSentinel(self.reboot_sentinel, task.hostname)
        why = f"GPU {gpu.index} ({gpu.uuid}), remediation {task.remediation_id}: {task.why}"
        try:
            if sentinel.request(why):
                return RemedyReport("reboot", "done", f"asked kured for a reboot: wrote {sentinel.path}", gpu.uuid)
            whose = "ours" if sentinel.state() in ("requested", "served") else "someone else's, left as it is"
        except RebootSentinelError as err:
            return RemedyReport("reboot", "failed", str(err), gpu.uuid)
        return RemedyReport("reboot", "done", f"a reboot is asked already: {sentinel.path} ({whose})", gpu.uuid)

    def _send(self, remediation_id: int, report: RemedyReport) -> None:
        try:
            taken = self.service.report(remediation_id, report)
        except Exception as err:  # over HTTP a ServiceError; in process, whatever the store raised
            if not isinstance(err, ServiceError):
                log.exception("remediation %d: handing the report in failed", remediation_id)
            self._failed("report", err)
            with self._lock:
                self._reports["unsent"] += 1
            if report.result != "refused" and len(self._unsent) < MAX_UNSENT:  # refused: nothing to repeat
                self._unsent[remediation_id] = report
            return
        with self._lock:
            self._reports["taken" if taken else "dropped"] += 1
        self._unsent.pop(remediation_id, None)

    def _forget_unsent(self, host: str, tasks: list[RemedyTask], gpus: list[GpuInfo]) -> None:
        """Kept reports whose task the service no longer hands out have nothing left to say."""
        open_ids = {t.remediation_id for t in tasks}
        ours = {g.uuid for g in gpus if g.hostname == host}
        for rid, report in list(self._unsent.items()):
            if rid not in open_ids and report.gpu_uuid in ours:
                del self._unsent[rid]

    # --- counting -----------------------------------------------------------------------------

    def _count_task(self, do: str, result: str) -> None:
        with self._lock:
            self._tasks[(do, result)] += 1

    def _failed(self, stage: str, err: Exception) -> None:
        with self._lock:
            self._errors[stage] += 1
        if self._failing == stage:
            log.debug("remedies: still failing: %s", err)
            return
        self._failing = stage
        what = "cannot ask the service for tasks" if stage == "tasks" else "cannot hand a report in"
        log.warning("remedies: %s: %s; asking again every %gs", what, err, self.poll_s)

    def stats(self) -> AgentStats:
        """The counters, read together (the HTTP client's unreadable tasks as do `unknown`)."""
        with self._lock:
            tasks = dict(self._tasks)
            reports, errors, last = dict(self._reports), dict(self._errors), self._last_success
        if isinstance(self.service, HttpRemedies) and self.service.unreadable:
            tasks[("unknown", SKIPPED)] = self.service.unreadable
        return AgentStats(tasks, reports, errors, last)

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                self.run_once()
            except Exception:  # the backend's gpus() failing, a bug: the next round tries again
                log.exception("remedies: round failed")
            self._stop.wait(max(0.0, self.poll_s - (time.monotonic() - started)))


class RemedyCollector(Collector):
    """gpuhealth_agent_remedy_* series: tasks by kind and result, reports, failures to reach the service."""

    def __init__(self, agent: RemedyAgent) -> None:
        self._agent = agent

    def collect(self) -> Iterator[Metric]:
        st = self._agent.stats()
        tasks = CounterMetricFamily(
            "gpuhealth_agent_remedy_tasks",
            "Remedy tasks the node agent handled, by kind (do) and result (skipped: not carried out).",
            labels=["do", "result"],
        )
        known: dict[tuple[str, str], int] = {(do, result): 0 for do in TASK_KINDS for result in TASK_RESULTS}
        for (do, result), n in {**known, **st.tasks}.items():
            tasks.add_metric([do, result], float(n))
        yield tasks
        yield _counter(
            "gpuhealth_agent_remedy_reports",
            "Remedy reports by outcome (taken; dropped: the task was no longer open; unsent: kept for the next ask).",
            "outcome", REPORT_OUTCOMES, st.reports,
        )  # fmt: skip
        yield _counter(
            "gpuhealth_agent_remedy_service_errors",
            "Asks for remedy tasks (tasks) or reports (report) that got no usable answer from the service.",
            "stage", STAGES, st.errors,
        )  # fmt: skip
        yield GaugeMetricFamily(
            "gpuhealth_agent_remedy_last_success_timestamp_seconds",
            "Unix time of the last round that got every host's remedy tasks from the service (0: none yet).",
            value=st.last_success or 0.0,
        )


def _counter(name: str, doc: str, label: str, values: tuple[str, ...], counts: dict[str, int]) -> Metric:
    """A counter family with one series per value of `label`, 0 for those not counted yet."""
    fam = CounterMetricFamily(name, doc, labels=[label])
    for v in values:
        fam.add_metric([v], float(counts.get(v, 0)))
    return fam
