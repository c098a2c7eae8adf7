"""Decisions (ok, watch, demote, drain, rma): the lists people act on, and acknowledging one."""

from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query
from fastapi.responses import JSONResponse

from api import schemas
from api.deps import StoreDep, WriteAuth
from api.errors import problem
from api.params import Limit, Offset
from store import Decision, NotFound, StoreError, StoreUnavailable

reads = APIRouter(prefix="/v1/decisions", tags=["decisions"])
writes = APIRouter(prefix="/v1/decisions", tags=["decisions"], dependencies=[WriteAuth])


@reads.get("", response_model=schemas.DecisionPage)
def list_decisions(
    store: StoreDep,
    decision: schemas.Decision | None = None,
    state: Annotated[str, Query(pattern="^(active|open|acknowledged|closed|all)$")] = "active",
    hostname: Annotated[str | None, Query(max_length=255)] = None,
    limit: Limit = 100,
    offset: Offset = 0,
) -> dict[str, Any]:
    """Decisions; by default the active ones. `?decision=rma` is the RMA list, `demote` the demotion list.
    Each names the pods or Slurm jobs on its GPU now: what acting on it affects."""
    items, total = store.decisions.find(
        decision=decision, state=None if state == "all" else state, hostname=hostname, limit=limit, offset=offset
    )
    on = store.workloads.of([d["gpu_uuid"] for d in items])
    out = [{**d, "workloads": on[d["gpu_uuid"]]["workloads"] if d["gpu_uuid"] in on else []} for d in items]
    return {"items": out, "total": total, "limit": limit, "offset": offset}


@writes.post(
    "/{decision_id}/ack",
    response_model=schemas.DecisionOut,
    responses={404: problem("no such decision"), 409: problem("the decision is closed")},
)
def ack_decision(
    store: StoreDep, decision_id: Annotated[int, Path(ge=1, le=2**62)], body: schemas.AckIn
) -> Decision | JSONResponse:
    """Acknowledge a decision (someone is acting on it)."""
    try:
        return store.decisions.ack(decision_id, by=body.by, at=datetime.now(UTC))
    except (NotFound, StoreUnavailable):
        raise
    except StoreError as err:  # the decision is closed
        return JSONResponse({"detail": str(err)}, 409)
