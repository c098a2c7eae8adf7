"""How long each table keeps its rows, and applying that: roll-ups into hours, then deletes.

Raw samples roll into `samples_hourly` (`Pruner.prune_samples`), raw risk scores into
`risk_scores_hourly`; closed decisions, alerts and probe results are deleted when old;
hourly rows go after `hourly`. Failure and RMA records are never deleted: they are the
labels the next model learns from. Open decisions are never deleted either. The arithmetic
of the roll-ups is in `store.rollup`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pandas as pd
import sqlalchemy as sa
from sqlalchemy.engine import Connection

from store.engine import Database, quote
from store.errors import StoreError
from store.rollup import (
    RISKS,
    SAMPLE_HOUR_COLUMNS,
    merge_sample_hours,
    merge_score_hours,
    rollup_samples,
    rollup_scores,
)
from store.samples import fetch_block, metric_select, where_sql
from store.schema import (
    METRIC_COLUMNS,
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
"""Prune rolls up this many GPUs per transaction, so a first prune of a big database stays bounded."""


@dataclass(frozen=True)
class Retention:
    """How long rows are kept (GPUHEALTH_RETENTION, GPUHEALTH_*_RETENTION)."""

    samples: timedelta = 35 * DAY
    """Raw samples, then hourly roll-ups (35 d: the 30-day feature window and a margin)."""
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


def _from_us(us: int) -> datetime:
    """Microseconds since the epoch as an exact aware UTC datetime."""
    return datetime.fromtimestamp(us // 1_000_000, UTC).replace(microsecond=us % 1_000_000)


def _stored_sample_hours(db: Database, conn: Connection, new: pd.DataFrame, uuids: list[str]) -> pd.DataFrame:
    """The stored hour rows (SAMPLE_HOUR_COLUMNS) that `new` may have to be merged with."""
    lo = datetime.fromtimestamp(int(new["hour"].min()) / 1e6, UTC)
    hi = datetime.fromtimestamp(int(new["hour"].max()) / 1e6, UTC)
    sql, params = metric_select(db, "samples_hourly", "hour", ("n", db.ts_us("last_at")), lo, hi, uuids)
    u, ts, v = fetch_block(db, conn, sql, params, 2, stream=False)
    old = pd.DataFrame(v[:, 2:], columns=list(METRIC_COLUMNS))
    old.insert(0, "last_at", v[:, 1].astype(np.int64))
    old.insert(0, "n", v[:, 0].astype(np.int64))
    old.insert(0, "hour", ts)
    old.insert(0, "gpu_uuid", u)
    return old


def _write_sample_hours(db: Database, conn: Connection, hourly: pd.DataFrame) -> None:
    rows = []
    for rec in hourly.to_dict("records"):
        row: dict[str, Any] = {
            "gpu_uuid": rec["gpu_uuid"],
            "hour": datetime.fromtimestamp(int(rec["hour"]) / 1e6, UTC),
            "n": int(rec["n"]),
            "last_at": _from_us(int(rec["last_at"])),
        }
        for c in METRIC_COLUMNS:
            x = float(rec[c])
            row[c] = None if math.isnan(x) else x
        rows.append(row)
    ins = db.insert(samples_hourly)
    set_ = {c: ins.excluded[c] for c in SAMPLE_HOUR_COLUMNS[2:]}
    conn.execute(ins.on_conflict_do_update(index_elements=["gpu_uuid", "hour"], set_=set_), rows)


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
    """Applies a Retention: rolls old raw rows into hours and deletes what is kept no longer."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def prune_samples(self, now: datetime, retention: timedelta) -> tuple[int, int]:
        """Roll raw samples older than now - retention (whole hours) into samples_hourly and delete them.

        Returns (hour rows written, raw samples deleted). The rows rolled up are exactly those
        deleted (DELETE … RETURNING), so a sample ingested meanwhile is never lost; a late sample
        for an hour already rolled up is merged into it. Running it again changes nothing.
        """
        now = utc(now, "now")
        if not isinstance(retention, timedelta) or retention <= timedelta(0):
            raise StoreError(f"retention must be a positive timedelta, got {retention!r}")
        cutoff = (now - retention).replace(minute=0, second=0, microsecond=0)
        db = self.db
        rolled = deleted = 0
        cols = ", ".join(quote(c) for c in METRIC_COLUMNS)
        for part in self._gpu_batches(samples.c.gpu_uuid, samples.c.timestamp, cutoff):
            with db.tx(write=True) as conn:
                where, params = where_sql(db, "timestamp", None, cutoff, part, until_inclusive=False)
                sql = f"DELETE FROM samples{where} RETURNING gpu_uuid, {db.ts_us(quote('timestamp'))}, {cols}"
                u, ts, v = fetch_block(db, conn, sql, params, 0, stream=False)
                if not len(u):
                    continue
                hourly = rollup_samples(u, ts, v)
                hourly = merge_sample_hours(hourly, _stored_sample_hours(db, conn, hourly, part))
                _write_sample_hours(db, conn, hourly)
                rolled += len(hourly)
                deleted += len(u)
        return rolled, deleted

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
        out["sample_hours_written"], out["samples_rolled_up"] = self.prune_samples(now, retention.samples)
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
        }
        with self.db.tx(write=True) as conn:
            for kind, stmt in deletes.items():
                out[kind] = int(conn.execute(stmt).rowcount or 0)
        return out
