"""Failures and RMA outcomes: the labels of the next training run."""

from fastapi import APIRouter

from api import schemas
from api.deps import MetricsDep, StoreDep, WriteAuth
from api.errors import problem
from api.params import Limit
from store import Failure

reads = APIRouter(prefix="/v1/failures", tags=["failures"])
writes = APIRouter(prefix="/v1/failures", tags=["failures"], dependencies=[WriteAuth])


@writes.post("", response_model=schemas.FailureOut, status_code=201, responses={404: problem("no such GPU")})
def add_failure(store: StoreDep, metrics: MetricsDep, body: schemas.FailureIn) -> Failure:
    """Record a failure or RMA outcome (a label for the next training run)."""
    rec = store.labels.add_failure(**body.model_dump())
    metrics.failure_recorded(body.mode, body.kind)
    return rec


@reads.get("", response_model=list[schemas.FailureOut])
def list_failures(store: StoreDep, since: schemas.UtcTime | None = None, limit: Limit = 100) -> list[Failure]:
    """Recorded failures and RMAs, newest first."""
    return store.labels.failures(since=since, limit=limit)
