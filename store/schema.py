"""The tables (SQLAlchemy 2.0 declarative). Migrations in store/migrations must match them.

Metric columns of `samples` and `samples_hourly` are generated from the catalogue, one
nullable float per field: double precision for counters (they grow large and must stay
exact), single precision for gauges (what the history frame holds, see history.metric_dtype).
A catalogue field added later therefore needs a new migration; tests/store/test_schema.py
fails until it exists.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from core import catalog, remediation_metrics

METRIC_COLUMNS: tuple[str, ...] = (
    *catalog.HISTORY_COLUMNS,
    *(f.name for f in catalog.FIELDS if f.name not in catalog.HISTORY_COLUMNS),
)
"""Every catalogue field, the fixed history columns first: what a sample row can hold."""

GPU_STATES = ("active", "lost", "retired")
DECISION_STATES = ("open", "acknowledged", "closed")
FAILURE_KINDS = ("failure", "rma")
ALERT_STATUSES = ("firing", "resolved")
PROBE_STATUSES = ("pass", "fail", "error", "skipped")


def metric_type(name: str) -> sa.types.TypeEngine[Any]:
    """Double for counters and fields outside the catalogue, REAL (float32) for gauges."""
    f = catalog.BY_NAME.get(name)
    return sa.REAL() if f is not None and f.kind == "gauge" else sa.Double()


class UTCDateTime(sa.types.TypeDecorator[datetime]):
    """A timezone-aware UTC datetime on every backend (SQLite keeps no zone: stored as UTC, read back aware)."""

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:  # naive means UTC throughout gpuhealth (history.validate does the same)
            return value.replace(tzinfo=UTC) if dialect.name != "sqlite" else value
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class Base(DeclarativeBase):
    """Declarative base; `Base.metadata` is what migrations are compared with."""


class Node(Base):
    __tablename__ = "nodes"

    hostname: Mapped[str] = mapped_column(sa.String(255), primary_key=True)
    first_seen: Mapped[datetime] = mapped_column(UTCDateTime())
    last_seen: Mapped[datetime] = mapped_column(UTCDateTime())


class Gpu(Base):
    __tablename__ = "gpus"

    uuid: Mapped[str] = mapped_column(sa.String(64), primary_key=True)
    hostname: Mapped[str] = mapped_column(sa.String(255), index=True)
    gpu_index: Mapped[int | None] = mapped_column(sa.Integer)  # unknown for a GPU only ever scored
    model_name: Mapped[str | None] = mapped_column(sa.String(255))
    serial: Mapped[str | None] = mapped_column(sa.String(64))
    pci_bus_id: Mapped[str | None] = mapped_column(sa.String(32))
    # Its InfiniBand/RoCE ports, "mlx5_3/1" (migration 0016): the rail its reasons name (predictor.fabric).
    ib_rail: Mapped[str | None] = mapped_column(sa.String(255))
    first_seen: Mapped[datetime] = mapped_column(UTCDateTime())
    last_seen: Mapped[datetime] = mapped_column(UTCDateTime())
    state: Mapped[str] = mapped_column(sa.String(16), default="active")
    # The newest risk_scores row, kept here so listing 10,000 GPUs joins one row each instead of
    # searching the score history. No foreign key: risk_scores already points at gpus.
    latest_score_id: Mapped[int | None] = mapped_column(sa.Integer)

    __table_args__ = (sa.CheckConstraint("state IN ('active', 'lost', 'retired')", name="ck_gpus_state"),)


def _metric_columns() -> list[sa.Column[Any]]:
    return [sa.Column(name, metric_type(name), nullable=True) for name in METRIC_COLUMNS]


samples = sa.Table(
    "samples",
    Base.metadata,
    sa.Column("gpu_uuid", sa.String(64), primary_key=True),
    sa.Column("timestamp", UTCDateTime(), primary_key=True),
    *_metric_columns(),
    sa.Index("ix_samples_timestamp", "timestamp"),
)
"""Raw telemetry, one row per GPU per sample. No foreign key on the hot path: ingest upserts
the GPU in the same transaction. On PostgreSQL partitioned by range of "timestamp", one partition
per UTC day (migration 0005, `store.partitions`); the metadata leaves that out, as autogenerate does."""

samples_hourly = sa.Table(
    "samples_hourly",
    Base.metadata,
    sa.Column("gpu_uuid", sa.String(64), primary_key=True),
    sa.Column("hour", UTCDateTime(), primary_key=True),
    sa.Column("n", sa.Integer, nullable=False),
    sa.Column("last_at", UTCDateTime(), nullable=False),  # newest raw sample rolled in: merges keep counters right
    # The writing transaction's `hour_revisions` value (migration 0015): the scorer's window re-reads changed rows.
    sa.Column("revision", sa.BigInteger, nullable=False, server_default="0"),
    *_metric_columns(),
    sa.Column("thermal_throttle_share", sa.Float, nullable=True),  # share of the hour's samples throttled for heat
    sa.Index("ix_samples_hourly_hour", "hour"),
    sa.Index("ix_samples_hourly_revision", "revision"),
)
"""Hour rows of the samples, kept at ingest (`store.hours`): `hour` H covers (H, H + 1 h]; gauges
averaged, counters and states last, xid max (`core.hourly`). The scorer reads these."""

hour_revisions = sa.Table(
    "hour_revisions",
    Base.metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("revision", sa.BigInteger, nullable=False),
)
"""One row: the last revision stamped on hour rows (`store.changes`)."""


class RiskScore(Base):
    __tablename__ = "risk_scores"

    id: Mapped[int] = mapped_column(sa.Integer, primary_key=True, autoincrement=True)
    gpu_uuid: Mapped[str] = mapped_column(sa.String(64), sa.ForeignKey("gpus.uuid"))
    scored_at: Mapped[datetime] = mapped_column(UTCDateTime())
    risk: Mapped[float | None] = mapped_column(sa.Double)
    risk_ecc: Mapped[float | None] = mapped_column(sa.Double)
    risk_thermal: Mapped[float | None] = mapped_column(sa.Double)
    risk_pcie: Mapped[float | None] = mapped_column(sa.Double)
    decision: Mapped[str] = mapped_column(sa.String(16))
    reasons: Mapped[list[str]] = mapped_column(sa.JSON, default=list)
    heat_z: Mapped[float | None] = mapped_column(sa.Double)
    """The core's heat the round judged (`heat_excess_z`, σ; null at light load or not known): how long
    it has held decides a thermal demote on heat alone (`predictor.conditions.heat_held`)."""
    heat_vs_node_z: Mapped[float | None] = mapped_column(sa.Double)
    """Its heat over its node's in its own spread of that (`heat_vs_node_own_z`, σ; null as `heat_z`),
    the other yardstick a round's heat alone counts by (`predictor.conditions.heat_counts`)."""
    remedy: Mapped[str | None] = mapped_column(sa.String(16))
    """What brings the GPU back, beside the decision (`core.decisions.REMEDIES`; null: rounds before it)."""
    remedy_when: Mapped[str | None] = mapped_column(sa.String(8))
    """When the remedy is due (`core.decisions.REMEDY_WHEN`; null as `remedy`)."""

    __table_args__ = (
        sa.Index("ix_risk_scores_gpu_scored", "gpu_uuid", "scored_at"),
        sa.Index("ix_risk_scores_scored", "scored_at"),  # retention deletes by time across GPUs
    )


