"""How long each table keeps its rows, and the roll-up of risk scores into hours.

Raw samples roll into `samples_hourly` (see `Store.prune`), raw risk scores into
`risk_scores_hourly`; closed decisions, alerts and probe results are deleted when old;
hourly rows go after `hourly`. Failure and RMA records are never deleted: they are the
labels the next model learns from. Open decisions are never deleted either.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from datetime import timedelta
from typing import Any

import numpy as np
import pandas as pd

from store.errors import StoreError
from store.schema import DECISIONS

DAY = timedelta(days=1)


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


_SEVERITY = {d: i for i, d in enumerate(DECISIONS)}
RISKS = ("risk", "risk_ecc", "risk_thermal", "risk_pcie")


def rollup_scores(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """Hour rows from raw scores: the highest risk of each kind, the worst decision and its latest reasons."""
    df = pd.DataFrame(rows)
    df["hour"] = pd.to_datetime(df["scored_at"], utc=True).dt.floor("h")
    df["severity"] = df["decision"].map(_SEVERITY).astype(np.int64)
    df = df.sort_values(["gpu_uuid", "hour", "severity", "scored_at"], kind="stable")
    grouped = df.groupby(["gpu_uuid", "hour"], sort=True)
    worst = grouped.tail(1).set_index(["gpu_uuid", "hour"])  # highest severity, latest among those
    out = pd.concat(
        [grouped.size().rename("n"), grouped[list(RISKS)].max(), worst[["decision", "reasons"]]], axis=1
    ).reset_index()
    return out


def merge_score_hours(new: pd.DataFrame, old: pd.DataFrame) -> pd.DataFrame:
    """New hour rows merged with stored ones of the same (GPU, hour): counts add, maxima and the worse decision win."""
    if old.empty:
        return new
    both = pd.concat([old, new], ignore_index=True)
    both["severity"] = both["decision"].map(_SEVERITY).astype(np.int64)
    both = both.sort_values(["gpu_uuid", "hour", "severity"], kind="stable")  # new after old at equal severity
    grouped = both.groupby(["gpu_uuid", "hour"], sort=True)
    worst = grouped.tail(1).set_index(["gpu_uuid", "hour"])
    merged = pd.concat(
        [grouped["n"].sum(), grouped[list(RISKS)].max(), worst[["decision", "reasons"]]], axis=1
    ).reset_index()
    keys = new.set_index(["gpu_uuid", "hour"]).index
    return merged.set_index(["gpu_uuid", "hour"]).loc[keys].reset_index()
