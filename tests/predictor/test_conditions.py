"""The per-round conditions the policy reads from the levels (`predictor.conditions`): a pending remap's
wait, the probation, the core's heat alone."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd

from predictor.conditions import heat_alone, heat_counts, heat_held, on_probation, remap_waits
from predictor.reasons import heat_reason
from predictor.thresholds import Thresholds


def _t(hours: list[float]) -> pd.DatetimeIndex:
    return pd.DatetimeIndex([pd.Timestamp("2026-03-01", tz="UTC") + pd.Timedelta(hours=h) for h in hours])


def test_remap_waits_while_the_ecc_risk_has_not_held_the_level() -> None:
    th = Thresholds(remap_hold_risk=0.3, remap_hold_for_s=2 * 3600)
    at = _t([10] * 5)
    since = _t([10, 9, 8, 7, 10]).tz_convert(None).to_numpy().copy()
    since[0] = np.datetime64("NaT")  # at the level from this round on
    risk = np.asarray([0.5, 0.5, 0.5, 0.2, np.nan])
    # 0 h and 1 h at the level wait; 2 h does not; under the level waits; unknown shows no wear, and waits
    assert remap_waits(at, since, risk, th).tolist() == [True, True, False, True, True]
    assert not remap_waits(at, since, risk, Thresholds(remap_hold_risk=0.0)).any()  # 0: a drain at once


def test_on_probation_needs_no_drain_now_a_high_risk_and_a_recent_release() -> None:
    th = Thresholds(probation_risk=0.2, probation_for_s=24 * 3600)
    at = _t([30, 30, 30, 30, 30, 30])
    began = _t([10, 10, 6, 10, 10, 10]).tz_convert(None).to_numpy().copy()
    began[5] = np.datetime64("NaT")
    out = np.asarray([False, True, False, False, False, False])
    risk = np.asarray([0.2, 0.9, 0.9, 0.19, np.nan, 0.9])
    # a release 24 h old is over; a risk under 0.2 or unknown is no probation; none without a release
    assert on_probation(at, began, out, risk, th).tolist() == [True, False, False, False, False, False]


def test_heat_alone_counts_the_core_heat_at_its_level_and_not_at_light_load() -> None:
    table = pd.DataFrame(
        {"heat_excess_z": [5.0, 3.9, 5.0, np.nan, 4.0], "heat_load_share": [1.0, 1.0, 0.3, 1.0, np.nan]}
    )
    assert heat_alone(table, Thresholds(thermal_heat_z=4.0)).tolist() == [True, False, False, False, True]
    assert not heat_alone(table, Thresholds(thermal_heat_z=0.0)).any()  # 0: never
    assert not heat_alone(table.drop(columns="heat_excess_z"), Thresholds(thermal_heat_z=4.0)).any()
    # The heat over its node's in its own spread counts at its level with some heat of its own; the
    # yardsticks are ORed, each off at 0; NaN (a young GPU, no node) never counts.
    table["heat_vs_node_own_z"] = [0.0, 5.0, 9.0, 9.0, np.nan]
    table["heat_excess_z"] = [5.0, 2.0, 2.0, np.nan, 1.9]
    th = Thresholds(thermal_heat_z=4.0, thermal_heat_vs_node_z=5.0, thermal_heat_vs_node_excess_z=2.0)
    assert heat_alone(table, th).tolist() == [True, True, False, False, False]
    assert heat_alone(table, replace(th, thermal_heat_vs_node_z=0.0)).tolist() == [True, False, False, False, False]
    assert heat_alone(table, replace(th, thermal_heat_z=0.0)).tolist() == [False, True, False, False, False]
    assert heat_counts([1.9, 2.0, np.nan], [5.0, 4.9, 9.0], th).tolist() == [False, False, False]
    # Held: the run began 6 h or more before the cutoff; NaT is a run that begins in this round.
    th = Thresholds(thermal_heat_z=4.0, thermal_heat_for_s=6 * 3600)
    since = np.asarray(_t([0, 1, 0]).tz_convert(None).to_numpy(), dtype="datetime64[ns]")
    since[2] = np.datetime64("NaT")
    assert heat_held(_t([6, 6, 6]), since, th).tolist() == [True, False, False]
    assert heat_held(_t([6]), since[2:], Thresholds(thermal_heat_z=4.0, thermal_heat_for_s=0)).tolist() == [True]
    reason = heat_reason(5.04, np.nan, pd.Timestamp("2026-03-01 02:00", tz="UTC"), th)
    assert reason.startswith(
        "thermal demote on heat alone: the core runs +5.0 σ hot against its own past and its "
        "node, at 4 σ or more in every round since 2026-03-01 02:00 UTC (the hold: 6 h)"
    )
