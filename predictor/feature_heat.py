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

import numpy as np
import pandas as pd

from predictor.feature_context import Columns, FeatureContext, family, mean
from predictor.feature_frame import OrderedFrame
from predictor.feature_windows import DAY, HOUR, MONTH, Queries, Sums

SD_FLOOR_C = 0.5
"""The least spread a temperature series is credited with (°C): readings are whole degrees."""
HOT_Z = 2.0
"""A GPU with its excess at least this many of its own σ counts as hot for its node."""
MIN_AGE_S = 4 * DAY
"""A GPU younger than this at the cutoff has no heat z-scores (NaN): a baseline of a few hours
(a GPU just replaced) has no idea how much its temperature wanders."""
NODE_MIN_GPUS = 3
"""With fewer GPUs of a node scored, a GPU is measured against its model's GPUs instead."""


class _Moments:
    """Window sums of a gap-free series x (NaN where the sample lacks a value): n, Σx, Σx²."""

    def __init__(self, q: Queries, x: np.ndarray) -> None:
        self.q = q
        ok = ~np.isnan(x)
        v = np.where(ok, x, 0.0).astype(np.float64)
        self.gaps = np.flatnonzero(~ok)
        self.s1, self.s2 = Sums(v), Sums(v * v)

    def get(self, w: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        q = self.q
        return _present(q, self.gaps, w), q.window_sum(self.s1, w), q.window_sum(self.s2, w)


def _present(q: Queries, gaps: np.ndarray, w: int) -> np.ndarray:
    """Samples with a value in each query's window: all of them less the gaps (sorted positions)."""
    return q.window_count(None, w) - (q.window_count(gaps, w) if len(gaps) else 0.0)


def _z(recent: np.ndarray, base_n: np.ndarray, base_s: np.ndarray, base_ss: np.ndarray) -> np.ndarray:
    """(recent - baseline mean) / baseline σ (floored), NaN without a baseline of 2+ samples."""
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = base_s / base_n
        var = (base_ss - base_s * mean) / (base_n - 1)
        sd = np.maximum(np.sqrt(np.maximum(var, 0.0)), SD_FLOOR_C)
        return np.where(base_n > 1, (recent - mean) / sd, np.nan)


def _residual_moments(ctx: FeatureContext) -> dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] | None:
    """Per window (6 h, 1 d, 30 d): n, Σr, Σr² of r = temperature - k·power, k per model and cutoff."""
    f, q = ctx.f, ctx.q
    temp, power = f.col("gpu_temp_c", native=True), f.col("power_w", native=True)
    if temp is None or power is None:
        return None
    both = ~np.isnan(temp) & ~np.isnan(power)
    t = np.where(both, temp, 0.0).astype(np.float64)
    p = np.where(both, power, 0.0).astype(np.float64)
    gaps = np.flatnonzero(~both)
    sums = {"t": Sums(t), "p": Sums(p), "tt": Sums(t * t), "pp": Sums(p * p), "tp": Sums(t * p)}
    del t, p
    out: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
    raw = {}
    for w in (MONTH, DAY, 6 * HOUR):
        raw[w] = (_present(q, gaps, w), {name: q.window_sum(x, w) for name, x in sums.items()})
    # Degrees per watt of each GPU over its baseline (heat sinks differ), its model's pooled
    # slope where its load did not vary enough to fit one.
    bn, bs = raw[MONTH][0] - raw[DAY][0], {k: raw[MONTH][1][k] - raw[DAY][1][k] for k in sums}
    k = _slope(f, q, bn, bs)
    for w, (n, s) in raw.items():
        sr = s["t"] - k * s["p"]
        srr = s["tt"] - 2 * k * s["tp"] + k * k * s["pp"]
        out[w] = (n, sr, srr)
    return out


