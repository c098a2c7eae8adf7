"""The GPU's and its node's record: failures and RMAs recorded before the cutoff.

In a public fault trace (REFERENCE.md) a third of the nodes with a GPU fault had another,
a median of 18 days apart: a node's power, backplane or risers outlive the GPU replaced.
So failures recorded on the node, and in the GPU's slot (the GPU now there or the one it
replaced), are features. They come from the failure records handed to `build_features`
(the store's `POST /v1/failures`, or a simulation's labels); without records they are 0.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from predictor.features.context import Columns, FeatureContext, family

DAY_NS = 86_400 * 1_000_000_000


@family()
def repeat_offenders(ctx: FeatureContext) -> Columns:
    """Failures recorded on the GPU's node in 30 and 180 days, and in its slot in 180 days."""
    ident = ctx.ident
    n = len(ident)
    zeros = {"node_failures_30d": np.zeros(n), "node_failures_180d": np.zeros(n), "slot_failures_180d": np.zeros(n)}
    fails = ctx.failures
    if fails is None or len(fails) == 0 or "failed_at" not in fails.columns:
        return zeros
    at = pd.DatetimeIndex(pd.to_datetime(fails["failed_at"], utc=True)).as_unit("ns").asi8
    host = fails["hostname"].astype(str).to_numpy() if "hostname" in fails.columns else np.full(len(fails), "")
    uuid = fails["gpu_uuid"].astype(str).to_numpy()
    # A failure's slot: its GPU's index on its host, from the history (the GPU may be gone).
    f = ctx.f
    index_of = dict(zip(f.uuids[f.gpu_codes].astype(str), f.ident("gpu_index", f.gpu_start), strict=True))
    slot = np.array([f"{h}#{index_of.get(u, -1)}" for h, u in zip(host, uuid, strict=True)], dtype=object)
    cut = pd.DatetimeIndex(ident["cutoff"]).as_unit("ns").asi8
    q_host = ident["hostname"].astype(str).to_numpy()
    q_slot = (pd.Series(q_host) + "#" + ident["gpu_index"].astype(str)).to_numpy()
    return {
        "node_failures_30d": _count_before(host, at, q_host, cut, 30),
        "node_failures_180d": _count_before(host, at, q_host, cut, 180),
        "slot_failures_180d": _count_before(slot, at, q_slot, cut, 180),
    }


def _count_before(keys: np.ndarray, at: np.ndarray, q_keys: np.ndarray, cut: np.ndarray, days: int) -> np.ndarray:
    """Per query: records of its key in (cutoff - days, cutoff), by binary search over one sorted key."""
    codes, _ = pd.factorize(np.concatenate([keys, q_keys]))
    f_code, q_code = codes[: len(keys)].astype(np.int64), codes[len(keys) :].astype(np.int64)
    t0 = int(at.min()) // 1_000_000_000 - 1  # seconds relative to just before the first record: all >= 1
    rel = (at // 1_000_000_000 - t0).astype(np.int64)
    combined = np.sort((f_code << 40) | rel)
    end = np.clip(cut // 1_000_000_000 - t0, 0, None).astype(np.int64)
    start = np.clip((cut - days * DAY_NS) // 1_000_000_000 - t0, 0, None).astype(np.int64)
    hi = np.searchsorted(combined, (q_code << 40) | end, side="left")
    lo = np.searchsorted(combined, (q_code << 40) | start, side="right")
    return np.maximum(hi - lo, 0).astype(float)
