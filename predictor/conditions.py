"""The per-round conditions the policy reads from the levels of `Thresholds`: per row whether a demote
by the model still waits, whether the core's heat alone counts, whether a GPU is on probation.

A model demote stands once its risk has held its riskiest head's wait (`Thresholds.wait_for`),
longer at light load (`light_wait`: unless the memory-core spread stands out), on a link that
replays out of habit (`habitual_link`) and where no reading of the GPU's own cooling corroborates a
thermal one (`uncorroborated`), at once where two readings agree (`witnesses_agree`); `demote_waits`
is the one path `policy.decide` and `replay.apply_waits` share. The core's heat alone demotes once it
has counted for its hold (`heat_alone`, `heat_held`). A GPU a drain or RMA let go is on probation
while its risk stays high (`on_probation`). A pending remap's reset waits for idle (`remap_waits`). The
reasons say why, in sentences (`predictor.reasons`).

The policy reads these, these read the levels: `policy` -> `conditions` -> `thresholds`, one way.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from predictor.thresholds import HEADS, Thresholds


def light_load(share: Any, thresholds: Thresholds) -> np.ndarray:
    """Per row: whether the GPU is at light load, its 6 h power under `light_load_share` of its
    baseline's (`heat_load_share`, NaN: not known, so not light)."""
    x = np.asarray(share, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        return np.asarray(x < thresholds.light_load_share)


def light_wait(share: Any, spread_z: Any, thresholds: Thresholds) -> np.ndarray:
    """Per row: whether a thermal demote waits the light-load wait (`light_load_demote_for_s`): the GPU
    is at light load (`light_load`) and its memory-core spread is under `light_load_spread_z` σ (a
    level of 0: the spread never shortens it; NaN: not known, so it does not)."""
    return light_load(share, thresholds) & ~_reaches(spread_z, thresholds.light_load_spread_z)


def uncorroborated(vs_node_z: Any, spread_z: Any, light: Any, thresholds: Thresholds) -> np.ndarray:
    """Per row: whether no reading of the GPU's own cooling corroborates a thermal demote: its heat over
    its node's in its own spread of that and its memory-core spread both known and both under
    `thermal_corroborate_z` σ (0: never), and the GPU not at light load (`light`)."""
    level = thresholds.thermal_corroborate_z
    with np.errstate(invalid="ignore"):
        low = (np.asarray(vs_node_z, dtype=float) < level) & (np.asarray(spread_z, dtype=float) < level)
    return np.asarray((level > 0) & low & ~np.asarray(light, dtype=bool))


def thermal_conditions(
    share: Any, spread_z: Any, vs_node_z: Any, thresholds: Thresholds
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per row, what sets a thermal demote's wait: at light load (`light_load`, where no witness cuts
    it), waiting the light-load wait (`light_wait`), and no reading corroborating it (`uncorroborated`).
    The one reading of them `demote_waits` and `pending_reason` share."""
    light = light_load(share, thresholds)
    return light, light_wait(share, spread_z, thresholds), uncorroborated(vs_node_z, spread_z, light, thresholds)


def habitual_link(surprise: Any, thresholds: Thresholds) -> np.ndarray:
    """Per row: whether its link replays out of habit, its hours with new replays over 6 h less
    than `pcie_surprise_z` σ out of its own month (`replay_surprise_6h`, NaN: not known, so habit)."""
    x = np.asarray(surprise, dtype=np.float64)
    if thresholds.pcie_surprise_z <= 0:
        return np.zeros(x.shape, dtype=bool)
    with np.errstate(invalid="ignore"):
        return np.asarray(~(x >= thresholds.pcie_surprise_z))


def pending_demote(
    cutoff: np.ndarray,
    since: np.ndarray,
    thresholds: Thresholds,
    mode: Any,
    light: Any = None,
    habit: Any = None,
    alone: Any = None,
) -> np.ndarray:
    """Per row: whether a demote by the model still waits for its risk to hold the wait of its
    riskiest head `mode` (`Thresholds.wait_for`, at light load where `light`, on a link replaying
    out of habit where `habit`, with no reading to corroborate it where `alone`; since NaT: the run
    begins now)."""
    return np.asarray(run_length(cutoff, since) < thresholds.wait_for(mode, light, habit, alone))


def run_length(at: Any, since: Any) -> np.ndarray:
    """Per row: how long a run begun at `since` (NaT: at this round, so 0) has lasted by `at`, as
    timedelta64[ns]: what a wait, a hold or a probation is measured with."""
    c, s = naive_utc(at), naive_utc(since)
    return c - np.where(np.isnat(s), c, s)


def remap_waits(at: Any, since: Any, risk_ecc: Any, thresholds: Thresholds) -> np.ndarray:
    """Per round: whether a pending remap's reset waits for idle at watch (NVIDIA's guide): the ECC risk
    has not held `remap_hold_risk` for `remap_hold_for_s` (`since`: when its run at the level began; NaT:
    this round); unknown (NaN) shows no wear, and waits; a level of 0 never waits (the operator's
    choice of a drain at once). Whether the GPU was drained already is the caller's (`replay.remap_held`,
    `policy.decide`'s `drained`): a drain stands."""
    r = np.asarray(risk_ecc, dtype=np.float64)
    if thresholds.remap_hold_risk <= 0:
        return np.zeros(r.shape, dtype=bool)
    with np.errstate(invalid="ignore"):
        at_level = r >= thresholds.remap_hold_risk
    wore = at_level & (run_length(at, since) >= as_ns(thresholds.remap_hold_for_s))
    return np.asarray(~wore)


