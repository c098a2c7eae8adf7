"""Decisions replayed over a GPU's rounds in time order: its runs of high risk, the chain of a
probation after a drain or RMA, and the hold of a standing demote.

The service decides one round at a time and keeps what carries over in its store (the stored
rounds, the standing decisions); the evaluation and `gpuhealth score` have only hourly rows, and
rebuild the same from them here (`apply_waits`), with `policy`'s per-round pieces.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from predictor.conditions import (
    as_ns,
    demote_waits,
    heat_alone,
    heat_held,
    naive_utc,
    on_probation,
    remap_waits,
    run_length,
)
from predictor.policy import top_heads
from predictor.thresholds import Thresholds


def high_since(gpu: np.ndarray, at: np.ndarray, high: np.ndarray) -> np.ndarray:
    """Per row: when the GPU's run of high rows that the row belongs to began (NaT where not high).

    Rows are (GPU, time) points in any order; a run is the GPU's consecutive high rows in time.
    The evaluation gives every scored hour; the service its stored rounds and the current one.
    """
    out = np.full(len(gpu), np.datetime64("NaT"), dtype="datetime64[ns]")
    if len(gpu) == 0:
        return out
    order, g, tt = _in_gpu_time_order(gpu, at)
    h = np.asarray(high, dtype=bool)[order]
    starts = _run_starts(g, h)
    run = np.cumsum(starts)
    first = np.full(run.max() + 1, np.datetime64("NaT"), dtype="datetime64[ns]")
    first[run[starts]] = tt[starts]
    out[order] = np.where(h, first[run], np.datetime64("NaT"))
    return out


def stored_run_began(
    stored: Sequence[tuple[str, Any]], high: Any, uuids: Sequence[str], now: pd.Timestamp
) -> dict[str, pd.Timestamp]:
    """For GPUs whose value counts now (their risk at the demote threshold, their heat alone): when
    that run began, from their stored rounds (gpu_uuid, scored_at) and whether each counted (`high`,
    False where its value is unknown); a GPU whose last stored round did not count (or has none) is
    left out: its run begins now."""
    if not stored or not uuids:
        return {}
    at = pd.DatetimeIndex([pd.Timestamp(r[1]) for r in stored])
    return run_began(np.asarray([r[0] for r in stored], dtype=object), at, high, uuids, now)


def run_began(gpu: np.ndarray, at: Any, high: Any, uuids: Sequence[str], now: pd.Timestamp) -> dict[str, pd.Timestamp]:
    """`stored_run_began` of stored rounds given as columns: their GPUs and times (aware or naive UTC)."""
    if not len(gpu) or not uuids:
        return {}
    every = np.concatenate([np.asarray(gpu, dtype=object), np.asarray(list(uuids), dtype=object)])
    now_naive = naive_utc([now])[0]
    times = np.concatenate([naive_utc(at), np.full(len(uuids), now_naive)])
    counted = np.r_[np.asarray(high, dtype=bool), np.ones(len(uuids), dtype=bool)]
    since = high_since(every, times, counted)[len(gpu) :]
    return {str(u): pd.Timestamp(t).tz_localize("UTC") for u, t in zip(uuids, since, strict=True) if t < now_naive}


def probation_began(gpu: np.ndarray, at: Any, out: np.ndarray, risk: np.ndarray, thresholds: Thresholds) -> np.ndarray:
    """Per row: when a drain or RMA last let the GPU go (its first row after the last one `out`),
    where the row continues that release without a break; NaT where the row is out itself or no
    such release leads to it.

    Rows are (GPU, time) points in any order. Without a break: every row of the GPU from the
    release to this one is out or at `probation_risk` or above, as every round of the service's
    from then to now decided drain, RMA or demote (a demote's risk is above `probation_risk`;
    `store.Decisions.released_at` reads the same from the stored decisions)."""
    n = len(gpu)
    began = np.full(n, np.datetime64("NaT"), dtype="datetime64[ns]")
    if n == 0:
        return began
    order, g, tt = _in_gpu_time_order(gpu, at)
    o = np.asarray(out, dtype=bool)[order]
    with np.errstate(invalid="ignore"):
        hold = o | (np.asarray(risk, dtype=np.float64)[order] >= thresholds.probation_risk)
    # Per row (in that order): where its run of held rows starts, and the last row out so far.
    run_start = np.maximum.accumulate(np.where(_run_starts(g, hold), np.arange(n), -1))
    last_out = np.maximum.accumulate(np.where(o, np.arange(n), -1))
    live = hold & ~o & (last_out >= run_start) & (run_start >= 0)
    began[order[live]] = tt[last_out[live] + 1]
    return began


def held_demotes(gpu: np.ndarray, at: Any, demoted: np.ndarray, out: np.ndarray, risk: np.ndarray,
                 thresholds: Thresholds) -> np.ndarray:  # fmt: skip
    """Per row: demoted, or held so: a row after a demoted one of its GPU stays demoted while every
    row between them has risk at `release_level` or above and none before this one is `out` (a drain
    or RMA: its decision is the drain, and the probation takes over after it).

    Rows are (GPU, time) points in any order, as `probation_began`'s. The service reads the same from
    its standing decision (`Decisions.demoted_since`): a demote, and this round's risk at the level."""
    n = len(gpu)
    d = np.asarray(demoted, dtype=bool)
    if n == 0:
        return d.copy()
    order, g, _ = _in_gpu_time_order(gpu, at)
    o = np.asarray(out, dtype=bool)[order]
    with np.errstate(invalid="ignore"):
        level = np.asarray(risk, dtype=np.float64)[order] >= thresholds.release_level
    # A row continues the one before: the same GPU, not out there, and its own risk at the level.
    goes_on = np.r_[False, (g[1:] == g[:-1]) & ~o[:-1]] & level
    run_start = np.maximum.accumulate(np.where(~goes_on, np.arange(n), -1))
    last_demoted = np.maximum.accumulate(np.where(d[order], np.arange(n), -1))
    held = np.zeros(n, dtype=bool)
    held[order] = last_demoted >= run_start
    return held