class RiskScoreHourly(Base):
    """Scores older than the score retention, one row per GPU and hour: the highest risks, the
    worst decision and its reasons (a risk history that outlives the raw scores, as samples do)."""

    __tablename__ = "risk_scores_hourly"

    gpu_uuid: Mapped[str] = mapped_column(sa.String(64), sa.ForeignKey("gpus.uuid"), primary_key=True)
    hour: Mapped[datetime] = mapped_column(UTCDateTime(), primary_key=True)
    n: Mapped[int] = mapped_column(sa.Integer)
    risk: Mapped[float | None] = mapped_column(sa.Double)
    risk_ecc: Mapped[float | None] = mapped_column(sa.Double)
    risk_thermal: Mapped[float | None] = mapped_column(sa.Double)
    risk_pcie: Mapped[float | None] = mapped_column(sa.Double)
    decision: Mapped[str] = mapped_column(sa.String(16))
    reasons: Mapped[list[str]] = mapped_column(sa.JSON, default=list)

    __table_args__ = (sa.Index("ix_risk_scores_hourly_hour", "hour"),)


class Decision(Base):
    __tablename__ = "decisions"

    id: Mapped[int] = mapped_column(sa.Integer, primary_key=True, autoincrement=True)
    gpu_uuid: Mapped[str] = mapped_column(sa.String(64), sa.ForeignKey("gpus.uuid"))
    decision: Mapped[str] = mapped_column(sa.String(16))
    reasons: Mapped[list[str]] = mapped_column(sa.JSON, default=list)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime())
    state: Mapped[str] = mapped_column(sa.String(16), default="open")
    acknowledged_by: Mapped[str | None] = mapped_column(sa.String(255))
    acknowledged_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    closed_at: Mapped[datetime | None] = mapped_column(UTCDateTime())

    __table_args__ = (
        sa.CheckConstraint("state IN ('open', 'acknowledged', 'closed')", name="ck_decisions_state"),
        # At most one decision per GPU that is not closed, enforced by the database itself.
        sa.Index(
            "ux_decisions_gpu_active",
            "gpu_uuid",
            unique=True,
            sqlite_where=sa.text("state != 'closed'"),
            postgresql_where=sa.text("state != 'closed'"),
        ),
        sa.Index("ix_decisions_state_decision", "state", "decision"),
        sa.Index("ix_decisions_closed_at", "closed_at"),  # retention of closed decisions
    )


