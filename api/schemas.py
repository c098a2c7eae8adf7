"""Request and response bodies of the REST API (they make the OpenAPI schema at /docs)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
LATEST = datetime(2200, 1, 1, tzinfo=UTC)


def _utc(t: datetime) -> datetime:
    """Naive times are UTC; aware ones are converted; years no GPU ever saw are refused."""
    try:
        t = t.replace(tzinfo=UTC) if t.tzinfo is None else t.astimezone(UTC)
    except OverflowError:
        raise ValueError("time out of range") from None
    if not EARLIEST <= t < LATEST:
        raise ValueError(f"time must be between {EARLIEST:%Y} and {LATEST:%Y}")
    return t


UtcTime = Annotated[datetime, AfterValidator(_utc)]
"""A time in UTC (ISO 8601; a naive time is taken as UTC)."""


def _end(t: datetime | None) -> datetime | None:
    """Alertmanager's endsAt: its zero time (0001-01-01) means "not ended"."""
    return None if t is None or t.year < EARLIEST.year else _utc(t)


EndTime = Annotated[datetime | None, AfterValidator(_end)]

Decision = Literal["ok", "watch", "demote", "drain", "rma"]
FailureMode = Literal["ecc", "thermal", "pcie", "other"]
Remedy = Literal["none", "reset", "reboot", "replace"]
RemedyWhen = Literal["idle", "now"]
_REMEDY = "what brings the GPU back, from its latest round (null: not scored, or scored before remedies)"
_REMEDY_WHEN = "when the remedy is due: idle (the next moment the GPU has no work) or now"


class Problem(BaseModel):
    """Every error answer: one line that says what went wrong."""

    detail: str


class Risk(BaseModel):
    risk: float | None = Field(None, description="overall failure risk in the lead window, 0..1 (calibrated)")
    risk_ecc: float | None = None
    risk_thermal: float | None = None
    risk_pcie: float | None = None


class GpuSummary(Risk):
    uuid: str
    hostname: str
    gpu_index: int | None = None
    model_name: str | None = None
    serial: str | None = None
    state: str | None = Field(None, description="active | lost | retired")
    first_seen: datetime | None = None
    last_seen: datetime | None = None
    scored_at: datetime | None = None
    decision: Decision | None = Field(None, description="null until the GPU was first scored")
    reasons: list[str] = Field(default_factory=list)
    remedy: Remedy | None = Field(None, description=_REMEDY)
    remedy_when: RemedyWhen | None = Field(None, description=_REMEDY_WHEN)


class GpuWorkloadsOut(BaseModel):
    workloads: list[dict[str, str]] = Field(default_factory=list, description="label sets, one per workload")
    seen_at: datetime | None = Field(None, description="when the collector last reported them")


class GpuDetail(GpuSummary):
    decision_id: int | None = None
    latest_sample: dict[str, Any] | None = Field(None, description="timestamp and catalogue fields (null: absent)")


class Page(BaseModel):
    total: int
    limit: int
    offset: int


class GpuPage(Page):
    items: list[GpuSummary]


class RiskPoint(Risk):
    scored_at: datetime
    decision: Decision
    reasons: list[str] = Field(default_factory=list)


class RiskHistory(BaseModel):
    uuid: str
    points: list[RiskPoint]


class ProbeOut(BaseModel):
    """One probe run on one GPU (gpuhealth probe / the collector's scheduler)."""

    gpu_uuid: str
    ran_at: datetime
    test: str
    status: str = Field(description="pass | fail | error | skipped")
    value: float | None = None
    unit: str | None = None
    expected: float | None = None
    ratio: float | None = None
    duration_s: float | None = None
    details: dict[str, Any] | None = None


class NodeDetail(BaseModel):
    hostname: str
    first_seen: datetime | None = None
    last_seen: datetime | None = None
    counts: dict[str, int] = Field(default_factory=dict, description="GPUs per decision (and unscored)")
    gpus: list[GpuSummary]
    workloads: dict[str, GpuWorkloadsOut] = Field(
        default_factory=dict, description="GPU UUID -> the pods or Slurm jobs on it (what a drain would affect)"
    )


