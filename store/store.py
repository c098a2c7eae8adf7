"""The store: telemetry, scores, decisions, labels, alerts and probe results in SQLite or PostgreSQL.

`Store` is the one object the rest of gpuhealth holds. It is a facade: each method hands over
to the part that owns the responsibility, and every part works through one `Database`
(`store.engine`). One Engine per store; every call takes its own connection and transaction,
so the scoring loop, the ingest thread and API workers can share it.

| part | module | owns |
|---|---|---|
| `Database` | `store.engine` | URL, engine, transactions, errors, dialect SQL, migrations |
| `Samples` | `store.samples` | ingest, history frames |
| `Gpus` | `store.gpus` | GPUs and nodes, the GPU listing and detail, latest samples |
| `Decisions` | `store.decisions` | scoring rounds, the decision lifecycle, risk history |
| `Labels` | `store.labels` | failure and RMA records, Alertmanager alerts |
| `Probes` | `store.probes` | probe results |
| `Models` | `store.models` | stored risk models, their cards, the active one |
| `Pruner` | `store.retention` | roll-ups and deletes of old rows |
| `Leases` | `store.leases` | replicas' heartbeats and their leases on shards of the fleet |
| `Workloads` | `store.workloads` | the pods and jobs on each GPU now, as the collector last saw them |
| `Actuation` | `store.actuation` | the actuator's audit, holds, settle clocks, breaker (`Store.actuation`) |
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

import pandas as pd
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from core.decisions import DECISIONS, OUT_OF_SERVICE
from store.actuation import Actuation
from store.decisions import Decision, DecisionRule, Decisions, ScorePoint, ScoreRecord
from store.engine import Database, not_closed
from store.gpus import GpuDetail, GpuItem, GpuRow, Gpus, Node, Sample
from store.labels import Alert, AlertmanagerAlert, Failure, Labels
from store.leases import SHARDS, Lease, Leases, LeaseTick, ReplicaInfo, RoundFence
from store.models import ModelInfo, Models, StoredModel
from store.probes import ProbeResult, ProbeResultRow, Probes
from store.retention import Pruner, Retention
from store.samples import Samples
from store.schema import T_ALERTS, T_DECISIONS, T_FAILURES, T_GPUS, T_NODES, T_PROBES, T_SCORES
from store.schema import samples as t_samples
from store.schema import samples_hourly as t_samples_hourly
from store.workloads import GpuWorkloads, Workloads

CLOCK_SKEW = timedelta(minutes=5)
"""How far a sample may be dated past the caller's clock before `ingest(not_after=now + CLOCK_SKEW)`
refuses it as from the future."""


class Store:
    """Telemetry, risk scores, decisions, failure labels, alerts and probe results (SQLite or PostgreSQL)."""

    def __init__(self, url: str) -> None:
        """Create the engine (no connection yet); most callers want `Store.open`."""
        self._db = Database(url)
        self.url = self._db.url
        self.dialect = self._db.dialect
        self._samples = Samples(self._db)
        self._gpus = Gpus(self._db)
        self._decisions = Decisions(self._db)
        self._labels = Labels(self._db)
        self._probes = Probes(self._db)
        self._models = Models(self._db)
        self._pruner = Pruner(self._db)
        self._leases = Leases(self._db)
        self._workloads = Workloads(self._db)
        self.actuation = Actuation(self._db)
        """The actuator's part, handed over whole: only the actuator and its routes use it."""

    @classmethod
    def open(cls, url: str, *, upgrade: bool = True) -> Store:
        """Open the database at `url`; with `upgrade`, bring its schema to the newest migration."""
        store = cls(url)
        if upgrade:
            try:
                store.upgrade()
            except BaseException:
                store.close()
                raise
        return store

    def __repr__(self) -> str:
        return f"Store({self.url})"

    __str__ = __repr__

    @property
    def _engine(self) -> Engine:
        """The Engine, for benchmarks and schema tests that compare with the bare driver."""
        return self._db.engine

    # -- the database -----------------------------------------------------------------------

    def upgrade(self) -> None:
        """Bring the schema to the newest migration (`gpuhealth db upgrade`)."""
        self._db.upgrade()

    def revision(self) -> str | None:
        """The schema's current migration, or None for an empty database."""
        return self._db.revision()

    def close(self) -> None:
        """Close every pooled connection and every thread's read connection."""
        self._db.close()

    def ping(self) -> None:
        """Raises StoreUnavailable when the database cannot be reached or cannot take a write now."""
        self._db.ping()

    def counts(self) -> dict[str, int]:
        """Row counts for /metrics: gpus, nodes, samples, …, and active decisions per decision value."""
        tables = {
            "gpus": T_GPUS,
            "nodes": T_NODES,
            "samples": t_samples,
            "samples_hourly": t_samples_hourly,
            "risk_scores": T_SCORES,
            "failures": T_FAILURES,
            "alerts": T_ALERTS,
            "probe_results": T_PROBES,
        }
        d = T_DECISIONS.c
        with self._db.tx() as conn:
            out = {
                k: int(conn.execute(sa.select(sa.func.count()).select_from(t)).scalar_one()) for k, t in tables.items()
            }
            per: dict[str, int] = dict(
                conn.execute(
                    sa.select(d.decision, sa.func.count()).where(not_closed(d.state)).group_by(d.decision)
                ).all()
            )
        for value in DECISIONS[1:]:
            out[f"decisions_{value}"] = int(per.get(value, 0))
        out["decisions_active"] = sum(int(v) for v in per.values())
        return out

    # -- telemetry (store.samples) ----------------------------------------------------------

    def ingest(self, frame: pd.DataFrame, *, not_after: datetime | None = None) -> int:
        """Store a history frame; returns the rows newly inserted (repeated samples are skipped)."""
        return self._samples.ingest(frame, not_after=not_after)

    def history(
        self,
        *,
        since: datetime | None = None,
        until: datetime | None = None,
        uuids: Sequence[str] | None = None,
    ) -> pd.DataFrame:
        """Stored telemetry as a valid history frame, sorted by (gpu_uuid, timestamp)."""
        return self._samples.history(since=since, until=until, uuids=uuids)

    def scoring_history(
        self,
        *,
        since: datetime | None,
        until: datetime,
        hostnames: Sequence[str] | None = None,
        uuids: Sequence[str] | None = None,
    ) -> pd.DataFrame:
        """Hour rows of (since, until]: the stored hours and the raw tail of the last one rolled up."""
        return self._samples.scoring_history(since=since, until=until, hostnames=hostnames, uuids=uuids)

    def newest_sample_time(self, until: datetime | None = None) -> datetime | None:
        """The timestamp of the newest raw sample of any GPU, at or before `until` if given (None when none)."""
        return self._samples.newest_sample_time(until)

    # -- GPUs and nodes (store.gpus) --------------------------------------------------------

    def upsert_gpus(self, gpus: Sequence[GpuRow | Mapping[str, Any]]) -> None:
        """Record GPUs seen: uuid, hostname, gpu_index, model_name, serial?, pci_bus_id?, state?, seen_at."""
        self._gpus.upsert_gpus(gpus)

    def list_gpus(
        self,
        *,
        hostname: str | None = None,
        decision: str | None = None,
        min_risk: float | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> tuple[list[GpuItem], int]:
        """GPUs by risk (highest first, unscored last), then UUID; and how many match in all."""
        return self._gpus.list_gpus(hostname=hostname, decision=decision, min_risk=min_risk, limit=limit, offset=offset)

    def get_gpu(self, uuid: str, *, wait: bool = True) -> GpuDetail:
        """One GPU as list_gpus shows it, plus its latest raw sample (or None); NotFound if unknown."""
        return self._gpus.get_gpu(uuid, wait=wait)

    def latest_samples(self, uuids: Sequence[str] | None = None) -> dict[str, Sample]:
        """The newest raw sample of each GPU: uuid -> {timestamp, metric: value or None}."""
        return self._gpus.latest_samples(uuids)

    def get_node(self, hostname: str) -> Node:
        """A node, its GPUs (as list_gpus items) and how many GPUs carry each decision; NotFound if unknown."""
        return self._gpus.get_node(hostname)

    # -- workloads on GPUs (store.workloads) ------------------------------------------------

    def set_workloads(self, per_gpu: Mapping[str, Sequence[Mapping[str, str]]], at: datetime) -> int:
        """Replace the workloads (label sets) of these GPUs as seen at `at`; an empty list: none now."""
        return self._workloads.set_workloads(per_gpu, at)

    def workloads(self, uuids: Sequence[str]) -> dict[str, GpuWorkloads]:
        """The newest workloads of these GPUs (those ever reported) and when they were seen."""
        return self._workloads.workloads(uuids)

    # -- scores and decisions (store.decisions) ---------------------------------------------

    def write_scores(
        self,
        records: Sequence[ScoreRecord],
        scored_at: datetime,
        *,
        rule: DecisionRule,
        fence: RoundFence | None = None,
    ) -> list[Decision]:
        """Store one scoring round and move each GPU's decision as `rule` says; returns the decisions opened.

        With a `fence` (a replica's round), only the shards it still holds and nobody wrote in the round."""
        return self._decisions.write_scores(records, scored_at, rule=rule, fence=fence)

    def recent_rounds(
        self, uuids: Sequence[str], since: datetime, until: datetime, of: Sequence[str] = ("risk",)
    ) -> list[tuple[str, datetime, tuple[float | None, ...]]]:
        """(gpu_uuid, scored_at, values) of the GPUs' stored rounds in [since, until), oldest first: the
        round's `of` (its risk; `heat_z`, `heat_vs_node_z`: the core's heat it judged)."""
        return self._decisions.recent_rounds(uuids, since, until, of)

    def released_at(self, uuids: Sequence[str], now: datetime) -> dict[str, datetime]:
        """For the GPUs whose standing decision continues a drain or RMA: when it let them go."""
        return self._decisions.released_at(uuids, now)

    def demoted_since(self, uuids: Sequence[str]) -> dict[str, datetime]:
        """For the GPUs whose standing decision is a demote: when it was opened."""
        return self._decisions.demoted_since(uuids)

    def drained(self, uuids: Sequence[str]) -> set[str]:
        """The GPUs whose standing decision is a drain or RMA."""
        return set(self._decisions.standing_since(uuids, OUT_OF_SERVICE))

    def risk_history(
        self, uuid: str, *, since: datetime | None = None, until: datetime | None = None, limit: int = 1000
    ) -> list[ScorePoint]:
        """The GPU's newest `limit` scores in the window, oldest first; NotFound if unknown."""
        return self._decisions.risk_history(uuid, since=since, until=until, limit=limit)

    def decisions(
        self,
        *,
        decision: str | None = None,
        state: str | None = "open",
        hostname: str | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> tuple[list[Decision], int]:
        """Decisions, newest first, and how many match; state "active" means open or acknowledged."""
        return self._decisions.decisions(decision=decision, state=state, hostname=hostname, limit=limit, offset=offset)

    def ack_decision(self, decision_id: int, by: str, at: datetime) -> Decision:
        """Acknowledge a decision (idempotent: the first acknowledgement stays); closed ones refuse."""
        return self._decisions.ack_decision(decision_id, by, at)

    # -- failures and alerts (store.labels) -------------------------------------------------

    def add_failure(
        self,
        *,
        gpu_uuid: str,
        failed_at: datetime,
        mode: str,
        kind: str = "failure",
        hostname: str | None = None,
        xid: int | None = None,
        note: str | None = None,
        recorded_by: str | None = None,
    ) -> Failure:
        """Record a failure or RMA outcome (a training label); a GPU unknown here needs its hostname."""
        return self._labels.add_failure(
            gpu_uuid=gpu_uuid, failed_at=failed_at, mode=mode, kind=kind, hostname=hostname, xid=xid, note=note,
            recorded_by=recorded_by,
        )  # fmt: skip

    def failures(self, *, since: datetime | None = None, limit: int = 1000) -> list[Failure]:
        """Failure and RMA records, newest first."""
        return self._labels.failures(since=since, limit=limit)

    def failures_frame(self) -> pd.DataFrame:
        """All failure labels in the history format (gpu_uuid, failed_at, mode, hostname, xid) for training."""
        return self._labels.failures_frame()

    def add_alertmanager(self, payload: Mapping[str, Any], received_at: datetime) -> int:
        """Store an Alertmanager webhook (version 4) notification as it came (JSON); returns the alerts stored."""
        return self._labels.add_alertmanager(payload, received_at)

    def add_alerts(
        self,
        alerts: Sequence[AlertmanagerAlert],
        received_at: datetime,
        *,
        group_key: str | None = None,
        receiver: str | None = None,
    ) -> int:
        """Store the alerts of one Alertmanager notification; returns the alerts stored."""
        return self._labels.add_alerts(alerts, received_at, group_key=group_key, receiver=receiver)

    def alerts(
        self, *, status: str | None = None, gpu_uuid: str | None = None, limit: int = 100, offset: int = 0
    ) -> tuple[list[Alert], int]:
        """Stored alerts, most recently received first, and how many match."""
        return self._labels.alerts(status=status, gpu_uuid=gpu_uuid, limit=limit, offset=offset)

    # -- probe results (store.probes) -------------------------------------------------------

    def add_probe_results(self, results: Sequence[ProbeResultRow | Mapping[str, Any]]) -> int:
        """Store probe results: gpu_uuid, ran_at, test, status, value, unit, expected, ratio, duration_s, details."""
        return self._probes.add_probe_results(results)

    def probe_results(self, uuid: str, *, limit: int = 100) -> list[ProbeResult]:
        """A GPU's probe results, newest first; NotFound if the GPU is unknown."""
        return self._probes.probe_results(uuid, limit=limit)

    def recent_probe_results(self, since: datetime, until: datetime | None = None) -> list[ProbeResult]:
        """Every GPU's probe results that ran in [since, until], oldest first (for the scoring loop)."""
        return self._probes.recent_probe_results(since, until)

    # -- risk models (store.models) ---------------------------------------------------------

    def put_model(
        self,
        data: bytes,
        card: Mapping[str, Any],
        *,
        created_at: datetime | None = None,
        version: str | None = None,
    ) -> ModelInfo:
        """Store a model archive (skops bytes) and its JSON card, inactive; the same archive again is a no-op."""
        return self._models.put_model(data, card, created_at=created_at, version=version)

    def list_models(self, *, limit: int = 100) -> list[ModelInfo]:
        """Stored models without their archives, newest first."""
        return self._models.list_models(limit=limit)

    def model_info(self, version: str) -> ModelInfo:
        """One stored model without its archive; NotFound if unknown."""
        return self._models.model_info(version)

    def get_model(self, version: str) -> StoredModel:
        """One stored model with its archive; NotFound if unknown."""
        return self._models.get_model(version)

    def active_model_version(self) -> str | None:
        """The active stored model's version, or None (a one-row read for the scoring loop)."""
        return self._models.active_model_version()

    def active_model_info(self) -> ModelInfo | None:
        """The active stored model without its archive, or None."""
        return self._models.active_model_info()

    def active_model(self) -> StoredModel | None:
        """The active stored model with its archive, or None."""
        return self._models.active_model()

    def update_model_card(self, version: str, card: Mapping[str, Any]) -> ModelInfo:
        """Replace a stored model's card."""
        return self._models.update_model_card(version, card)

    def activate_model(self, version: str, at: datetime, card: Mapping[str, Any] | None = None) -> ModelInfo:
        """Make `version` the one active model (its card replaced when given); the others become inactive."""
        return self._models.activate_model(version, at, card)

    def prune_models(self, keep: int, *, dry_run: bool = False) -> list[ModelInfo]:
        """Delete all stored models but the `keep` newest and the active one; returns those deleted."""
        return self._models.prune_models(keep, dry_run=dry_run)

    # -- retention (store.retention) --------------------------------------------------------

    def prune(self, now: datetime, retention: timedelta) -> int:
        """Remove raw samples older than now - retention (PostgreSQL: whole days); returns the rows removed."""
        return self._pruner.prune_samples(now, retention)

    def apply_retention(self, now: datetime, retention: Retention) -> dict[str, int]:
        """Roll up and delete what each table keeps no longer (see `store.retention`); rows per kind."""
        return self._pruner.apply(now, retention)

    # -- replicas and shard leases (store.leases) -------------------------------------------

    def lease_tick(
        self,
        replica_id: str,
        lease: timedelta,
        *,
        shards: int = SHARDS,
        info: Mapping[str, Any] | None = None,
        now: datetime | None = None,
    ) -> LeaseTick:
        """Heartbeat, renew, give back what is over the fair share, claim free or expired shards (one transaction)."""
        return self._leases.tick(replica_id, lease, shards=shards, info=info, now=now)

    def release_leases(self, replica_id: str) -> int:
        """Give back every shard `replica_id` holds and forget the replica (clean shutdown); returns the shards."""
        return self._leases.release(replica_id)

    def leases(self) -> list[Lease]:
        """Every shard's lease: owner, expiry, the last round written."""
        return self._leases.leases()

    def replicas(self) -> list[ReplicaInfo]:
        """The replicas that heartbeated lately, by id."""
        return self._leases.replicas()
