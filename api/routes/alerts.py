"""Alerts: Alertmanager's webhook, and the alerts it delivered."""

import logging
from datetime import UTC, datetime
from typing import Annotated, Any, cast

from fastapi import APIRouter, Query
from pydantic import TypeAdapter, ValidationError

from api import schemas
from api.deps import StoreDep, WriteAuth
from api.errors import one_line
from api.params import Limit, Offset
from store import AlertmanagerAlert, StoreError

log = logging.getLogger(__name__)

MAX_ERRORS_SHOWN = 10
"""Skipped alerts whose reasons a webhook answer lists."""

reads = APIRouter(prefix="/v1", tags=["alerts"])
writes = APIRouter(prefix="/v1", tags=["alerts"], dependencies=[WriteAuth])

am_alert = TypeAdapter(schemas.AmAlert)


@writes.post("/alertmanager", response_model=schemas.Stored)
def alertmanager(store: StoreDep, body: schemas.AmWebhook) -> dict[str, Any]:
    """Alertmanager webhook (payload version 4): alerts are stored and linked to GPUs by their UUID label.

    An alert that is not valid is skipped and reported in the answer; the rest of the batch is stored."""
    if body.version != "4":
        raise StoreError(f"unsupported Alertmanager payload version {body.version!r}; expected 4")
    good: list[AlertmanagerAlert] = []
    errors: list[str] = []
    for i, raw in enumerate(body.alerts):
        try:
            # Parsed once, here: the store takes the alert with its times as datetimes, no JSON round trip.
            good.append(cast(AlertmanagerAlert, am_alert.validate_python(raw).model_dump()))
        except ValidationError as err:
            errors.append(f"alert {i}: {one_line(err).removeprefix('invalid request: ')}")
    if errors:
        log.warning("alertmanager webhook: skipped %d invalid alert(s): %s", len(errors), "; ".join(errors[:5]))
    at = datetime.now(UTC)
    stored = store.labels.add_alerts(good, at, group_key=body.groupKey, receiver=body.receiver) if good else 0
    return {"stored": stored, "skipped": len(errors), "errors": errors[:MAX_ERRORS_SHOWN]}


@reads.get("/alerts", response_model=schemas.AlertPage)
def list_alerts(
    store: StoreDep,
    status: Annotated[str | None, Query(pattern="^(firing|resolved)$")] = None,
    gpu_uuid: Annotated[str | None, Query(max_length=200)] = None,
    limit: Limit = 100,
    offset: Offset = 0,
) -> dict[str, Any]:
    """Alerts received from Alertmanager, newest first."""
    items, total = store.labels.alerts(status=status, gpu_uuid=gpu_uuid, limit=limit, offset=offset)
    return {"items": items, "total": total, "limit": limit, "offset": offset}