class Failure(Base):
    __tablename__ = "failures"

    id: Mapped[int] = mapped_column(sa.Integer, primary_key=True, autoincrement=True)
    gpu_uuid: Mapped[str] = mapped_column(sa.String(64), index=True)  # may name a GPU that never reported here
    hostname: Mapped[str | None] = mapped_column(sa.String(255))
    failed_at: Mapped[datetime] = mapped_column(UTCDateTime())
    mode: Mapped[str] = mapped_column(sa.String(16))
    kind: Mapped[str] = mapped_column(sa.String(16), default="failure")
    xid: Mapped[int | None] = mapped_column(sa.Integer)
    note: Mapped[str | None] = mapped_column(sa.Text)
    recorded_at: Mapped[datetime] = mapped_column(UTCDateTime())
    recorded_by: Mapped[str | None] = mapped_column(sa.String(255))

    __table_args__ = (
        sa.CheckConstraint("mode IN ('ecc', 'thermal', 'pcie', 'other')", name="ck_failures_mode"),
        sa.CheckConstraint("kind IN ('failure', 'rma')", name="ck_failures_kind"),
    )


class Alert(Base):
    """One row per alert instance (fingerprint, startsAt); a later notification updates it."""

    __tablename__ = "alerts"

    id: Mapped[int] = mapped_column(sa.Integer, primary_key=True, autoincrement=True)
    received_at: Mapped[datetime] = mapped_column(UTCDateTime())
    fingerprint: Mapped[str] = mapped_column(sa.String(64))
    status: Mapped[str] = mapped_column(sa.String(16))
    alertname: Mapped[str | None] = mapped_column(sa.String(255))
    severity: Mapped[str | None] = mapped_column(sa.String(64))
    action: Mapped[str | None] = mapped_column(sa.String(64))
    gpu_uuid: Mapped[str | None] = mapped_column(sa.String(64), index=True)
    hostname: Mapped[str | None] = mapped_column(sa.String(255))
    labels: Mapped[dict[str, str]] = mapped_column(sa.JSON, default=dict)
    annotations: Mapped[dict[str, str]] = mapped_column(sa.JSON, default=dict)
    starts_at: Mapped[datetime] = mapped_column(UTCDateTime())
    ends_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    generator_url: Mapped[str | None] = mapped_column(sa.Text)
    group_key: Mapped[str | None] = mapped_column(sa.Text)
    receiver: Mapped[str | None] = mapped_column(sa.String(255))

    __table_args__ = (
        sa.UniqueConstraint("fingerprint", "starts_at", name="uq_alerts_fingerprint_starts"),
        sa.Index("ix_alerts_received", "received_at"),
    )


