"""Remediations: the loop's state (`/v1/remediations`), and the node agent's tasks and reports."""

from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Path, Query

from api import schemas
from api.deps import ConfigDep, StoreDep, WriteAuth
from api.errors import problem
from api.params import Limit, Offset
from api.routes.actuator import Hostname, _now
from core.remedies import ProbeResult, RemedyReport
from service.remedy_tasks import take_report, tasks_for

reads = APIRouter(prefix="/v1/remediations", tags=["remediations"])
writes = APIRouter(prefix="/v1/remediations", tags=["remediations"], dependencies=[WriteAuth])
agent_reads = APIRouter(prefix="/v1/nodes", tags=["remediations"])

RemediationId = Annotated[int, Path(ge=1, le=2**63 - 1)]


@reads.get("", response_model=schemas.RemediationPage)
def list_remediations(
    store: StoreDep,
    hostname: Annotated[str | None, Query(max_length=255)] = None,
    open: Annotated[bool, Query(description="only those still under way")] = False,
    limit: Limit = 100,
    offset: Offset = 0,
) -> dict[str, Any]:
    """Each GPU's way back (drain, remedy, verify, then returned, rma or cancelled), newest first."""
    items, total = store.remediations.page(hostname=hostname, open_only=open, limit=limit, offset=offset)
    return {"items": items, "total": total, "limit": limit, "offset": offset}


@reads.get("/{remediation_id}", response_model=schemas.RemediationOut, responses={404: problem("no such remediation")})
def get_remediation(store: StoreDep, remediation_id: RemediationId) -> dict[str, Any]:
    """One remediation."""
    return dict(store.remediations.get(remediation_id))


@agent_reads.get("/{hostname}/remedies", response_model=schemas.RemedyTasksOut)
def node_tasks(store: StoreDep, config: ConfigDep, hostname: Hostname) -> dict[str, Any]:
    """What the node agent on `hostname` is asked to do now (reset, reboot through kured, verify); a node
    the service does not know has none. Handed out on every ask until a report moves it on."""
    act = config.actuator
    agent = act is not None and act.remediator is not None and act.remediator.agent_reboots
    return {"hostname": hostname, "tasks": [t.to_dict() for t in tasks_for(store, hostname, agent_reboots=agent)]}


@writes.post(
    "/{remediation_id}/report",
    response_model=schemas.RemedyReportOut,
    responses={
        404: problem("no such remediation"),
        409: problem("the task is no longer open (moved on or closed): drop it"),
    },
)
def report(store: StoreDep, config: ConfigDep, remediation_id: RemediationId, body: schemas.RemedyReportIn
           ) -> dict[str, Any]:  # fmt: skip
    """The node agent's outcome of a task: a reset done moves the GPU to verification, a refusal waits on,
    a failed reset turns into a reboot; a verification is judged at the actuator's next pass."""
    probes = tuple(ProbeResult(p.probe, p.passed, p.detail) for p in body.probes)
    rep = RemedyReport(body.do, body.result, body.detail, body.gpu_uuid, body.duration_s, probes)
    act = config.actuator
    taken = take_report(store, act.remediator if act is not None else None, remediation_id, rep, _now(config))
    if taken is None:
        raise HTTPException(409, f"remediation {remediation_id} has no open {body.do} task: drop it")
    return {"remediation": taken}
