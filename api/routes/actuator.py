"""The actuator: its audit (`/v1/actions`), per-node hold and release, and the breaker's reset."""

from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Path, Query

from api import schemas
from api.deps import ConfigDep, StoreDep, WriteAuth
from api.params import Limit, Offset
from store import ActionRow

actions_reads = APIRouter(prefix="/v1/actions", tags=["actuator"])
actuator_reads = APIRouter(prefix="/v1/actuator", tags=["actuator"])
actuator_writes = APIRouter(prefix="/v1/actuator", tags=["actuator"], dependencies=[WriteAuth])
node_writes = APIRouter(prefix="/v1/nodes", tags=["nodes"], dependencies=[WriteAuth])

Hostname = Annotated[str, Path(min_length=1, max_length=255)]
VERB = {"planned": "would {a}", "applied": "{a}", "pending": "{a} (pending)", "failed": "{a} failed",
        "blocked": "{a} blocked", "skipped": "{a} skipped"}  # fmt: skip


def summary(row: ActionRow) -> str:
    """One line a person reads: "would drain sim-node-01: GPU 3 rma (row remap failure)"."""
    # drain and rma both cordon and evict; the decision that asked for it is in the reason.
    verb = {"rma": "drain", "release": "release"}.get(row["action"], row["action"])
    head = VERB[row["result"]].format(a=verb)
    why = row["why"]
    gpu, _, reasons = why.partition(": ")
    text = f"{head} {row['hostname']}: {gpu}" + (f" ({reasons})" if reasons else "")
    return text + (f"; {row['error']}" if row["error"] else "")


@actions_reads.get("", response_model=schemas.ActionPage)
def list_actions(
    store: StoreDep,
    hostname: Annotated[str | None, Query(max_length=255)] = None,
    result: Annotated[str | None, Query(pattern="^(planned|applied|pending|failed|blocked|skipped)$")] = None,
    since: schemas.UtcTime | None = None,
    limit: Limit = 100,
    offset: Offset = 0,
) -> dict[str, Any]:
    """What the actuator planned (dry-run) and did, newest first, with the jobs or pods on the node then."""
    items, total = store.actuation.actions(hostname=hostname, result=result, since=since, limit=limit, offset=offset)
    return {"items": [{**r, "summary": summary(r)} for r in items], "total": total, "limit": limit, "offset": offset}


@actuator_reads.get("", response_model=schemas.ActuatorOut)
def get_actuator(store: StoreDep, config: ConfigDep) -> dict[str, Any]:
    """The actuator's mode, target, breaker and last pass."""
    act = config.actuator
    if act is None:
        return {"mode": "off"}
    st = act.state
    return {**store.actuation.breaker(act.target.name), "mode": act.mode, "target": act.target.name,
            "passes": st.passes, "failures": st.failures, "last_error": st.last_error}  # fmt: skip


@actuator_writes.post(
    "/reset",
    response_model=schemas.ActuatorOut,
    responses={409: {"model": schemas.Problem, "description": "No actuator runs here, or the breaker is closed"}},
)
def reset_breaker(store: StoreDep, config: ConfigDep, body: schemas.NodeControlIn) -> dict[str, Any]:
    """Close the breaker after checking why it opened; the next pass re-reads every node (nothing is replayed).
    A closed breaker is not reset (409): a reset restarts the breaker's window."""
    if config.actuator is None:
        raise HTTPException(409, "no actuator runs in this service (serve --actuate dry-run|on)")
    if not config.actuator.reset_breaker(body.by):
        raise HTTPException(409, "the breaker is closed: nothing to reset (a reset would restart its window)")
    return get_actuator(store, config)


def _now(config: ConfigDep) -> datetime:
    """The actuator's clock when one runs (the time its decisions and passes are in), else now."""
    return config.actuator.now() if config.actuator is not None else datetime.now(UTC)


def _control(store: StoreDep, hostname: str) -> dict[str, Any]:
    c = store.actuation.node_controls([hostname]).get(hostname)
    return {"hostname": hostname, "held": False} if c is None else dict(c)


def _known(store: StoreDep, config: ConfigDep, hostname: str) -> None:
    """404 unless the store knows the node (`GET /v1/nodes/{hostname}`) or the scheduler showed it at the
    actuator's last pass: a typo must not answer "held" for a node nothing acts on."""
    if config.actuator is not None and hostname in config.actuator.state.seen:
        return
    if not store.actuation.knows(hostname):
        raise HTTPException(404, f"node {hostname} not found: neither the store nor the scheduler knows it")


NOT_FOUND: dict[int | str, dict[str, Any]] = {
    404: {"model": schemas.Problem, "description": "Neither the store nor the scheduler knows the node"}
}


@node_writes.post("/{hostname}/hold", response_model=schemas.NodeControlOut, responses=NOT_FOUND)
def hold_node(store: StoreDep, config: ConfigDep, hostname: Hostname, body: schemas.NodeControlIn) -> dict[str, Any]:
    """Keep the actuator off this node: nothing of ours is applied or undone until the hold is lifted."""
    _known(store, config, hostname)
    store.actuation.hold(hostname, held=True, by=body.by, at=_now(config))
    return _control(store, hostname)


@node_writes.delete("/{hostname}/hold", response_model=schemas.NodeControlOut, responses=NOT_FOUND)
def unhold_node(
    store: StoreDep, config: ConfigDep, hostname: Hostname, by: Annotated[str, Query(min_length=1, max_length=200)]
) -> dict[str, Any]:
    """Let the actuator act on this node again (`?by=` who lifts the hold); a hold the node has is lifted
    even when nothing knows the node any more."""
    if hostname not in store.actuation.node_controls([hostname]):
        _known(store, config, hostname)
    store.actuation.hold(hostname, held=False, by=by, at=_now(config))
    return _control(store, hostname)


@node_writes.post("/{hostname}/release", response_model=schemas.NodeControlOut, responses=NOT_FOUND)
def release_node(store: StoreDep, config: ConfigDep, hostname: Hostname, body: schemas.NodeControlIn) -> dict[str, Any]:
    """Undo ours on this node at the next pass, without the settle period; its current decisions no
    longer act (a newer or worse decision does)."""
    _known(store, config, hostname)
    store.actuation.release(hostname, by=body.by, at=_now(config))
    return _control(store, hostname)