def remap_held(rows: pd.DataFrame, thresholds: Thresholds) -> np.ndarray:
    """Per hourly row (`score.hour_rows`): a pending remap held at watch, its reset waiting for idle
    (NVIDIA's guide). The row's pending remap fired with no drain or RMA rule (`remap_alone`) and its ECC
    risk waits (`remap_waits`: it has not held `remap_hold_risk` for `remap_hold_for_s`, nor within
    `remap_hold_clear_s` before: `ecc_wore`), and the GPU was not drained since its run of such rows
    (or of out-of-service ones) began: a drain, once made, stands for the rest of the run (no flapping
    as the risk moves). The service reads the last from its standing decision (`policy.decide`'s `drained`)."""
    n = len(rows)
    alone = _pending_alone(rows)
    act = rows["rule_act"].to_numpy(dtype=bool) | alone
    if not alone.any() or thresholds.remap_hold_risk <= 0:  # 0: every pending remap drains at once
        return np.zeros(n, dtype=bool)
    gpu = rows["gpu_uuid"].to_numpy()
    risk = rows["risk_ecc"].to_numpy(dtype=np.float64)
    with np.errstate(invalid="ignore"):
        at_level = risk >= thresholds.remap_hold_risk
    waits = remap_waits(rows["cutoff"], high_since(gpu, rows["cutoff"], at_level), risk, thresholds)
    waits &= ~ecc_wore(gpu, rows["cutoff"], risk, thresholds)
    drains = act & ~(alone & waits)
    order, g, _ = _in_gpu_time_order(gpu, rows["cutoff"])
    a, idx = act[order], np.arange(n)
    # Per row (in that order): where its run of out-of-service rows starts, and the last row that drained.
    run_start = np.maximum.accumulate(np.where(_run_starts(g, a), idx, -1))
    last_drain = np.maximum.accumulate(np.where(drains[order], idx, -1))
    held = np.zeros(n, dtype=bool)
    held[order] = a & (last_drain < run_start)
    return held


def out_of_service(rows: pd.DataFrame, held: np.ndarray) -> np.ndarray:
    """Per hourly row: a drain or RMA rule fired (`rule_act`), or a pending remap alone that is not held
    at watch (`held`: `remap_held`'s answer): the GPU is out of service."""
    return np.asarray((rows["rule_act"].to_numpy(dtype=bool) | _pending_alone(rows)) & ~np.asarray(held, dtype=bool))


def _pending_alone(rows: pd.DataFrame) -> np.ndarray:
    """Per hourly row: its pending remap fired with no drain or RMA rule (`remap_alone`; absent: none)."""
    if "remap_alone" not in rows.columns:
        return np.zeros(len(rows), dtype=bool)
    return rows["remap_alone"].to_numpy(dtype=bool)


def _wore_rows(gpu: np.ndarray, at: Any, risk_ecc: Any, thresholds: Thresholds) -> np.ndarray:
    """Per row: the GPU's ECC risk at `remap_hold_risk`, held for `remap_hold_for_s` by then."""
    with np.errstate(invalid="ignore"):
        level = np.asarray(risk_ecc, dtype=np.float64) >= thresholds.remap_hold_risk
    return np.asarray(level & (run_length(at, high_since(gpu, at, level)) >= as_ns(thresholds.remap_hold_for_s)))


