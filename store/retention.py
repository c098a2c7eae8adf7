"""How long each table keeps its rows, and applying that: roll-ups into hours, then deletes.

Raw samples are removed (`Pruner.prune_samples`: whole day partitions on PostgreSQL, see
`store.partitions`; their hours are written at ingest, `store.hours`), raw risk scores roll into
`risk_scores_hourly`; closed decisions, alerts, probe results and the actuator's audit are deleted when old;
hourly rows go after `hourly`. Failure and RMA records are never deleted: they are the
labels the next model learns from. Open decisions are never deleted either. The arithmetic
of the roll-ups is in `store.rollup`.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from datetime import datetime, timedelta
from typing import Any

import pandas as pd
import sqlalchemy as sa
from sqlalchemy.engine import Connection

from store.engine import Database
from store.errors import StoreError
from store.partitions import drop_before
from store.rollup import RISKS, merge_score_hours, rollup_scores
from store.schema import (
    T_ACTIONS,
    T_ALERTS,
    T_DECISIONS,
    T_PROBES,
    T_SCORES,
    T_SCORES_HOURLY,
    samples,
    samples_hourly,
)
from store.validate import utc

DAY = timedelta(days=1)
PRUNE_GPUS_PER_TX = 64
"""Prune handles this many GPUs per transaction, so a first prune of a big database stays bounded."""


@dataclass(frozen=True)
class Retention:
    """How long rows are kept (GPUHEALTH_RETENTION, GPUHEALTH_*_RETENTION)."""

    samples: timedelta = 35 * DAY
    """Raw samples (35 d: the 30-day feature window and a margin; their hours stay, made at ingest).
    PostgreSQL drops whole days, so it keeps up to a day more."""
    scores: timedelta = 7 * DAY
    """Raw risk scores (every round: 2.9 M rows a day at 10,000 GPUs every 5 minutes), then hourly."""
    hourly: timedelta = 400 * DAY
    """Hourly sample and risk roll-ups: over a year, for training from the fleet's own history."""
    decisions: timedelta = 365 * DAY
    """Closed decisions, from when they closed (the audit of what was decided and why)."""
    alerts: timedelta = 90 * DAY
    """Alerts received from Alertmanager, from when they were last received."""
    probes: timedelta = 90 * DAY
    """Probe results (the scorer reads the last 7 days)."""
    actions: timedelta = 365 * DAY
    """The actuator's audit: a year, as decisions (what the cluster was made to do, and why)."""

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if not isinstance(value, timedelta) or value <= timedelta(0):
                raise StoreError(f"{f.name} retention must be a positive timedelta, got {value!r}")
        if self.hourly < self.samples or self.hourly < self.scores:
            raise StoreError(
                f"hourly retention ({self.hourly}) must be at least the sample ({self.samples}) "
                f"and score ({self.scores}) retention: roll-ups would be deleted as they are made"
            )


def _score_hour_rows(conn: Connection, gone: list[dict[str, Any]], part: list[str]) -> list[dict[str, Any]]:
    """Hour rows for deleted raw scores, merged with the hours already stored for them."""
    h = T_SCORES_HOURLY.c
    kept = ("n", *RISKS, "decision", "reasons")
    hours = rollup_scores(gone)
    stored = conn.execute(
        sa.select(T_SCORES_HOURLY).where(
            h.gpu_uuid.in_(part), h.hour >= hours["hour"].min(), h.hour <= hours["hour"].max()
        )
    ).mappings().all()  # fmt: skip
    old = pd.DataFrame([dict(r) for r in stored], columns=["gpu_uuid", "hour", *kept])
    old["hour"] = pd.to_datetime(old["hour"], utc=True)
    merged = merge_score_hours(hours, old)
    return [
        {"gpu_uuid": r["gpu_uuid"], "hour": r["hour"].to_pydatetime(), "n": int(r["n"]),
         "decision": r["decision"], "reasons": list(r["reasons"] or []),
         **{c: None if pd.isna(r[c]) else float(r[c]) for c in RISKS}}
        for r in merged.to_dict("records")
    ]  # fmt: skip


