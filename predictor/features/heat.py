"""Heat in units that mean the same on any fleet: the GPU's own variability, and its node.

A raw "0.9 °C above its own 30 days" means nothing without knowing how much this GPU's
temperature usually wanders (sensor noise, load, the room's daily swing): on a quiet
fleet it is a lot, on a noisy one nothing. So the excess temperature (beyond what the
GPU's power explains) is divided by its own standard deviation over the baseline, the
30 days before the last day. And a node-wide heat episode (fans, a rack door, the air
handler) lifts every GPU of the node together; a failing heat sink lifts one. So each
GPU's excess is also measured against the median of its node's GPUs at the same cutoff:
the heads see how far a GPU stands out from its node, and the node's own excess is a
node finding (`predictor.node`), not a reason to demote its GPUs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import special

from predictor.features.context import NODE_MIN_GPUS, Columns, FeatureContext, family, mean, tail_as_z
from predictor.features.frame import KEY_SHIFT, OrderedFrame
from predictor.features.medians import group_medians
from predictor.features.windows import DAY, HOUR, MONTH, Queries, Sums, WindowRows

SD_FLOOR_C = 0.5
"""The least spread a temperature series is credited with (°C): readings are whole degrees."""
HOT_Z = 2.0
"""A GPU with its excess at least this many of its own σ counts as hot for its node."""
MIN_AGE_S = 4 * DAY
"""A GPU younger than this at the cutoff has no heat z-scores (NaN): a baseline of a few hours
(a GPU just replaced) has no idea how much its temperature wanders."""
MEM_SPREAD_WINDOW_S = 6 * HOUR
"""The recent window of the memory-core spread (`_memory_spread`)."""
MIN_PEER_SLOPES = 3
"""Peers (same model, same cutoff) with a slope of their own needed to measure how much slopes spread."""


def _present(q: Queries, gaps: np.ndarray, w: int) -> np.ndarray:
    """Samples with a value in each query's window: all of them less the gaps (sorted positions)."""
    return q.window_count(None, w) - (q.window_count(gaps, w) if len(gaps) else 0.0)