class DecisionOut(BaseModel):
    id: int
    workloads: list[dict[str, str]] = Field(
        default_factory=list, description="the pods or Slurm jobs on the GPU now: what acting on it affects"
    )
    gpu_uuid: str
    hostname: str | None = None
    gpu_index: int | None = None
    model_name: str | None = None
    decision: Decision
    reasons: list[str] = Field(default_factory=list)
    state: str = Field(description="open | acknowledged | closed")
    created_at: datetime
    updated_at: datetime | None = None
    acknowledged_by: str | None = None
    acknowledged_at: datetime | None = None
    closed_at: datetime | None = None
    risk: float | None = None
    remedy: Remedy | None = Field(None, description=_REMEDY)
    remedy_when: RemedyWhen | None = Field(None, description=_REMEDY_WHEN)


class DecisionPage(Page):
    items: list[DecisionOut]


class AckIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    by: str = Field(min_length=1, max_length=200, description="who acknowledges (person or system)")


class FailureIn(BaseModel):
    """A failure or RMA outcome: a label for the next training run."""

    model_config = ConfigDict(extra="forbid")
    gpu_uuid: str = Field(min_length=1, max_length=200)
    failed_at: UtcTime
    mode: FailureMode
    kind: Literal["failure", "rma"] = "failure"
    hostname: str | None = Field(None, max_length=255, description="needed for a GPU that never reported here")
    xid: int | None = Field(None, ge=0, le=1_000_000)
    note: str | None = Field(None, max_length=4000)
    recorded_by: str | None = Field(None, max_length=200)


class FailureOut(BaseModel):
    id: int
    gpu_uuid: str
    hostname: str | None = None
    failed_at: datetime
    mode: FailureMode
    kind: str
    xid: int | None = None
    note: str | None = None
    recorded_at: datetime | None = None
    recorded_by: str | None = None


class AmAlert(BaseModel):
    """One alert of an Alertmanager webhook notification (payload version 4)."""

    status: Literal["firing", "resolved"]
    labels: dict[str, str]
    annotations: dict[str, str] = Field(default_factory=dict)
    startsAt: UtcTime
    endsAt: EndTime = None
    generatorURL: str | None = None
    fingerprint: str | None = None


class AmWebhook(BaseModel):
    """Alertmanager's webhook body, version 4 (https://prometheus.io/docs/alerting/latest/configuration/#webhook_config)."""

    version: str = "4"
    groupKey: str | None = None
    truncatedAlerts: int = 0
    status: Literal["firing", "resolved"]
    receiver: str | None = None
    groupLabels: dict[str, str] = Field(default_factory=dict)
    commonLabels: dict[str, str] = Field(default_factory=dict)
    commonAnnotations: dict[str, str] = Field(default_factory=dict)
    externalURL: str | None = None
    alerts: list[dict[str, Any]] = Field(
        max_length=10_000,
        description="Each an AmAlert. One that is not valid is skipped and reported, the others are stored: "
        "Alertmanager does not retry a 4xx, so refusing the batch would lose every alert in it.",
    )


class Stored(BaseModel):
    stored: int
    skipped: int = 0
    """Alerts of the batch that were not valid (see `errors`)."""
    errors: list[str] = Field(default_factory=list)
    """Why, for the first few skipped alerts."""


class AlertOut(BaseModel):
    id: int
    status: str
    alertname: str | None = None
    severity: str | None = None
    action: str | None = None
    gpu_uuid: str | None = None
    hostname: str | None = None
    labels: dict[str, Any] = Field(default_factory=dict)
    annotations: dict[str, Any] = Field(default_factory=dict)
    starts_at: datetime | None = None
    ends_at: datetime | None = None
    received_at: datetime


class AlertPage(Page):
    items: list[AlertOut]


