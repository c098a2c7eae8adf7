"""Decisions replayed over a GPU's rounds: runs of high risk, the probation's chain, the hold of a standing demote."""

from __future__ import annotations

import numpy as np
import pandas as pd

from predictor.replay import (
    apply_waits,
    held_demotes,
    high_since,
    probation_began,
    recently_wore,
    remap_held,
    stored_run_began,
)
from predictor.thresholds import Thresholds
from tests.predictor.test_conditions import _t

CUT = pd.Timestamp("2026-03-01", tz="UTC")


def test_high_since_finds_each_run_of_high_rows_in_any_order() -> None:
    gpu = np.array(["a", "b", "a", "a", "b", "a"])
    at = pd.to_datetime(["01:00", "00:00", "00:00", "03:00", "01:00", "02:00"], format="%H:%M", utc=True)
    high = np.array([False, True, True, True, True, True])
    got = pd.DatetimeIndex(high_since(gpu, at, high))
    t = pd.Timestamp("1900-01-01")
    want = pd.DatetimeIndex([pd.NaT, t, t, t + pd.Timedelta(hours=2), t, t + pd.Timedelta(hours=2)])
    assert got.equals(want)


def test_stored_run_began_reads_the_run_before_this_round() -> None:
    stored = [
        ("a", CUT - pd.Timedelta(hours=4), 0.5), ("a", CUT - pd.Timedelta(hours=3), 0.8),
        ("a", CUT - pd.Timedelta(hours=1), 0.75), ("b", CUT - pd.Timedelta(hours=2), 0.9),
        ("b", CUT - pd.Timedelta(hours=1), None), ("c", CUT - pd.Timedelta(hours=9), 0.95),
    ]  # fmt: skip
    # a: high since 3 h ago (a missing round does not break a run); b: its last round is
    # unknown, so its run begins now; c: high at its last round; d: never stored.
    rounds = [(u, t) for u, t, _ in stored]
    with np.errstate(invalid="ignore"):
        high = np.array([np.nan if r is None else r for _, _, r in stored]) >= 0.7
    got = stored_run_began(rounds, high, ["a", "b", "c", "d"], CUT)
    assert got == {"a": CUT - pd.Timedelta(hours=3), "c": CUT - pd.Timedelta(hours=9)}
    assert stored_run_began([], [], ["a"], CUT) == {}


def test_probation_began_is_the_first_row_after_the_last_drain_of_an_unbroken_run() -> None:
    # GPU a: drained at 0-1, let go at 2 with its risk still high until 4, a dip at 5, high at 6.
    # GPU b: high risk but never drained. GPU c: drained, risk under at once, high again later.
    # GPU d: drained twice with a high risk between: the second release counts from its own end.
    rows = [
        ("a", 0, True, 0.2), ("a", 1, True, 0.01), ("a", 2, False, 0.1), ("a", 3, False, 0.5), ("a", 4, False, 0.9),
        ("a", 5, False, 0.09), ("a", 6, False, 0.3),
        ("b", 0, False, 0.9), ("b", 1, False, 0.9),
        ("c", 0, True, 0.5), ("c", 1, False, 0.05), ("c", 2, False, 0.5),
        ("d", 0, True, 0.5), ("d", 1, False, 0.5), ("d", 2, True, 0.5), ("d", 3, False, 0.5), ("d", 4, False, np.nan),
    ]  # fmt: skip
    order = np.random.default_rng(3).permutation(len(rows))  # any order of rows
    gpu = np.asarray([rows[i][0] for i in order], dtype=object)
    at = _t([rows[i][1] for i in order])
    out = np.asarray([rows[i][2] for i in order])
    risk = np.asarray([rows[i][3] for i in order])
    began = probation_began(gpu, at, out, risk, Thresholds())
    t0 = _t([0]).tz_convert(None)[0]
    got = {(rows[i][0], rows[i][1]): (None if np.isnat(b) else int((b - t0) / np.timedelta64(1, "h")))
           for i, b in zip(order, began, strict=True)}  # fmt: skip
    assert got == {
        ("a", 0): None, ("a", 1): None, ("a", 2): 2, ("a", 3): 2, ("a", 4): 2, ("a", 5): None, ("a", 6): None,
        ("b", 0): None, ("b", 1): None,
        ("c", 0): None, ("c", 1): None, ("c", 2): None,
        ("d", 0): None, ("d", 1): 1, ("d", 2): None, ("d", 3): 3, ("d", 4): None,
    }  # fmt: skip
    assert probation_began(np.asarray([], dtype=object), _t([]), np.zeros(0, bool), np.zeros(0), Thresholds()).size == 0