class ProbeResult(Base):
    __tablename__ = "probe_results"

    id: Mapped[int] = mapped_column(sa.Integer, primary_key=True, autoincrement=True)
    gpu_uuid: Mapped[str] = mapped_column(sa.String(64))
    ran_at: Mapped[datetime] = mapped_column(UTCDateTime())
    test: Mapped[str] = mapped_column(sa.String(64))
    status: Mapped[str] = mapped_column(sa.String(16))
    value: Mapped[float | None] = mapped_column(sa.Double)
    unit: Mapped[str | None] = mapped_column(sa.String(32))
    expected: Mapped[float | None] = mapped_column(sa.Double)
    ratio: Mapped[float | None] = mapped_column(sa.Double)
    duration_s: Mapped[float | None] = mapped_column(sa.Double)
    details: Mapped[dict[str, Any] | None] = mapped_column(sa.JSON)

    __table_args__ = (
        sa.CheckConstraint("status IN ('pass', 'fail', 'error', 'skipped')", name="ck_probe_results_status"),
        sa.Index("ix_probe_results_gpu_ran", "gpu_uuid", "ran_at"),
        sa.Index("ix_probe_results_ran", "ran_at"),  # retention deletes by time across GPUs
    )


class ModelArchive(Base):
    """Risk models trained here (`gpuhealth train --db`): the skops archive, its card, and which one
    is active. The scoring loop reads `version` of the active row every round and loads the archive
    when it changed (`service.scorer`)."""

    __tablename__ = "models"

    id: Mapped[int] = mapped_column(sa.Integer, primary_key=True, autoincrement=True)
    version: Mapped[str] = mapped_column(sa.String(64))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    data: Mapped[bytes] = mapped_column(sa.LargeBinary)
    size: Mapped[int] = mapped_column(sa.BigInteger)
    sha256: Mapped[str] = mapped_column(sa.String(64))
    card: Mapped[dict[str, Any]] = mapped_column(sa.JSON)
    active: Mapped[bool] = mapped_column(sa.Boolean, default=False)
    activated_at: Mapped[datetime | None] = mapped_column(UTCDateTime())

    __table_args__ = (
        sa.UniqueConstraint("version", name="uq_models_version"),
        sa.UniqueConstraint("sha256", name="uq_models_sha256"),  # the same archive is stored once
        # At most one active model, enforced by the database itself (as for active decisions).
        sa.Index(
            "ux_models_active",
            "active",
            unique=True,
            sqlite_where=sa.text("active"),
            postgresql_where=sa.text("active"),
        ),
    )


metadata = Base.metadata

T_NODES = metadata.tables["nodes"]
T_GPUS = metadata.tables["gpus"]
T_SCORES = metadata.tables["risk_scores"]
T_SCORES_HOURLY = metadata.tables["risk_scores_hourly"]
T_DECISIONS = metadata.tables["decisions"]
T_FAILURES = metadata.tables["failures"]
T_ALERTS = metadata.tables["alerts"]
T_PROBES = metadata.tables["probe_results"]
T_MODELS = metadata.tables["models"]
"""The tables as Core tables, for the store's queries (samples and samples_hourly are above)."""


# -- replicas of `serve --source prometheus` and their shard leases (store.leases) ------------


