"""Decision policy: worst of rules and risk, thresholds, reasons and their order; what a round does to decisions."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pandas as pd
import pytest

from predictor.conditions import habitual_link, light_load, light_wait, uncorroborated, witnesses_agree
from predictor.node import NODE_COLUMNS, NodeHeat, node_findings, node_reason
from predictor.policy import DECISIONS, DecisionChanges, decide, decision_changes
from predictor.rules import evaluate_rules
from predictor.thresholds import Thresholds
from tests.predictor.test_rules import HEALTHY, frame


def risk_frame(index: pd.Index, risk: list[float], **cols: list[Any]) -> pd.DataFrame:
    """A risk frame; heads default to the overall risk on ECC and 0 elsewhere."""
    data: dict[str, Any] = {
        "risk": risk,
        "risk_ecc": risk,
        "risk_thermal": [0.0] * len(risk),
        "risk_pcie": [0.0] * len(risk),
    }
    return pd.DataFrame(data | cols, index=index)


def test_decisions_are_ordered_by_severity() -> None:
    assert DECISIONS == ("ok", "watch", "demote", "drain", "rma")


def test_threshold_boundaries() -> None:
    values = [0.0, 0.2999, 0.3, 0.6999, 0.7, 1.0]
    f = frame(*[HEALTHY] * len(values))
    out = decide(f, risk_frame(f.index, values), Thresholds())
    assert out["decision"].tolist() == ["ok", "ok", "watch", "watch", "demote", "demote"]
    assert out["reasons"].iat[0] == [] and out["reasons"].iat[1] == []
    assert out.index.equals(f.index)


def test_rules_override_a_low_risk() -> None:
    f = frame(HEALTHY | {"xid_95_7d": 1}, HEALTHY | {"row_remap_failure": 1})
    out = decide(f, risk_frame(f.index, [0.01, 0.01]), Thresholds())
    assert out["decision"].tolist() == ["drain", "rma"]
    assert out["reasons"].iat[0] == [
        "uncontained ECC error (XID 95) 1 time in the last 7 days: drain and reset the GPU"
    ]
    assert "remap failed" in out["reasons"].iat[1][0]


def test_worst_action_wins_and_only_its_reasons_are_given() -> None:
    # XID 79 twice in 30 days (rma) and once in 7 days (drain), PCIe replays (watch), high risk.
    bad = HEALTHY | {"xid_79_30d": 2, "xid_79_7d": 1, "replay_rate_1d": 600}
    f = frame(bad)
    out = decide(f, risk_frame(f.index, [0.95], reasons=[["SBE rate 40/day"]]), Thresholds())
    assert out["decision"].tolist() == ["rma"]
    assert out["reasons"].iat[0] == ["XID 79 fell off the bus 2 times in 30 days: RMA (repeated XID 79)"]


def test_model_demote_beats_a_watch_rule() -> None:
    f = frame(HEALTHY | {"link_width_ratio": 0.5})
    risk = risk_frame(f.index, [0.82], reasons=[["SBE rate 40/day", "3 remaps in 7 days"]])
    risk["risk_ecc"] = [0.80]
    out = decide(f, risk, Thresholds())
    assert out["decision"].tolist() == ["demote"]
    assert out["reasons"].iat[0] == ["risk 0.82 (ECC 0.80): SBE rate 40/day", "3 remaps in 7 days"]


def test_tie_lists_rule_reasons_before_the_models() -> None:
    f = frame(HEALTHY | {"replay_rate_1d": 1200})
    risk = risk_frame(f.index, [0.45], reasons=[["PCIe replays rising"]])
    risk["risk_ecc"], risk["risk_pcie"] = [0.1], [0.45]
    out = decide(f, risk, Thresholds())
    assert out["decision"].tolist() == ["watch"]
    reasons = out["reasons"].iat[0]
    assert len(reasons) == 2
    assert reasons[0].startswith("PCIe replays 1,200/h")
    assert reasons[1] == "risk 0.45 (PCIe 0.45): PCIe replays rising"


def test_model_reason_without_model_sentences_or_heads() -> None:
    f = frame(HEALTHY, HEALTHY)
    risk = pd.DataFrame({"risk": [0.75, 0.35]}, index=f.index)  # no heads, no reasons
    out = decide(f, risk, Thresholds())
    assert out["reasons"].tolist() == [["risk 0.75"], ["risk 0.35"]]
    risk = risk_frame(f.index, [0.75, 0.35])
    risk["risk_thermal"] = [0.9, np.nan]
    risk["risk_ecc"] = [0.2, np.nan]
    risk["risk_pcie"] = [0.1, np.nan]
    out = decide(f, risk, Thresholds())
    assert out["reasons"].tolist() == [["risk 0.75 (thermal 0.90)"], ["risk 0.35"]]


def test_a_pending_remap_says_how_urgent_its_reset_is_from_the_ecc_risk() -> None:
    """The drain stands either way (NVIDIA's criterion); after its reason, where the ECC head's risk
    is known, a line says whether the memory looks worn (at the watch level) or the reset can wait."""
    pending = HEALTHY | {"row_remap_pending": 1}
    f = frame(pending, pending, pending, pending | {"row_remap_failure": 1}, pending, HEALTHY)
    risk = risk_frame(f.index, [0.01, 0.3, np.nan, 0.9, 0.29, 0.9], risk_ecc=[0.01, 0.3, np.nan, 0.9, 0.29, 0.9])
    out = decide(f, risk, Thresholds())
    assert out["decision"].tolist() == ["drain", "drain", "drain", "rma", "drain", "demote"]
    rule = "row remap pending: drain and reset the GPU to apply it (NVIDIA memory error management)"
    assert out["reasons"].iat[0] == [
        rule,
        "its ECC risk 0.01 (under 0.3) shows no wearing memory: a weak row on a healthy GPU is remapped too, "
        "and NVIDIA lets work go on until the reset, so it can wait for a convenient moment",
    ]
    assert out["reasons"].iat[1] == [
        rule,
        "its ECC risk 0.30 (at 0.3 or above) says its memory is wearing: drain it soon and follow the reset "
        "with a field diagnostic",
    ]
    assert out["reasons"].iat[2] == [rule, "no risk score"]  # unknown: nothing said of it
    assert not any("ECC risk" in r for r in out["reasons"].iat[3])  # the RMA set it, not the pending remap
    assert out["reasons"].iat[4][1].startswith("its ECC risk 0.29 (under 0.3) shows no wearing memory")
    assert not any("ECC risk" in r for r in out["reasons"].iat[5])  # no remap pending
    # The watch level is the thresholds': at 0.25, 0.29 reads as wear.
    worn = decide(f, risk, replace(Thresholds(), watch=0.25))
    assert worn["reasons"].iat[4][1].startswith("its ECC risk 0.29 (at 0.25 or above) says its memory is wearing")


def test_a_pending_remaps_drain_is_held_at_watch_only_where_the_remap_alone_drains_a_gpu_without_wear() -> None:
    """With the hold (`remap_since` given): held where the remap alone drains, the ECC risk is known and
    under the level and the GPU was not drained already; another drain or RMA rule, an unknown ECC risk,
    a risk at the level, or a drain that stands (`drained`) drain as NVIDIA says."""
    pending = HEALTHY | {"row_remap_pending": 1}
    f = frame(pending, pending, pending, pending | {"row_remap_failure": 1}, pending, pending).assign(
        cutoff=pd.Timestamp("2026-03-01 12:00", tz="UTC")
    )
    ecc = [0.05, 0.3, np.nan, 0.05, 0.05, 0.29]
    risk = risk_frame(f.index, [0.05, 0.3, np.nan, 0.05, 0.05, 0.29], risk_ecc=ecc)
    th = Thresholds(remap_hold_risk=0.3)
    nat = np.full(len(f), np.datetime64("NaT"), dtype="datetime64[ns]")
    drained = np.asarray([False, False, False, False, True, False])
    out = decide(f, risk, th, remap_since=nat, drained=drained)
    assert out["decision"].tolist() == ["watch", "drain", "drain", "rma", "drain", "watch"]
    assert out["reasons"].iat[0][0].startswith("row remap pending: drain and reset")
    assert out["reasons"].iat[0][1].startswith("the drain waits: its ECC risk 0.05 is under 0.3")
    assert not any("the drain waits" in r for i in (1, 2, 3, 4) for r in out["reasons"].iat[i])
    # Without the hold's questions, or off: NVIDIA's drain at once.
    assert set(decide(f, risk, th)["decision"]) == {"drain", "rma"}
    assert set(decide(f, risk, Thresholds(), remap_since=nat, drained=drained)["decision"]) == {"drain", "rma"}
    with pytest.raises(ValueError, match="cutoff column"):
        decide(f.drop(columns="cutoff"), risk, th, remap_since=nat)


def test_unscored_gpus_decide_from_rules_alone() -> None:
    f = frame(HEALTHY | {"row_remap_pending": 1}, HEALTHY, HEALTHY)
    risk = risk_frame(
        f.index,
        [np.nan, np.nan, 0.1],
        risk_note=["too little history (2 h)", None, None],
    )
    out = decide(f, risk, Thresholds())
    assert out["decision"].tolist() == ["drain", "ok", "ok"]
    assert out["reasons"].iat[0] == [
        "row remap pending: drain and reset the GPU to apply it (NVIDIA memory error management)",
        "no risk score: too little history (2 h)",
    ]
    # Unscored but clean: still ok, and the reasons say it was not scored.
    assert out["reasons"].iat[1] == ["no risk score"]
    assert out["reasons"].iat[2] == []


def test_precomputed_rule_hits_are_used() -> None:
    f = frame(HEALTHY, HEALTHY, index=["x", "y"])
    hits = pd.DataFrame({"row": ["y"], "rule": ["manual"], "action": ["drain"], "reason": ["operator said so"]})
    out = decide(f, risk_frame(f.index, [0.0, 0.0]), Thresholds(), rule_hits=hits)
    assert out["decision"].tolist() == ["ok", "drain"]
    assert out["reasons"].iat[1] == ["operator said so"]


def test_decisions_sort_by_severity() -> None:
    f = frame(HEALTHY | {"xid_79_7d": 1}, HEALTHY, HEALTHY)
    out = decide(f, risk_frame(f.index, [0.0, 0.9, 0.4]), Thresholds())
    assert out["decision"].max() == "drain"
    assert out.sort_values("decision")["decision"].tolist() == ["watch", "demote", "drain"]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda r: r.iloc[::-1], "index"),
        (lambda r: r.drop(columns=["risk"]), "no 'risk' column"),
    ],
)
def test_bad_risk_frames_raise(change: Any, message: str) -> None:
    f = frame(HEALTHY, HEALTHY)
    with pytest.raises(ValueError, match=message):
        decide(f, change(risk_frame(f.index, [0.1, 0.2])), Thresholds())


def test_rule_hits_for_unknown_rows_raise() -> None:
    f = frame(HEALTHY)
    hits = pd.DataFrame({"row": [7], "rule": ["x"], "action": ["rma"], "reason": ["?"]})
    with pytest.raises(ValueError, match="not in the features frame"):
        decide(f, risk_frame(f.index, [0.1]), Thresholds(), rule_hits=hits)


def test_ten_thousand_gpus_decide() -> None:
    n = 10_000
    rng = np.random.default_rng(7)
    base = frame(HEALTHY)
    f = base.loc[base.index.repeat(n)].reset_index(drop=True)
    f.loc[rng.random(n) < 0.01, "xid_79_7d"] = 1.0
    f.loc[rng.random(n) < 0.01, "row_remap_failure"] = 1.0
    f.loc[rng.random(n) < 0.02, "replay_rate_1d"] = 900.0
    r = rng.random(n)
    r[rng.random(n) < 0.01] = np.nan
    risk = pd.DataFrame(
        {
            "risk": r,
            "risk_ecc": r * 0.9,
            "risk_thermal": r * 0.5,
            "risk_pcie": r * 0.2,
            "reasons": [["SBE rate rising"]] * n,
        },
        index=f.index,
    )
    hits = evaluate_rules(f)
    out = decide(f, risk, Thresholds(), rule_hits=hits)
    assert len(out) == n
    assert set(out["decision"].unique()) <= set(DECISIONS)
    counts = out["decision"].value_counts()
    assert counts["rma"] == f["row_remap_failure"].eq(1).sum()
    # Every non-ok decision has at least one reason; every scored ok GPU none.
    ok = out["decision"].eq("ok").to_numpy()
    lens = out["reasons"].map(len).to_numpy()
    assert (lens[~ok] >= 1).all()
    assert (lens[ok & ~np.isnan(r)] == 0).all()


# -- node context: a node's heat is the node's finding, not its GPUs' demotes -----------------

HOT_NODE_Z = [4.1, 3.8, 4.5, 3.2, 4.0, 3.6, 0.2, -0.1]
"""temp_excess_own_z of node00's 8 GPUs: 6 hot, median 3.7 σ (a node finding)."""
HOT_NODE_REASON = node_reason("node00", 3.7, 6, 8)


def with_node_columns(f: pd.DataFrame, own_z: list[float]) -> pd.DataFrame:
    """The node columns of the features contract, from each GPU's temp_excess_own_z (one node, one cutoff)."""
    f = f.copy()
    z = pd.Series(own_z, index=f.index, dtype=np.float64)
    f["temp_excess_own_z"] = z
    f["node_heat_z"] = float(z.median())
    f["node_hot_gpus"] = float((z >= 2).sum())
    f["node_gpus"] = float(len(z))
    f["temp_excess_vs_node_z"] = z - z.median()
    return f


def thermal_risk(index: pd.Index, risk: list[float]) -> pd.DataFrame:
    """Risk whose riskiest head is thermal, with the model's own reason."""
    return risk_frame(
        index,
        risk,
        risk_ecc=[0.05] * len(risk),
        risk_thermal=risk,
        reasons=[["temperature 9 °C above what its power explains"]] * len(risk),
    )


def test_a_hot_node_holds_thermal_demotes_at_watch_and_watches_every_gpu() -> None:
    # GPUs 0-4 hot with a thermal demote; none stands out of the node (vs node < 3 σ).
    f = with_node_columns(frame(*[HEALTHY] * 8), HOT_NODE_Z)
    out = decide(f, thermal_risk(f.index, [0.82, 0.8, 0.85, 0.75, 0.9, 0.1, 0.05, 0.0]), Thresholds())
    assert out["decision"].tolist() == ["watch"] * 8  # not five demotes
    held = out["reasons"].iat[0]
    assert held[0] == HOT_NODE_REASON
    assert held[0].startswith("node-wide heat: check cooling (6 of 8 GPUs of node00")
    assert held[1] == (
        "thermal demote held at watch: the GPU runs as hot as its node (its own excess against the node's: "
        "+0.4 σ; memory-core spread against its own 30 days: not known; a demote needs +3.0 σ in either)"
    )
    assert held[2] == "risk 0.82 (thermal 0.82): temperature 9 °C above what its power explains"
    # A GPU the model left alone gets the node's watch and its reason only.
    assert out["reasons"].iat[7] == [HOT_NODE_REASON]


def test_a_gpu_that_stands_out_of_its_hot_node_keeps_its_demote() -> None:
    z = [9.5, *HOT_NODE_Z[1:]]  # GPU 0: 9.5 σ, 5.8 σ above the node's median
    f = with_node_columns(frame(*[HEALTHY] * 8), z)
    out = decide(f, thermal_risk(f.index, [0.9, 0.85, *[0.0] * 6]), Thresholds())
    assert out["decision"].tolist() == ["demote", "watch", *["watch"] * 6]
    # The model set the demote; the node's finding follows as context.
    assert out["reasons"].iat[0] == [
        "risk 0.90 (thermal 0.90): temperature 9 °C above what its power explains",
        HOT_NODE_REASON,
    ]
    # Settings decide what "stands out" means.
    out = decide(f, thermal_risk(f.index, [0.9, 0.85, *[0.0] * 6]), Thresholds(), node_heat=NodeHeat(stands_out_z=6))
    assert out["decision"].iat[0] == "watch"


def test_a_gpu_whose_memory_core_spread_widens_on_a_hot_node_keeps_its_demote() -> None:
    # The node's air moves core and memory together; a widening spread is the GPU's own cooling.
    f = with_node_columns(frame(*[HEALTHY] * 8), HOT_NODE_Z)
    f["mem_spread_z"] = [3.0, 2.9, np.nan, 5.0, 0.1, 0.0, 0.0, 0.0]
    out = decide(f, thermal_risk(f.index, [0.82, 0.8, 0.85, 0.75, 0.9, 0.1, 0.05, 0.0]), Thresholds())
    # GPU 0 at 3 σ and GPU 3 at 5 σ keep their demotes; 2.9 σ and an unknown spread are held.
    assert out["decision"].tolist() == ["demote", "watch", "watch", "demote", *["watch"] * 4]
    assert out["reasons"].iat[0] == [
        "risk 0.82 (thermal 0.82): temperature 9 °C above what its power explains",
        HOT_NODE_REASON,
    ]
    assert "memory-core spread against its own 30 days: +2.9 σ" in out["reasons"].iat[1][1]
    # The same yardstick as standing out of the node's heat.
    out = decide(f, thermal_risk(f.index, [0.82, 0.8, 0.85, 0.75, 0.9, 0.1, 0.05, 0.0]), Thresholds(),
                 node_heat=NodeHeat(stands_out_z=6))  # fmt: skip
    assert out["decision"].tolist() == ["watch"] * 8


def test_a_demote_for_another_mode_is_not_held() -> None:
    f = with_node_columns(frame(*[HEALTHY] * 8), HOT_NODE_Z)
    risk = risk_frame(f.index, [0.85, *[0.0] * 7], reasons=[["SBE rate 40/day"]] * 8)  # ECC head riskiest
    out = decide(f, risk, Thresholds())
    assert out["decision"].tolist() == ["demote", *["watch"] * 7]
    assert out["reasons"].iat[0] == ["risk 0.85 (ECC 0.85): SBE rate 40/day", HOT_NODE_REASON]


def test_rules_are_never_lowered_on_a_hot_node() -> None:
    rows = [HEALTHY | {"xid_95_7d": 1}, HEALTHY | {"row_remap_failure": 1}, *[HEALTHY] * 6]
    f = with_node_columns(frame(*rows), HOT_NODE_Z)
    hits = pd.DataFrame({"row": [2], "rule": ["slowdown"], "action": ["drain"], "reason": ["past slowdown temp"]})
    hits = pd.concat([evaluate_rules(f), hits], ignore_index=True)
    out = decide(f, thermal_risk(f.index, [0.9] * 8), Thresholds(), rule_hits=hits)
    assert out["decision"].tolist() == ["drain", "rma", "drain", *["watch"] * 5]
    assert out["reasons"].iat[0] == [
        "uncontained ECC error (XID 95) 1 time in the last 7 days: drain and reset the GPU",
        HOT_NODE_REASON,
    ]
    assert out["reasons"].iat[2] == ["past slowdown temp", HOT_NODE_REASON]


def test_a_node_without_a_finding_is_unchanged() -> None:
    one_hot = [6.0, 0.1, -0.3, 0.4, 0.0, 0.2, -0.2, 0.3]
    plain = frame(*[HEALTHY] * 8)
    risk = thermal_risk(plain.index, [0.9, 0.4, *[0.0] * 6])
    expected = decide(plain, risk, Thresholds())
    out = decide(with_node_columns(plain, one_hot), risk, Thresholds())
    pd.testing.assert_frame_equal(out, expected)
    assert out["decision"].tolist() == ["demote", "watch", *["ok"] * 6]
    # An older feature frame without the node columns decides the same, without an error.
    older = plain.drop(columns=[c for c in NODE_COLUMNS if c in plain.columns])
    pd.testing.assert_frame_equal(decide(older, risk, Thresholds()), expected)


def test_unscored_gpus_of_a_hot_node_are_watched() -> None:
    f = with_node_columns(frame(*[HEALTHY] * 8), HOT_NODE_Z)
    risk = risk_frame(f.index, [np.nan] * 8, risk_note=["too little history (2 h)"] * 8)
    out = decide(f, risk, Thresholds())
    assert out["decision"].tolist() == ["watch"] * 8
    assert out["reasons"].iat[0] == [HOT_NODE_REASON, "no risk score: too little history (2 h)"]


def test_precomputed_node_findings_are_used_per_node_and_cutoff() -> None:
    f = frame(*[HEALTHY] * 16)  # node00 and node01
    later = f["cutoff"] + pd.Timedelta(hours=1)
    f.loc[8:, "cutoff"] = later[8:]
    nodes = pd.DataFrame(
        {
            "hostname": ["node00", "node01", "node01"],
            "cutoff": [f["cutoff"].iat[0], f["cutoff"].iat[0], later.iat[0]],  # node01 at node00's cutoff: no rows
            "suspected": [True, True, False],
            "heat_z": [4.0, 5.0, 0.5],
            "hot_gpus": [7.0, 8.0, 0.0],
            "gpus": [8.0, 8.0, 8.0],
        }
    )
    out = decide(f, thermal_risk(f.index, [0.9] * 16), Thresholds(), nodes=nodes)
    assert out["decision"].tolist() == ["watch"] * 8 + ["demote"] * 8
    assert out["reasons"].iat[0][0] == node_reason("node00", 4.0, 7, 8)
    # Without node values (NaN or no columns), the findings computed here suspect nobody: the model decides alone.
    assert not node_findings(f)["suspected"].any()
    assert decide(f, thermal_risk(f.index, [0.9] * 16), Thresholds())["decision"].eq("demote").all()


def test_node_findings_naming_a_node_twice_raise() -> None:
    f = frame(*[HEALTHY] * 2)
    nodes = pd.DataFrame(
        {"hostname": ["node00"] * 2, "cutoff": [f["cutoff"].iat[0]] * 2, "suspected": [True] * 2,
         "heat_z": [4.0] * 2, "hot_gpus": [2.0] * 2, "gpus": [2.0] * 2}
    )  # fmt: skip
    with pytest.raises(ValueError, match="more than once"):
        decide(f, risk_frame(f.index, [0.1, 0.1]), Thresholds(), nodes=nodes)


# -- decision_changes: what a scoring round does to each GPU's standing decision ----------


def test_a_new_decision_is_opened_and_ok_opens_nothing() -> None:
    changes = decision_changes({}, [("GPU-a", "watch", ["warm"]), ("GPU-b", "ok", [])])
    assert changes == DecisionChanges(open=(("GPU-a", "watch", ["warm"]),))


def test_the_same_decision_again_refreshes_its_reasons() -> None:
    changes = decision_changes({"GPU-a": (7, "watch")}, [("GPU-a", "watch", ["still warm"])])
    assert changes == DecisionChanges(refresh=((7, ["still warm"]),))


def test_another_decision_closes_the_active_one_and_opens_the_new_one() -> None:
    changes = decision_changes({"GPU-a": (7, "watch")}, [("GPU-a", "demote", ["hot"])])
    assert changes == DecisionChanges(close=(7,), open=(("GPU-a", "demote", ["hot"]),))
    # a milder decision replaces it too: the newest score is what stands
    assert decision_changes({"GPU-a": (8, "drain")}, [("GPU-a", "watch", ["r"])]) == DecisionChanges(
        close=(8,), open=(("GPU-a", "watch", ["r"]),)
    )


def test_ok_closes_the_active_decision() -> None:
    assert decision_changes({"GPU-a": (7, "watch")}, [("GPU-a", "ok", [])]) == DecisionChanges(close=(7,))


def test_gpus_not_scored_keep_their_decisions_and_opened_ones_keep_the_round_order() -> None:
    active = {"GPU-a": (1, "watch"), "GPU-z": (2, "drain")}  # GPU-z is not in this round
    scored = [("GPU-c", "rma", ["x"]), ("GPU-a", "ok", []), ("GPU-b", "watch", ["y"])]
    changes = decision_changes(active, scored)
    assert changes.close == (1,)
    assert changes.refresh == ()
    assert [uuid for uuid, _, _ in changes.open] == ["GPU-c", "GPU-b"]


def test_decision_changes_copies_the_reasons() -> None:
    reasons = ["warm"]
    changes = decision_changes({"GPU-a": (7, "watch")}, [("GPU-a", "watch", reasons)])
    reasons.append("later")
    assert changes.refresh == ((7, ["warm"]),)


# -- a model demote stands once its risk has held (an alert rule's `for:`) --------------------


def naive(*times: str | None) -> np.ndarray:
    """Times as the naive-UTC datetime64 array `decide` takes (None: NaT)."""
    return np.array([np.datetime64("NaT") if t is None else pd.Timestamp(t).to_datetime64() for t in times],
                    dtype="datetime64[ns]")  # fmt: skip


def thermal(index: pd.Index, risk: list[float]) -> pd.DataFrame:
    """A risk frame whose riskiest head is thermal."""
    return risk_frame(index, risk, risk_ecc=[0.0] * len(risk), risk_thermal=risk)


def test_a_model_demote_waits_until_its_risk_has_held_demote_for() -> None:
    f = frame(HEALTHY, HEALTHY, HEALTHY, HEALTHY)
    since = naive(None, "2026-02-28 22:00", "2026-02-28 21:00", "2026-02-20")
    out = decide(f, thermal(f.index, [0.9, 0.9, 0.9, 0.5]), Thresholds(), since=since)
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
    since = naive("2026-02-28 20:00", "2026-02-28 12:00", "2026-02-28 20:00", "2026-02-28 20:00")
    risk = risk_frame(f.index, [0.9] * 4, risk_ecc=[0.9, 0.9, 0.2, 0.2],
                      risk_thermal=[0.1, 0.1, 0.9, 0.2], risk_pcie=[0.0, 0.0, 0.0, 0.9])  # fmt: skip
    out = decide(f, risk, Thresholds(), since=since)
    # ECC for 4 h: pending; ECC for 12 h: it stands; thermal and PCIe for 4 h: they stand.
    assert out["decision"].tolist() == ["watch", "demote", "demote", "demote"]
    assert out["reasons"].iat[0][0] == (
        "demote pending: risk at or above 0.70 since 2026-02-28 20:00 UTC; "
        "it is demoted if that holds until 2026-03-01 08:00 UTC"
    )
    same = Thresholds(ecc_demote_for_s=3 * 3600)
    assert decide(f, risk, same, since=since)["decision"].tolist() == ["demote"] * 4
    # PCIe's own wait: 6 h holds only the PCIe demote, and its reason says until when.
    pcie = decide(f, risk, Thresholds(pcie_demote_for_s=6 * 3600), since=since)
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
    since = naive("2026-02-28 20:00", "2026-02-28 12:00", "2026-02-28 20:00", "2026-02-28 20:00", "2026-02-28 20:00")
    risk = risk_frame(f.index, [0.9] * 5, risk_ecc=[0.1, 0.1, 0.1, 0.1, 0.9], risk_thermal=[0.9, 0.9, 0.9, 0.9, 0.2])
    out = decide(f, risk, Thresholds(), since=since)
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
    assert decide(f, risk, Thresholds(light_load_share=0.0), since=since)["decision"].iat[0] == "demote"
    assert decide(f, risk, Thresholds(light_load_demote_for_s=3 * 3600), since=since)["decision"].iat[0] == "demote"
    assert decide(f, risk, Thresholds(light_load_share=0.1), since=since)["decision"].iat[0] == "demote"
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
    since = naive(*["2026-02-28 20:00", "2026-02-28 22:00", "2026-02-28 20:00", "2026-02-28 20:00",
                    "2026-02-28 20:00", "2026-02-28 23:00"])  # fmt: skip
    th = Thresholds(light_load_spread_z=2.5)
    out = decide(f, risk, th, since=since)
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
    assert set(decide(f, risk, Thresholds(light_load_spread_z=0), since=since)["decision"]) == {"watch"}
    assert set(decide(f, risk, Thresholds(light_load_spread_z=2.7), since=since)["decision"]) == {"watch"}
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
    since = naive(*["2026-02-28 20:00"] * 6)  # 4 h at 0.9
    th = Thresholds(thermal_corroborate_z=1.5)
    out = decide(f, risk, th, since=since)
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
    assert decide(f, risk, Thresholds(thermal_corroborate_z=0), since=since)["decision"].iat[0] == "demote"
    assert decide(f, risk, Thresholds(thermal_corroborate_z=0.3), since=since)["decision"].iat[0] == "demote"
    six = decide(f, risk, th, since=naive(*["2026-02-28 18:00"] * 6))
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
    since = np.array([np.datetime64("2026-03-01T00:00", "ns")] * 7)  # risen this round
    out = decide(f, risk, Thresholds(), since=since)
    assert out["decision"].tolist() == ["demote", "demote", "watch", "watch", "watch", "watch", "watch"]
    assert out["reasons"].iat[0][0] == (
        "thermal demote without its 3 h wait: two readings of its own cooling agree: the core runs +2.5 σ hot "
        "against its own past and its node (at 1 σ or more), and the memory-core spread is +2.8 σ wide against "
        "its own 30 days (at 2 σ or more)"
    )
    assert out["reasons"].iat[2][0].startswith("demote pending: risk at or above 0.70 since 2026-03-01 00:00 UTC")
    # Off (0), or a level the readings do not reach: the wait holds every one of them.
    assert set(decide(f, risk, Thresholds(thermal_agree_z=0), since=since)["decision"]) == {"watch"}
    assert decide(f, risk, Thresholds(thermal_agree_z=2.9), since=since)["decision"].iat[0] == "watch"
    assert decide(f, risk, Thresholds(thermal_agree_heat_z=2.6), since=since)["decision"].tolist()[:2] == ["watch"] * 2
    # With no wait at all nothing is cut short, and no reason says so.
    now = decide(f, risk, Thresholds(demote_for_s=0, ecc_demote_for_s=0, light_load_share=0), since=since)
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
    since = np.array([np.datetime64("2026-03-01T00:00", "ns")] * 6)  # risen this round
    out = decide(f, risk, Thresholds(), since=since)
    assert out["decision"].tolist() == ["demote", "demote", "watch", "watch", "watch", "watch"]
    assert out["reasons"].iat[0][0] == (
        "thermal demote without its 3 h wait: the memory-core spread is +4.2 σ wide against its own 30 days "
        "(at 4 σ or more; the core's heat against its own past and its node: +0.7 σ): its own cooling, not "
        "the room's"
    )
    assert "the core's heat against its own past and its node: not known" in out["reasons"].iat[1][0]
    # Off (0) or a level not reached: it waits; the two readings' agreement is a separate setting.
    assert set(decide(f, risk, Thresholds(thermal_spread_z=0), since=since)["decision"]) == {"watch"}
    assert decide(f, risk, Thresholds(thermal_spread_z=4.3), since=since)["decision"].iat[0] == "watch"
    assert decide(f, risk, Thresholds(thermal_agree_z=0), since=since)["decision"].iat[0] == "demote"
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
    since = np.array([np.datetime64("2026-03-01T00:00", "ns")] * 6)  # risen this round
    out = decide(f, risk, Thresholds(), since=since)
    assert out["decision"].tolist() == ["demote", "demote", "watch", "watch", "watch", "watch"]
    assert out["reasons"].iat[0][0] == (
        "thermal demote without its 3 h wait: the core runs hotter than its node's GPUs by +3.4 σ of its own "
        "spread of that difference (at 3 σ or more; against its own past and its node: +0.6 σ): its own "
        "cooling, not the room's"
    )
    assert "against its own past and its node: not known" in out["reasons"].iat[1][0]
    # Off (0) or a level not reached: it waits; the other witnesses are settings of their own.
    assert set(decide(f, risk, Thresholds(thermal_agree_vs_node_z=0), since=since)["decision"]) == {"watch"}
    assert decide(f, risk, Thresholds(thermal_agree_vs_node_z=3.5), since=since)["decision"].iat[0] == "watch"
    others_off = Thresholds(thermal_agree_z=0, thermal_spread_z=0)
    assert decide(f, risk, others_off, since=since)["decision"].iat[0] == "demote"
    mode = np.array(["thermal"] * 5 + ["ECC"], dtype=object)
    light = light_load(f["heat_load_share"], Thresholds())
    assert witnesses_agree(f, mode, light, Thresholds()).tolist() == [True, True, False, False, False, False]
    # Where the spread also holds, its reason comes first.
    wide = decide(f.assign(mem_spread_z=4.5), risk, Thresholds(), since=since)
    assert wide["reasons"].iat[0][0].startswith("thermal demote without its 3 h wait: the memory-core spread is +4.5")


def test_a_pcie_demote_on_a_link_replaying_out_of_habit_waits_six_hours() -> None:
    """A healthy link that bursts now and then lifts the PCIe risk for the hours its burst spends in
    the 6 h window; a degrading link's replaying hours are new to it. A PCIe demote whose link's
    replaying hours stand under 3 σ out of its own month (or not known) waits 6 h, not 3."""
    f = frame(*[HEALTHY] * 4)
    f["replay_surprise_6h"] = [2.0, 5.0, np.nan, 2.0]
    since = naive("2026-02-28 20:00", "2026-02-28 20:00", "2026-02-28 20:00", "2026-02-28 17:00")
    risk = risk_frame(f.index, [0.9] * 4, risk_ecc=[0.1] * 4, risk_pcie=[0.9] * 4)
    out = decide(f, risk, Thresholds(), since=since)
    # 4 h: a habitual link waits on, a surprising one stands; 7 h: the habitual link stands too.
    assert out["decision"].tolist() == ["watch", "demote", "watch", "demote"]
    assert out["reasons"].iat[0][0] == (
        "demote pending: risk at or above 0.70 since 2026-02-28 20:00 UTC; it is demoted if that holds until "
        "2026-03-01 02:00 UTC: its link replays out of habit (its hours with new replays over 6 h stand +2.0 σ "
        "out of its own month, under 3 σ)"
    )
    assert "stand not known out of its own month" in out["reasons"].iat[2][0]
    assert decide(f, risk, Thresholds(pcie_surprise_z=0), since=since)["decision"].tolist() == ["demote"] * 4
    # The other heads never read it.
    thermal = risk_frame(f.index, [0.9] * 4, risk_ecc=[0.1] * 4, risk_thermal=[0.9] * 4)
    assert decide(f, thermal, Thresholds(), since=since)["decision"].tolist() == ["demote"] * 4
    assert habitual_link([2.9, 3.0, np.nan], Thresholds()).tolist() == [True, False, True]


def test_rules_never_wait_and_no_since_means_this_instant_decides() -> None:
    f = frame(HEALTHY | {"row_remap_failure": 1}, HEALTHY)
    out = decide(f, risk_frame(f.index, [0.9, 0.9]), Thresholds(), since=naive(None, None))
    assert out["decision"].tolist() == ["rma", "watch"]
    assert decide(f, risk_frame(f.index, [0.9, 0.9]), Thresholds())["decision"].tolist() == ["rma", "demote"]
    at_once = Thresholds(demote_for_s=0, ecc_demote_for_s=0, pcie_demote_for_s=0)
    assert decide(f, risk_frame(f.index, [0.9, 0.9]), at_once, since=naive(None, None))["decision"].iat[1] == "demote"


def test_decide_demotes_on_probation_and_says_since_when_and_until_when() -> None:
    th = Thresholds()
    f = frame(HEALTHY, HEALTHY | {"row_remap_pending": 1.0}, HEALTHY, HEALTHY, HEALTHY)
    released = np.full(len(f), np.datetime64("2026-02-27T12:00", "ns"))
    released[4] = np.datetime64("NaT")
    # risks: on probation (0.15); drained by the rule; under the probation risk; the model's own demote; no release
    risk = risk_frame(f.index, [0.15, 0.15, 0.05, 0.9, 0.15], reasons=[["sbe rising"]] * 5)
    out = decide(f, risk, th, released=released)
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
    assert decide(f, risk, off, released=released)["decision"].tolist() == ["ok", "drain", "ok", "demote", "ok"]


def test_decide_holds_a_standing_demote_and_says_since_when() -> None:
    th = Thresholds()
    f = frame(HEALTHY, HEALTHY | {"row_remap_pending": 1.0}, HEALTHY, HEALTHY, HEALTHY)
    demoted = np.full(len(f), np.datetime64("2026-02-27T12:00", "ns"))
    demoted[4] = np.datetime64("NaT")
    # risks: held (0.4); drained by the rule; under the release level; the model's own demote; none standing
    risk = risk_frame(f.index, [0.4, 0.4, 0.29, 0.9, 0.4], reasons=[["sbe rising"]] * 5)
    out = decide(f, risk, th, demoted=demoted)
    assert out["decision"].tolist() == ["demote", "drain", "ok", "demote", "watch"]
    assert out["reasons"].iat[0] == [
        "demote held: demoted since 2026-02-27 12:00 UTC, and its risk 0.40 is still at or above 0.30; "
        "interruptible work only until it falls under that",
        "risk 0.40 (ECC 0.40): sbe rising",
    ]
    assert not any(r.startswith("demote held") for r in out["reasons"].iat[3])
    # No hold without the standing demotes; a release level of 0.5 lets the 0.4 go.
    assert decide(f, risk, th)["decision"].tolist() == ["watch", "drain", "ok", "demote", "watch"]
    assert decide(f, risk, Thresholds(release=0.5), demoted=demoted)["decision"].tolist()[0] == "watch"


def test_decide_demotes_on_the_core_heat_alone_once_it_has_held_and_says_why() -> None:
    th = Thresholds(thermal_heat_z=4.0, thermal_heat_for_s=6 * 3600)
    hot = HEALTHY | {"heat_excess_z": 5.0, "heat_load_share": 1.0}
    f = frame(hot, hot, hot | {"heat_load_share": 0.2}, hot | {"heat_excess_z": 3.5}, hot | {"row_remap_pending": 1.0},
              hot, hot)  # fmt: skip
    # held 8 h; 5 h (too short); at light load; under the level; drained by the rule; held (with a probation); NaT
    heat_since = naive(*["2026-02-28 16:00", "2026-02-28 19:00", "2026-02-28 16:00", "2026-02-28 16:00",
                         "2026-02-28 16:00", "2026-02-28 16:00", None])  # fmt: skip
    released = naive(*[None] * 5, "2026-02-27 12:00", None)
    risk = risk_frame(f.index, [0.05, 0.05, 0.05, 0.05, 0.05, 0.15, 0.05], reasons=[["warm"]] * 7)
    out = decide(f, risk, th, heat_since=heat_since, released=released)
    assert out["decision"].tolist() == ["demote", "ok", "ok", "ok", "drain", "demote", "ok"]
    assert out["reasons"].iat[0] == [
        "thermal demote on heat alone: the core runs +5.0 σ hot against its own past and its node, at 4 σ or more "
        "in every round since 2026-02-28 16:00 UTC (the hold: 6 h), beyond what its power explains: check its "
        "cooling (heat sink, fans, thermal paste)",
        "risk 0.05 (ECC 0.05): warm",
    ]
    assert out["reasons"].iat[5][0].startswith("probation: ")  # one reason: the probation's comes first
    # Off (level 0), or without the rounds before: nothing on heat alone; a 0 h hold needs none.
    assert decide(f, risk, Thresholds(thermal_heat_z=0), heat_since=heat_since)["decision"].tolist()[0] == "ok"
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
    out = decide(f, risk, th, heat_since=heat_since)
    # both; its own heat too low; the node's yardstick under 5 σ; at light load; not known (young)
    assert out["decision"].tolist() == ["demote", "ok", "ok", "ok", "ok"]
    assert out["reasons"].iat[0][0] == (
        "thermal demote on heat alone: the core runs hotter than its node's GPUs by +6.0 σ of its own spread of "
        "that difference (at 5 σ or more; the room's swings cancel against its node), and +2.5 σ hot against its "
        "own past and its node (at 2 σ or more) in every round since 2026-02-28 16:00 UTC (the hold: 6 h), "
        "beyond what its power explains: check its cooling (heat sink, fans, thermal paste)"
    )
    # Its level at 0 turns this yardstick off, and the other's at 0 leaves it on.
    off = decide(f, risk, replace(th, thermal_heat_vs_node_z=0.0), heat_since=heat_since)
    assert off["decision"].tolist()[0] == "ok"
    alone = decide(f, risk, replace(th, thermal_heat_z=0.0), heat_since=heat_since)
    assert alone["decision"].tolist() == ["demote", "ok", "ok", "ok", "ok"]
    # A GPU at 4 σ on its own yardstick says that one, whatever the other reads.
    one = frame(hot | {"heat_excess_z": 4.5})
    both = decide(one, risk_frame(one.index, [0.05]), th, heat_since=naive("2026-02-28 16:00"))
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
        decide(f, risk, at_once, heat_since=naive("2026-02-28 16:00", None))
    with pytest.raises(ValueError, match="'cutoff' column in features to count released to"):
        decide(f, risk, Thresholds(probation_for_s=3600.0), released=naive(None, None))