def as_ns(seconds: float) -> np.timedelta64:
    """A duration in seconds (a `Thresholds` field) as timedelta64[ns], to compare a `run_length` with."""
    return np.timedelta64(round(seconds * 1e9), "ns")


WAIT_INPUTS = ("heat_load_share", "heat_excess_z", "mem_spread_z", "replay_surprise_6h", "heat_vs_node_own_z")
"""The feature columns a model demote's wait (`demote_waits`) and the demote on heat alone
(`heat_alone`) read beside the risk: kept with the hourly rows that are decided again under other
waits (`score.hour_rows`)."""


def witnesses_agree(table: pd.DataFrame, mode: Any, light: Any, thresholds: Thresholds) -> np.ndarray:
    """Per row of `table` (features, or `score.hour_rows`' rows): whether its demote, thermal by its
    riskiest head `mode`, stands without its wait because two readings of the GPU's own cooling agree
    (`Thresholds.thermal_agree_z`, `thermal_agree_heat_z`), the memory-core spread alone is wide
    (`Thresholds.thermal_spread_z`) or its heat over its node's stands out of its own spread of that
    (`Thresholds.thermal_agree_vs_node_z`); never at light load (`light`)."""
    both, wide, over_node = cooling_witnesses(
        feature_column(table, "heat_excess_z"),
        feature_column(table, "mem_spread_z"),
        feature_column(table, "heat_vs_node_own_z"),
        thresholds,
    )
    thermal = np.asarray(mode, dtype=object) == HEADS["risk_thermal"]
    return np.asarray((both | wide | over_node) & thermal & ~np.asarray(light, dtype=bool))