def ecc_wore(gpu: np.ndarray, at: Any, risk_ecc: Any, thresholds: Thresholds) -> np.ndarray:
    """Per row: the GPU's ECC risk held `remap_hold_risk` (for `remap_hold_for_s`) at the row or at one
    of its rows less than `remap_hold_clear_s` before it: memory the ECC head called wearing, whose
    pending remap's drain does not wait (`remap_held`). Rows are (GPU, time) points in any order; the
    service asks its stored rounds the same (`recently_wore`)."""
    n = len(gpu)
    out = np.zeros(n, dtype=bool)
    if n == 0 or thresholds.remap_hold_risk <= 0:
        return out
    order, g, tt = _in_gpu_time_order(gpu, at)
    w = _wore_rows(gpu, at, risk_ecc, thresholds)[order]
    last = np.maximum.accumulate(np.where(w, np.arange(n), -1))
    j = np.maximum(last, 0)
    out[order] = w | ((last >= 0) & (g[j] == g) & (tt - tt[j] < as_ns(thresholds.remap_hold_clear_s)))
    return out


def recently_wore(
    stored: Sequence[tuple[str, Any]], risk_ecc: Any, now: pd.Timestamp, thresholds: Thresholds
) -> set[str]:
    """The GPUs whose ECC risk held `remap_hold_risk` (for `remap_hold_for_s`) at one of their stored
    rounds (gpu_uuid, scored_at; the risk of each, NaN where unknown) less than `remap_hold_clear_s`
    before `now`: what `ecc_wore` reads from the rows before this round, for the service and
    `gpuhealth score`, whose pending remap's drain then stands (`policy.decide`'s `drained`)."""
    if not stored:
        return set()
    at = pd.DatetimeIndex([pd.Timestamp(r[1]) for r in stored])
    return wore_recently(np.asarray([r[0] for r in stored], dtype=object), at, risk_ecc, now, thresholds)


def wore_recently(gpu: np.ndarray, at: Any, risk_ecc: Any, now: pd.Timestamp, thresholds: Thresholds) -> set[str]:
    """`recently_wore` of stored rounds given as columns: their GPUs and times (aware or naive UTC)."""
    if not len(gpu) or thresholds.remap_hold_risk <= 0 or thresholds.remap_hold_clear_s <= 0:
        return set()
    gpu = np.asarray(gpu, dtype=object)
    recent = naive_utc(at) > naive_utc([now])[0] - as_ns(thresholds.remap_hold_clear_s)
    return {str(u) for u in gpu[_wore_rows(gpu, at, risk_ecc, thresholds) & recent]}


def apply_waits(rows: pd.DataFrame, thresholds: Thresholds) -> pd.DataFrame:
    """Hourly (GPU, cutoff) rows (`score.hour_rows`) with `demote`, `probation` and `alert` decided as
    the service decides them round by round: a model demote stands once the risk has held its
    riskiest head's wait (a thermal one at light load its own) unless a node finding holds it
    (`held`), a GPU a drain or RMA let go is demoted while on probation, and a demote is held while
    the risk stays at the release level (`held_demotes`), as is one on heat alone (`on_heat`: the core's
    heat has held `Thresholds.thermal_heat_z` for `thermal_heat_for_s`); `alert` adds the drain/RMA
    rules (`rule_act`) and a pending remap whose memory wears (`remap_alone` but `remap_held`):
    `out_of_service`."""
    high = (rows["risk"] >= thresholds.demote).to_numpy()
    gpu = rows["gpu_uuid"].to_numpy()
    since = high_since(gpu, rows["cutoff"], high)
    mode, _ = top_heads(rows)
    out = rows.copy()
    pending, _ = demote_waits(rows, since, thresholds, mode)
    out["remap_held"] = remap_held(rows, thresholds)
    act = out_of_service(rows, out["remap_held"].to_numpy())
    risk = rows["risk"].to_numpy(dtype=np.float64)
    out["probation"] = np.zeros(len(rows), dtype=bool)
    if thresholds.probation_for_s > 0:
        released = probation_began(gpu, rows["cutoff"], act, risk, thresholds)
        out["probation"] = on_probation(rows["cutoff"], released, act, risk, thresholds)
    # A thermal demote on heat alone once the core's heat has held its level (`heat_held`).
    hot = heat_alone(rows, thresholds)
    out["on_heat"] = hot & heat_held(rows["cutoff"], high_since(gpu, rows["cutoff"], hot), thresholds)
    demoted = (high & ~rows["held"].to_numpy(dtype=bool) & ~pending) | out["probation"].to_numpy() | out["on_heat"]
    out["demote"] = held_demotes(gpu, rows["cutoff"], demoted, act, risk, thresholds)
    out["out_of_service"] = act
    out["alert"] = out["demote"] | act
    return out


def _in_gpu_time_order(gpu: Any, at: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The order of (GPU, time) rows by GPU, then time; the GPUs and naive UTC times in that order."""
    t = naive_utc(at)
    order = np.lexsort((t, pd.factorize(np.asarray(gpu))[0]))
    return order, np.asarray(gpu)[order], t[order]


def _run_starts(g: np.ndarray, flag: np.ndarray) -> np.ndarray:
    """Per row, rows in GPU-time order (GPUs `g`): whether a run of its GPU's consecutive flagged rows starts."""
    return np.asarray(flag & ~np.r_[False, (g[1:] == g[:-1]) & flag[:-1]])
