"""Probe results as predictor inputs: GPUs slower than their same-model peers (issue 7).

A GPU whose GEMM TFLOP/s is more than 10 % below the median of its same-model peers is
"slow": one such GPU stalls every synchronous step of a training job. The rule itself is
core.probes; the collector applies it to its latest results for `gpuhealth_probe_slow`,
this module to stored results, for the scoring loop's features and `watch` reasons.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from core.probes import MIN_PEERS, SLOW_THRESHOLD, compare_to_peers, is_slow

MAX_AGE = pd.Timedelta(days=7)
"""Older GEMM results do not count: a GPU probed a week ago says little about today."""

COLUMNS = ["gpu_uuid", "model_name", "value", "peer_median", "peers", "ratio_to_peers", "slow", "reason"]


def _model_names(results: pd.DataFrame) -> pd.Series:
    if "model_name" in results.columns:
        return results["model_name"].astype("string")
    details = results["details"] if "details" in results.columns else pd.Series([None] * len(results))

    def name(d: Any) -> str | None:
        return d.get("model_name") if isinstance(d, Mapping) else None

    return pd.Series([name(d) for d in details], index=results.index, dtype="string")


def slow_gpus(
    results: pd.DataFrame,
    *,
    at: pd.Timestamp | None = None,
    test: str = "gemm",
    threshold: float = SLOW_THRESHOLD,
    min_peers: int = MIN_PEERS,
    max_age: pd.Timedelta | None = MAX_AGE,
) -> pd.DataFrame:
    """Per GPU with a usable latest `test` result: its ratio to the median of its same-model
    peers (the other GPUs), whether that is more than `threshold` below 1, and a reason.

    `results` holds probe results as Store rows: gpu_uuid, ran_at, test, status, value, and
    model_name as a column or inside `details` (the collector puts it there). Only results
    up to `at` (default: all) and no older than `max_age` before it count; GPUs with fewer
    than `min_peers` peers get ratio NaN and slow False.
    """
    empty = pd.DataFrame({c: pd.Series(dtype=t) for c, t in zip(COLUMNS, [
        "string", "string", "float64", "float64", "int64", "float64", "bool", "string"], strict=True)})  # fmt: skip
    if results.empty:
        return empty
    df = results.loc[results["test"] == test].copy()
    df["model_name"] = _model_names(df)
    df["ran_at"] = pd.to_datetime(df["ran_at"], utc=True)
    df = df.loc[df["status"].isin(["pass", "fail"]) & df["value"].notna() & df["model_name"].notna()]
    if at is not None:
        at = pd.Timestamp(at)
        at = at.tz_localize("UTC") if at.tzinfo is None else at
        df = df.loc[df["ran_at"] <= at]
    if df.empty:
        return empty
    if max_age is not None:
        df = df.loc[df["ran_at"] >= (at if at is not None else df["ran_at"].max()) - max_age]
    latest = df.sort_values("ran_at").groupby("gpu_uuid", sort=True).tail(1)
    rows = []
    for model, group in latest.groupby("model_name", sort=True):
        values = group.set_index("gpu_uuid")["value"].astype(float).to_dict()
        for uuid, c in compare_to_peers(values, min_peers).items():
            ratio = float("nan") if c.ratio is None else c.ratio
            slow = is_slow(c.ratio, threshold)
            reason = (
                f"GEMM {c.value:.0f} TFLOP/s is {1 - ratio:.0%} below the median of {c.peers} same-model peers "
                f"({c.peer_median:.0f} TFLOP/s)"
                if slow
                else ""
            )
            rows.append([uuid, model, c.value, float(c.peer_median), c.peers, ratio, slow, reason])
    out = pd.DataFrame(rows, columns=COLUMNS)
    return out.astype({"gpu_uuid": "string", "model_name": "string", "reason": "string", "slow": "bool"})


def probe_features(results: pd.DataFrame, *, at: pd.Timestamp | None = None) -> pd.DataFrame:
    """Per GPU: `probe_gemm_ratio_to_peers`, `probe_slow` (0/1) and `probe_memtest_errors`
    (bit errors in its latest memtest), for joining onto the scoring features by gpu_uuid."""
    slow = slow_gpus(results, at=at)
    feats = slow[["gpu_uuid", "ratio_to_peers", "slow"]].rename(
        columns={"ratio_to_peers": "probe_gemm_ratio_to_peers", "slow": "probe_slow"}
    )
    feats["probe_slow"] = feats["probe_slow"].astype(float)
    mem = results.loc[(results["test"] == "memtest") & results["value"].notna()] if not results.empty else results
    if at is not None and not mem.empty:
        at = pd.Timestamp(at)
        mem = mem.loc[pd.to_datetime(mem["ran_at"], utc=True) <= (at.tz_localize("UTC") if at.tzinfo is None else at)]
    if not mem.empty:
        last = (
            mem.assign(ran_at=pd.to_datetime(mem["ran_at"], utc=True)).sort_values("ran_at").groupby("gpu_uuid").tail(1)
        )
        errs = last[["gpu_uuid", "value"]].rename(columns={"value": "probe_memtest_errors"})
        errs["gpu_uuid"] = errs["gpu_uuid"].astype("string")
        feats = feats.merge(errs, on="gpu_uuid", how="outer")
    else:
        feats["probe_memtest_errors"] = pd.Series(dtype="float64")
    return feats.reset_index(drop=True)
