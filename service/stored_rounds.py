"""The rounds before a cutoff as the service's store keeps them: `StoredRounds`, the scoring loop's
`PastRounds` (`gpuhealth score` rebuilds the same from a history's hours, `predictor.history_rounds`).

The runs (of the risk at the demote level, of the heat alone, of the ECC risk at the remap hold's
level) are read from the stored rounds (`Decisions.round_columns`); the probation, the hold and whether a
drain stands from the standing decisions. A restart or another replica therefore keeps every clock.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from predictor.conditions import HEAT_COLUMNS, heat_counts
from predictor.replay import run_began, wore_recently
from predictor.thresholds import Thresholds
from store import Store


class StoredRounds:
    """`PastRounds` read from the store's rounds and standing decisions before the cutoff, under the
    thresholds of the round that asks (the active model's remap hold included)."""

    def __init__(self, store: Store, thresholds: Thresholds) -> None:
        self.store = store
        self.thresholds = thresholds

    def risk_since(self, uuids: list[str], cutoff: pd.Timestamp) -> dict[str, pd.Timestamp]:
        """When each GPU's risk rose to the demote threshold, from the stored rounds before this one."""
        th = self.thresholds
        with np.errstate(invalid="ignore"):
            return self._run_began(uuids, cutoff, th.longest_wait, ("risk",), lambda v: v[:, 0] >= th.demote)

    def heat_since(self, uuids: list[str], cutoff: pd.Timestamp) -> dict[str, pd.Timestamp]:
        """When each GPU's run of rounds whose core heat alone counts began, from the stored rounds before this one."""
        th = self.thresholds
        return self._run_began(uuids, cutoff, th.heat_hold, HEAT_COLUMNS, lambda v: heat_counts(v[:, 0], v[:, 1], th))

    def ecc_since(self, uuids: list[str], cutoff: pd.Timestamp) -> dict[str, pd.Timestamp]:
        """When each GPU's ECC risk rose to the level a pending remap's drain waits for, from the stored rounds."""
        th = self.thresholds
        span = pd.Timedelta(seconds=th.remap_hold_for_s)
        with np.errstate(invalid="ignore"):
            return self._run_began(uuids, cutoff, span, ("risk_ecc",), lambda v: v[:, 0] >= th.remap_hold_risk)

    def drained(self, uuids: list[str], cutoff: pd.Timestamp) -> set[str]:
        """The GPUs whose pending remap's drain stands: their standing decision is a drain or RMA, or
        their ECC risk held the hold's level within `remap_hold_clear_s` (`replay.recently_wore`, the
        stored rounds)."""
        th = self.thresholds
        stands = set(self.store.decisions.drained(uuids))
        if th.remap_hold_clear_s > 0:
            span = pd.Timedelta(seconds=th.remap_hold_clear_s + th.remap_hold_for_s) + pd.Timedelta(hours=1)
            gpu, at, risk = self.store.decisions.round_columns(
                uuids, (cutoff - span).to_pydatetime(), cutoff.to_pydatetime(), of=("risk_ecc",)
            )
            stands |= wore_recently(gpu, at, risk[:, 0], cutoff, th)
        return stands

    def released(self, uuids: list[str], cutoff: pd.Timestamp) -> dict[str, pd.Timestamp]:
        """When a drain or RMA let each GPU go, where its standing decision continues that release."""
        went = self.store.decisions.released_at(uuids, cutoff.to_pydatetime())
        return {u: pd.Timestamp(t) for u, t in went.items()}

    def demoted(self, uuids: list[str], cutoff: pd.Timestamp) -> dict[str, pd.Timestamp]:
        """Since when each GPU's standing decision is a demote (a demote is held while its risk stays high)."""
        return {u: pd.Timestamp(t) for u, t in self.store.decisions.demoted_since(uuids).items()}

    def _run_began(
        self,
        uuids: list[str],
        cutoff: pd.Timestamp,
        span: pd.Timedelta,
        of: tuple[str, ...],
        counts: Callable[[np.ndarray], np.ndarray],
    ) -> dict[str, pd.Timestamp]:
        """When each GPU's run of stored rounds that `counts` (by their `of`, `Decisions.round_columns`, one
        column each, NaN where null) began, read over `span` and an hour before the cutoff."""
        lookback = cutoff - span - pd.Timedelta(hours=1)
        gpu, at, values = self.store.decisions.round_columns(
            uuids, lookback.to_pydatetime(), cutoff.to_pydatetime(), of=of
        )
        return run_began(gpu, at, counts(values), uuids, cutoff)