class Pruner:
    """Applies a Retention: removes old raw samples, rolls old scores into hours, deletes what is kept no longer."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def prune_samples(self, now: datetime, retention: timedelta) -> int:
        """Remove the raw samples older than now - retention; returns how many rows went.

        Their hours are in samples_hourly already (written at ingest, `store.hours`), so this only
        removes. PostgreSQL drops every day partition that ends at or before the cutoff, its rows
        counted (count(*)) just before: the rest of the cutoff's own day stays until that whole day
        has passed, so up to a day more than the retention is kept. SQLite deletes the rows before
        the cutoff (whole hours), PRUNE_GPUS_PER_TX GPUs per transaction. Running it again changes
        nothing.
        """
        now = utc(now, "now")
        if not isinstance(retention, timedelta) or retention <= timedelta(0):
            raise StoreError(f"retention must be a positive timedelta, got {retention!r}")
        if self.db.dialect == "postgresql":
            return drop_before(self.db, now - retention)
        cutoff = (now - retention).replace(minute=0, second=0, microsecond=0)
        s = samples.c
        deleted = 0
        for part in self._gpu_batches(s.gpu_uuid, s.timestamp, cutoff):
            with self.db.tx(write=True) as conn:
                gone = conn.execute(sa.delete(samples).where(s.timestamp < cutoff, s.gpu_uuid.in_(part)))
                deleted += int(gone.rowcount or 0)
        return deleted

    def prune_scores(self, before: datetime) -> tuple[int, int]:
        """Roll raw scores older than `before` (whole hours) into risk_scores_hourly and delete them.

        Returns (hour rows written, scores deleted); as for samples, the rows rolled up are
        exactly those deleted, and an hour already rolled up is merged with, not replaced.
        """
        cutoff = before.replace(minute=0, second=0, microsecond=0)
        s = T_SCORES.c
        written = deleted = 0
        kept = ("n", *RISKS, "decision", "reasons")
        for part in self._gpu_batches(s.gpu_uuid, s.scored_at, cutoff):
            with self.db.tx(write=True) as conn:
                gone = conn.execute(
                    sa.delete(T_SCORES)
                    .where(s.scored_at < cutoff, s.gpu_uuid.in_(part))
                    .returning(s.gpu_uuid, s.scored_at, *(s[c] for c in RISKS), s.decision, s.reasons)
                ).mappings().all()  # fmt: skip
                if not gone:
                    continue
                rows = _score_hour_rows(conn, [dict(r) for r in gone], part)
                ins = self.db.insert(T_SCORES_HOURLY)
                conn.execute(
                    ins.on_conflict_do_update(
                        index_elements=["gpu_uuid", "hour"], set_={c: ins.excluded[c] for c in kept}
                    ),
                    rows,
                )
                written += len(rows)
                deleted += len(gone)
        return written, deleted

    def _gpu_batches(
        self, uuid_col: sa.ColumnElement[str], time_col: sa.ColumnElement[datetime], cutoff: datetime
    ) -> list[list[str]]:
        """The GPUs with rows before `cutoff`, in groups of PRUNE_GPUS_PER_TX (one transaction each, so a
        first prune of a big database stays bounded)."""
        with self.db.tx() as conn:
            gpus = [r[0] for r in conn.execute(sa.select(uuid_col).where(time_col < cutoff).distinct())]
        return [gpus[i : i + PRUNE_GPUS_PER_TX] for i in range(0, len(gpus), PRUNE_GPUS_PER_TX)]

    def apply(self, now: datetime, retention: Retention) -> dict[str, int]:
        """Roll up and delete what each table keeps no longer; rows per kind.

        Idempotent: a second run at the same `now` changes nothing. Failures and open
        decisions are never deleted.
        """
        now = utc(now, "now")
        out: dict[str, int] = {}
        out["samples_deleted"] = self.prune_samples(now, retention.samples)
        out["score_hours_written"], out["scores_rolled_up"] = self.prune_scores(now - retention.scores)
        d, a, p = T_DECISIONS.c, T_ALERTS.c, T_PROBES.c
        deletes = {
            "sample_hours_deleted": sa.delete(samples_hourly).where(samples_hourly.c.hour < now - retention.hourly),
            "score_hours_deleted": sa.delete(T_SCORES_HOURLY).where(T_SCORES_HOURLY.c.hour < now - retention.hourly),
            "decisions_deleted": sa.delete(T_DECISIONS).where(
                d.state == "closed", d.closed_at < now - retention.decisions
            ),
            "alerts_deleted": sa.delete(T_ALERTS).where(a.received_at < now - retention.alerts),
            "probes_deleted": sa.delete(T_PROBES).where(p.ran_at < now - retention.probes),
            "actions_deleted": sa.delete(T_ACTIONS).where(T_ACTIONS.c.at < now - retention.actions),
        }
        with self.db.tx(write=True) as conn:
            for kind, stmt in deletes.items():
                out[kind] = int(conn.execute(stmt).rowcount or 0)
        return out
