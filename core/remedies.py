"""What the node agent and the service say to each other about remedies: tasks and reports.

The service's remediation loop (`service.remediation`) keeps each remediation's stage in the store.
The node agent (`gpuhealth collect`, `collector.remediate`) asks for the tasks addressed to its own
node (`GET /v1/nodes/{hostname}/remedies`), carries each out on its GPU and reports the outcome
(`POST /v1/remediations/{id}/report`). A task is level-triggered, like the actuator: it is handed
out on every ask until a report moves its remediation on, so an agent that restarts, or a report
that is lost, costs one more ask, never a remedy done twice (a report for a task no longer open
is answered 409 and dropped).

    do = "reset"   reset the GPU (`collector.remedy.Resetter`): refused while any process runs on it
    do = "reboot"  ask for a node reboot through kured's sentinel (`collector.reboot`), Kubernetes only;
                   on Slurm the service asks `scontrol reboot` itself
    do = "verify"  run the verified probes on that GPU (`collector.probes`) and report each
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, Protocol

TaskKind = Literal["reset", "reboot", "verify"]
TASK_KINDS: tuple[TaskKind, ...] = ("reset", "reboot", "verify")
ReportResult = Literal["done", "refused", "failed"]
"""done: carried out (verify: every probe passed); refused: not attempted, nothing touched (the GPU is
busy, reset not allowed); failed: attempted and it did not work (verify: a probe failed)."""
REPORT_RESULTS: tuple[ReportResult, ...] = ("done", "refused", "failed")
DETAIL_CHARS = 2000
"""The longest detail kept from a report (a tool's output is cut there)."""


@dataclass(frozen=True)
class RemedyTask:
    """One thing the service asks a node's agent to do on one of its GPUs."""

    remediation_id: int
    hostname: str
    gpu_uuid: str
    gpu_index: int | None
    do: TaskKind
    why: str
    """The cause, as the decision's remedy line says it (for the agent's log and the sentinel's line)."""
    deadline: datetime | None = None
    """After this the remediation counts as stuck (an alert fires); the agent may still carry it out."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "remediation_id": self.remediation_id, "hostname": self.hostname, "gpu_uuid": self.gpu_uuid,
            "gpu_index": self.gpu_index, "do": self.do, "why": self.why,
            "deadline": self.deadline.isoformat() if self.deadline else None,
        }  # fmt: skip


@dataclass(frozen=True)
class ProbeResult:
    """One verification probe's outcome on the GPU (`collector.probes`' thresholds)."""

    probe: str
    passed: bool
    detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"probe": self.probe, "passed": self.passed, "detail": self.detail}


@dataclass(frozen=True)
class RemedyReport:
    """What the agent did with a task."""

    do: TaskKind
    result: ReportResult
    detail: str = ""
    gpu_uuid: str = ""
    duration_s: float | None = None
    probes: tuple[ProbeResult, ...] = field(default_factory=tuple)
    """verify only: every probe run, passed or not."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "do": self.do, "result": self.result, "detail": self.detail[:DETAIL_CHARS], "gpu_uuid": self.gpu_uuid,
            "duration_s": self.duration_s, "probes": [p.to_dict() for p in self.probes],
        }  # fmt: skip


class RemedyService(Protocol):
    """The service as the agent sees it: over HTTP (`core.service_client`) or in the same process
    (the small install and the demo, `service.remediation.LocalRemedies`)."""

    def tasks(self, hostname: str) -> list[RemedyTask]:
        """The open tasks for `hostname`'s GPUs (raises `core.service_client.ServiceError` over HTTP)."""
        ...

    def report(self, remediation_id: int, report: RemedyReport) -> bool:
        """Hand in a report; False when the task is no longer open (409: moved on, closed), True when taken."""
        ...
