"""What carries over between scoring rounds: `PastRounds`, the questions a round asks of the rounds
before it (`score.score` asks them; `policy.CarriedOver` holds the answers per row for `policy.decide`).

Two implementations answer them:

- the service's stored rounds (`service.stored_rounds.StoredRounds`): its store's rounds (risk, ECC
  risk, the heat each judged) and standing decisions, so a restart or another replica keeps every clock;
- the history's hours replayed (`history_rounds.HistoryRounds`): `gpuhealth score` has no rounds of
  its own, so the asked GPUs' rounds at every hour before the cutoff are scored again and decided as
  the service decides them (`replay.apply_waits`). The evaluation decides every hour at once
  (`replay.apply_waits`) and asks nothing.

On the same history, with the service scoring every hour on the hour from its start and nothing but
the history deciding (no lost GPU, probe finding or `on_scored` hook), they answer alike
(tests/service/test_past_rounds.py), but where they are built to differ:

- a run that began before the span a question reads (`risk_since`: the longest wait; `heat_since`:
  the heat's hold; `ecc_since`: the ECC risk's hold) is answered at the span's start, which the
  service reads an hour further back: either says the run has held the whole span, all the policy asks;
- times are those of each one's rounds: the service's (every `GPUHEALTH_SCORE_INTERVAL`), or whole hours
  before the cutoff;
- the replay reads a month back (`history_rounds.HOLD_LOOKBACK`, or `probation_for_s` where longer),
  the store however far; decisions the service raises from outside the history (a lost GPU's drain, a
  probe's watch) are in its standing decisions only;
- `released` after `probation_for_s`: the replay keeps the chain of rounds at `probation_risk` or
  above, the service's standing decision may have fallen to ok under the release level; either way
  the probation is over;
- `ecc_since` is asked only with a hold for the ECC risk (`remap_hold_for_s` > 0): without one, the
  service's answer is its last round, the replay's nothing.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Protocol

import pandas as pd


class PastRounds(Protocol):
    """The rounds before this one, asked per GPU at a cutoff (aware UTC). Each question names the GPUs
    it is asked of (those for which the answer matters now) and answers only those it has something for:
    a GPU left out has nothing carried over (a run that begins in this round, no release, no demote)."""

    def risk_since(self, uuids: list[str], cutoff: pd.Timestamp) -> Mapping[str, pd.Timestamp]:
        """(GPUs at the demote threshold now) -> when each one's risk rose to it, if before this round:
        a model demote stands once that has held its riskiest head's wait (`Thresholds.wait_for`)."""
        ...

    def released(self, uuids: list[str], cutoff: pd.Timestamp) -> Mapping[str, pd.Timestamp]:
        """(GPUs no drain or RMA holds now, at the probation risk or above) -> when a drain or RMA let each
        one go, where its rounds since continue that release (`replay.probation_began`): the probation."""
        ...

    def demoted(self, uuids: list[str], cutoff: pd.Timestamp) -> Mapping[str, pd.Timestamp]:
        """(GPUs no drain or RMA holds now, at the release level or above) -> since when each one's standing
        decision (the last round's) is a demote, for those it is (`replay.held_demotes`): the hold."""
        ...

    def heat_since(self, uuids: list[str], cutoff: pd.Timestamp) -> Mapping[str, pd.Timestamp]:
        """(GPUs whose heat alone counts now, `conditions.heat_alone`) -> when each one's run of such rounds
        began, if before this round (`conditions.heat_held`): the demote on heat alone."""
        ...

    def ecc_since(self, uuids: list[str], cutoff: pd.Timestamp) -> Mapping[str, pd.Timestamp]:
        """(GPUs whose pending remap alone would drain them now, their ECC risk at `remap_hold_risk` or
        above) -> when each one's ECC risk rose to that level, if before this round (`conditions.remap_waits`)."""
        ...

    def drained(self, uuids: list[str], cutoff: pd.Timestamp) -> Collection[str]:
        """(GPUs whose pending remap alone would drain them now) -> those whose drain stands
        (`replay.remap_held`): their standing decision (the last round's) is a drain or RMA, or their ECC
        risk held `remap_hold_risk` within `remap_hold_clear_s` before (`replay.recently_wore`)."""
        ...
