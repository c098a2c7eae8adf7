"""NVIDIA/DCGM rules: each fires at its threshold and not just under it; NaN never fires."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest

from predictor import rules
from predictor.features import FEATURES
from predictor.rules import BASELINE_RULES, BY_NAME, RULES, Rule, evaluate_rules, rule_alerts

# A healthy H100 as build_features would describe it: no page retirement (Ampere and
# later, so retired_pages* are NaN), no errors, full PCIe link, a few SBEs.
HEALTHY: dict[str, float] = {name: np.nan for name in FEATURES} | {
    "sbe_rate_1d": 0.5,
    "sbe_rate_7d": 0.4,
    "sbe_rate_30d": 0.4,
    "dbe_7d": 0.0,
    "dbe_30d": 0.0,
    "remapped_rows_correctable": 2.0,
    "remapped_rows_uncorrectable": 0.0,
    "remaps_new_7d": 0.0,
    "row_remap_pending": 0.0,
    "row_remap_failure": 0.0,
    "temp_mean_1d": 62.0,
    "replay_rate_1d": 0.2,
    "replay_rate_7d": 0.2,
    "link_width_ratio": 1.0,
    "link_gen_ratio": 1.0,
    **{f"xid_{c}_7d": 0.0 for c in (48, 63, 64, 79, 92, 94, 95)},
    "xid_79_30d": 0.0,
    "xid_48_30d": 0.0,
    "xid_other_7d": 0.0,
    "coverage_1d": 1.0,
    "age_days": 200.0,
}
# A pre-Ampere GPU (V100) has page retirement and no row remapping.
PRE_AMPERE: dict[str, float] = HEALTHY | {
    "remapped_rows_correctable": np.nan,
    "remapped_rows_uncorrectable": np.nan,
    "row_remap_pending": np.nan,
    "row_remap_failure": np.nan,
    "retired_pages": 3.0,
    "retired_pages_dbe": 1.0,
    "retired_pages_dbe_new_7d": 0.0,
    "retired_pages_pending": 0.0,
}


def frame(*rows: dict[str, float], index: list[Any] | None = None) -> pd.DataFrame:
    """A features frame: identity columns and FEATURES, one row per dict."""
    ident = {
        "gpu_uuid": [f"GPU-{i:04d}" for i in range(len(rows))],
        "hostname": [f"node{i // 8:02d}" for i in range(len(rows))],
        "gpu_index": [i % 8 for i in range(len(rows))],
        "model_name": ["NVIDIA H100 80GB HBM3"] * len(rows),
        "cutoff": pd.Timestamp("2026-03-01", tz="UTC"),
        "last_seen": pd.Timestamp("2026-03-01", tz="UTC"),
    }
    feats = pd.DataFrame(list(rows), columns=list(FEATURES))
    out = pd.concat([pd.DataFrame(ident), feats], axis=1)
    if index is not None:
        out.index = pd.Index(index)
    return out


# (rule, base, overrides just under the threshold, overrides at/over it, text in the reason)
CASES: list[tuple[str, dict[str, float], dict[str, float], dict[str, float], str]] = [
    ("row_remap_failure", HEALTHY, {"row_remap_failure": 0}, {"row_remap_failure": 1}, "remap failed"),
    (
        "remapped_rows_limit",
        HEALTHY,
        {"remapped_rows_uncorrectable": 511},
        {"remapped_rows_uncorrectable": 512},
        "512 uncorrectable remapped rows",
    ),
    (
        "retired_pages_limit",
        PRE_AMPERE,
        {"retired_pages": 62},
        {"retired_pages": 63},
        "retired pages 63 >= 63",
    ),
    (
        "retired_pages_limit",
        PRE_AMPERE,
        {"retired_pages": 62},
        {"retired_pages": 64},
        "retired pages 64 >= 63",
    ),
    (
        "retired_pages_dbe_growth",
        PRE_AMPERE,
        {"retired_pages_dbe": 15, "retired_pages_dbe_new_7d": 2},
        {"retired_pages_dbe": 16, "retired_pages_dbe_new_7d": 2},
        "DBE retired pages 16 > 15 with 2 new in 7 days",
    ),
    (
        "retired_pages_dbe_growth",
        PRE_AMPERE,
        {"retired_pages_dbe": 20, "retired_pages_dbe_new_7d": 1},
        {"retired_pages_dbe": 20, "retired_pages_dbe_new_7d": 3},
        "20 > 15 with 3 new",
    ),
    ("repeated_dbe", HEALTHY, {"dbe_30d": 1, "xid_48_30d": 1}, {"dbe_30d": 2}, "2 DBEs in 30 days"),
    ("repeated_dbe", HEALTHY, {"dbe_30d": 1, "xid_48_30d": 1}, {"xid_48_30d": 2}, "XID 48 logged 2 times"),
    (
        "off_bus_repeated",
        HEALTHY,
        {"xid_79_30d": 1},
        {"xid_79_30d": 2},
        "fell off the bus 2 times in 30 days",
    ),
    ("remap_recording_failure", HEALTHY, {"xid_64_7d": 0}, {"xid_64_7d": 1}, "XID 64"),
    ("off_bus", HEALTHY, {"xid_79_7d": 0}, {"xid_79_7d": 1}, "fell off the bus 1 time in the last 7 days"),
    ("uncontained_ecc", HEALTHY, {"xid_95_7d": 0}, {"xid_95_7d": 1}, "uncontained ECC error (XID 95) 1 time"),
    ("dbe_recent", HEALTHY, {"dbe_7d": 0, "xid_48_7d": 0}, {"dbe_7d": 1}, "(1 DBE)"),
    ("dbe_recent", HEALTHY, {"dbe_7d": 0, "xid_48_7d": 0}, {"xid_48_7d": 3}, "XID 48 logged 3 times"),
    # Contained (XID 94) on a GPU with dynamic page offlining: no drain, unless one was uncontained (XID 95).
    ("dbe_recent", HEALTHY, {"dbe_7d": 1, "xid_94_7d": 1}, {"dbe_7d": 1, "xid_94_7d": 1, "xid_95_7d": 1}, "(1 DBE)"),
    ("dbe_recent", PRE_AMPERE, {"dbe_7d": 0}, {"dbe_7d": 1, "xid_94_7d": 1}, "(1 DBE)"),  # no page offlining
    ("gsp_error", HEALTHY, {"xid_119_7d": 0, "xid_120_7d": 0}, {"xid_119_7d": 1}, "GSP error (XID 119 1 time"),
    ("gsp_error", HEALTHY, {"xid_120_7d": 0}, {"xid_120_7d": 2}, "XID 120 2 times in the last 7 days"),
    ("driver_reboot", HEALTHY, {"recovery_action": 1}, {"recovery_action": 2}, "action 2 (node reboot): drain"),
    ("driver_reboot", HEALTHY, {"recovery_action": 0}, {"recovery_action": 7}, "action 7 (system reboot)"),
    ("driver_reset", HEALTHY, {"recovery_action": 0}, {"recovery_action": 1}, "action 1 (GPU reset): drain and"),
    ("driver_reset", HEALTHY, {"recovery_action": 3}, {"recovery_action": 4}, "(drain P2P and reset)"),
    ("driver_reset", HEALTHY, {"recovery_action": 5}, {"recovery_action": 6}, "(PCIe bus reset)"),
    ("driver_drain_p2p", HEALTHY, {"recovery_action": 0}, {"recovery_action": 3}, "then read the action again"),
    ("driver_imex", HEALTHY, {"recovery_action": 0}, {"recovery_action": 5}, "recover the IMEX domain"),
    ("remap_pending", HEALTHY, {"row_remap_pending": 0}, {"row_remap_pending": 1}, "row remap pending: "),
    (
        "remap_pending",
        PRE_AMPERE,
        {"retired_pages_pending": 0},
        {"retired_pages_pending": 1},
        "page retirement pending: ",
    ),
    ("pcie_replays", HEALTHY, {"replay_rate_1d": 480}, {"replay_rate_1d": 481}, "PCIe replays 481/h"),
    (
        "pcie_replays",
        HEALTHY,
        {"replay_rate_1d": 479.9},
        {"replay_rate_1d": 1200},
        "PCIe replays 1,200/h (20/min, 1-day mean) above DCGM's 8/min",
    ),
    (
        "link_downtrained",
        HEALTHY,
        {"link_width_ratio": 1.0},
        {"link_width_ratio": 0.5},
        "width at 50% of max",
    ),
    (
        "link_downtrained",
        HEALTHY,
        {"link_gen_ratio": 1.0},
        {"link_gen_ratio": 0.8},
        "generation at 80% of max",
    ),
    ("sbe_rate_high", HEALTHY, {"xid_92_7d": 0}, {"xid_92_7d": 2, "sbe_rate_1d": 14}, "2 times in 7 days"),
    ("sbe_rate_high", HEALTHY, {"xid_92_7d": 0}, {"xid_92_7d": 1, "sbe_rate_1d": 14}, "SBE rate 14/day"),
]
CASE_IDS = [f"{c[0]}-{i}" for i, c in enumerate(CASES)]


@pytest.mark.parametrize(("name", "base", "under", "over", "text"), CASES, ids=CASE_IDS)
def test_rule_fires_at_threshold_not_under(
    name: str, base: dict[str, float], under: dict[str, float], over: dict[str, float], text: str
) -> None:
    rule = BY_NAME[name]
    f = frame(base | under, base | over, index=["under", "over"])
    hits = evaluate_rules(f, rules=(rule,))
    assert hits["row"].tolist() == ["over"]
    assert hits["rule"].tolist() == [name]
    assert hits["action"].tolist() == [rule.action]
    assert text in hits["reason"].iat[0]


EXPECTED_ACTIONS = {
    "row_remap_failure": "rma",
    "remapped_rows_limit": "rma",
    "retired_pages_limit": "rma",
    "retired_pages_dbe_growth": "rma",
    "repeated_dbe": "rma",
    "off_bus_repeated": "rma",
    "remap_recording_failure": "rma",
    "off_bus": "drain",
    "uncontained_ecc": "drain",
    "dbe_recent": "drain",
    "gsp_error": "drain",
    "driver_reboot": "drain",
    "driver_reset": "drain",
    "driver_drain_p2p": "drain",
    "remap_pending": "watch",
    "pcie_replays": "watch",
    "link_downtrained": "watch",
    "sbe_rate_high": "watch",
    "driver_imex": "watch",
}


def test_rule_set_and_actions() -> None:
    assert {r.name: r.action for r in RULES} == EXPECTED_ACTIONS
    assert {c[0] for c in CASES} == set(EXPECTED_ACTIONS)  # every rule has a test case


def test_rules_are_well_formed() -> None:
    assert len({r.name for r in RULES}) == len(RULES)
    assert set(BASELINE_RULES) <= set(RULES)
    for r in RULES:
        assert r.source.strip(), r.name
        unknown = set(r.inputs) - set(FEATURES)
        assert not unknown, f"rule {r.name} reads unknown features {unknown}"


def test_thresholds_match_the_documents() -> None:
    assert rules.RETIRED_PAGES_LIMIT == 63  # DCGM_LIMIT_MAX_RETIRED_PAGES
    assert rules.RETIRED_PAGES_DBE_SOFT_LIMIT == 15
    assert rules.RETIRED_PAGES_DBE_NEW_PER_WEEK == 1
    assert rules.ROW_REMAP_LIMIT == 512
    assert rules.PCIE_REPLAYS_PER_HOUR == 8 * 60


def test_healthy_gpus_fire_nothing() -> None:
    f = frame(HEALTHY, PRE_AMPERE)
    assert evaluate_rules(f).empty
    assert not rule_alerts(f).any()


def test_nan_never_fires() -> None:
    f = frame({name: np.nan for name in FEATURES})
    hits = evaluate_rules(f)
    assert hits.empty
    assert list(hits.columns) == ["row", "rule", "action", "reason"]
    assert not rule_alerts(f).any()


@pytest.mark.parametrize("rule", RULES, ids=[r.name for r in RULES])
def test_nan_in_one_input_does_not_fire_through_the_other(rule: Rule) -> None:
    # Every input NaN but a healthy value in one: still nothing.
    for col in rule.inputs:
        row = {name: np.nan for name in FEATURES} | {col: HEALTHY[col] if not np.isnan(HEALTHY[col]) else 0.0}
        assert not rule.fires(frame(row)).any(), col


def test_missing_columns_read_as_nan() -> None:
    f = frame(HEALTHY | {"xid_79_7d": 1.0}).drop(columns=["row_remap_failure", "replay_rate_1d"])
    hits = evaluate_rules(f)
    assert hits["rule"].tolist() == ["off_bus"]


def test_and_rule_needs_both_inputs() -> None:
    # DCGM's weekly DBE check needs the weekly growth; an unknown growth does not fire.
    f = frame(PRE_AMPERE | {"retired_pages_dbe": 40, "retired_pages_dbe_new_7d": np.nan})
    assert not BY_NAME["retired_pages_dbe_growth"].fires(f).any()


def test_several_rules_on_one_gpu_and_index_labels_kept() -> None:
    bad = HEALTHY | {"xid_79_30d": 3, "xid_79_7d": 2, "replay_rate_1d": 900}
    f = frame(HEALTHY, bad, HEALTHY, index=["a", "b", "c"])
    hits = evaluate_rules(f)
    assert set(hits["row"]) == {"b"}
    assert hits.set_index("rule")["action"].to_dict() == {
        "off_bus_repeated": "rma",
        "off_bus": "drain",
        "pcie_replays": "watch",
    }
    assert "fell off the bus 3 times in 30 days" in hits.set_index("rule").at["off_bus_repeated", "reason"]
    assert rule_alerts(f).tolist() == [False, True, False]


def test_watch_rules_count_as_alerts() -> None:
    f = frame(HEALTHY | {"link_width_ratio": 0.5})
    assert rule_alerts(f).tolist() == [True]


def test_reasons_formatted_only_for_rows_that_fired() -> None:
    def boom(row: Any) -> str:
        raise AssertionError("reason formatted for a row that did not fire")

    rule = Rule("never", "watch", "test", ("dbe_7d",), lambda f: f["dbe_7d"] > 100, boom)
    assert evaluate_rules(frame(HEALTHY, HEALTHY), rules=(rule,)).empty


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"name": "Bad Name"}, "snake_case"),
        ({"action": "reboot"}, "not one of"),
        ({"source": ""}, "cite its source"),
    ],
)
def test_rule_validation(kwargs: dict[str, Any], message: str) -> None:
    args: dict[str, Any] = {
        "name": "ok_rule",
        "action": "watch",
        "source": "somewhere",
        "inputs": ("dbe_7d",),
        "predicate": lambda f: f["dbe_7d"] > 0,
        "reason": lambda r: "x",
    }
    with pytest.raises(ValueError, match=message):
        Rule(**(args | kwargs))