def _excess(
    recent: np.ndarray, base_n: np.ndarray, base_s: np.ndarray, base_ss: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(recent - baseline mean, baseline σ floored): both NaN without a baseline of 2+ samples."""
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = base_s / base_n
        var = (base_ss - base_s * mean) / (base_n - 1)
        sd = np.maximum(np.sqrt(np.maximum(var, 0.0)), SD_FLOOR_C)
        ok = base_n > 1
        return np.where(ok, recent - mean, np.nan), np.where(ok, sd, np.nan)


@dataclass
class _Residuals:
    """Window sums of r = y - k·power per query, and how far the slope k may be off.

    `moments[w]` is (n, Σr, Σr²) over the window w before the cutoff; `power[w]` the mean power
    there. `k_sd` is the slope's uncertainty: a residual measured at a load far from the
    baseline's is an extrapolation, off by about k_sd x the difference in power.
    """

    moments: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]]
    power: dict[int, np.ndarray]
    base_power: np.ndarray
    k_sd: np.ndarray
    days: np.ndarray
    """Independent samples the baseline holds: one per day of it (1 to 29)."""

    def excess(self, w: int) -> tuple[np.ndarray, np.ndarray]:
        """(the window's mean residual above the baseline's, its σ): the baseline's own σ and
        the extrapolation's, added in quadrature. NaN without a baseline."""
        base = _minus(self.moments[MONTH], self.moments[DAY])
        n, s1, _ = self.moments[w]
        e, sd = _excess(mean(s1, n), *base)
        extrapolation = self.k_sd * np.abs(self.power[w] - self.base_power)
        return e, np.sqrt(sd * sd + np.nan_to_num(extrapolation) ** 2)

    def own_z(self, e: np.ndarray, sd: np.ndarray) -> np.ndarray:
        """The excess in the GPU's own σ, as the normal z-score that is as rare (`as_rare`)."""
        with np.errstate(invalid="ignore", divide="ignore"):
            return as_rare(e / sd, self.days)


def as_rare(z: np.ndarray, days: np.ndarray) -> np.ndarray:
    """A z-score against a baseline of `days` independent samples, as the normal z-score that is as rare.

    The baseline's mean and σ are estimates, and from a week of days they are rough: a new
    reading is then Student-t distributed, t = z / sqrt(1 + 1/n) with n - 1 degrees of freedom
    (the prediction interval). So a GPU installed last week must run hotter to be as unusual
    as one with a month behind it: 3 σ over 7 days is as rare as 2.2 σ is, over 29 days as
    2.7 σ. One sample a day, as for the slope: air and load change over hours.
    """
    n = np.maximum(days, 2.0)
    with np.errstate(invalid="ignore"):
        t = np.abs(z) / np.sqrt(1.0 + 1.0 / n)
        return np.where(np.isnan(z), np.nan, np.copysign(tail_as_z(special.stdtr(n - 1.0, -t)), z))


def _residuals(
    ctx: FeatureContext, y: np.ndarray, windows: tuple[int, ...] = (MONTH, DAY, 6 * HOUR), owned: bool = False
) -> _Residuals | None:
    """`_Residuals` of y on power, k fitted per GPU over its baseline (its model's pooled slope
    where its load barely varied). None without a power column. `owned`: y (float64) may be
    overwritten."""
    f, q = ctx.f, ctx.q
    power = f.col("power_w", native=True)
    if power is None:
        return None
    raw = _moments(q, y, power, windows, owned)
    # Degrees per watt of each GPU over its baseline (heat sinks differ), its model's pooled
    # slope where its load did not vary enough to fit one.
    bn, bs = raw[MONTH][0] - raw[DAY][0], {k: raw[MONTH][1][k] - raw[DAY][1][k] for k in raw[MONTH][1]}
    baseline_days = np.clip((q.c - f.first_t[q.gpu_pos]) / DAY - 1.0, 1.0, (MONTH - DAY) / DAY)
    k, k_sd = _slope(f, q, bn, bs, baseline_days)
    moments = {}
    for w, (n, s) in raw.items():
        sr = s["t"] - k * s["p"]
        srr = s["tt"] - 2 * k * s["tp"] + k * k * s["pp"]
        moments[w] = (n, sr, srr)
    power_means = {w: mean(s["p"], n) for w, (n, s) in raw.items()}
    return _Residuals(moments, power_means, mean(bs["p"], bn), k_sd, baseline_days)


def _moments(
    q: Queries, y: np.ndarray, power: np.ndarray, windows: tuple[int, ...], owned: bool
) -> dict[int, tuple[np.ndarray, dict[str, np.ndarray]]]:
    """Per window: samples with both values, and the window sums of t, p, t², p² and tp (t = y,
    p = power; a row lacking either counts 0 in every sum). Each product is made in one shared
    buffer and summed over every window before the next: a month of 10,000 GPUs is 7 M rows,
    and each array of them costs its allocation as much as its arithmetic."""
    missing = np.isnan(y)
    missing |= np.isnan(power)
    gaps = np.flatnonzero(missing)
    del missing
    t = y if owned and y.dtype == np.float64 else y.astype(np.float64)
    p = power.astype(np.float64)
    t[gaps] = 0.0
    p[gaps] = 0.0
    raw: dict[int, tuple[np.ndarray, dict[str, np.ndarray]]] = {w: (_present(q, gaps, w), {}) for w in windows}
    buf = np.empty_like(t)
    for name, a, b in (("t", t, None), ("p", p, None), ("tt", t, t), ("pp", p, p), ("tp", t, p)):
        sums = Sums(a if b is None else np.multiply(a, b, out=buf))
        for w in windows:
            raw[w][1][name] = q.window_sum(sums, w)
    return raw


MIN_LOAD_SD_W = 20.0
"""A GPU whose power varied less than this over its baseline (W, σ) gets its model's pooled slope."""
POOLED_SLOPE_SD = 0.1
"""The pooled slope's uncertainty as a share of it, where too few peers have a slope of their own
to measure how much heat sinks differ (they differ by a few to ten per cent)."""


def _slope(
    f: OrderedFrame, q: Queries, n: np.ndarray, s: dict[str, np.ndarray], baseline_days: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Least-squares slope of y on power per GPU over the baseline, and its uncertainty.

    Where the GPU's power barely varied (< MIN_LOAD_SD_W σ), the slope pooled over its model's
    GPUs at the cutoff, uncertain by how much its peers' own slopes spread (robust σ). An own
    slope is uncertain by its standard error, counting one independent sample per baseline day:
    load and air change over hours, so samples minutes apart are not independent.
    """
    with np.errstate(invalid="ignore", divide="ignore"):
        sxy = np.where(n > 1, s["tp"] - s["p"] * s["t"] / n, 0.0)
        sxx = np.where(n > 1, s["pp"] - s["p"] * s["p"] / n, 0.0)
        syy = np.where(n > 1, s["tt"] - s["t"] * s["t"] / n, 0.0)
        own = sxy / sxx
        varied = (sxx > np.maximum(n - 1, 1) * MIN_LOAD_SD_W**2) & np.isfinite(own)
        # σ of the fit's residuals, and the slope's standard error with one sample a day.
        res_var = np.maximum(syy - own * sxy, 0.0) / np.maximum(n - 2, 1)
        own_se = np.sqrt(res_var / (sxx / np.maximum(n, 1)) / baseline_days)
    model_code = f.frame["model_name"].astype("category").cat.codes.to_numpy()
    rows = q.end_row if f.identity else f.order[q.end_row]
    key = pd.DataFrame({"c": q.c, "m": model_code[rows], "sxy": sxy, "sxx": sxx, "own": np.where(varied, own, np.nan)})
    groups = key.groupby(["c", "m"])
    pooled = groups[["sxy", "sxx"]].transform("sum")
    dev = (key["own"] - groups["own"].transform("median")).abs()
    peers = groups["own"].transform("count").to_numpy()
    spread = 1.4826 * dev.groupby([key["c"], key["m"]]).transform("median").to_numpy()
    with np.errstate(invalid="ignore", divide="ignore"):
        pool = np.where(pooled["sxx"] > 1.0, pooled["sxy"] / pooled["sxx"], 0.0)
    pool_sd = np.where(peers >= MIN_PEER_SLOPES, spread, POOLED_SLOPE_SD * np.abs(pool))
    k = np.where(varied, own, pool)
    k_sd = np.where(varied, own_se, pool_sd)
    return np.asarray(k, dtype=float), np.asarray(np.nan_to_num(k_sd), dtype=float)


def _minus(a: tuple[np.ndarray, ...], b: tuple[np.ndarray, ...]) -> tuple[np.ndarray, ...]:
    """Window sums of (cutoff - 30 d, cutoff - 1 d]: the baseline, without the recent day."""
    return tuple(x - y for x, y in zip(a, b, strict=True))


@family("gpu_temp_c", "power_w", heavy=True)
def heat(ctx: FeatureContext) -> Columns:
    """Excess temperature in units of the GPU's own σ, and against its node."""
    temp = ctx.f.col("gpu_temp_c", native=True)
    res = None if temp is None else _residuals(ctx, temp)
    if res is None or temp is None:
        return {}
    young = _young(ctx)
    e6, sd6 = res.excess(6 * HOUR)
    e1, sd1 = res.excess(DAY)
    e6, e1 = np.where(young, np.nan, e6), np.where(young, np.nan, e1)
    own6, own1 = res.own_z(e6, sd6), res.own_z(e1, sd1)
    # The load the heat is judged at against its baseline's: well under it, the excess is the
    # fitted line extrapolated (fans slow, the slope takes some of the air's swing), so the
    # policy waits longer before a thermal demote there (`conditions.light_load`).
    with np.errstate(invalid="ignore", divide="ignore"):
        load_share = np.where(res.base_power > 0, res.power[6 * HOUR] / res.base_power, np.nan)
    del res
    out: Columns = {"temp_excess_own_z": own6, "heat_load_share": load_share}
    out |= _against_node(ctx, e6, sd6, "temp_excess_vs_node_z", own_z=own6)
    out |= _against_node(ctx, e1, sd1, "temp_excess_vs_node_z_1d")
    # A failing heat sink makes its GPU hotter than its own past *and* than its node now: the
    # node's air heats every GPU of it (own past only), a node that cools leaves one GPU at its
    # usual heat standing out (the node only). The heads learn from the lesser of the two, and
    # only from heat: a GPU running cooler than both is no less healthy for it (0).
    out["heat_excess_z"] = _excess_over_both(own6, out["temp_excess_vs_node_z"])
    out["heat_excess_z_1d"] = _excess_over_both(own1, out["temp_excess_vs_node_z_1d"])
    return out


def _young(ctx: FeatureContext) -> np.ndarray:
    """Per query, whether its GPU is younger than MIN_AGE_S at the cutoff (no heat z-scores)."""
    return np.asarray((ctx.q.c - ctx.f.first_t[ctx.q.gpu_pos]) < MIN_AGE_S)


@family("gpu_temp_c", "power_w", heavy=True)
def node_relative_heat(ctx: FeatureContext) -> Columns:
    """The core's heat over its node's, hour by hour, against its own 30 days of that (`_node_relative_z`).

    A family of its own (not `heat`'s), so that the two run side by side (`FeatureContext.run_all`)."""
    temp = ctx.f.col("gpu_temp_c", native=True)
    if temp is None:
        return {}
    return {"heat_vs_node_own_z": _node_relative_z(ctx, temp)}  # NaN for a GPU under 8 days, past `young`'s 4


@family("memory_temp_c", "gpu_temp_c", "power_w")
def memory_spread(ctx: FeatureContext) -> Columns:
    """The memory-core spread beyond what the GPU's power explains, in its own σ (`_memory_spread`).

    A memory sensor that reads nothing leaves the spread unknown (NaN), not "no change" (0): the
    trees route a missing value on their own, and training fleets lack the sensor on up to
    TRAINING_MEMTEMP_MISSING of their GPUs (simulator.families), so they learn to judge such a
    GPU by its core. With 0 they could not tell a GPU without the sensor from one whose
    memory runs as it always did, and a sensorless GPU's failing cooler stayed at risk 0.4-0.6.
    `_memory_spread` is NaN without a memory or core temperature or power."""
    return {"mem_spread_z": np.where(_young(ctx), np.nan, _memory_spread(ctx))}


def _excess_over_both(own: np.ndarray, vs_node: np.ndarray) -> np.ndarray:
    """The lesser of two z-scores, floored at 0 (NaN where either is unknown)."""
    with np.errstate(invalid="ignore"):
        return np.where(np.isnan(own) | np.isnan(vs_node), np.nan, np.maximum(np.minimum(own, vs_node), 0.0))


def _against_node(
    ctx: FeatureContext, e: np.ndarray, sd: np.ndarray, name: str, own_z: np.ndarray | None = None
) -> Columns:
    """How far a GPU's excess heat (°C) stands above its node's median at the cutoff (its model's
    GPUs if the node has few), in the larger of its own σ and the node's current spread.

    A node's air (an incident, a rack door, a fan) adds about the same °C to each of its GPUs, so
    the comparison is made in °C, before dividing by anyone's σ: a quiet sensor must not make a
    GPU stand out of a node that heated evenly. And a node that heats unevenly (1.4826 x the
    median absolute deviation of its GPUs' excess) widens the yardstick, so no GPU stands out
    of it by the unevenness alone. With `own_z` (each GPU's excess in its own σ), also the
    node's columns for the node finding.
    """
    ident = ctx.ident
    s = pd.Series(e)
    node = [ident["cutoff"], ident["hostname"]]
    peer = [ident["cutoff"], ident["model_name"]]
    node_med = s.groupby(node).transform("median").to_numpy()
    node_n = s.groupby(node).transform("count").to_numpy()
    peer_med = s.groupby(peer).transform("median").to_numpy()
    node_spread = 1.4826 * (s - pd.Series(node_med)).abs().groupby(node).transform("median").to_numpy()
    peer_spread = 1.4826 * (s - pd.Series(peer_med)).abs().groupby(peer).transform("median").to_numpy()
    by_node = node_n >= NODE_MIN_GPUS  # fewer: against its model's GPUs instead
    with np.errstate(invalid="ignore", divide="ignore"):
        out: Columns = {
            name: np.where(
                by_node, (e - node_med) / np.fmax(sd, node_spread), (e - peer_med) / np.fmax(sd, peer_spread)
            )
        }
    if own_z is not None:
        z = pd.Series(own_z)
        out["node_heat_z"] = np.where(by_node, z.groupby(node).transform("median").to_numpy(), np.nan)
        out["node_hot_gpus"] = pd.Series(own_z >= HOT_Z).groupby(node).transform("sum").to_numpy(dtype=float)
        out["node_gpus"] = node_n.astype(float)
    return out


def _memory_spread(ctx: FeatureContext) -> np.ndarray:
    """Memory minus core temperature beyond what the GPU's power explains, over the last 6 h
    against its baseline, in its own σ (the spread narrows as the load rises: a quiet day is no
    sign of a failing heat sink).

    The room's air, a node's incident and its fans move core and memory together, so the spread
    is free of what makes the core's excess slow to trust on a warm, swinging floor; a failing
    heat sink or memory contact widens it. Over 6 h rather than a day: a day's mean lags a
    widening spread by half a day."""
    f = ctx.f
    mem, temp = f.col("memory_temp_c", native=True), f.col("gpu_temp_c", native=True)
    if mem is None or temp is None:
        return ctx.nan
    res = _residuals(ctx, np.subtract(mem, temp, dtype=np.float64), (MONTH, DAY, MEM_SPREAD_WINDOW_S), owned=True)
    if res is None:
        return ctx.nan
    return res.own_z(*res.excess(MEM_SPREAD_WINDOW_S))


FIRST_WEEK_S = 7 * DAY
"""The span at the start of a GPU's history its own slope of heat on power is fitted over, for
`_node_relative_z` (a slope fixed per GPU, so every sample's residual can be set against its node's)."""


def _node_relative_z(ctx: FeatureContext, temp: np.ndarray) -> np.ndarray:
    """The core's heat beyond its power, over its node's median of the same at each sample's hour,
    as a 6 h mean against the 30 days before the last day, in its own spread of that difference
    (floored at 0). Each GPU's slope of heat on power is its first week's (its model's where its
    load barely varied); the node's air cancels before the spread is taken. NaN in its first
    week and a day, and where its node had fewer than NODE_MIN_GPUS GPUs reporting in the hour."""
    f, q = ctx.f, ctx.q
    power = f.col("power_w", native=True)
    if power is None:
        return np.full(len(q.c), np.nan)
    return _own_spread_z(f, q, _beyond_node(f, _first_week_slope(f, temp, power)))


def _own_spread_z(f: OrderedFrame, q: Queries, d: np.ndarray) -> np.ndarray:
    """Per query, the 6 h mean of a per-row `d` (float64, overwritten) against its 30 days before the
    last day, in its own spread there (floored at 0); NaN in the GPU's first week and a day."""
    gaps = np.flatnonzero(np.isnan(d))
    d[gaps] = 0.0  # a row without a value adds nothing to the sums; `_present` leaves it out of the counts
    sums, sqs = Sums(d), Sums(d * d)
    moments = {w: (_present(q, gaps, w), q.window_sum(sums, w), q.window_sum(sqs, w)) for w in (MONTH, DAY, 6 * HOUR)}
    base = _minus(moments[MONTH], moments[DAY])
    n6, s6, _ = moments[6 * HOUR]
    ex, sd = _excess(mean(s6, n6), *base)
    young = (q.c - f.first_t[q.gpu_pos]) < FIRST_WEEK_S + DAY
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(young, np.nan, np.maximum(ex / sd, 0.0))


def _first_week_slope(f: OrderedFrame, temp: np.ndarray, power: np.ndarray) -> np.ndarray:
    """Per GPU (`f`'s order), the least-squares slope of its heat on its power over its first
    FIRST_WEEK_S; its model's slope pooled over the GPUs' sums where its power varied less than
    MIN_LOAD_SD_W (σ). NaN where neither can be fitted. Only each GPU's first week is read."""
    end = np.searchsorted(f.key, (f.gpu_codes << KEY_SHIFT) | (f.first_t + FIRST_WEEK_S), side="left")
    rows = WindowRows(f, f.gpu_start, end).rows
    gpu = np.repeat(np.arange(len(f.gpu_start)), end - f.gpu_start)
    t, p = temp[rows], power[rows]
    ok = ~np.isnan(t) & ~np.isnan(p)
    g, t, p = gpu[ok], t[ok].astype(np.float64), p[ok].astype(np.float64)
    size = len(f.gpu_start)
    n = np.bincount(g, minlength=size).astype(np.float64)
    st, sp = np.bincount(g, t, minlength=size), np.bincount(g, p, minlength=size)
    stp, spp = np.bincount(g, t * p, minlength=size), np.bincount(g, p * p, minlength=size)
    with np.errstate(invalid="ignore", divide="ignore"):
        sxy = np.where(n > 0, stp - sp * st / n, 0.0)
        sxx = np.where(n > 0, spp - sp * sp / n, 0.0)
        own = np.where(sxx > np.maximum(n - 1, 1) * MIN_LOAD_SD_W**2, sxy / sxx, np.nan)
        model = f.label_codes("model_name")[f.frame_rows(f.gpu_start)]
        model = np.where(model < 0, model.max() + 1, model)  # no model name: a kind of its own
        pooled = np.bincount(model, sxy) / np.bincount(model, sxx)
    return np.where(np.isnan(own), pooled[model], own)


def _beyond_node(f: OrderedFrame, slope: np.ndarray) -> np.ndarray:
    """Per row (GPU, time order), its heat beyond its power (each GPU's `slope`) less the median of
    the same over its node's rows in that hour; NaN where fewer than NODE_MIN_GPUS of those have a
    value, or the row names no node.

    Worked out in the frame's own row order, where an hour's rows lie together and in it a
    node's GPUs (`features.medians`), then put in (GPU, time) order: one gather, no group-by."""
    temp, power = f.raw("gpu_temp_c"), f.raw("power_w")
    assert temp is not None and power is not None
    r = f.per_frame_row(slope)  # r = temp - slope x power, in one array
    np.multiply(r, power, out=r)
    np.subtract(temp, r, out=r)
    node = f.label_codes("hostname").astype(np.int64)
    hour = f.frame_hours()
    slot = f.frame["gpu_index"].to_numpy()  # a node's GPUs have an index each: their medians need no sort
    median = group_medians(hour * (int(node.max()) + 1) + node, r, min_count=NODE_MIN_GPUS, slot=slot)
    del hour
    median[node < 0] = np.nan
    r -= median
    return r if f.identity else np.take(r, f.order)