def cooling_witnesses(
    heat_z: Any, spread_z: Any, vs_node_z: Any, thresholds: Thresholds
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Whether the core's heat and the memory-core spread agree (the heat at `thermal_agree_heat_z`, the
    spread at `thermal_agree_z`), whether the spread alone is wide (at `thermal_spread_z`), and whether
    the heat over its node's stands out (at `thermal_agree_vs_node_z`); a level of 0 never holds
    (`thermal_agree_z`, `thermal_spread_z`, `thermal_agree_vs_node_z`), nor does NaN."""
    th = thresholds
    heat = np.asarray(heat_z, dtype=float)
    with np.errstate(invalid="ignore"):
        both = _reaches(spread_z, th.thermal_agree_z) & (heat >= th.thermal_agree_heat_z)
    return both, _reaches(spread_z, th.thermal_spread_z), _reaches(vs_node_z, th.thermal_agree_vs_node_z)


def _reaches(z: Any, level: float) -> np.ndarray:
    """Per value: whether it is at `level` σ or above, where a level of 0 means never (the policy's
    switch for each of its σ levels) and an unknown value (NaN) never reaches any."""
    with np.errstate(invalid="ignore"):
        return np.asarray((level > 0) & (np.asarray(z, dtype=float) >= level))


def demote_waits(
    table: pd.DataFrame, since: np.ndarray, thresholds: Thresholds, mode: Any
) -> tuple[np.ndarray, np.ndarray]:
    """Per row of `table` (with `cutoff` and `WAIT_INPUTS`): whether a demote by the model still waits
    (`pending_demote`, with the light-load and uncorroborated waits of `thermal_conditions` and the
    habitual link's), and whether it would, but two readings agree (`witnesses_agree`, never at light
    load) and it stands now."""
    light, long, alone = thermal_conditions(
        feature_column(table, "heat_load_share"),
        feature_column(table, "mem_spread_z"),
        feature_column(table, "heat_vs_node_own_z"),
        thresholds,
    )
    habit = habitual_link(feature_column(table, "replay_surprise_6h"), thresholds)
    pending = pending_demote(table["cutoff"], since, thresholds, mode, long, habit, alone)
    agree = pending & witnesses_agree(table, mode, light, thresholds)
    return pending & ~agree, agree


HEAT_COLUMNS = ("heat_z", "heat_vs_node_z")
"""The heat a round judged (`judged_heats`), as `score` names it and the service stores it with each
round (`risk_scores`), so a later round reads how long it has counted (`heat_counts`, `heat_held`)."""


def judged_heats(table: pd.DataFrame, thresholds: Thresholds) -> tuple[np.ndarray, np.ndarray]:
    """Per row of `table` (features, or `score.hour_rows`' rows): the core's heat as a demote on heat
    alone judges it (HEAT_COLUMNS): its heat over both its own past and its node (`heat_excess_z`), and
    its heat over its node's in its own spread of that (`heat_vs_node_own_z`); NaN at light load
    (`light_load`, where heat is judged by extrapolation) or where not known."""
    light = light_load(feature_column(table, "heat_load_share"), thresholds)
    return (
        np.where(light, np.nan, feature_column(table, "heat_excess_z")),
        np.where(light, np.nan, feature_column(table, "heat_vs_node_own_z")),
    )


def heat_counts(heat_z: Any, vs_node_z: Any, thresholds: Thresholds) -> np.ndarray:
    """Per round judged (`judged_heats`' two values, NaN where not known): whether the core's heat alone
    counts toward a thermal demote on heat: `heat_z` at `Thresholds.thermal_heat_z`, or `vs_node_z` at
    `thermal_heat_vs_node_z` with `heat_z` at `thermal_heat_vs_node_excess_z`. A level of 0 never
    counts. No node finding holds it: `heat_excess_z` is the lesser of the GPU's heat over its own
    past and over its node, and the other stands against its node's, so such a GPU stands out of its node."""
    th = thresholds
    with np.errstate(invalid="ignore"):
        own = np.asarray(heat_z, dtype=float) >= th.thermal_heat_vs_node_excess_z
    return _reaches(heat_z, th.thermal_heat_z) | (_reaches(vs_node_z, th.thermal_heat_vs_node_z) & own)


def heat_alone(table: pd.DataFrame, thresholds: Thresholds) -> np.ndarray:
    """Per row of `table`: whether the core's heat alone counts toward a thermal demote on heat
    (`heat_counts` of its `judged_heats`). Never at light load or where the heat is not known."""
    return heat_counts(*judged_heats(table, thresholds), thresholds)


def heat_held(cutoff: Any, since: np.ndarray, thresholds: Thresholds) -> np.ndarray:
    """Per row whose heat counts (`heat_alone`): whether its run of such rounds, begun at `since` (NaT:
    in this round), has held `thermal_heat_for_s` by the cutoff: a thermal demote on heat alone."""
    return np.asarray(run_length(cutoff, since) >= as_ns(thresholds.thermal_heat_for_s))


def on_probation(at: Any, began: np.ndarray, out: np.ndarray, risk: np.ndarray, thresholds: Thresholds) -> np.ndarray:
    """Per row: whether the GPU is on probation, demoted after a drain or RMA let it go at `began`
    (`replay.probation_began`, or the store's; NaT: none): no drain or RMA holds now (`out` false), its
    risk is at `probation_risk` or above and the release is under `probation_for_s` old."""
    b = np.asarray(began, dtype="datetime64[ns]")
    with np.errstate(invalid="ignore"):
        high = np.asarray(risk, dtype=np.float64) >= thresholds.probation_risk
    young = run_length(at, b) < as_ns(thresholds.probation_for_s)
    return np.asarray(~np.asarray(out, dtype=bool) & high & ~np.isnat(b) & young)


def naive_utc(t: Any) -> np.ndarray:
    """Times (aware or naive UTC, any unit) as naive UTC datetime64[ns]."""
    idx = pd.DatetimeIndex(t)
    return (idx.tz_convert(None) if idx.tz is not None else idx).as_unit("ns").to_numpy()


def feature_column(features: pd.DataFrame, name: str) -> np.ndarray:
    """A numeric feature column as float64 (NaN where missing, all NaN when the frame lacks it)."""
    if name not in features.columns:
        return np.full(len(features), np.nan)
    return pd.to_numeric(features[name], errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
