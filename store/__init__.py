"""Store: SQLAlchemy models, sessions, migrations and queries (SQLite or PostgreSQL)."""

from store.actuation import ActionRow, ActiveDecision, BreakerState, NodeControl
from store.decisions import Decision, DecisionChanges, DecisionRule, ScorePoint, ScoreRecord
from store.errors import NotFound, StoreError, StoreUnavailable
from store.gpus import GpuDetail, GpuItem, GpuRow, Node, Sample
from store.labels import Alert, AlertmanagerAlert, Failure
from store.leases import SHARDS, Lease, LeaseTick, ReplicaInfo, RoundFence, shard_of
from store.probes import ProbeResult, ProbeResultRow
from store.retention import Retention
from store.store import CLOCK_SKEW, Store
from store.workloads import GpuWorkloads

__all__ = [
    "CLOCK_SKEW",
    "SHARDS",
    "ActionRow",
    "ActiveDecision",
    "Alert",
    "AlertmanagerAlert",
    "BreakerState",
    "Decision",
    "DecisionChanges",
    "DecisionRule",
    "Failure",
    "GpuDetail",
    "GpuItem",
    "GpuRow",
    "GpuWorkloads",
    "Lease",
    "LeaseTick",
    "Node",
    "NodeControl",
    "NotFound",
    "ProbeResult",
    "ProbeResultRow",
    "ReplicaInfo",
    "Retention",
    "RoundFence",
    "Sample",
    "ScorePoint",
    "ScoreRecord",
    "Store",
    "StoreError",
    "StoreUnavailable",
    "shard_of",
]
