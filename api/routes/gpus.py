"""GPUs: the fleet, what needs action first; one GPU in detail, its risk over time and its probe results."""

import contextlib
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response
from pydantic import TypeAdapter
from starlette.concurrency import run_in_threadpool

from api import schemas
from api.deps import StoreDep
from api.errors import Responses, problem
from api.params import Decisions, Limit, Offset, Uuid, decisions
from store import ProbeResult, Store, StoreUnavailable

reads = APIRouter(prefix="/v1/gpus", tags=["gpus"])

UNKNOWN_GPU: Responses = {404: problem("no such GPU")}

gpu_detail = TypeAdapter(schemas.GpuDetail)


@reads.get("", response_model=schemas.GpuPage)
def list_gpus(
    store: StoreDep,
    hostname: Annotated[str | None, Query(max_length=255)] = None,
    decision: Decisions = None,
    min_risk: Annotated[
        float | None,
        Query(ge=0.0, le=1.0, description="the model's risk only: rules drain and RMA GPUs whatever it says"),
    ] = None,
    limit: Limit = 100,
    offset: Offset = 0,
) -> dict[str, Any]:
    """GPUs, what needs action first: by decision (rma, drain, demote, watch, ok, then not yet scored),
    then by the model's risk. `?decision=rma,drain,demote,watch` lists every GPU that needs action;
    filter also by host or minimum risk."""
    items, total = store.gpus.find(
        hostname=hostname, decision=decisions(decision), min_risk=min_risk, limit=limit, offset=offset
    )
    return {"items": items, "total": total, "limit": limit, "offset": offset}


@reads.get("/{uuid}", response_model=schemas.GpuDetail, responses=UNKNOWN_GPU)
async def get_gpu(uuid: Uuid, request: Request) -> Response:
    """One GPU: identity, latest sample, risk per mode, decision and reasons."""
    # The hottest endpoint: the store is taken from the app's state, not through a dependency,
    # which would add a step to every request.
    store: Store = request.app.state.store
    item = None
    if store.dialect == "sqlite":
        # A WAL read of a few indexed rows costs less than the thread-pool hop, so it runs on
        # the loop, but never waits there: a locked database sends it to a thread instead.
        with contextlib.suppress(StoreUnavailable):
            item = store.gpus.get(uuid, wait=False)
    if item is None:
        item = await run_in_threadpool(store.gpus.get, uuid)
    # Validated and written as JSON by pydantic in one step.
    return Response(gpu_detail.dump_json(gpu_detail.validate_python(item)), media_type="application/json")


@reads.get("/{uuid}/risk", response_model=schemas.RiskHistory, responses=UNKNOWN_GPU)
def risk_history(
    store: StoreDep,
    uuid: Uuid,
    since: schemas.UtcTime | None = None,
    until: schemas.UtcTime | None = None,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 1000,
) -> dict[str, Any]:
    """Risk over time (oldest first); beyond the score retention (7 d), one point per hour: its highest risks."""
    points = store.decisions.risk_history(uuid, since=since, until=until, limit=limit)
    return {"uuid": uuid, "points": points}


@reads.get("/{uuid}/probes", response_model=list[schemas.ProbeOut], responses=UNKNOWN_GPU)
def probe_results(store: StoreDep, uuid: Uuid, limit: Limit = 100) -> list[ProbeResult]:
    """The GPU's latest probe results (GEMM, memtest, bandwidth, PCIe), newest first."""
    return store.probes.of(uuid, limit=limit)