def _slope(f: OrderedFrame, q: Queries, n: np.ndarray, s: dict[str, np.ndarray]) -> np.ndarray:
    """Least-squares slope of temperature on power per GPU over the baseline; where the GPU's
    power barely varied (< 20 W σ), the slope pooled over its model's GPUs at the cutoff."""
    with np.errstate(invalid="ignore", divide="ignore"):
        sxy = np.where(n > 1, s["tp"] - s["p"] * s["t"] / n, 0.0)
        sxx = np.where(n > 1, s["pp"] - s["p"] * s["p"] / n, 0.0)
        own = sxy / sxx
    model_code = f.frame["model_name"].astype("category").cat.codes.to_numpy()
    rows = q.end_row if f.identity else f.order[q.end_row]
    key = pd.DataFrame({"c": q.c, "m": model_code[rows], "sxy": sxy, "sxx": sxx})
    pooled = key.groupby(["c", "m"])[["sxy", "sxx"]].transform("sum")
    with np.errstate(invalid="ignore", divide="ignore"):
        pool = np.where(pooled["sxx"] > 1.0, pooled["sxy"] / pooled["sxx"], 0.0)
        varied = sxx > np.maximum(n - 1, 1) * 20.0**2
    return np.asarray(np.where(varied & np.isfinite(own), own, pool), dtype=float)


def _minus(a: tuple[np.ndarray, ...], b: tuple[np.ndarray, ...]) -> tuple[np.ndarray, ...]:
    """Window sums of (cutoff - 30 d, cutoff - 1 d]: the baseline, without the recent day."""
    return tuple(x - y for x, y in zip(a, b, strict=True))


@family("gpu_temp_c", "power_w", "memory_temp_c")
def heat(ctx: FeatureContext) -> Columns:
    """Excess temperature and memory-core spread in units of the GPU's own σ, and against its node."""
    m = _residual_moments(ctx)
    if m is None:
        return {}
    base = _minus(m[MONTH], m[DAY])
    young = (ctx.q.c - ctx.f.first_t[ctx.q.gpu_pos]) < MIN_AGE_S
    own6 = np.where(young, np.nan, _z(mean(m[6 * HOUR][1], m[6 * HOUR][0]), *base))
    own1 = np.where(young, np.nan, _z(mean(m[DAY][1], m[DAY][0]), *base))
    del m
    out: Columns = {"temp_excess_own_z": own6}
    out |= _against_node(ctx, own6, "temp_excess_vs_node_z", with_node=True)
    out |= _against_node(ctx, own1, "temp_excess_vs_node_z_1d")
    out["mem_spread_z"] = np.where(young, np.nan, _memory_spread(ctx))
    return out


def _against_node(ctx: FeatureContext, z: np.ndarray, name: str, with_node: bool = False) -> Columns:
    """z minus the median z of the GPU's node at its cutoff (its model's GPUs if the node has few)."""
    ident = ctx.ident
    s = pd.Series(z)
    node = [ident["cutoff"], ident["hostname"]]
    node_med = s.groupby(node).transform("median").to_numpy()
    node_n = s.groupby(node).transform("count").to_numpy()
    peer_med = s.groupby([ident["cutoff"], ident["model_name"]]).transform("median").to_numpy()
    # In units of the node's spread too (robust: 1.4826 x the median absolute deviation), so
    # GPUs of a node that heats up unevenly do not stand out by the unevenness alone.
    dev = (s - pd.Series(node_med)).abs()
    node_sd = np.maximum(1.4826 * dev.groupby(node).transform("median").to_numpy(), 1.0)
    pdev = (s - pd.Series(peer_med)).abs()
    peer_sd = np.maximum(
        1.4826 * pdev.groupby([ident["cutoff"], ident["model_name"]]).transform("median").to_numpy(), 1.0
    )
    by_node = node_n >= NODE_MIN_GPUS
    out: Columns = {name: np.where(by_node, (z - node_med) / node_sd, (z - peer_med) / peer_sd)}
    if with_node:
        out["node_heat_z"] = np.where(node_n >= NODE_MIN_GPUS, node_med, np.nan)
        out["node_hot_gpus"] = pd.Series(z >= HOT_Z).groupby(node).transform("sum").to_numpy(dtype=float)
        out["node_gpus"] = node_n.astype(float)
    return out


def _memory_spread(ctx: FeatureContext) -> np.ndarray:
    """Memory minus core temperature over the last day against its baseline, in its own σ."""
    f, q = ctx.f, ctx.q
    mem, temp = f.col("memory_temp_c", native=True), f.col("gpu_temp_c", native=True)
    if mem is None or temp is None:
        return ctx.nan
    mom = _Moments(q, np.subtract(mem, temp, dtype=np.float64))
    month, day = mom.get(MONTH), mom.get(DAY)
    return _z(mean(day[1], day[0]), *_minus(month, day))
