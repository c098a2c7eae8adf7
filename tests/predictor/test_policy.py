"""Decision policy: worst of rules and risk, thresholds, reasons and their order, a pending remap's
drain held; what a round does to decisions. The node, the waits and the standing demotes: test_policy_*.py."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pandas as pd
import pytest

from predictor.policy import DECISIONS, CarriedOver, DecisionChanges, decide, decision_changes
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


def naive(*times: str | None) -> np.ndarray:
    """Times as the naive-UTC datetime64 array `decide` takes (None: NaT)."""
    return np.array([np.datetime64("NaT") if t is None else pd.Timestamp(t).to_datetime64() for t in times],
                    dtype="datetime64[ns]")  # fmt: skip


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
    """A pending remap waits for a reset at idle where no wear shows; after its reason, where the ECC
    head's risk is known, a line says whether the memory looks worn (at the watch level) or not, and
    when it would drain; at the level (0.3 by default) it drains and says why."""
    pending = HEALTHY | {"row_remap_pending": 1}
    f = frame(pending, pending, pending, pending | {"row_remap_failure": 1}, pending, HEALTHY)
    risk = risk_frame(f.index, [0.01, 0.3, np.nan, 0.9, 0.29, 0.9], risk_ecc=[0.01, 0.3, np.nan, 0.9, 0.29, 0.9])
    out = decide(f, risk, Thresholds())
    assert out["decision"].tolist() == ["watch", "drain", "watch", "rma", "watch", "demote"]
    rule = (
        "row remap pending: unaffected work goes on; reset the GPU at its next idle moment to apply it "
        "(NVIDIA memory error management)"
    )
    assert out["reasons"].iat[0] == [
        rule,
        "its ECC risk 0.01 (under 0.3) shows no wearing memory: a weak row on a healthy GPU is remapped too, "
        "and NVIDIA lets work go on until the reset; it is drained if its ECC risk reaches 0.3",
    ]
    assert out["reasons"].iat[1] == [
        rule,
        "its ECC risk 0.30 reached 0.3: its memory is wearing, so the reset does not wait for idle: drain it, "
        "reset it now and follow the reset with a field diagnostic",
    ]
    assert out["reasons"].iat[2] == [rule, "no risk score"]  # unknown: nothing said of it
    assert not any("ECC risk" in r for r in out["reasons"].iat[3])  # the RMA set it, not the pending remap
    assert out["reasons"].iat[4][1].startswith("its ECC risk 0.29 (under 0.3) shows no wearing memory")
    assert not any("ECC risk" in r for r in out["reasons"].iat[5])  # no remap pending
    # The watch level is the thresholds': at 0.25, 0.29 reads as wear (the drain stays at 0.3).
    worn = decide(f, risk, replace(Thresholds(), watch=0.25))
    assert worn["reasons"].iat[4][1].startswith("its ECC risk 0.29 (at 0.25 or above) says its memory may be wearing")


def test_a_pending_remap_alone_is_a_watch_unless_its_memory_wears() -> None:
    """NVIDIA's guide: a pending remap alone is a watch and a reset at idle, an unknown ECC risk
    included; it drains where the ECC risk reaches the level (wearing memory) or the drain stands
    (`drained`); another drain or RMA rule decides by itself."""
    pending = HEALTHY | {"row_remap_pending": 1}
    f = frame(pending, pending, pending, pending | {"row_remap_failure": 1}, pending, pending).assign(
        cutoff=pd.Timestamp("2026-03-01 12:00", tz="UTC")
    )
    ecc = [0.05, 0.3, np.nan, 0.05, 0.05, 0.29]
    risk = risk_frame(f.index, [0.05, 0.3, np.nan, 0.05, 0.05, 0.29], risk_ecc=ecc)
    th = Thresholds(remap_hold_risk=0.3)
    nat = np.full(len(f), np.datetime64("NaT"), dtype="datetime64[ns]")
    drained = np.asarray([False, False, False, False, True, False])
    held = CarriedOver(ecc_since=nat, drained=drained)
    out = decide(f, risk, th, carried=held)
    assert out["decision"].tolist() == ["watch", "drain", "watch", "rma", "drain", "watch"]
    assert out["reasons"].iat[0][0].startswith("row remap pending: unaffected work goes on; reset the GPU at its next")
    assert out["reasons"].iat[0][1].startswith("its ECC risk 0.05 (under 0.3) shows no wearing memory")
    assert out["reasons"].iat[1][1].startswith("its ECC risk 0.30 reached 0.3: its memory is wearing")
    assert out["reasons"].iat[4][1].startswith("the drain stands though its ECC risk 0.05 is under 0.3")
    # Without the rounds before: this round's risk alone; at 0 (the operator's choice): a drain at once.
    assert decide(f, risk, th)["decision"].tolist() == ["watch", "drain", "watch", "rma", "watch", "watch"]
    assert set(decide(f, risk, Thresholds(remap_hold_risk=0.0), carried=held)["decision"]) == {"drain", "rma"}
    with pytest.raises(ValueError, match="cutoff column"):
        decide(f.drop(columns="cutoff"), risk, th, carried=CarriedOver(ecc_since=nat))


def test_unscored_gpus_decide_from_rules_alone() -> None:
    f = frame(HEALTHY | {"row_remap_pending": 1}, HEALTHY, HEALTHY)
    risk = risk_frame(
        f.index,
        [np.nan, np.nan, 0.1],
        risk_note=["too little history (2 h)", None, None],
    )
    out = decide(f, risk, Thresholds())
    assert out["decision"].tolist() == ["watch", "ok", "ok"]
    assert out["reasons"].iat[0] == [
        "row remap pending: unaffected work goes on; reset the GPU at its next idle moment to apply it "
        "(NVIDIA memory error management)",
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
