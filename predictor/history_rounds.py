"""The rounds before a cutoff rebuilt from the history's own hours: `HistoryRounds`, the `PastRounds`
of `gpuhealth score`, which has no stored rounds (the service's are `service.stored_rounds`).

Each question scores the asked GPUs again at every hour of the span it needs before the cutoff
(`score.hour_rows`, the whole fleet's history feeding the features) and decides those hours as the
service decides its rounds (`replay`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import pandas as pd

from predictor.conditions import WAIT_INPUTS, heat_alone
from predictor.features import STALE_S, build_features
from predictor.model import MODES, RiskModel
from predictor.replay import (
    apply_waits,
    high_since,
    out_of_service,
    probation_began,
    recently_wore,
    remap_held,
    stored_run_began,
)
from predictor.score import hour_rows, too_little_history, up_to
from predictor.thresholds import Thresholds

HOLD_LOOKBACK = pd.Timedelta(days=30)
"""How far back `gpuhealth score` rebuilds the hours to find a standing demote (the service reads
it from its stored decisions, however old): a demote older than this, whose risk has held at the
release level since, is not seen."""
HOURS_PER_PASS = 96
"""Hourly cutoffs whose features are built at once when the history is scored again (memory)."""


class HistoryRounds:
    """`PastRounds` read from the history itself, as the service's stored rounds and decisions would
    say (`gpuhealth score` has none of its own): the asked GPUs' rounds at every hour before the cutoff
    are scored again and decided as the service decides them (`replay.apply_waits`). The hours of the
    last question are kept, so a question about fewer GPUs over no longer a span (the hold's after the
    probation's) builds nothing again. Where it answers otherwise than the service's stored rounds:
    `past`'s docstring."""

    def __init__(
        self, model: RiskModel, frame: pd.DataFrame, thresholds: Thresholds, failures: pd.DataFrame | None = None
    ) -> None:
        self.model, self.frame, self.th, self.failures = model, frame, thresholds, failures
        self._kept: tuple[pd.Timestamp, pd.Timedelta, set[str], pd.DataFrame] | None = None

    def hours(self, uuids: list[str], cutoff: pd.Timestamp, span: pd.Timedelta) -> pd.DataFrame:
        """The GPUs' rounds at every hour of `span` before the cutoff (`_hours_before`)."""
        k = self._kept
        if k is not None and k[0] == cutoff and k[1] >= span and set(uuids) <= k[2]:
            rows = k[3]
            return rows[rows["gpu_uuid"].isin(uuids) & (rows["cutoff"] >= cutoff - span)].reset_index(drop=True)
        rows = _hours_before(self.model, self.frame, uuids, cutoff, span, self.th, self.failures)
        self._kept = (cutoff, span, set(uuids), rows)
        return rows

    def risk_since(self, uuids: list[str], cutoff: pd.Timestamp) -> Mapping[str, pd.Timestamp]:
        """When each GPU's run at the demote level began (`score`'s `risk_since`)."""
        with np.errstate(invalid="ignore"):
            return self._run_began(uuids, cutoff, self.th.longest_wait, lambda rows: rows["risk"] >= self.th.demote)

    def heat_since(self, uuids: list[str], cutoff: pd.Timestamp) -> Mapping[str, pd.Timestamp]:
        """When each GPU's run of rounds whose heat alone counts began (`score`'s `heat_since`)."""
        return self._run_began(uuids, cutoff, self.th.heat_hold, lambda rows: heat_alone(rows, self.th))

    def _run_began(
        self,
        uuids: list[str],
        cutoff: pd.Timestamp,
        span: pd.Timedelta,
        counts: Callable[[pd.DataFrame], Any],
    ) -> Mapping[str, pd.Timestamp]:
        """When each GPU's run of rounds that `counts` (per hour row) began, from its hours over `span`
        before the cutoff (`replay.stored_run_began`, as the service's stored rounds)."""
        rows = self.hours(uuids, cutoff, span)
        return stored_run_began(list(zip(rows["gpu_uuid"], rows["cutoff"], strict=True)), counts(rows), uuids, cutoff)

    def ecc_since(self, uuids: list[str], cutoff: pd.Timestamp) -> Mapping[str, pd.Timestamp]:
        """When each GPU's run of rounds with its ECC risk at `remap_hold_risk` began (`score`'s `ecc_since`)."""
        span, level = pd.Timedelta(seconds=self.th.remap_hold_for_s), self.th.remap_hold_risk
        with np.errstate(invalid="ignore"):
            return self._run_began(uuids, cutoff, span, lambda rows: rows["risk_ecc"] >= level)

    def drained(self, uuids: list[str], cutoff: pd.Timestamp) -> set[str]:
        """The GPUs whose pending remap's drain stands (`score`'s `drained`), from their hours over
        HOLD_LOOKBACK: their last round was a drain or RMA (a drain the hold let stand is found by
        replaying its run of such rounds), or their ECC risk held the hold's level within
        `remap_hold_clear_s` (`replay.recently_wore`)."""
        rows = self.hours(uuids, cutoff, max(HOLD_LOOKBACK, pd.Timedelta(seconds=self.th.remap_hold_clear_s
                                                                           + self.th.remap_hold_for_s)))  # fmt: skip
        if len(rows) == 0:
            return set()
        decided = apply_waits(rows, self.th)
        last = _last_rounds(rows)
        out = {str(u) for u, o in zip(rows["gpu_uuid"].to_numpy()[last], decided["out_of_service"].to_numpy()[last],
                                      strict=True) if o}  # fmt: skip
        stored = list(zip(rows["gpu_uuid"], rows["cutoff"], strict=True))
        return out | recently_wore(stored, rows["risk_ecc"].to_numpy(dtype=np.float64), cutoff, self.th)

    def released(self, uuids: list[str], cutoff: pd.Timestamp) -> Mapping[str, pd.Timestamp]:
        """When a drain or RMA let each GPU go (`score`'s `released`)."""
        rows = self.hours(uuids, cutoff, pd.Timedelta(seconds=self.th.probation_for_s))
        if len(rows) == 0:
            return {}
        # The rounds before, then this one: no drain or RMA holds now and the risk is high (asked).
        gpu = np.r_[rows["gpu_uuid"].to_numpy(), np.asarray(uuids, dtype=object)]
        at = pd.DatetimeIndex([*rows["cutoff"], *[cutoff] * len(uuids)])
        out = np.r_[out_of_service(rows, remap_held(rows, self.th)), np.zeros(len(uuids), dtype=bool)]
        risk = np.r_[rows["risk"].to_numpy(dtype=np.float64), np.ones(len(uuids))]
        began = probation_began(gpu, at, out, risk, self.th)[len(rows) :]
        return {u: pd.Timestamp(b).tz_localize("UTC") for u, b in zip(uuids, began, strict=True) if not np.isnat(b)}

    def demoted(self, uuids: list[str], cutoff: pd.Timestamp) -> Mapping[str, pd.Timestamp]:
        """Since when each GPU's last round was a demote, not a drain or RMA (`score`'s `demoted`):
        the run of demote rounds its last round ends, as the store's standing demote began."""
        rows = self.hours(uuids, cutoff, max(HOLD_LOOKBACK, pd.Timedelta(seconds=self.th.probation_for_s)))
        if len(rows) == 0:
            return {}
        decided = apply_waits(rows, self.th)
        standing = decided["demote"].to_numpy(dtype=bool) & ~decided["out_of_service"].to_numpy(dtype=bool)
        gpu = rows["gpu_uuid"].to_numpy()
        since = high_since(gpu, rows["cutoff"], standing)
        last = _last_rounds(rows)
        return {str(u): pd.Timestamp(t).tz_localize("UTC") for u, t in zip(gpu[last], since[last], strict=True)
                if not np.isnat(t)}  # fmt: skip


def _last_rounds(rows: pd.DataFrame) -> np.ndarray:
    """The position of each GPU's last round among hour rows (`_hours_before`'s, a RangeIndex)."""
    return rows.groupby("gpu_uuid")["cutoff"].idxmax().to_numpy()


def _hours_before(
    model: RiskModel,
    frame: pd.DataFrame,
    uuids: list[str],
    cutoff: pd.Timestamp,
    span: pd.Timedelta,
    th: Thresholds,
    failures: pd.DataFrame | None,
) -> pd.DataFrame:
    """The GPUs' rounds (`hour_rows`) at every hour of `span` before the cutoff (within the history),
    as the service's rounds would have scored them: the whole fleet's history feeds the features
    (peers), their nodes' GPUs the node findings, and only the asked GPUs' rows are kept; risk is NaN
    with too little history."""
    hours = int(np.ceil(span / pd.Timedelta(hours=1)))
    if hours <= 0 or not uuids:
        return _no_hours()
    cuts = pd.DatetimeIndex([cutoff - pd.Timedelta(hours=k) for k in range(hours, 0, -1)])
    cuts = cuts[cuts >= frame["timestamp"].min()]
    if len(cuts) == 0:
        return _no_hours()
    past, asked = up_to(frame, cuts[-1]), set(uuids)
    hosts = set(frame.loc[frame["gpu_uuid"].astype(str).isin(asked), "hostname"].astype(str))
    parts = []
    for i in range(0, len(cuts), HOURS_PER_PASS):
        x = build_features(past, cuts[i : i + HOURS_PER_PASS], stale_s=STALE_S, failures=failures)
        x = x[x["hostname"].astype(str).isin(hosts)].reset_index(drop=True)
        rows = hour_rows(model, x, th) if len(x) else None
        if rows is not None:
            rows["risk"] = np.where(too_little_history(x), np.nan, rows["risk"].to_numpy())
            parts.append(rows[x["gpu_uuid"].astype(str).isin(asked).to_numpy()])
    if not parts:
        return _no_hours()
    rows = pd.concat(parts, ignore_index=True)
    rows["gpu_uuid"] = rows["gpu_uuid"].astype(str)
    return rows


def _no_hours() -> pd.DataFrame:
    """`_hours_before`'s answer where there are no hours: `hour_rows`' columns, no rows."""
    cols = ["gpu_uuid", "hostname", "model_name", "risk", *[f"risk_{m}" for m in MODES], *WAIT_INPUTS]
    out = pd.DataFrame({c: pd.Series(dtype=object if c in cols[:3] else np.float64) for c in cols})
    out["cutoff"] = out["last_seen"] = pd.to_datetime([], utc=True)
    for c in ("rule_alert", "rule_act", "held"):
        out[c] = pd.Series(dtype=bool)
    return out
