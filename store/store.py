"""The store: telemetry, scores, decisions, labels, alerts and probe results in SQLite or PostgreSQL.

`Store` is the one object the rest of gpuhealth holds. It hands out its parts, each owning one
responsibility (`store.decisions.find(...)`, `store.samples.ingest(...)`), and keeps only what spans
them: opening and upgrading the database, its health and row counts, closing it. Every part works
through one `Database` (`store.engine`). One Engine per store; every call takes its own connection
and transaction, so the scoring loop, the ingest thread and API workers can share it.

| attribute | part | module | owns |
|---|---|---|---|
| | `Database` | `store.engine` | URL, engine, transactions, errors, dialect SQL, migrations |
| `samples` | `Samples` | `store.samples` | ingest, history frames |
| `gpus` | `Gpus` | `store.gpus` | GPUs and nodes, the GPU listing and detail, latest samples |
| `decisions` | `Decisions` | `store.decisions` | scoring rounds, the decision lifecycle, risk history |
| `labels` | `Labels` | `store.labels` | failure and RMA records, Alertmanager alerts |
| `probes` | `Probes` | `store.probes` | probe results |
| `models` | `Models` | `store.models` | stored risk models, their cards, the active one |
| `pruner` | `Pruner` | `store.retention` | roll-ups and deletes of old rows |
| `leases` | `Leases` | `store.leases` | replicas' heartbeats and their leases on shards of the fleet |
| `workloads` | `Workloads` | `store.workloads` | the pods and jobs on each GPU now, as the collector last saw them |
| `actuation` | `Actuation` | `store.actuation` | the actuator's audit, holds, settle clocks, breaker |
| `remediations` | `Remediations` | `store.remediations` | each GPU's way back: drain, remedy, verify, return or RMA |
"""

from __future__ import annotations

from datetime import timedelta

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from core.decisions import DECISIONS
from store.actuation import Actuation
from store.decisions import Decisions
from store.engine import Database, not_closed
from store.gpus import Gpus
from store.labels import Labels
from store.leases import Leases
from store.models import Models
from store.probes import Probes
from store.remediations import Remediations
from store.retention import Pruner
from store.samples import Samples
from store.schema import T_ALERTS, T_DECISIONS, T_FAILURES, T_GPUS, T_NODES, T_PROBES, T_SCORES
from store.schema import samples as t_samples
from store.schema import samples_hourly as t_samples_hourly
from store.workloads import Workloads

CLOCK_SKEW = timedelta(minutes=5)
"""How far a sample may be dated past the caller's clock before `samples.ingest(not_after=now + CLOCK_SKEW)`
refuses it as from the future."""


class Store:
    """Telemetry, risk scores, decisions, failure labels, alerts and probe results (SQLite or PostgreSQL)."""

    def __init__(self, url: str) -> None:
        """Create the engine (no connection yet); most callers want `Store.open`."""
        self._db = Database(url)
        self.url = self._db.url
        self.dialect = self._db.dialect
        self.samples = Samples(self._db)
        """Telemetry: ingest and history frames."""
        self.gpus = Gpus(self._db)
        """GPUs and nodes with their latest score and decision."""
        self.decisions = Decisions(self._db)
        """Scoring rounds, the decision lifecycle, risk history."""
        self.labels = Labels(self._db)
        """Failure and RMA records (training labels), Alertmanager alerts."""
        self.probes = Probes(self._db)
        """Probe results."""
        self.models = Models(self._db)
        """Stored risk models, their cards, the active one."""
        self.pruner = Pruner(self._db)
        """Roll-ups and deletes of what the retention keeps no longer."""
        self.leases = Leases(self._db)
        """Replicas' heartbeats and their leases on shards of the fleet."""
        self.workloads = Workloads(self._db)
        """The pods and jobs on each GPU now."""
        self.actuation = Actuation(self._db)
        """The actuator's audit, holds, settle clocks and breaker."""
        self.remediations = Remediations(self._db)
        """Each GPU's way back: drain, remedy, verify, then returned, rma or cancelled."""

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
