"""The node agent's side of the remediation loop: the tasks handed to it and the reports it sends back.

`GET /v1/nodes/{hostname}/remedies` answers `tasks_for`, `POST /v1/remediations/{id}/report` calls
`take_report`; in the same process (the small install, the demo) `LocalRemedies` does both for the
agent (`collector.remediate`). Contract: `core.remedies`.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from core.remedies import DETAIL_CHARS, RemedyReport, RemedyTask
from service.remediation import RemediationConfig, Remediator, audit, to_verify
from store import Store
from store.remediations import RemediationRow


def tasks_for(store: Store, hostname: str, *, agent_reboots: bool) -> list[RemedyTask]:
    """What the agent on `hostname` is asked to do now: reset a GPU whose remedy started, ask kured for a
    reboot (Kubernetes), verify a remedied GPU (until its report is in)."""
    out = []
    for r in store.remediations.open(hostname=hostname):
        do = None
        if r["stage"] == "remedy" and r["remedy"] == "reset":
            do = "reset"
        elif r["stage"] == "remedy" and r["remedy"] == "reboot" and r["reboot"] and agent_reboots:
            do = "reboot"
        elif r["stage"] == "verify" and not r["verified"]:
            do = "verify"
        if do is not None:
            out.append(RemedyTask(r["id"], r["hostname"], r["gpu_uuid"], r["gpu_index"], do, r["cause"], r["deadline"]))  # type: ignore[arg-type]
    return out


def take_report(
    store: Store, remediator: Remediator | None, remediation_id: int, report: RemedyReport, now: datetime
) -> RemediationRow | None:
    """Take the agent's report: a reset done moves the remediation to verify, a refusal is noted (it waits
    on), a reset that failed turns it into a reboot; a verification's outcome is kept for the next pass.
    None when the task is no longer open (closed, or at another stage): the agent drops it."""
    rem = store.remediations
    r = rem.get(remediation_id)
    expected = {"reset": "remedy", "reboot": "remedy", "verify": "verify"}[report.do]
    if r["stage"] != expected or (report.gpu_uuid and report.gpu_uuid != r["gpu_uuid"]):
        return None
    detail = f"{report.do} {report.result}: {report.detail}"[:DETAIL_CHARS]
    if report.do == "verify":
        if report.result == "refused":
            values: dict[str, Any] = {"detail": detail, "attempts": r["attempts"] + 1}
        else:
            values = {
                "verified": {
                    "result": report.result,
                    "detail": report.detail[:DETAIL_CHARS],
                    "probes": [p.to_dict() for p in report.probes],
                    "at": now.isoformat(),
                },
                "detail": detail,
            }
        return rem.get(remediation_id) if rem.move(remediation_id, stage="verify", values=values) else None
    if report.do == "reboot":
        return rem.get(remediation_id) if rem.move(remediation_id, stage="remedy", values={"detail": detail}) else None
    if report.result == "done":
        within = remediator.config.verify if remediator is not None else RemediationConfig().verify
        to_verify(store, r, now, [], within, f"GPU reset by the node agent ({report.detail})")
    elif report.result == "failed":  # a reset that ran and did not work: the node needs a reboot
        values = {
            "remedy": "reboot",
            "stage": "drain",
            "due": "now",
            "stage_at": now,
            "detail": detail,
            "attempts": r["attempts"] + 1,
        }
        if rem.move(remediation_id, stage="remedy", values=values):
            audit(store, r, "reset", now, [], why=f"GPU {r['gpu_index']} reset failed, rebooting: {report.detail}")
    else:
        rem.move(remediation_id, stage="remedy", values={"detail": detail, "attempts": r["attempts"] + 1})
    return rem.get(remediation_id)


class LocalRemedies:
    """The agent's `RemedyService` in the same process as the service (the small install, the demo)."""

    def __init__(self, store: Store, remediator: Remediator | None, now: Callable[[], datetime]) -> None:
        self.store = store
        self.remediator = remediator
        self.now = now

    def tasks(self, hostname: str) -> list[RemedyTask]:
        agent = self.remediator.agent_reboots if self.remediator is not None else False
        return tasks_for(self.store, hostname, agent_reboots=agent)

    def report(self, remediation_id: int, report: RemedyReport) -> bool:
        return take_report(self.store, self.remediator, remediation_id, report, self.now()) is not None


__all__ = ["LocalRemedies", "take_report", "tasks_for"]