class Health(BaseModel):
    status: str
    detail: str


class TrainingSetOut(BaseModel):
    """One history a model learned from: a simulated prior fleet or the operator's own."""

    name: str
    weight: float | None = Field(None, description="what all its rows weighed together against the other sets")
    gpus: int | None = None
    span: list[str] | None = Field(None, description="first and last sample")
    failures: dict[str, int] = Field(default_factory=dict, description="failures per mode it held")


class TrainedOn(BaseModel):
    sets: list[TrainingSetOut]
    window: list[str] | None = Field(None, description="earliest and latest sample over all sets")
    gpus: int | None = None
    rows: int | None = Field(None, description="training rows (GPU x cutoff)")
    failures: dict[str, int] = Field(default_factory=dict)
    model_names: list[str] = Field(default_factory=list, description="GPU models seen in training")
    fleet: dict[str, Any] | None = Field(None, description="the fleet's own history: weight, GPUs, span, failures")
    prior: dict[str, Any] | None = Field(None, description="the simulated prior: fleets, size, seeds, weight")


class Holdout(BaseModel):
    """The newest part of the fleet's history the model was not trained on: promote judges it there."""

    days: float
    start: datetime
    end: datetime
    gpus: int
    failures: dict[str, int] = Field(default_factory=dict)


class AddedFrom(BaseModel):
    """The model file a stored model was added from (`gpuhealth model add`)."""

    file: str = Field(description="the file's name")
    sha256: str
    bytes: int


class PromotionMeasure(BaseModel):
    name: str = Field(description="recall_ecc, recall_thermal, recall_pcie (per incident) or precision (episodes)")
    candidate: float | None = None
    baseline: float | None = None
    judged: bool = Field(description="false: too few failures or alerts in the slice to compare")
    worse: bool
    detail: str


class Promotion(BaseModel):
    """`gpuhealth model promote`'s comparison on the holdout slice (the latest attempt)."""

    version: str
    baseline: str = Field(description="the model it was compared with")
    promoted: bool
    forced: bool
    at: datetime
    measures: list[PromotionMeasure] = Field(default_factory=list)
    refusals: list[str] = Field(default_factory=list, description="why it is (or was, when forced) not promotable")
    notes: list[str] = Field(default_factory=list, description="what the slice could not judge")
    slice: dict[str, Any] = Field(default_factory=dict)


class ModelCard(BaseModel):
    """The risk model the scoring loop uses now, where it came from, what it learned and how it measured."""

    version: str | None = Field(None, description="the stored model's version; null for a model file")
    source: Literal["store", "file"] = Field(
        description="store: stored (trained here, or added from a file) and promoted; file: shipped or --model"
    )
    trained_by: str | None = Field(
        None, description="how a stored model came to be: gpuhealth train --db, or a model file (gpuhealth model add)"
    )
    added_from: AddedFrom | None = Field(None, description="the file a stored model was added from")
    created_at: datetime | None = None
    activated_at: datetime | None = None
    loaded_at: datetime | None = Field(None, description="when the scoring loop loaded it")
    pending_version: str | None = Field(None, description="the store's active version, while not (yet) loaded")
    load_error: str | None = Field(None, description="why the last active version did not load (the old one kept)")
    trained_on: TrainedOn
    holdout: Holdout | None = None
    validation: dict[str, dict[str, float | None]] = Field(
        default_factory=dict, description="per mode, on the last 20 % of each training set's time"
    )
    promotion: Promotion | None = None
    sklearn_version: str | None = None
    data_hash: str | None = None


# -- the actuator ------------------------------------------------------------------------------


