"""Roll-ups into hours, as pure table arithmetic (no database): raw samples and raw risk scores.

`store.retention` deletes old rows and writes what these functions make of them; a later
roll-up of the same hour (a late sample or score) is merged with the stored one, never
replaces it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from core import catalog
from store.schema import DECISIONS, METRIC_COLUMNS

_SEVERITY = {d: i for i, d in enumerate(DECISIONS)}
RISKS = ("risk", "risk_ecc", "risk_thermal", "risk_pcie")
HOUR_US = 3_600_000_000
_GAUGES = frozenset(c for c in METRIC_COLUMNS if catalog.BY_NAME[c].kind == "gauge")
SAMPLE_HOUR_COLUMNS = ("gpu_uuid", "hour", "n", "last_at", *METRIC_COLUMNS)
"""A sample hour row: GPU, hour and newest sample (µs since the epoch), count, then the metrics."""


def rollup_samples(u: np.ndarray, ts: np.ndarray, v: np.ndarray) -> pd.DataFrame:
    """Hour rows from raw samples (uuids, µs, metric values): gauges averaged, counters the last value
    seen, xid the largest code; `<gauge>__n` columns count each gauge's values (weights for a merge)."""
    hour = ts - ts % HOUR_US
    df = pd.DataFrame(v, columns=list(METRIC_COLUMNS))
    df.insert(0, "ts", ts)
    df.insert(0, "hour", hour)
    df.insert(0, "gpu_uuid", u)
    df = df.sort_values(["gpu_uuid", "ts"], kind="stable")
    grouped = df.groupby(["gpu_uuid", "hour"], sort=True)
    gauges = [c for c in METRIC_COLUMNS if c in _GAUGES and c != "xid"]
    counters = [c for c in METRIC_COLUMNS if c not in _GAUGES]
    out = pd.concat(
        [
            grouped.size().rename("n"),
            grouped["ts"].max().rename("last_at"),
            grouped[gauges].mean(),
            grouped[counters].last(),  # last non-null: the counter's value at the end of the hour
            grouped[["xid"]].max(),
            grouped[gauges].count().add_suffix("__n"),  # per-column weights for a later merge
        ],
        axis=1,
    ).reset_index()
    return out[[*SAMPLE_HOUR_COLUMNS, *(f"{c}__n" for c in gauges)]]


def merge_sample_hours(new: pd.DataFrame, old: pd.DataFrame) -> pd.DataFrame:
    """New hour rows combined with stored ones (SAMPLE_HOUR_COLUMNS) of the same (GPU, hour): a late sample's hour."""
    if old.empty:
        return new
    m = new.merge(old, on=["gpu_uuid", "hour"], how="left", suffixes=("", "_old"), indicator=True)
    both = (m["_merge"] == "both").to_numpy()
    if not both.any():
        return new
    n_new, n_old = m["n"].to_numpy(np.float64), m["n_old"].to_numpy(np.float64)
    newer = m["last_at"].to_numpy() >= m["last_at_old"].to_numpy(np.float64, na_value=-np.inf)
    out = m[["gpu_uuid", "hour"]].copy()
    for c in METRIC_COLUMNS:
        a, b = m[c].to_numpy(np.float64), m[f"{c}_old"].to_numpy(np.float64)
        if c == "xid":
            merged = np.fmax(a, b)
        elif c in _GAUGES:
            # Mean of the two parts weighted by their sample counts: exact for the new part (its
            # non-null count is known); the stored hour keeps only its row count n, so a stored
            # hour with gaps in this column is weighted a little too much.
            w = m[f"{c}__n"].to_numpy(np.float64)
            merged = np.where(np.isnan(a), b, np.where(np.isnan(b), a, (a * w + b * n_old) / (w + n_old)))
        else:  # the counter value of whichever part reaches later into the hour
            merged = np.where(newer, np.where(np.isnan(a), b, a), np.where(np.isnan(b), a, b))
        out[c] = np.where(both, merged, a)
    out["n"] = np.where(both, n_new + n_old, n_new).astype(np.int64)
    last_old = m["last_at_old"].to_numpy(np.float64)
    out["last_at"] = np.where(both, np.fmax(m["last_at"].to_numpy(np.float64), last_old), m["last_at"])
    out["last_at"] = out["last_at"].astype(np.int64)
    return out[list(SAMPLE_HOUR_COLUMNS)]


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
