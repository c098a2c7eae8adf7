"""Decision policy: the demotes that stand whatever this round's risk (a probation, a held demote, the
core's heat alone), from what the rounds before carry over."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from predictor.policy import CarriedOver, decide
from predictor.thresholds import Thresholds
from tests.predictor.test_policy import naive, risk_frame
from tests.predictor.test_rules import HEALTHY, frame


def test_decide_demotes_on_probation_and_says_since_when_and_until_when() -> None:
    th = Thresholds()
    f = frame(HEALTHY, HEALTHY | {"xid_79_7d": 1.0}, HEALTHY, HEALTHY, HEALTHY)
    released = np.full(len(f), np.datetime64("2026-02-27T12:00", "ns"))
    released[4] = np.datetime64("NaT")
    # risks: on probation (0.15); drained by the rule; under the probation risk; the model's own demote; no release
    risk = risk_frame(f.index, [0.15, 0.15, 0.05, 0.9, 0.15], reasons=[["sbe rising"]] * 5)
    past = CarriedOver(released=released)
    out = decide(f, risk, th, carried=past)
    assert out["decision"].tolist() == ["demote", "drain", "ok", "demote", "ok"]
    first = out["reasons"].iat[0]
    assert first[0] == (
        "probation: a drain or RMA let it go on 2026-02-27 12:00 UTC, and its risk 0.15 is still at or above 0.10; "
        "interruptible work only until it falls under that, or until 2026-03-29 12:00 UTC at the latest"
    )
    assert first[1] == "risk 0.15 (ECC 0.15): sbe rising"
    assert not any(r.startswith("probation") for r in out["reasons"].iat[3])
    # No probation without the releases, or with it switched off.
    assert decide(f, risk, th)["decision"].tolist() == ["ok", "drain", "ok", "demote", "ok"]
    off = Thresholds(probation_for_s=0)
    assert decide(f, risk, off, carried=past)["decision"].tolist() == ["ok", "drain", "ok", "demote", "ok"]


def test_decide_holds_a_standing_demote_and_says_since_when() -> None:
    th = Thresholds()
    f = frame(HEALTHY, HEALTHY | {"xid_79_7d": 1.0}, HEALTHY, HEALTHY, HEALTHY)
    demoted = np.full(len(f), np.datetime64("2026-02-27T12:00", "ns"))
    demoted[4] = np.datetime64("NaT")
    # risks: held (0.4); drained by the rule; under the release level; the model's own demote; none standing
    risk = risk_frame(f.index, [0.4, 0.4, 0.29, 0.9, 0.4], reasons=[["sbe rising"]] * 5)
    past = CarriedOver(demoted=demoted)
    out = decide(f, risk, th, carried=past)
    assert out["decision"].tolist() == ["demote", "drain", "ok", "demote", "watch"]
    assert out["reasons"].iat[0] == [
        "demote held: demoted since 2026-02-27 12:00 UTC, and its risk 0.40 is still at or above 0.30; "
        "interruptible work only until it falls under that",
        "risk 0.40 (ECC 0.40): sbe rising",
    ]
    assert not any(r.startswith("demote held") for r in out["reasons"].iat[3])
    # No hold without the standing demotes; a release level of 0.5 lets the 0.4 go.
    assert decide(f, risk, th)["decision"].tolist() == ["watch", "drain", "ok", "demote", "watch"]
    assert decide(f, risk, Thresholds(release=0.5), carried=past)["decision"].tolist()[0] == "watch"


def test_decide_demotes_on_the_core_heat_alone_once_it_has_held_and_says_why() -> None:
    th = Thresholds(thermal_heat_z=4.0, thermal_heat_for_s=6 * 3600)
    hot = HEALTHY | {"heat_excess_z": 5.0, "heat_load_share": 1.0}
    f = frame(hot, hot, hot | {"heat_load_share": 0.2}, hot | {"heat_excess_z": 3.5}, hot | {"xid_79_7d": 1.0},
              hot, hot)  # fmt: skip
    # held 8 h; 5 h (too short); at light load; under the level; drained by the rule; held (with a probation); NaT
    heat_since = naive(*["2026-02-28 16:00", "2026-02-28 19:00", "2026-02-28 16:00", "2026-02-28 16:00",
                         "2026-02-28 16:00", "2026-02-28 16:00", None])  # fmt: skip
    released = naive(*[None] * 5, "2026-02-27 12:00", None)
    risk = risk_frame(f.index, [0.05, 0.05, 0.05, 0.05, 0.05, 0.15, 0.05], reasons=[["warm"]] * 7)
    out = decide(f, risk, th, carried=CarriedOver(heat_since=heat_since, released=released))
    assert out["decision"].tolist() == ["demote", "ok", "ok", "ok", "drain", "demote", "ok"]
    assert out["reasons"].iat[0] == [
        "thermal demote on heat alone: the core runs +5.0 σ hot against its own past and its node, at 4 σ or more "
        "in every round since 2026-02-28 16:00 UTC (the hold: 6 h), beyond what its power explains: check its "
        "cooling (heat sink, fans, thermal paste)",
        "risk 0.05 (ECC 0.05): warm",
    ]
    assert out["reasons"].iat[5][0].startswith("probation: ")  # one reason: the probation's comes first
    # Off (level 0), or without the rounds before: nothing on heat alone; a 0 h hold needs none.
    warm = CarriedOver(heat_since=heat_since)
    assert decide(f, risk, Thresholds(thermal_heat_z=0), carried=warm)["decision"].tolist()[0] == "ok"
    assert decide(f, risk, th)["decision"].tolist()[0] == "ok"
    at_once = decide(f, risk, Thresholds(thermal_heat_z=4.0, thermal_heat_for_s=0))["decision"].tolist()
    assert at_once == ["demote", "demote", "ok", "ok", "drain", "demote", "demote"]


def test_decide_counts_the_heat_over_its_node_in_its_own_spread_with_some_heat_of_its_own() -> None:
    """The second yardstick of the demote on heat alone: its heat over its node's at 5 σ of its own
    spread of that, with its heat over its own past and its node at 2 σ; either alone is not enough."""
    th = Thresholds(thermal_heat_z=4.0, thermal_heat_vs_node_z=5.0, thermal_heat_vs_node_excess_z=2.0,
                    thermal_heat_for_s=6 * 3600)  # fmt: skip
    hot = HEALTHY | {"heat_excess_z": 2.5, "heat_vs_node_own_z": 6.0, "heat_load_share": 1.0}
    f = frame(hot, hot | {"heat_excess_z": 1.5}, hot | {"heat_vs_node_own_z": 4.5}, hot | {"heat_load_share": 0.2},
              hot | {"heat_vs_node_own_z": float("nan")})  # fmt: skip
    heat_since = naive(*["2026-02-28 16:00"] * 5)
    risk = risk_frame(f.index, [0.05] * 5)
    warm = CarriedOver(heat_since=heat_since)
    out = decide(f, risk, th, carried=warm)
    # both; its own heat too low; the node's yardstick under 5 σ; at light load; not known (young)
    assert out["decision"].tolist() == ["demote", "ok", "ok", "ok", "ok"]
    assert out["reasons"].iat[0][0] == (
        "thermal demote on heat alone: the core runs hotter than its node's GPUs by +6.0 σ of its own spread of "
        "that difference (at 5 σ or more; the room's swings cancel against its node), and +2.5 σ hot against its "
        "own past and its node (at 2 σ or more) in every round since 2026-02-28 16:00 UTC (the hold: 6 h), "
        "beyond what its power explains: check its cooling (heat sink, fans, thermal paste)"
    )
    # Its level at 0 turns this yardstick off, and the other's at 0 leaves it on.
    off = decide(f, risk, replace(th, thermal_heat_vs_node_z=0.0), carried=warm)
    assert off["decision"].tolist()[0] == "ok"
    alone = decide(f, risk, replace(th, thermal_heat_z=0.0), carried=warm)
    assert alone["decision"].tolist() == ["demote", "ok", "ok", "ok", "ok"]
    # A GPU at 4 σ on its own yardstick says that one, whatever the other reads.
    one = frame(hot | {"heat_excess_z": 4.5})
    both = decide(one, risk_frame(one.index, [0.05]), th, carried=CarriedOver(heat_since=naive("2026-02-28 16:00")))
    assert both["reasons"].iat[0][0].startswith("thermal demote on heat alone: the core runs +4.5 σ hot against")


def test_decide_without_a_cutoff_column_judges_the_heat_alone_as_this_round_only() -> None:
    """A features frame without `cutoff` (a caller's own frame): a hot core has no rounds before this
    one, so only a 0 h hold is met; times to count to it (`heat_since`, `released`) are a clear error."""
    hot = HEALTHY | {"heat_excess_z": 5.0, "heat_load_share": 1.0}
    f = frame(hot, HEALTHY).drop(columns="cutoff")
    risk = risk_frame(f.index, [0.05, 0.05])
    assert decide(f, risk, Thresholds(thermal_heat_z=4.0, thermal_heat_for_s=6 * 3600))["decision"].tolist() == [
        "ok", "ok"]  # fmt: skip
    at_once = Thresholds(thermal_heat_z=4.0, thermal_heat_for_s=0)
    out = decide(f, risk, at_once)
    assert out["decision"].tolist() == ["demote", "ok"]
    assert "in every round since 2026-03-01 00:00 UTC" in out["reasons"].iat[0][0]  # when it was last seen
    with pytest.raises(ValueError, match="'cutoff' column in features to count heat_since to"):
        decide(f, risk, at_once, carried=CarriedOver(heat_since=naive("2026-02-28 16:00", None)))
    with pytest.raises(ValueError, match="'cutoff' column in features to count released to"):
        decide(f, risk, Thresholds(probation_for_s=3600.0), carried=CarriedOver(released=naive(None, None)))
