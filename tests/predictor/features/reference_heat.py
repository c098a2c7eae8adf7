"""The heat features' per-row work as it was written before issue 60, kept as a reference.

`predictor.features.heat` now finds each node's median heat per hour with a sorting network
over runs of the frame's own rows (`features.medians`), reads only each GPU's first week for
its slope, and makes the five window sums' products in one buffer. These are the plain
versions they replaced (a pandas group-by over every row, masks over every row, one array per
product); `test_features_identity.py` swaps them in and asks for the same numbers, bit for bit.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from predictor.features.context import NODE_MIN_GPUS, FeatureContext
from predictor.features.frame import T_MASK, OrderedFrame
from predictor.features.heat import FIRST_WEEK_S, MIN_LOAD_SD_W, _own_spread_z, _present
from predictor.features.windows import HOUR, Queries, Sums


def moments(
    q: Queries, y: np.ndarray, power: np.ndarray, windows: tuple[int, ...], owned: bool
) -> dict[int, tuple[np.ndarray, dict[str, np.ndarray]]]:
    """`heat._moments` as it was: each product its own array."""
    both = ~np.isnan(y) & ~np.isnan(power)
    t = np.where(both, y, 0.0).astype(np.float64)
    p = np.where(both, power, 0.0).astype(np.float64)
    gaps = np.flatnonzero(~both)
    sums = {"t": Sums(t), "p": Sums(p), "tt": Sums(t * t), "pp": Sums(p * p), "tp": Sums(t * p)}
    return {w: (_present(q, gaps, w), {name: q.window_sum(x, w) for name, x in sums.items()}) for w in windows}


def node_relative_z(ctx: FeatureContext, temp: np.ndarray) -> np.ndarray:
    """`heat._node_relative_z` as it was: every row in (GPU, time) order, a group-by for the node."""
    f, q = ctx.f, ctx.q
    power = f.col("power_w", native=True)
    if power is None:
        return np.full(len(q.c), np.nan)
    t_s = f.key & T_MASK
    gpu = np.repeat(np.arange(len(f.gpu_start)), f.gpu_end - f.gpu_start)
    r = temp - _first_week_slope(f, gpu, t_s, temp, power)[gpu] * power
    return _own_spread_z(f, q, r - _node_median_by_hour(f, t_s, r))


def _first_week_slope(
    f: OrderedFrame, gpu: np.ndarray, t_s: np.ndarray, temp: np.ndarray, power: np.ndarray
) -> np.ndarray:
    early = (t_s - f.first_t[gpu] < FIRST_WEEK_S) & ~np.isnan(temp) & ~np.isnan(power)
    g, t, p = gpu[early], temp[early].astype(np.float64), power[early].astype(np.float64)
    size = len(f.gpu_start)
    n = np.bincount(g, minlength=size).astype(np.float64)
    st, sp = np.bincount(g, t, minlength=size), np.bincount(g, p, minlength=size)
    stp, spp = np.bincount(g, t * p, minlength=size), np.bincount(g, p * p, minlength=size)
    with np.errstate(invalid="ignore", divide="ignore"):
        sxy = np.where(n > 0, stp - sp * st / n, 0.0)
        sxx = np.where(n > 0, spp - sp * sp / n, 0.0)
        own = np.where(sxx > np.maximum(n - 1, 1) * MIN_LOAD_SD_W**2, sxy / sxx, np.nan)
        model = f.codes("model_name")[f.gpu_start]
        model = np.where(model < 0, model.max() + 1, model)
        pooled = np.bincount(model, sxy) / np.bincount(model, sxx)
    return np.where(np.isnan(own), pooled[model], own)


def _node_median_by_hour(f: OrderedFrame, t_s: np.ndarray, r: np.ndarray) -> np.ndarray:
    node = f.codes("hostname").astype(np.int64)
    same = pd.Series(r).groupby((t_s // HOUR) * (int(node.max()) + 1) + node, sort=False)
    n, median = same.transform("count").to_numpy(), same.transform("median").to_numpy()
    return np.where((n >= NODE_MIN_GPUS) & (node >= 0), median, np.nan)
