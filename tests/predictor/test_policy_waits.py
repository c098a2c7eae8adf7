"""Decision policy: a model demote waits until its risk has held its head's wait (longer at light load,
uncorroborated, on a habitual link), and stands at once where the witnesses agree."""

from __future__ import annotations

import numpy as np
import pandas as pd

from predictor.conditions import habitual_link, light_load, light_wait, uncorroborated, witnesses_agree
from predictor.policy import CarriedOver, decide
from predictor.thresholds import Thresholds
from tests.predictor.test_policy import naive, risk_frame
from tests.predictor.test_rules import HEALTHY, frame

# -- a model demote stands once its risk has held (an alert rule's `for:`) --------------------


def thermal(index: pd.Index, risk: list[float]) -> pd.DataFrame:
    """A risk frame whose riskiest head is thermal."""
    return risk_frame(index, risk, risk_ecc=[0.0] * len(risk), risk_thermal=risk)


def test_a_model_demote_waits_until_its_risk_has_held_demote_for() -> None:
    f = frame(HEALTHY, HEALTHY, HEALTHY, HEALTHY)
    past = CarriedOver(risk_since=naive(None, "2026-02-28 22:00", "2026-02-28 21:00", "2026-02-20"))
    out = decide(f, thermal(f.index, [0.9, 0.9, 0.9, 0.5]), Thresholds(), carried=past)
    # Began now, 2 h ago: pending; 3 h ago: it stands; a watch is no demote to wait for.
    assert out["decision"].tolist() == ["watch", "watch", "demote", "watch"]
    assert out["reasons"].iat[0][0] == (
        "demote pending: risk at or above 0.70 since 2026-03-01 00:00 UTC; "
        "it is demoted if that holds until 2026-03-01 03:00 UTC"
    )
    assert out["reasons"].iat[1][0].startswith("demote pending: risk at or above 0.70 since 2026-02-28 22:00 UTC")
    assert len(out["reasons"].iat[0]) > 1  # the model's own reasons follow
    assert not any(r.startswith("demote pending") for r in out["reasons"].iat[2] + out["reasons"].iat[3])


def test_an_ecc_demote_waits_half_a_day() -> None:
    """Memory wears out over days, a burst of corrected errors on a healthy GPU lasts hours: the
    wait is the riskiest head's, 12 h for ECC, 3 h for thermal and PCIe; PCIe's is a setting of its own."""
    f = frame(HEALTHY, HEALTHY, HEALTHY, HEALTHY)
    f["replay_surprise_6h"] = 5.0  # its link's replays are new to it (`habitual_link`: no longer wait)
    past = CarriedOver(risk_since=naive("2026-02-28 20:00", "2026-02-28 12:00", *["2026-02-28 20:00"] * 2))
    risk = risk_frame(f.index, [0.9] * 4, risk_ecc=[0.9, 0.9, 0.2, 0.2],
                      risk_thermal=[0.1, 0.1, 0.9, 0.2], risk_pcie=[0.0, 0.0, 0.0, 0.9])  # fmt: skip
    out = decide(f, risk, Thresholds(), carried=past)
    # ECC for 4 h: pending; ECC for 12 h: it stands; thermal and PCIe for 4 h: they stand.
    assert out["decision"].tolist() == ["watch", "demote", "demote", "demote"]
    assert out["reasons"].iat[0][0] == (
        "demote pending: risk at or above 0.70 since 2026-02-28 20:00 UTC; "
        "it is demoted if that holds until 2026-03-01 08:00 UTC"
    )
    same = Thresholds(ecc_demote_for_s=3 * 3600)
    assert decide(f, risk, same, carried=past)["decision"].tolist() == ["demote"] * 4
    # PCIe's own wait: 6 h holds only the PCIe demote, and its reason says until when.
    pcie = decide(f, risk, Thresholds(pcie_demote_for_s=6 * 3600), carried=past)
    assert pcie["decision"].tolist() == ["watch", "demote", "demote", "watch"]
    assert pcie["reasons"].iat[3][0].endswith("it is demoted if that holds until 2026-03-01 02:00 UTC")
    assert Thresholds().longest_wait == pd.Timedelta(hours=12)
    assert Thresholds(ecc_demote_for_s=0, pcie_demote_for_s=16 * 3600).longest_wait == pd.Timedelta(hours=16)
    none = Thresholds(
        demote_for_s=0,
        ecc_demote_for_s=0,
        pcie_demote_for_s=0,
        light_load_demote_for_s=0,
        pcie_habit_demote_for_s=0,
        uncorroborated_demote_for_s=0,
    )
    assert none.longest_wait == pd.Timedelta(0)
    off = Thresholds(
        demote_for_s=0,
        ecc_demote_for_s=0,
        pcie_demote_for_s=0,
        light_load_share=0,
        pcie_surprise_z=0,
        thermal_corroborate_z=0,
    )
    assert off.longest_wait == pd.Timedelta(0)


