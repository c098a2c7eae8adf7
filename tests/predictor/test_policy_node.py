"""Decision policy on a hot node: a node's heat is the node's finding, not its GPUs' demotes."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from predictor.node import NODE_COLUMNS, NodeHeat, node_findings, node_reason
from predictor.policy import decide
from predictor.rules import evaluate_rules
from predictor.thresholds import Thresholds
from tests.predictor.test_policy import risk_frame
from tests.predictor.test_rules import HEALTHY, frame

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