class Replica(Base):
    """A running `serve --source prometheus` replica: when it started and last said it is alive."""

    __tablename__ = "replicas"

    replica_id: Mapped[str] = mapped_column(sa.String(255), primary_key=True)
    started_at: Mapped[datetime] = mapped_column(UTCDateTime())
    heartbeat_at: Mapped[datetime] = mapped_column(UTCDateTime())
    info: Mapped[dict[str, Any] | None] = mapped_column(sa.JSON)


class ShardLease(Base):
    """One shard of the fleet's hostnames: which replica holds it until when, and the last scoring
    round written for it (so a shard that changes hands is not scored twice in one round)."""

    __tablename__ = "shard_leases"

    shard: Mapped[int] = mapped_column(sa.Integer, primary_key=True, autoincrement=False)
    owner: Mapped[str | None] = mapped_column(sa.String(255))
    expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    scored_round: Mapped[int | None] = mapped_column(sa.BigInteger)


T_REPLICAS = metadata.tables["replicas"]
T_LEASES = metadata.tables["shard_leases"]


# -- the actuator: its audit, its per-node controls and its breaker (store.actuation) ----------

ACTION_RESULTS = ("planned", "applied", "pending", "failed", "blocked", "skipped")
"""planned: dry-run; pending: started, not finished (an eviction refused for now); blocked: the
breaker stopped it; skipped: not ours to do (the node is drained or cordoned by someone else)."""


class ActionRecord(Base):
    """One planned or applied change of a node by the actuator, and what ran on the node then."""

    __tablename__ = "actions"

    id: Mapped[int] = mapped_column(sa.Integer, primary_key=True, autoincrement=True)
    at: Mapped[datetime] = mapped_column(UTCDateTime())
    target: Mapped[str] = mapped_column(sa.String(32))
    mode: Mapped[str] = mapped_column(sa.String(16))
    hostname: Mapped[str] = mapped_column(sa.String(255))
    action: Mapped[str] = mapped_column(sa.String(16))
    from_state: Mapped[str] = mapped_column(sa.String(16))
    to_state: Mapped[str] = mapped_column(sa.String(16))
    why: Mapped[str] = mapped_column(sa.Text)
    gpu_uuid: Mapped[str | None] = mapped_column(sa.String(64))
    gpu_index: Mapped[int | None] = mapped_column(sa.Integer)
    result: Mapped[str] = mapped_column(sa.String(16))
    error: Mapped[str | None] = mapped_column(sa.Text)
    workloads: Mapped[list[str] | None] = mapped_column(sa.JSON)
    escalates: Mapped[bool] = mapped_column(sa.Boolean, default=False)

    __table_args__ = (
        sa.CheckConstraint(
            "result IN ('planned', 'applied', 'pending', 'failed', 'blocked', 'skipped')", name="ck_actions_result"
        ),
        sa.CheckConstraint("mode IN ('dry-run', 'on')", name="ck_actions_mode"),
        sa.Index("ix_actions_at", "at"),
        sa.Index("ix_actions_host_at", "hostname", "at"),
    )


class ActuatorNode(Base):
    """What the actuator keeps per node between passes: an operator's hold or release, the settle
    clock of a lowering, and what it changed that it must put back (the Slurm weight)."""

    __tablename__ = "actuator_nodes"

    hostname: Mapped[str] = mapped_column(sa.String(255), primary_key=True)
    held: Mapped[bool] = mapped_column(sa.Boolean, default=False)
    held_by: Mapped[str | None] = mapped_column(sa.String(255))
    held_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    released_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    released_by: Mapped[str | None] = mapped_column(sa.String(255))
    lowering_since: Mapped[datetime | None] = mapped_column(UTCDateTime())
    lowering_to: Mapped[str | None] = mapped_column(sa.String(16))
    saved: Mapped[dict[str, Any] | None] = mapped_column(sa.JSON)


