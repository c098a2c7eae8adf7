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

from core.history import BUS_IDS_ATTR
from predictor.features.context import Columns, FeatureContext, family

DAY_NS = 86_400 * 1_000_000_000
SLOT_WINDOW_DAYS = 60
"""The window of `slot_gpus_failed_60d`: in InfiniteHBD-Trace (REFERENCE.md) 47 of the 61 gaps between a
node's GPU faults were within 60 days (37 within 30), about four times the 11 that faults spread
evenly over its 400 servers would give; split over a node's 8 slots, chance leaves about 1.4 slots a
year with two failures within 60 days on such a fleet (decision 0089)."""


@family()
def repeat_offenders(ctx: FeatureContext) -> Columns:
    """Failures recorded on the GPU's node in 30 and 180 days, in its slot in 180 days, and the GPUs its
    slot lost in SLOT_WINDOW_DAYS."""
    ident = ctx.ident
    n = len(ident)
    names = ("node_failures_30d", "node_failures_180d", "slot_failures_180d", "slot_gpus_failed_60d")
    zeros = {name: np.zeros(n) for name in names}
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
    # The GPUs a slot lost: by its PCI bus id where the history knows it (`features.slots`), else by index.
    bus = ctx.f.frame.attrs.get(BUS_IDS_ATTR) or {}
    q_uuid = ident["gpu_uuid"].astype(str).to_numpy()
    by_bus = np.array([f"{h}/{bus[u]}" if u in bus else k for h, u, k in zip(host, uuid, slot, strict=True)], object)
    q_by_bus = np.array([f"{h}/{bus[u]}" if u in bus else k for h, u, k in zip(q_host, q_uuid, q_slot, strict=True)],
                        dtype=object)  # fmt: skip
    return {
        "node_failures_30d": _count_before(host, at, q_host, cut, 30),
        "node_failures_180d": _count_before(host, at, q_host, cut, 180),
        "slot_failures_180d": _count_before(slot, at, q_slot, cut, 180),
        "slot_gpus_failed_60d": _gpus_before(by_bus, uuid, at, q_by_bus, cut, SLOT_WINDOW_DAYS),
    }


def _gpus_before(
    keys: np.ndarray, uuids: np.ndarray, at: np.ndarray, q_keys: np.ndarray, cut: np.ndarray, days: int
) -> np.ndarray:
    """Per query: the GPUs with a record of its key in (cutoff - days, cutoff), each GPU once (its failure
    and its RMA are one GPU lost). Only the queries of keys with records are joined to them (few)."""
    out = np.zeros(len(q_keys))
    mine = np.flatnonzero(np.isin(q_keys, keys))
    if len(mine) == 0:
        return out
    recs = pd.DataFrame({"key": keys, "uuid": uuids, "at": at})
    pairs = pd.DataFrame({"key": q_keys[mine], "q": mine, "cut": cut[mine]}).merge(recs, on="key")
    pairs = pairs[((pairs["at"] < pairs["cut"]) & (pairs["at"] > pairs["cut"] - days * DAY_NS)).to_numpy()]
    lost = pairs.groupby("q")["uuid"].nunique()
    out[lost.index.to_numpy()] = lost.to_numpy(dtype=float)
    return out


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
