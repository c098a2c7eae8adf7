"""Roll-ups into hours, as pure table arithmetic (no database): raw samples and raw risk scores.

Sample hours are made at ingest (`store.hours`, with `core.hourly`'s arithmetic, the same
the features use); score hours by the retention (`store.retention`). A later roll-up of the
same hour (a late sample or score) is merged with the stored one, never replaces it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from core import hourly
from core.decisions import DECISIONS
from store.schema import METRIC_COLUMNS

_SEVERITY = {d: i for i, d in enumerate(DECISIONS)}
RISKS = ("risk", "risk_ecc", "risk_thermal", "risk_pcie")
HOUR_VALUES = (*METRIC_COLUMNS, hourly.SHARE)
"""What an hour row holds besides its key: the metrics and the share of samples thermally throttled."""
SAMPLE_HOUR_COLUMNS = ("gpu_uuid", "hour", "n", "last_at", *HOUR_VALUES)
"""A sample hour row: GPU, hour (the start of (hour, hour + 1 h]) and newest sample (µs since the
epoch), count, then the values."""


def rollup_samples(u: np.ndarray, ts: np.ndarray, v: np.ndarray | pd.DataFrame) -> pd.DataFrame:
    """Hour rows (SAMPLE_HOUR_COLUMNS and the `<gauge>__n` weights) from raw samples: uuids, µs, and
    metric values (an array in METRIC_COLUMNS order, or a frame of some of them; the others are
    NaN); the arithmetic is `core.hourly.rollup`."""
    values = v if isinstance(v, pd.DataFrame) else pd.DataFrame(v, columns=list(METRIC_COLUMNS))
    out = hourly.rollup(u, ts, values)
    for c in HOUR_VALUES:
        if c not in out.columns:
            out[c] = np.nan
        if hourly.how(c) == "mean" and f"{c}__n" not in out.columns:
            out[f"{c}__n"] = 0
    return out


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
    for c in HOUR_VALUES:
        a, b = m[c].to_numpy(np.float64), m[f"{c}_old"].to_numpy(np.float64)
        if hourly.how(c) == "code":  # the newer part's code if it saw one, else the older part's
            a0, b0 = np.where(a == 0, np.nan, a), np.where(b == 0, np.nan, b)
            merged = np.where(newer, np.where(np.isnan(a0), b, a), np.where(np.isnan(b0), a, b))
        elif hourly.how(c) == "mean":
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
