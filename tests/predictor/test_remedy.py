"""The remedy beside each decision: each rule's remedy, the strongest winning, the model's none, and
when a GPU's next remedy is a replacement (the repeat offender)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pandas as pd
import pytest

from core.history import BUS_IDS_ATTR
from predictor.model import RiskModel
from predictor.remedy import remedies, repeat_offender, slot_lines, strongest, with_decisions
from predictor.rules import REPEAT_REMEDIES, REPEAT_WINDOW_DAYS, RULE_REMEDIES, RULES, RemedyRef, evaluate_rules
from predictor.score import score
from tests.predictor.features.test_history import CUT, DAY, failures, fleet


def _hits(*rows: tuple[int, str]) -> pd.DataFrame:
    by = {r.name: r.action for r in RULES}
    return pd.DataFrame({"row": [r for r, _ in rows], "rule": [n for _, n in rows],
                         "action": [by[n] for _, n in rows], "reason": ["x"] * len(rows)})  # fmt: skip


def _one(hits: pd.DataFrame, n: int = 1) -> tuple[str, str, list[str]]:
    got = remedies(hits, pd.RangeIndex(n))
    return str(got["remedy"].iat[0]), str(got["remedy_when"].iat[0]), list(got["remedy_reasons"].iat[0])


@pytest.mark.parametrize(
    ("action", "remedy", "when"),
    [(1, "reset", "now"), (2, "reboot", "now"), (3, "none", "idle"), (4, "reset", "now"), (5, "none", "idle"),
     (6, "reset", "now"), (7, "reboot", "now"), (0, "none", "idle")],
)  # fmt: skip
def test_the_drivers_recovery_action_names_the_remedy(action: int, remedy: str, when: str) -> None:
    got = _one(evaluate_rules(pd.DataFrame({"recovery_action": [float(action)]})))
    assert got[:2] == (remedy, when)
    if action in (3, 5):  # no remedy yet, but the reason says why
        assert len(got[2]) == 1 and got[2][0].startswith("remedy: none (driver's recovery action")
        assert ("read the action again" if action == 3 else "IMEX") in got[2][0]
    elif action == 0:
        assert got[2] == []
    else:
        assert got[2][0].startswith(f"remedy: {remedy} now (driver's recovery action")


@pytest.mark.parametrize(
    ("rule", "remedy", "when"),
    [("remap_pending", "reset", "idle"), ("uncontained_ecc", "reset", "now"), ("off_bus", "reboot", "now"),
     ("dbe_recent", "reset", "now"), ("repeated_dbe", "replace", "now"), ("row_remap_failure", "replace", "now"),
     ("gsp_error", "reset", "now"), ("driver_reset", "reset", "now"), ("driver_reboot", "reboot", "now"),
     ("pcie_replays", "none", "idle"), ("sbe_rate_high", "none", "idle")],
)  # fmt: skip
def test_each_rule_names_its_remedy(rule: str, remedy: str, when: str) -> None:
    assert _one(_hits((0, rule)))[:2] == (remedy, when)


def test_every_rma_rule_asks_for_a_replacement() -> None:
    assert {r.name for r in RULES if r.action == "rma"} <= {
        k for k, v in RULE_REMEDIES.items() if v.remedy == "replace"
    }


def test_a_pending_remap_says_it_applies_at_the_next_reset() -> None:
    _, _, lines = _one(_hits((0, "remap_pending")))
    assert lines == [
        "remedy: reset idle (pending row remap applies at the next reset — NVIDIA memory error management guide)"
    ]


@pytest.mark.parametrize("code", [119, 120])
def test_gsp_xids_ask_for_a_reset_now(code: int) -> None:
    got = _one(evaluate_rules(pd.DataFrame({f"xid_{code}_7d": [2.0]})))
    assert got[:2] == ("reset", "now") and "XID 119/120" in got[2][0]


def test_the_strongest_remedy_wins_then_the_most_urgent() -> None:
    # pending remap (reset idle) + GSP error (reset now) -> reset now
    assert _one(_hits((0, "remap_pending"), (0, "gsp_error")))[:2] == ("reset", "now")
    # pending remap + driver's node reboot -> reboot now; + an RMA rule -> replace
    assert _one(_hits((0, "remap_pending"), (0, "driver_reboot")))[:2] == ("reboot", "now")
    assert _one(_hits((0, "remap_pending"), (0, "repeated_dbe"), (0, "driver_reboot")))[:2] == ("replace", "now")
    # drain P2P (none yet) beside a reset: the reset, and the none line is left out
    got = _one(_hits((0, "uncontained_ecc"), (0, "driver_drain_p2p")))
    assert got[:2] == ("reset", "now") and len(got[2]) == 1
    assert strongest([]).remedy == "none"
    assert strongest([RemedyRef("reset", "idle", "a"), RemedyRef("reset", "now", "b")]).why == "b"


def test_rows_are_told_apart() -> None:
    got = remedies(_hits((1, "off_bus"), (2, "driver_reset")), pd.RangeIndex(3))
    assert list(got["remedy"]) == ["none", "reboot", "reset"]
    assert list(got["remedy_when"]) == ["idle", "now", "now"]


NOW = datetime(2026, 3, 1, tzinfo=UTC)


def test_a_second_remedy_within_the_window_is_a_repeat_offender() -> None:
    """InfiniteHBD-Trace: 16 of 30 servers with DBE faults had them again, 22 of 30 repeats within 30 days."""
    assert (REPEAT_REMEDIES, REPEAT_WINDOW_DAYS) == (2, 30)
    assert not repeat_offender([], NOW)  # a first remedy is a remedy
    assert repeat_offender([NOW - timedelta(days=29)], NOW)
    assert not repeat_offender([NOW - timedelta(days=31)], NOW)  # out of the window
    assert not repeat_offender([NOW + timedelta(hours=1)], NOW)  # not yet happened: does not count
    assert repeat_offender([NOW - timedelta(days=40), NOW - timedelta(days=1)], NOW)
    # Other counts and windows, as a caller may ask.
    assert not repeat_offender([NOW - timedelta(days=1)], NOW, times=3)
    assert repeat_offender([NOW - timedelta(days=1), NOW - timedelta(days=2)], NOW, times=3)
    assert not repeat_offender([NOW - timedelta(days=8)], NOW, days=7)


def test_model_only_decisions_ask_for_no_remedy() -> None:
    """A watch or demote the risk alone set (no rule, no driver action) asks for none, and says nothing."""
    features = pd.DataFrame({"xid_92_7d": [0.0], "row_remap_pending": [0.0]})
    assert _one(evaluate_rules(features)) == ("none", "idle", [])


def test_a_slot_that_keeps_losing_gpus_is_named_as_the_slot() -> None:
    """Two or more GPUs lost in one slot within 60 days (`REPEAT_REMEDIES`, decision 0089): the reasons
    name the slot, whichever GPU is in it now, and whatever else they say."""
    x = pd.DataFrame(
        {"hostname": ["node-07", "node-07", "node-08"], "gpu_index": [3, 4, 3], "slot_gpus_failed_60d": [3.0, 1.0, 2.0]}
    )
    got = remedies(_hits((0, "off_bus")), x.index, x)
    lines = list(got["remedy_reasons"])
    slot = "slot of GPU 3 on node-07 has lost 3 GPUs in 60 days: check its riser, cable and slot"
    assert lines[0] == [lines[0][0], slot] and lines[0][0].startswith("remedy: reboot now")
    assert lines[1] == []
    assert lines[2] == [slot.replace("node-07", "node-08").replace("3 GPUs", "2 GPUs")]
    assert list(got["remedy"]) == ["reboot", "none", "none"], "the slot's line asks for no remedy of the GPU"
    # A drain's worn remap replaces the remedy's line, not the slot's.
    fix = remedies(_hits((0, "remap_pending")), x.index[:1], x[:1])
    worn = with_decisions(fix, pd.Series(["drain"], index=x.index[:1]))
    assert worn["remedy_reasons"].iat[0][1] == slot


def test_the_scores_reasons_name_a_slot_that_lost_two_gpus(shipped_model: RiskModel) -> None:
    """Through `score`: the GPU now in the slot is told its slot lost two GPUs (its predecessor and
    itself); the other GPUs are not."""
    fails = failures(("GPU-old", "node-a", CUT - 8 * DAY), ("GPU-new", "node-a", CUT - DAY))
    out = score(shipped_model, fleet(), at=CUT, failures=fails).set_index("gpu_uuid")["reasons"]
    line = "slot of GPU 0 on node-a has lost 2 GPUs in 60 days: check its riser, cable and slot"
    assert line in out["GPU-new"]
    assert all(line not in out[u] and not any(r.startswith("slot of") for r in out[u]) for u in ("GPU-a1", "GPU-b0"))


def test_the_slot_is_named_by_its_bus_id_where_the_history_had_one() -> None:
    x = pd.DataFrame({"gpu_uuid": ["GPU-a", "GPU-b", "GPU-c"], "hostname": "node-07", "gpu_index": [3, 4, -1],
                      "slot_gpus_failed_60d": [3.0, 2.0, 2.0]})  # fmt: skip
    x.attrs[BUS_IDS_ATTR] = {"GPU-a": "00000000:41:00.0"}
    assert slot_lines(x) == [
        ["slot 00000000:41:00.0 of node-07 has lost 3 GPUs in 60 days: check its riser, cable and slot"],
        ["slot of GPU 4 on node-07 has lost 2 GPUs in 60 days: check its riser, cable and slot"],
        [],  # neither a bus id nor an index: no slot to name
    ]


def test_the_scores_reasons_name_the_slots_bus_id(shipped_model: RiskModel) -> None:
    """The store's scoring frame carries the bus ids (`history.BUS_IDS_ATTR`): the reasons name the slot by it."""
    fails = failures(("GPU-old", "node-a", CUT - 8 * DAY), ("GPU-new", "node-a", CUT - DAY))
    history = fleet()
    history.attrs[BUS_IDS_ATTR] = {"GPU-old": "00000000:41:00.0", "GPU-new": "00000000:41:00.0"}
    out = score(shipped_model, history, at=CUT, failures=fails).set_index("gpu_uuid")["reasons"]
    assert (
        "slot 00000000:41:00.0 of node-a has lost 2 GPUs in 60 days: check its riser, cable and slot" in out["GPU-new"]
    )
