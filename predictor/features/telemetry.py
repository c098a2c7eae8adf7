"""Telemetry features: temperatures, power, clock throttling, peers, and how the GPU reports.

Each function is a feature family (`features.SPECS` names it for its features): it gets
the shared `FeatureContext` and returns its columns, leaving out those it has no data for.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from core.hourly import SHARE
from predictor.features.context import NODE_MIN_GPUS, Columns, FeatureContext, family
from predictor.features.windows import DAY, MONTH, WEEK, Sums


@family("gpu_temp_c", "memory_temp_c")
def thermal(ctx: FeatureContext) -> Columns:
    """Core and memory temperature in °C: means and against the GPU's own past (context for
    people; the heads see heat in the GPU's own σ, `features.heat`)."""
    f = ctx.f
    temp = f.col("gpu_temp_c", native=True)
    run_t = None if temp is None or f.nan_state("gpu_temp_c")[0] else Sums(temp)
    t1, t7, t30 = ctx.window_means(run_t or temp, DAY, WEEK, MONTH)
    del run_t
    out = {"temp_mean_1d": t1, "temp_vs_own_30d": t1 - t30, "temp_trend_7d": t1 - t7}
    return out | _memory_temperature(ctx, temp)


def _memory_temperature(ctx: FeatureContext, temp: np.ndarray | None) -> Columns:
    """Memory temperature, and its spread over the core's against the GPU's own 30 days."""
    mem = ctx.f.col("memory_temp_c", native=True)
    (m1,) = ctx.window_means(mem, DAY)
    out = {"memtemp_mean_1d": m1}
    if temp is not None and mem is not None:
        spread = np.subtract(mem, temp, dtype=np.float64)
        s1, s30 = ctx.window_means(spread, DAY, MONTH, owned=True)
        del spread
        out["mem_minus_core_1d"] = s1
        out["mem_minus_core_vs_own"] = s1 - s30
    return out


@family("clocks_event_reasons")
def throttle_shares(ctx: FeatureContext) -> Columns:
    """Share of samples whose clocks were held back for heat, over 1 and 7 days: the mean of the
    hours' shares (`core.hourly.SHARE`, made from the bitmask), whatever the sampling interval."""
    if SHARE not in ctx.f.columns:
        return {}
    day, week, month = ctx.window_means(None, DAY, WEEK, MONTH, name=SHARE)
    # How much more than usual, for this GPU and for its node: a GPU in a hot aisle throttles
    # every afternoon, healthy, and a node-wide heat episode throttles all its GPUs together.
    ident = ctx.ident
    node = pd.Series(day).groupby([ident["cutoff"], ident["hostname"]])
    node_med = np.where(node.transform("count").to_numpy() >= NODE_MIN_GPUS, node.transform("median").to_numpy(), 0.0)
    return {
        "throttle_share_1d": day,
        "throttle_share_7d": week,
        "throttle_new_1d": np.maximum(day - np.fmax(month, node_med), 0.0),
    }


@family("thermal_violation_us", "power_violation_us")
def violations(ctx: FeatureContext) -> Columns:
    """Share of the last day the driver held the clocks back for heat or for power."""
    out: Columns = {}
    for name, feat in (("thermal_violation_us", "thermal_violation_share_1d"),
                       ("power_violation_us", "power_violation_share_1d")):  # fmt: skip
        viol = ctx.counter(name, windows=(DAY,))
        if viol is not None:
            out |= ctx.unknown_where_missing(viol, {feat: viol.sum(DAY) / (ctx.days(DAY) * DAY * 1e6)})
        del viol
    return out


@family("power_w", "gpu_util_pct")
def power_use(ctx: FeatureContext) -> Columns:
    """Mean power and utilisation over the last day."""
    (power,) = ctx.window_means(None, DAY, name="power_w")
    (util,) = ctx.window_means(None, DAY, name="gpu_util_pct")
    return {"power_mean_1d": power, "util_mean_1d": util}


@family()
def peers(ctx: FeatureContext) -> Columns:
    """Temperature and power against same-model GPUs and the node's GPUs at the same cutoff."""
    ident = ctx.ident
    by_model = [ident["cutoff"], ident["model_name"]]
    t = pd.Series(ctx.feature("temp_mean_1d"))
    # Power against peers at a similar load: residual of power after the peers' load slope.
    p, u = pd.Series(ctx.feature("power_mean_1d")), pd.Series(ctx.feature("util_mean_1d"))
    load_bin = (u // 20).fillna(-1)
    return {
        "temp_vs_peers_1d": (t - t.groupby(by_model).transform("median")).to_numpy(),
        "temp_vs_node_1d": (t - t.groupby([ident["cutoff"], ident["hostname"]]).transform("median")).to_numpy(),
        "power_vs_peers_1d": (p - p.groupby([*by_model, load_bin]).transform("median")).to_numpy(),
    }


@family()
def reporting(ctx: FeatureContext) -> Columns:
    """How densely the GPU reported over the last day, and how long it has reported."""
    q = ctx.q
    # Coverage against the GPU's own mean sampling interval over the week before (no look-ahead).
    n7 = q.window_count(None, WEEK)
    with np.errstate(invalid="ignore", divide="ignore"):
        interval_s = q.covered_s(WEEK) / np.maximum(n7 - 1, 1)
        expected = q.covered_s(DAY) / interval_s
        coverage = np.where(n7 > 1, np.minimum(q.window_count(None, DAY) / expected, 1.0), np.nan)
    return {"coverage_1d": coverage, "age_days": (q.c - ctx.f.first_t[q.gpu_pos]) / DAY}