def test_held_demotes_keeps_a_demote_while_the_risk_stays_at_the_release_level() -> None:
    # GPU a: demoted at 1, held at 0.5 and 0.3, released at 0.29, not held again at 0.5 (no new demote).
    # GPU b: a drain at 2 breaks the chain into 3 (the probation's turn); demoted again at 4, held at 5.
    # GPU c: never demoted. GPU d: demoted, an unknown risk ends it.
    rows = [
        ("a", 0, False, False, 0.5), ("a", 1, True, False, 0.9), ("a", 2, False, False, 0.5),
        ("a", 3, False, False, 0.3), ("a", 4, False, False, 0.29), ("a", 5, False, False, 0.5),
        ("b", 0, True, False, 0.9), ("b", 1, False, False, 0.5), ("b", 2, False, True, 0.5),
        ("b", 3, False, False, 0.5), ("b", 4, True, False, 0.9), ("b", 5, False, False, 0.4),
        ("c", 0, False, False, 0.6), ("c", 1, False, False, 0.6),
        ("d", 0, True, False, 0.9), ("d", 1, False, False, np.nan), ("d", 2, False, False, 0.5),
    ]  # fmt: skip
    order = np.random.default_rng(5).permutation(len(rows))  # any order of rows
    pick = [rows[i] for i in order]
    gpu = np.asarray([r[0] for r in pick], dtype=object)
    at = _t([r[1] for r in pick])
    demoted, out, risk = (np.asarray([r[k] for r in pick]) for k in (2, 3, 4))
    got = held_demotes(gpu, at, demoted, out, risk, Thresholds())
    held = {(r[0], r[1]) for r, g in zip(pick, got, strict=True) if g}
    assert held == {("a", 1), ("a", 2), ("a", 3), ("b", 0), ("b", 1), ("b", 2), ("b", 4), ("b", 5), ("d", 0)}
    # Released at the demote level: only the demoted rows (and a run at 0.7 or above after one) stay.
    strict = held_demotes(gpu, at, demoted, out, risk, Thresholds(release=0.7))
    assert {(r[0], r[1]) for r, g in zip(pick, strict, strict=True) if g} == {("a", 1), ("b", 0), ("b", 4), ("d", 0)}
    assert held_demotes(np.asarray([], dtype=object), _t([]), np.zeros(0, bool), np.zeros(0, bool), np.zeros(0),
                        Thresholds()).size == 0  # fmt: skip


def test_apply_waits_holds_the_model_demote_after_its_wait_as_the_service_does() -> None:
    """Hourly rows: risk 0.9 for 4 h (demoted after the 3 h wait), 0.5 for 3 h (held), then 0.2."""
    hours = _t(list(range(9)))
    risk = [0.9] * 4 + [0.5] * 3 + [0.2] * 2
    rows = pd.DataFrame({"gpu_uuid": "g", "cutoff": hours, "risk": risk, "risk_ecc": 0.0, "risk_thermal": risk,
                         "risk_pcie": 0.0, "held": False, "rule_act": False, "heat_load_share": 1.0})  # fmt: skip
    out = apply_waits(rows, Thresholds())
    assert out["demote"].tolist() == [False] * 3 + [True] * 4 + [False] * 2
    assert out["alert"].equals(out["demote"])
    assert apply_waits(rows, Thresholds(release=0.7))["demote"].tolist() == [False] * 3 + [True] + [False] * 5
    # A node finding that holds the thermal demote at watch does not end a demote that stands.
    node = apply_waits(rows.assign(held=[False] * 4 + [True] * 5), Thresholds())
    assert node["demote"].tolist() == [False] * 3 + [True] * 4 + [False] * 2


def test_apply_waits_demotes_on_heat_alone_once_it_has_held_as_the_service_does() -> None:
    """Hourly rows at risk 0: the core's heat at 5 σ from hour 1 to 8 with a light-load hour at 4, then
    at 5 σ from hour 5 on: a run of 3 h (1-3) is too short, one of 4 h (5-8) demotes from hour 8; the
    hold then keeps nothing (the risk is under the release level)."""
    heat = [0.0, 5.0, 5.0, 5.0, 5.0, 5.0, 5.0, 5.0, 5.0, 0.0]
    load = [1.0] * 4 + [0.2] + [1.0] * 5
    rows = pd.DataFrame({"gpu_uuid": "g", "cutoff": _t(list(range(10))), "risk": 0.0, "risk_ecc": 0.0,
                         "risk_thermal": 0.0, "risk_pcie": 0.0, "held": False, "rule_act": False,
                         "heat_load_share": load, "heat_excess_z": heat})  # fmt: skip
    th = Thresholds(thermal_heat_z=4.0, thermal_heat_for_s=3 * 3600)
    out = apply_waits(rows, th)
    assert out["on_heat"].tolist() == [False] * 8 + [True, False]
    assert out["demote"].equals(out["on_heat"]) and out["alert"].equals(out["demote"])
    assert not apply_waits(rows, Thresholds(thermal_heat_z=0.0))["demote"].any()
    # At risk 0.5 (the release level or above) the demote on heat is held as any standing demote.
    held = apply_waits(rows.assign(risk=0.5), th)
    assert held["demote"].tolist() == [False] * 8 + [True, True]