def test_a_thermal_demote_at_light_load_waits_half_a_day_or_for_the_load_to_return() -> None:
    """Far below its baseline's load a GPU's heat is the fitted line extrapolated (an idle GPU
    read 1-3 σ "hot" for as long as it idled): a thermal demote there waits 12 h, and stands at
    once when the load returns with the risk still high."""
    f = frame(*[HEALTHY] * 5)
    f["heat_load_share"] = [0.2, 0.2, 0.9, np.nan, 0.2]
    past = CarriedOver(risk_since=naive(*["2026-02-28 20:00", "2026-02-28 12:00"], *["2026-02-28 20:00"] * 3))
    risk = risk_frame(f.index, [0.9] * 5, risk_ecc=[0.1, 0.1, 0.1, 0.1, 0.9], risk_thermal=[0.9, 0.9, 0.9, 0.9, 0.2])
    out = decide(f, risk, Thresholds(), carried=past)
    # Idle for 4 h: pending; idle for 12 h: it stands; loaded again (0.9) or a load not known
    # (NaN) after 4 h: it stands; an ECC demote at light load keeps the ECC wait (12 h).
    assert out["decision"].tolist() == ["watch", "demote", "demote", "demote", "watch"]
    assert out["reasons"].iat[0][0] == (
        "demote pending: risk at or above 0.70 since 2026-02-28 20:00 UTC; it is demoted if that holds until "
        "2026-03-01 08:00 UTC, or sooner once its load returns: light load (6 h power 20% of its baseline's), "
        "where heat is judged by extrapolation"
    )
    assert out["reasons"].iat[4][0].endswith("it is demoted if that holds until 2026-03-01 08:00 UTC")
    # The share is a setting: 0 turns the light-load wait off; so does a wait no longer than the thermal one.
    assert decide(f, risk, Thresholds(light_load_share=0.0), carried=past)["decision"].iat[0] == "demote"
    assert decide(f, risk, Thresholds(light_load_demote_for_s=3 * 3600), carried=past)["decision"].iat[0] == "demote"
    assert decide(f, risk, Thresholds(light_load_share=0.1), carried=past)["decision"].iat[0] == "demote"
    assert light_load([0.49, 0.5, np.nan, 0.0], Thresholds()).tolist() == [True, False, False, True]