class ActuatorState(Base):
    """The breaker (one row per target): open or closed, since when, why, and the last reset."""

    __tablename__ = "actuator_state"

    target: Mapped[str] = mapped_column(sa.String(32), primary_key=True)
    breaker_open: Mapped[bool] = mapped_column(sa.Boolean, default=False)
    opened_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    reason: Mapped[str | None] = mapped_column(sa.Text)
    reset_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    reset_by: Mapped[str | None] = mapped_column(sa.String(255))


REMEDIATION_STAGES = remediation_metrics.STAGES
"""Where an open remediation stands: its node being drained (a remedy due now), the remedy asked for
(waiting for the GPU or node to be idle, then done), the GPU being verified."""
REMEDIATION_ACTIONS = remediation_metrics.AUDIT_ACTIONS
"""The audit's actions of the remediation loop (beside the node changes: watch, demote, drain, rma, release)."""
REMEDIATION_RESULTS = remediation_metrics.RESULTS
"""How a remediation ended: the GPU back in service, escalated to RMA, or no longer asked for."""


class RemediationRecord(Base):
    """One GPU's way back: drain, remedy (reset or reboot), verify, then return or RMA (store.remediations)."""

    __tablename__ = "remediations"

    id: Mapped[int] = mapped_column(sa.Integer, primary_key=True, autoincrement=True)
    target: Mapped[str] = mapped_column(sa.String(32))
    hostname: Mapped[str] = mapped_column(sa.String(255))
    gpu_uuid: Mapped[str] = mapped_column(sa.String(64))
    gpu_index: Mapped[int | None] = mapped_column(sa.Integer)
    remedy: Mapped[str] = mapped_column(sa.String(16))
    due: Mapped[str] = mapped_column(sa.String(8))
    cause: Mapped[str] = mapped_column(sa.Text)
    detected_at: Mapped[datetime] = mapped_column(UTCDateTime())
    opened_at: Mapped[datetime] = mapped_column(UTCDateTime())
    stage: Mapped[str | None] = mapped_column(sa.String(16))
    stage_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    deadline: Mapped[datetime | None] = mapped_column(UTCDateTime())
    remedied_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    reboot: Mapped[dict[str, Any] | None] = mapped_column(sa.JSON)
    verified: Mapped[dict[str, Any] | None] = mapped_column(sa.JSON)
    detail: Mapped[str | None] = mapped_column(sa.Text)
    attempts: Mapped[int] = mapped_column(sa.Integer, default=0)
    result: Mapped[str | None] = mapped_column(sa.String(16))
    closed_at: Mapped[datetime | None] = mapped_column(UTCDateTime())

    __table_args__ = (
        sa.CheckConstraint("stage IS NULL OR stage IN ('drain', 'remedy', 'verify')", name="ck_remediations_stage"),
        sa.CheckConstraint(
            "result IS NULL OR result IN ('returned', 'rma', 'cancelled')", name="ck_remediations_result"
        ),
        sa.CheckConstraint("remedy IN ('reset', 'reboot')", name="ck_remediations_remedy"),
        sa.Index("ix_remediations_gpu", "gpu_uuid", "opened_at"),
        sa.Index("ix_remediations_host", "hostname", "opened_at"),
        sa.Index("ix_remediations_stage", "stage"),
    )


T_ACTIONS = metadata.tables["actions"]
T_ACTUATOR_NODES = metadata.tables["actuator_nodes"]
T_ACTUATOR_STATE = metadata.tables["actuator_state"]
T_REMEDIATIONS = metadata.tables["remediations"]


class GpuWorkloads(Base):
    """What runs on each GPU now, as the collector last saw it: pods (pod, namespace, container) or
    Slurm jobs (hpc_job), one label set per workload, GPU_I_ID for a MIG instance (store.workloads)."""

    __tablename__ = "gpu_workloads"

    gpu_uuid: Mapped[str] = mapped_column(sa.String(64), primary_key=True)
    workloads: Mapped[list[dict[str, str]]] = mapped_column(sa.JSON)
    seen_at: Mapped[datetime] = mapped_column(UTCDateTime())


T_WORKLOADS = metadata.tables["gpu_workloads"]
