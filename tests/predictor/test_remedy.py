"""The remedy beside each decision: each source's remedy, the strongest winning, the model's none."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from predictor.remedy import driver_inputs, remedies, strongest
from predictor.rules import RECOVERY_REMEDIES, RULE_REMEDIES, RULES, RemedyRef, evaluate_rules

CUTOFF = pd.Timestamp("2026-01-10T00:00:00Z")


def _driver(n: int, recovery: list[float] | None = None, **xids: list[int]) -> pd.DataFrame:
    out = pd.DataFrame({"recovery_action": recovery or [np.nan] * n}, index=pd.RangeIndex(n))
    for code in (119, 120):
        out[f"xid_{code}_recent"] = xids.get(f"xid_{code}", [0] * n)
    return out


def _hits(*rows: tuple[int, str]) -> pd.DataFrame:
    by = {r.name: r.action for r in RULES}
    return pd.DataFrame({"row": [r for r, _ in rows], "rule": [n for _, n in rows],
                         "action": [by[n] for _, n in rows], "reason": ["x"] * len(rows)})  # fmt: skip


def _one(hits: pd.DataFrame, driver: pd.DataFrame) -> tuple[str, str, list[str]]:
    got = remedies(hits, driver, pd.RangeIndex(len(driver)))
    return str(got["remedy"].iat[0]), str(got["remedy_when"].iat[0]), list(got["remedy_reasons"].iat[0])


@pytest.mark.parametrize(
    ("action", "remedy", "when"),
    [(1, "reset", "now"), (2, "reboot", "now"), (3, "none", "idle"), (4, "reset", "now"), (5, "none", "idle"),
     (6, "reset", "now"), (7, "reboot", "now"), (0, "none", "idle")],
)  # fmt: skip
def test_the_drivers_recovery_action_names_the_remedy(action: int, remedy: str, when: str) -> None:
    got = _one(_hits(), _driver(1, [float(action)]))
    assert got[:2] == (remedy, when)
    if action in (3, 5):  # no remedy yet, but the reason says why
        assert got[2] == [f"remedy: none ({RECOVERY_REMEDIES[action].why})"]
        assert ("read the action again" if action == 3 else "IMEX") in got[2][0]
    elif action == 0:
        assert got[2] == []
    else:
        assert got[2][0].startswith(f"remedy: {remedy} now (driver's recovery action {action}")


@pytest.mark.parametrize(
    ("rule", "remedy", "when"),
    [("remap_pending", "reset", "idle"), ("uncontained_ecc", "reset", "now"), ("off_bus", "reboot", "now"),
     ("dbe_recent", "reset", "now"), ("repeated_dbe", "replace", "now"), ("row_remap_failure", "replace", "now"),
     ("pcie_replays", "none", "idle"), ("sbe_rate_high", "none", "idle")],
)  # fmt: skip
def test_each_rule_names_its_remedy(rule: str, remedy: str, when: str) -> None:
    assert _one(_hits((0, rule)), _driver(1))[:2] == (remedy, when)


def test_every_rma_rule_asks_for_a_replacement() -> None:
    assert {r.name for r in RULES if r.action == "rma"} <= {
        k for k, v in RULE_REMEDIES.items() if v.remedy == "replace"
    }


def test_a_pending_remap_says_it_applies_at_the_next_reset() -> None:
    _, _, lines = _one(_hits((0, "remap_pending")), _driver(1))
    assert lines == [
        "remedy: reset idle (pending row remap applies at the next reset — NVIDIA memory error management guide)"
    ]


@pytest.mark.parametrize("code", [119, 120])
def test_gsp_xids_ask_for_a_reset_now(code: int) -> None:
    got = _one(_hits(), _driver(1, **{f"xid_{code}": [2]}))
    assert got[:2] == ("reset", "now") and f"XID {code}" in got[2][0]


def test_the_strongest_remedy_wins_then_the_most_urgent() -> None:
    # pending remap (reset idle) + GSP error (reset now) -> reset now
    assert _one(_hits((0, "remap_pending")), _driver(1, xid_119=[1]))[:2] == ("reset", "now")
    # pending remap + driver's node reboot -> reboot now; + an RMA rule -> replace
    assert _one(_hits((0, "remap_pending")), _driver(1, [2.0]))[:2] == ("reboot", "now")
    assert _one(_hits((0, "remap_pending"), (0, "repeated_dbe")), _driver(1, [2.0]))[:2] == ("replace", "now")
    # drain P2P (none yet) beside a reset: the reset, and the none line is left out
    got = _one(_hits((0, "uncontained_ecc")), _driver(1, [3.0]))
    assert got[:2] == ("reset", "now") and len(got[2]) == 1
    assert strongest([]).remedy == "none"
    assert strongest([RemedyRef("reset", "idle", "a"), RemedyRef("reset", "now", "b")]).why == "b"


def test_rows_are_told_apart() -> None:
    got = remedies(_hits((1, "off_bus")), _driver(3, [np.nan, np.nan, 1.0]), pd.RangeIndex(3))
    assert list(got["remedy"]) == ["none", "reboot", "reset"]
    assert list(got["remedy_when"]) == ["idle", "now", "now"]


def test_driver_inputs_read_the_latest_action_and_recent_gsp_xids() -> None:
    t = pd.to_datetime(["2026-01-01 00:00", "2026-01-09 00:00", "2026-01-09 12:00", "2026-01-09 00:00"], utc=True)
    seen = pd.DataFrame({"gpu_uuid": ["a", "a", "a", "b"], "timestamp": t,
                         "recovery_action": [2.0, 1.0, 0.0, 4.0], "xid": [119, 0, 120, 0]})  # fmt: skip
    got = driver_inputs(seen, pd.RangeIndex(3), pd.Series(["a", "b", "c"]), CUTOFF)
    assert got["recovery_action"].tolist()[:2] == [0.0, 4.0] and np.isnan(got["recovery_action"].iat[2])
    assert got["xid_119_recent"].tolist() == [0, 0, 0]  # 9 days before the cutoff: out of the window
    assert got["xid_120_recent"].tolist() == [1, 0, 0]
    # No recovery_action column (an older history): nothing asked.
    assert (
        driver_inputs(seen.drop(columns="recovery_action"), pd.RangeIndex(1), pd.Series(["a"]), CUTOFF)[
            "recovery_action"
        ]
        .isna()
        .all()
    )


def test_model_only_decisions_ask_for_no_remedy() -> None:
    """A watch or demote the risk alone set (no rule, no driver action) asks for none, and says nothing."""
    features = pd.DataFrame({"xid_92_7d": [0.0], "row_remap_pending": [0.0]})
    assert _one(evaluate_rules(features), _driver(1)) == ("none", "idle", [])