class ActionOut(BaseModel):
    """One planned or applied change of a node (the actuator's audit)."""

    id: int
    at: datetime
    target: str = Field(description="slurm | kubernetes")
    mode: str = Field(description="dry-run (recorded, nothing touched) | on")
    hostname: str
    action: str = Field(
        description="watch | demote | drain | rma | release (back to ok); the remediation loop's steps: "
        "reset | reboot | verify | return | escalate | cancel"
    )
    from_state: Decision
    to_state: Decision
    why: str
    gpu_uuid: str | None = None
    gpu_index: int | None = None
    result: str = Field(description="planned | applied | pending | failed | blocked | skipped")
    error: str | None = None
    workloads: list[str] | None = Field(None, description="jobs or pods on the node at that moment")
    summary: str = Field(description='one line: "would drain sim-node-01: GPU 3 rma (row remap failure)"')


class ActionPage(Page):
    items: list[ActionOut]


class NodeControlIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    by: str = Field(min_length=1, max_length=200, description="who holds or releases the node")


class NodeControlOut(BaseModel):
    hostname: str
    held: bool
    held_by: str | None = None
    held_at: datetime | None = None
    released_at: datetime | None = None
    released_by: str | None = None


class ActuatorOut(BaseModel):
    """The actuator of this service: mode, target, breaker, last pass."""

    mode: str = Field(description="off | dry-run | on")
    target: str | None = None
    breaker_open: bool = False
    opened_at: datetime | None = None
    reason: str | None = None
    reset_at: datetime | None = None
    reset_by: str | None = None
    passes: int = 0
    failures: int = 0
    last_error: str | None = None


# -- remediations (service.remediation; the node agent's contract: core.remedies) ------------------


class RemediationOut(BaseModel):
    """One GPU's way back: drain, remedy, verify, then returned, rma or cancelled."""

    id: int
    target: str = Field(description="slurm | kubernetes | sim")
    hostname: str
    gpu_uuid: str
    gpu_index: int | None = None
    remedy: Literal["reset", "reboot"]
    due: Literal["now", "idle"] = Field(description="now: drained first; idle: at the GPU's next idle moment")
    cause: str = Field(description="the decision's remedy line: what asked for it and its source")
    detected_at: datetime = Field(description="when the decision that asked for it began")
    opened_at: datetime
    stage: Literal["drain", "remedy", "verify"] | None = Field(None, description="null once closed")
    stage_at: datetime | None = None
    deadline: datetime | None = Field(None, description="past it, the remediation is stuck (an alert fires)")
    remedied_at: datetime | None = None
    reboot: dict[str, Any] | None = Field(None, description="the reboot asked for: when, and the boot before it")
    verified: dict[str, Any] | None = Field(None, description="the agent's verification: result, probes")
    detail: str | None = Field(None, description="the last thing said of it: a refusal, a wait, why it closed")
    attempts: int = 0
    result: Literal["returned", "rma", "cancelled"] | None = None
    closed_at: datetime | None = None


class RemediationPage(Page):
    items: list[RemediationOut]


class RemedyTaskOut(BaseModel):
    """Something the node agent is asked to do on one of its GPUs (`core.remedies.RemedyTask`)."""

    remediation_id: int
    hostname: str
    gpu_uuid: str
    gpu_index: int | None = None
    do: Literal["reset", "reboot", "verify"]
    why: str
    deadline: datetime | None = None


class RemedyTasksOut(BaseModel):
    hostname: str
    tasks: list[RemedyTaskOut]


class ProbeResultIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    probe: str = Field(min_length=1, max_length=64)
    passed: bool
    detail: str = Field("", max_length=2000)


class RemedyReportIn(BaseModel):
    """What the node agent did with a task (`core.remedies.RemedyReport`)."""

    model_config = ConfigDict(extra="forbid")
    do: Literal["reset", "reboot", "verify"]
    result: Literal["done", "refused", "failed"] = Field(
        description="done: carried out (verify: every probe passed); refused: not attempted; failed: it did not work"
    )
    detail: str = Field("", max_length=4000)
    gpu_uuid: str = Field("", max_length=64)
    duration_s: float | None = Field(None, ge=0, le=86400 * 7)
    probes: list[ProbeResultIn] = Field(default_factory=list, max_length=32)


class RemedyReportOut(BaseModel):
    remediation: RemediationOut