def thermal_gpus(ecc: list[bool], **columns: list[float]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Healthy GPUs with these feature columns, each at risk 0.9: its riskiest head ECC where `ecc`,
    thermal elsewhere (what a thermal demote's waits are tested on)."""
    f = frame(*[HEALTHY] * len(ecc))
    for name, values in columns.items():
        f[name] = values
    heads = {"risk_ecc": [0.9 if e else 0.1 for e in ecc], "risk_thermal": [0.2 if e else 0.9 for e in ecc]}
    return f, risk_frame(f.index, [0.9] * len(ecc), **heads)


def test_a_thermal_demote_at_light_load_waits_only_the_thermal_wait_where_the_memory_spread_stands_out() -> None:
    """At light load the core's heat is its fitted line extrapolated, but the memory-core spread is
    memory against core in one GPU: where it stands at `light_load_spread_z` σ, an idle GPU's failing
    cooler is demoted after the thermal wait (3 h), not the light-load one (12 h). Under the level, not
    known, another riskiest head, or the level at 0: the light-load wait as before. It never cuts the
    wait to nothing (the witnesses stay off at light load)."""
    f, risk = thermal_gpus(
        [False, False, False, False, True, False],
        heat_load_share=[0.2] * 6,
        mem_spread_z=[2.6, 2.6, 2.4, np.nan, 2.6, 4.5],
        heat_excess_z=[0.3, 0.3, 0.3, 0.3, 0.3, 2.5],
    )
    risen = naive(*["2026-02-28 20:00", "2026-02-28 22:00", "2026-02-28 20:00", "2026-02-28 20:00",
                    "2026-02-28 20:00", "2026-02-28 23:00"])  # fmt: skip
    past = CarriedOver(risk_since=risen)
    th = Thresholds(light_load_spread_z=2.5)
    out = decide(f, risk, th, carried=past)
    # 4 h with the spread at 2.6 σ: it stands; 2 h: pending until the 3 h are over; at 2.4 σ, unknown, or
    # an ECC demote (its own 12 h wait): pending; a 4.5 σ spread an hour in: still pending (no witness).
    assert out["decision"].tolist() == ["demote", "watch", "watch", "watch", "watch", "watch"]
    assert out["reasons"].iat[1][0] == (
        "demote pending: risk at or above 0.70 since 2026-02-28 22:00 UTC; it is demoted if that holds until "
        "2026-03-01 01:00 UTC: at light load (6 h power 20% of its baseline's) but its memory-core spread "
        "stands +2.6 σ out of its own 30 days (at 2.5 σ or more), so not the 12 h light-load wait"
    )
    narrow = out["reasons"].iat[2][0]
    assert narrow.endswith("2026-03-01 08:00 UTC, or sooner once its load returns: light load (6 h power 20% of its "
                           "baseline's), where heat is judged by extrapolation")  # fmt: skip
    assert out["reasons"].iat[4][0].endswith("it is demoted if that holds until 2026-03-01 08:00 UTC")
    # Off (0), or a level the spread does not reach: the light-load wait holds them all.
    assert set(decide(f, risk, Thresholds(light_load_spread_z=0), carried=past)["decision"]) == {"watch"}
    assert set(decide(f, risk, Thresholds(light_load_spread_z=2.7), carried=past)["decision"]) == {"watch"}
    share, spread = f["heat_load_share"], f["mem_spread_z"]
    assert light_wait(share, spread, th).tolist() == [False, False, True, True, False, False]
    assert light_wait([0.9, np.nan], [0.0, 0.0], th).tolist() == [False, False]


def test_a_thermal_demote_no_reading_corroborates_waits_longer() -> None:
    """Where neither the core's heat over its node's (in its own spread of that) nor the memory-core
    spread stands out (both known, both under `thermal_corroborate_z`), the thermal head's risk rests on
    what the node or the power explain: its demote waits `uncorroborated_demote_for_s` (6 h), not 3 h.
    Either reading at the level, one not known, light load (its own wait), another head, or the level
    at 0: as before."""
    f, risk = thermal_gpus(
        [False] * 5 + [True],
        heat_load_share=[1.0, 1.0, 1.0, 1.0, 0.2, 1.0],
        heat_vs_node_own_z=[0.3, 1.6, 0.3, np.nan, 0.3, 0.3],
        mem_spread_z=[0.5, 0.5, 1.6, 0.5, 0.5, 0.5],
    )
    past = CarriedOver(risk_since=naive(*["2026-02-28 20:00"] * 6))  # 4 h at 0.9
    th = Thresholds(thermal_corroborate_z=1.5)
    out = decide(f, risk, th, carried=past)
    assert out["decision"].tolist() == ["watch", "demote", "demote", "demote", "watch", "watch"]
    assert out["reasons"].iat[0][0] == (
        "demote pending: risk at or above 0.70 since 2026-02-28 20:00 UTC; it is demoted if that holds until "
        "2026-03-01 02:00 UTC: no reading of its own cooling corroborates it (its heat over its node's +0.3 σ of "
        "its own spread of that, its memory-core spread +0.5 σ, both under 1.5 σ): its heat is what its node "
        "or its power explain"
    )
    assert "light load (6 h power 20% of its baseline's)" in out["reasons"].iat[4][0]
    assert out["reasons"].iat[5][0].endswith("it is demoted if that holds until 2026-03-01 08:00 UTC")
    # Off (0), or a level both readings reach: the 3 h wait is over for every thermal one at load.
    assert decide(f, risk, Thresholds(thermal_corroborate_z=0), carried=past)["decision"].iat[0] == "demote"
    assert decide(f, risk, Thresholds(thermal_corroborate_z=0.3), carried=past)["decision"].iat[0] == "demote"
    six = decide(f, risk, th, carried=CarriedOver(risk_since=naive(*["2026-02-28 18:00"] * 6)))
    assert six["decision"].tolist()[:4] == ["demote"] * 4
    light = light_load(f["heat_load_share"], th)
    alone = uncorroborated(f["heat_vs_node_own_z"], f["mem_spread_z"], light, th)
    assert alone.tolist() == [True, False, False, False, False, True]
    assert th.longest_wait == pd.Timedelta(hours=12)
    assert Thresholds(thermal_corroborate_z=1.5, uncorroborated_demote_for_s=86400).longest_wait == pd.Timedelta(days=1)


def test_a_thermal_demote_stands_at_once_where_core_heat_and_memory_spread_agree() -> None:
    """Two readings of a GPU's own cooling agree (its core's excess over its own past and its node at
    1 σ, its memory-core spread over its own at 2 σ): a thermal demote does not wait its 3 h. One
    reading alone, an unknown one (no memory sensor), light load or another riskiest head: it waits."""
    f, risk = thermal_gpus(
        [False] * 6 + [True],
        heat_load_share=[1.0, 1.0, 1.0, 1.0, 0.2, 1.0, 1.0],
        heat_excess_z=[2.5, 1.0, 2.5, 0.9, 2.5, 2.5, 2.5],
        mem_spread_z=[2.8, 2.0, 1.9, 2.5, 2.5, np.nan, 2.5],
    )
    past = CarriedOver(risk_since=np.array([np.datetime64("2026-03-01T00:00", "ns")] * 7))  # risen this round
    out = decide(f, risk, Thresholds(), carried=past)
    assert out["decision"].tolist() == ["demote", "demote", "watch", "watch", "watch", "watch", "watch"]
    assert out["reasons"].iat[0][0] == (
        "thermal demote without its 3 h wait: two readings of its own cooling agree: the core runs +2.5 σ hot "
        "against its own past and its node (at 1 σ or more), and the memory-core spread is +2.8 σ wide against "
        "its own 30 days (at 2 σ or more)"
    )
    assert out["reasons"].iat[2][0].startswith("demote pending: risk at or above 0.70 since 2026-03-01 00:00 UTC")
    # Off (0), or a level the readings do not reach: the wait holds every one of them.
    assert set(decide(f, risk, Thresholds(thermal_agree_z=0), carried=past)["decision"]) == {"watch"}
    assert decide(f, risk, Thresholds(thermal_agree_z=2.9), carried=past)["decision"].iat[0] == "watch"
    assert decide(f, risk, Thresholds(thermal_agree_heat_z=2.6), carried=past)["decision"].tolist()[:2] == ["watch"] * 2
    # With no wait at all nothing is cut short, and no reason says so.
    now = decide(f, risk, Thresholds(demote_for_s=0, ecc_demote_for_s=0, light_load_share=0), carried=past)
    assert now["decision"].iat[0] == "demote" and not any("without its" in r for r in now["reasons"].iat[0])
    mode = np.array(["thermal"] * 6 + ["ECC"], dtype=object)
    light = light_load(f["heat_load_share"], Thresholds())
    assert witnesses_agree(f, mode, light, Thresholds()).tolist() == [True, True, False, False, False, False, False]
    assert not witnesses_agree(f.drop(columns=["mem_spread_z"]), mode, light, Thresholds()).any()


def test_a_thermal_demote_stands_at_once_where_the_memory_spread_alone_is_four_sigma_wide() -> None:
    """A memory that runs 4 σ or more from its own core's heat (against its own 30 days) is the GPU's
    own cooling, whatever the core reads against its node: a thermal demote does not wait its 3 h.
    Under 4 σ, unknown, at light load, or another riskiest head: it waits."""
    f, risk = thermal_gpus(
        [False] * 5 + [True],
        heat_load_share=[1.0, 1.0, 1.0, 0.2, 1.0, 1.0],
        heat_excess_z=[0.7, np.nan, 0.7, 0.7, 0.7, 0.7],
        mem_spread_z=[4.2, 4.0, 3.9, 4.5, np.nan, 4.5],
    )
    past = CarriedOver(risk_since=np.array([np.datetime64("2026-03-01T00:00", "ns")] * 6))  # risen this round
    out = decide(f, risk, Thresholds(), carried=past)
    assert out["decision"].tolist() == ["demote", "demote", "watch", "watch", "watch", "watch"]
    assert out["reasons"].iat[0][0] == (
        "thermal demote without its 3 h wait: the memory-core spread is +4.2 σ wide against its own 30 days "
        "(at 4 σ or more; the core's heat against its own past and its node: +0.7 σ): its own cooling, not "
        "the room's"
    )
    assert "the core's heat against its own past and its node: not known" in out["reasons"].iat[1][0]
    # Off (0) or a level not reached: it waits; the two readings' agreement is a separate setting.
    assert set(decide(f, risk, Thresholds(thermal_spread_z=0), carried=past)["decision"]) == {"watch"}
    assert decide(f, risk, Thresholds(thermal_spread_z=4.3), carried=past)["decision"].iat[0] == "watch"
    assert decide(f, risk, Thresholds(thermal_agree_z=0), carried=past)["decision"].iat[0] == "demote"
    mode = np.array(["thermal"] * 5 + ["ECC"], dtype=object)
    light = light_load(f["heat_load_share"], Thresholds())
    assert witnesses_agree(f, mode, light, Thresholds()).tolist() == [True, True, False, False, False, False]


def test_a_thermal_demote_stands_at_once_where_its_heat_over_its_node_stands_out_of_its_own_spread() -> None:
    """The third witness: the core's heat over its node's GPUs at 3 σ of its own spread of that
    difference (the room's swings cancel against the node) cuts the thermal wait short. Under 3 σ,
    unknown, at light load, or another riskiest head: it waits."""
    f, risk = thermal_gpus(
        [False] * 5 + [True],
        heat_load_share=[1.0, 1.0, 1.0, 0.2, 1.0, 1.0],
        heat_excess_z=[0.6, np.nan, 0.6, 0.6, 0.6, 0.6],
        mem_spread_z=[1.5] * 6,
        heat_vs_node_own_z=[3.4, 3.0, 2.9, 6.0, np.nan, 6.0],
    )
    past = CarriedOver(risk_since=np.array([np.datetime64("2026-03-01T00:00", "ns")] * 6))  # risen this round
    out = decide(f, risk, Thresholds(), carried=past)
    assert out["decision"].tolist() == ["demote", "demote", "watch", "watch", "watch", "watch"]
    assert out["reasons"].iat[0][0] == (
        "thermal demote without its 3 h wait: the core runs hotter than its node's GPUs by +3.4 σ of its own "
        "spread of that difference (at 3 σ or more; against its own past and its node: +0.6 σ): its own "
        "cooling, not the room's"
    )
    assert "against its own past and its node: not known" in out["reasons"].iat[1][0]
    # Off (0) or a level not reached: it waits; the other witnesses are settings of their own.
    assert set(decide(f, risk, Thresholds(thermal_agree_vs_node_z=0), carried=past)["decision"]) == {"watch"}
    assert decide(f, risk, Thresholds(thermal_agree_vs_node_z=3.5), carried=past)["decision"].iat[0] == "watch"
    others_off = Thresholds(thermal_agree_z=0, thermal_spread_z=0)
    assert decide(f, risk, others_off, carried=past)["decision"].iat[0] == "demote"
    mode = np.array(["thermal"] * 5 + ["ECC"], dtype=object)
    light = light_load(f["heat_load_share"], Thresholds())
    assert witnesses_agree(f, mode, light, Thresholds()).tolist() == [True, True, False, False, False, False]
    # Where the spread also holds, its reason comes first.
    wide = decide(f.assign(mem_spread_z=4.5), risk, Thresholds(), carried=past)
    assert wide["reasons"].iat[0][0].startswith("thermal demote without its 3 h wait: the memory-core spread is +4.5")


def test_a_pcie_demote_on_a_link_replaying_out_of_habit_waits_six_hours() -> None:
    """A healthy link that bursts now and then lifts the PCIe risk for the hours its burst spends in
    the 6 h window; a degrading link's replaying hours are new to it. A PCIe demote whose link's
    replaying hours stand under 3 σ out of its own month (or not known) waits 6 h, not 3."""
    f = frame(*[HEALTHY] * 4)
    f["replay_surprise_6h"] = [2.0, 5.0, np.nan, 2.0]
    past = CarriedOver(risk_since=naive(*["2026-02-28 20:00"] * 3, "2026-02-28 17:00"))
    risk = risk_frame(f.index, [0.9] * 4, risk_ecc=[0.1] * 4, risk_pcie=[0.9] * 4)
    out = decide(f, risk, Thresholds(), carried=past)
    # 4 h: a habitual link waits on, a surprising one stands; 7 h: the habitual link stands too.
    assert out["decision"].tolist() == ["watch", "demote", "watch", "demote"]
    assert out["reasons"].iat[0][0] == (
        "demote pending: risk at or above 0.70 since 2026-02-28 20:00 UTC; it is demoted if that holds until "
        "2026-03-01 02:00 UTC: its link replays out of habit (its hours with new replays over 6 h stand +2.0 σ "
        "out of its own month, under 3 σ)"
    )
    assert "stand not known out of its own month" in out["reasons"].iat[2][0]
    assert decide(f, risk, Thresholds(pcie_surprise_z=0), carried=past)["decision"].tolist() == ["demote"] * 4
    # The other heads never read it.
    thermal = risk_frame(f.index, [0.9] * 4, risk_ecc=[0.1] * 4, risk_thermal=[0.9] * 4)
    assert decide(f, thermal, Thresholds(), carried=past)["decision"].tolist() == ["demote"] * 4
    assert habitual_link([2.9, 3.0, np.nan], Thresholds()).tolist() == [True, False, True]


def test_rules_never_wait_and_no_since_means_this_instant_decides() -> None:
    f = frame(HEALTHY | {"row_remap_failure": 1}, HEALTHY)
    now = CarriedOver(risk_since=naive(None, None))
    out = decide(f, risk_frame(f.index, [0.9, 0.9]), Thresholds(), carried=now)
    assert out["decision"].tolist() == ["rma", "watch"]
    assert decide(f, risk_frame(f.index, [0.9, 0.9]), Thresholds())["decision"].tolist() == ["rma", "demote"]
    at_once = Thresholds(demote_for_s=0, ecc_demote_for_s=0, pcie_demote_for_s=0)
    assert decide(f, risk_frame(f.index, [0.9, 0.9]), at_once, carried=now)["decision"].iat[1] == "demote"