def _remap_rows(runs: dict[str, list[tuple[bool, bool, float]]]) -> pd.DataFrame:
    """Hourly rows per GPU from (rule_act, remap_alone, risk_ecc), in a shuffled order."""
    rows = [(g, h, *r) for g, rs in runs.items() for h, r in enumerate(rs)]
    rows = [rows[i] for i in np.random.default_rng(5).permutation(len(rows))]
    return pd.DataFrame({"gpu_uuid": [r[0] for r in rows], "cutoff": _t([r[1] for r in rows]),
                         "rule_act": [r[2] for r in rows], "remap_alone": [r[3] for r in rows],
                         "risk_ecc": [r[4] for r in rows], "risk": [r[4] for r in rows], "risk_thermal": 0.0,
                         "risk_pcie": 0.0, "held": False, "heat_load_share": 1.0})  # fmt: skip


def test_remap_held_holds_a_pending_remap_at_watch_until_the_ecc_risk_reaches_the_level_then_its_drain_stands() -> None:
    P, OTHER = (False, True), (True, False)  # the pending remap alone; another drain or RMA rule (with or without it)
    runs = {
        # held while under 0.3; drained at 0.4; the drain stands at 0.1; the run ends (reset); a new run
        # 4 h after the 0.4 drains at once (the default look back, 24 h), held with none.
        "a": [(*P, 0.1), (*P, 0.2), (*P, 0.4), (*P, 0.1), (*P, 0.1), (False, False, 0.1), (*P, 0.1)],
        # another drain rule drains at once, and the pending remap's drain then stands.
        "b": [(*OTHER, 0.1), (*P, 0.1), (*P, 0.1)],
        # an unknown ECC risk shows no wear: held.
        "c": [(*P, np.nan), (*P, 0.1)],
        # never drained: the risk stays under the level.
        "d": [(*P, 0.29), (*P, 0.0)],
    }
    rows = _remap_rows(runs)
    key = list(zip(rows["gpu_uuid"], (rows["cutoff"] - _t([0])[0]) // pd.Timedelta(hours=1), strict=True))
    got = dict(zip(key, remap_held(rows, Thresholds(remap_hold_risk=0.3)), strict=True))
    want = {"a": [1, 1, 0, 0, 0, 0, 0], "b": [0, 0, 0], "c": [1, 1], "d": [1, 1]}
    assert {g: [int(got[(g, h)]) for h in range(len(w))] for g, w in want.items()} == want
    for clear_h, last in ((0, 1), (4, 1), (5, 0)):  # the 0.4 is 4 h before: in a look back of 5 h, not of 4
        th = Thresholds(remap_hold_risk=0.3, remap_hold_clear_s=clear_h * 3600)
        assert int(dict(zip(key, remap_held(rows, th), strict=True))[("a", 6)]) == last
    decided = apply_waits(rows, Thresholds(remap_hold_risk=0.3))
    assert (decided["out_of_service"] == ((rows["rule_act"] | rows["remap_alone"]) & ~decided["remap_held"])).all()
    assert (decided["alert"] >= decided["out_of_service"]).all()
    # At 0 (the operator's drain at once): nothing held. Held 2 h at the level: "a" drains at its 0.4 only
    # if it lasts, and the 0.4 that did not last is no wear its next run looks back to.
    assert not remap_held(rows, Thresholds(remap_hold_risk=0.0)).any()
    slow = dict(zip(key, remap_held(rows, Thresholds(remap_hold_risk=0.3, remap_hold_for_s=7200)), strict=True))
    assert [int(slow[("a", h)]) for h in range(7)] == [1, 1, 1, 1, 1, 0, 1]


def test_recently_wore_reads_the_stored_rounds_as_the_hourly_rows_look_back() -> None:
    """The service's question (`recently_wore`) from rounds before `now`: a GPU whose ECC risk held the
    level (for `remap_hold_for_s`) less than `remap_hold_clear_s` before now."""
    now = _t([30])[0]
    stored = [("a", t) for t in _t([5, 6, 7])] + [("b", t) for t in _t([27, 28])] + [("c", t) for t in _t([28, 29])]
    risk = np.asarray([0.5, 0.5, 0.1, 0.5, 0.1, np.nan, 0.2])
    th = Thresholds(remap_hold_risk=0.3)  # a day back: "a" at 0.5 until 6 h, 24 h before 30 h: just out
    assert recently_wore(stored, risk, now, th) == {"b"}
    assert recently_wore(stored, risk, now, Thresholds(remap_hold_risk=0.3, remap_hold_clear_s=25 * 3600)) == {"a", "b"}
    # Held 1 h: "a" (5 h and 6 h) did, "b" (one round at 0.5) did not.
    one_h = Thresholds(remap_hold_risk=0.3, remap_hold_for_s=3600, remap_hold_clear_s=25 * 3600)
    assert recently_wore(stored, risk, now, one_h) == {"a"}
    assert recently_wore(stored, risk, now, Thresholds(remap_hold_risk=0.0)) == set()  # no level
    assert recently_wore(stored, risk, now, Thresholds(remap_hold_risk=0.3, remap_hold_clear_s=0)) == set()
