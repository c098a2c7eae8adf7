"""Evaluation: per-incident catching, episodes and precision by hand; the floors on an unseen fleet; the report."""

from __future__ import annotations

import copy
import json
import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from predictor.evaluate import (
    FLOORS,
    Judging,
    alert_causes,
    caught,
    episodes,
    evaluate,
    pr_curve,
    precision,
    remap_hold_whatif,
    warned_at_lead,
)
from predictor.evaluate_report import causes_markdown, remap_hold_markdown, write_report
from predictor.features import STALE_S
from predictor.model import RiskModel
from predictor.replay import apply_waits
from predictor.thresholds import Thresholds
from simulator.fleet import SimConfig
from simulator.models import parse_mix
from simulator.run import simulate

HOUR = pd.Timedelta(hours=1)
DAY = pd.Timedelta(days=1)
WEEK = 7 * DAY
T = pd.Timestamp("2026-03-20T12:00:00Z")


def alerts(*rows: tuple[str, pd.Timestamp]) -> pd.DataFrame:
    """Scored rows that all alert (flag `a`), plus one quiet row so the flag is really read."""
    df = pd.DataFrame({"gpu_uuid": [u for u, _ in rows], "cutoff": [c for _, c in rows], "a": True})
    quiet = pd.DataFrame({"gpu_uuid": ["GPU-1"], "cutoff": [T - 2 * HOUR], "a": [False]})
    return pd.concat([df, quiet], ignore_index=True)


def failure(mode: str = "ecc", uuid: str = "GPU-1", at: pd.Timestamp = T) -> pd.DataFrame:
    return pd.DataFrame({"gpu_uuid": [uuid], "failed_at": [at], "mode": [mode]})


# --- caught ---------------------------------------------------------------------------------


def test_alert_three_days_ahead_is_caught_at_24h_lead() -> None:
    c = caught(alerts(("GPU-1", T - 3 * DAY)), "a", failure("ecc"), WEEK, DAY).iloc[0]
    assert c["first_alert_lead"] == 3 * DAY
    assert (c["caught_1h"], c["caught_24h"], c["caught"]) == (True, True, True)


@pytest.mark.parametrize(("mode", "expected"), [("ecc", False), ("thermal", False), ("pcie", True), ("other", True)])
def test_alert_twelve_hours_ahead_is_caught_only_at_1h_lead(mode: str, expected: bool) -> None:
    c = caught(alerts(("GPU-1", T - 12 * HOUR)), "a", failure(mode), WEEK, DAY).iloc[0]
    assert c["first_alert_lead"] == 12 * HOUR
    assert (c["caught_1h"], c["caught_24h"]) == (True, False)
    assert c["caught"] == expected  # ECC/thermal need 24 h, PCIe and others 1 h


def test_first_alert_sets_the_lead_and_the_window_bounds_it() -> None:
    rows = alerts(
        ("GPU-1", T - 8 * DAY),  # before the window: does not count
        ("GPU-1", T - WEEK),  # the window's far end counts
        ("GPU-1", T - 30 * pd.Timedelta(minutes=1)),
        ("GPU-1", T + HOUR),  # after the failure: does not count
        ("GPU-2", T - 2 * DAY),  # another GPU
    )
    c = caught(rows, "a", failure("thermal"), WEEK, DAY).iloc[0]
    assert c["first_alert_lead"] == WEEK and bool(c["caught"])


def test_alert_too_late_does_not_catch() -> None:
    rows = alerts(("GPU-1", T - 8 * DAY), ("GPU-1", T + HOUR), ("GPU-2", T - DAY), ("GPU-1", T - 30 * HOUR / 60))
    c = caught(rows, "a", failure("pcie"), WEEK, DAY).iloc[0]
    assert c["first_alert_lead"] == pd.Timedelta(minutes=30)  # the only alert in the window: too late
    assert not c["caught_1h"] and not c["caught"]


def test_one_caught_one_missed() -> None:
    two = pd.concat([failure("ecc", "GPU-1"), failure("ecc", "GPU-3")], ignore_index=True)
    c = caught(alerts(("GPU-1", T - 2 * DAY)), "a", two, WEEK, DAY)
    assert c["caught"].tolist() == [True, False]
    assert pd.isna(c["first_alert_lead"].iloc[1])


CAUGHT_NONE = (
    "BUG predictor/evaluate.py:117-122 (caught): when NO failure has an alert in its window, `first` is empty, "
    "f['fid'].map(first) is a float64 column of NaN and `>= HOUR` raises TypeError 'Cannot cast TimedeltaArray "
    "to dtype float64'; so evaluate() crashes on a fleet without judged failures, when the rule baseline "
    "catches nothing, or in pr_curve at a threshold (up to 0.95) where nothing is caught"
)


def test_no_failure_caught() -> None:
    none = caught(alerts(("GPU-2", T - DAY)), "a", failure("ecc"), WEEK, DAY).iloc[0]
    assert pd.isna(none["first_alert_lead"]) and not none["caught"] and not none["caught_1h"]


def test_evaluate_a_fleet_without_failures(shipped_model: RiskModel) -> None:
    # simulate() gives an empty, object-typed failures frame here (no failure in 2x8 GPUs x 20 days);
    # evaluate must still report (recall NaN, precision over episodes) rather than crash.
    frame, failures = simulate(SimConfig(nodes=2, gpus_per_node=8, seed=1, random_failures=True), 20)
    assert failures.empty
    rep = evaluate(shipped_model, frame, failures, every="6h")
    assert rep["failures"] == {} and math.isnan(rep["model"]["recall_ecc"])


# --- episodes and precision -----------------------------------------------------------------


def kept_rows(hours: int, gpus: dict[str, dict[str, Any]], head: str = "risk_thermal") -> pd.DataFrame:
    """Hourly kept rows (`score.hour_rows`' columns) from T: each GPU at risk 0.9 on `head`, at its
    baseline's load unless its columns say otherwise (a value, or one per hour), nothing held."""
    cutoffs = pd.date_range(T, periods=hours, freq="1h")
    common = {"risk": 0.9, "risk_ecc": 0.0, "risk_thermal": 0.0, "risk_pcie": 0.0, head: 0.9, "held": False,
              "rule_act": False, "heat_load_share": 1.0}  # fmt: skip
    frames = [pd.DataFrame({"gpu_uuid": g, "cutoff": cutoffs, **common, **cols}) for g, cols in gpus.items()]
    return pd.concat(frames, ignore_index=True)


def first_demotes(out: pd.DataFrame) -> pd.Series:
    """Per GPU of `apply_waits`' rows, the first cutoff it is demoted at."""
    return out[out["demote"]].groupby("gpu_uuid")["cutoff"].min()


def test_the_evaluation_decides_a_thermal_demote_at_light_load_as_the_service_does() -> None:
    """Kept scored rows are decided under the waits (`apply_waits`): a thermal demote of a GPU at
    light load (`heat_load_share` under half) waits 12 h, or until its load returns."""
    share = {"idle": [0.2] * 16, "busy": [1.0] * 16, "returns": [0.2] * 6 + [1.0] * 10}
    rows = kept_rows(16, {g: {"heat_load_share": s} for g, s in share.items()})
    out = apply_waits(rows, Thresholds())
    first = first_demotes(out)
    assert first.to_dict() == {"idle": T + 12 * HOUR, "busy": T + 3 * HOUR, "returns": T + 6 * HOUR}
    assert out["alert"].equals(out["demote"])
    off = apply_waits(rows, Thresholds(light_load_share=0.0))
    assert (first_demotes(off) == T + 3 * HOUR).all()


def test_the_evaluation_shortens_the_light_load_wait_where_the_memory_spread_stands_out_as_the_service_does() -> None:
    """Kept scored rows keep the memory-core spread (`conditions.WAIT_INPUTS`): at light load a thermal
    demote whose spread stands at `light_load_spread_z` σ waits the thermal 3 h, not 12 h; one whose
    spread rises there later waits 3 h from the risk's rise if that is over by then."""
    spreads = {"wide": [2.6] * 16, "narrow": [2.4] * 16, "later": [1.0] * 5 + [2.6] * 11, "unknown": [np.nan] * 16}
    idle = {"heat_load_share": 0.2, "heat_excess_z": 0.3}
    rows = kept_rows(16, {g: {**idle, "mem_spread_z": z} for g, z in spreads.items()})
    first = first_demotes(apply_waits(rows, Thresholds(light_load_spread_z=2.5)))
    assert first.to_dict() == {"wide": T + 3 * HOUR, "narrow": T + 12 * HOUR, "later": T + 5 * HOUR,
                               "unknown": T + 12 * HOUR}  # fmt: skip
    assert (first_demotes(apply_waits(rows, Thresholds(light_load_spread_z=0))) == T + 12 * HOUR).all()


def test_the_evaluation_lets_a_thermal_demote_no_reading_corroborates_wait_longer_as_the_service_does() -> None:
    """Kept scored rows keep the heat over the node's and the memory-core spread (`conditions.WAIT_INPUTS`):
    a thermal demote neither corroborates waits 6 h; one whose node yardstick rises to the level after 4 h
    stands then; one with a reading not known keeps the 3 h wait."""
    node = {"alone": [0.3] * 10, "rises": [0.3] * 4 + [1.6] * 6, "unknown": [np.nan] * 10}
    quiet = {"heat_excess_z": 1.0, "mem_spread_z": 0.5}
    rows = kept_rows(10, {g: {**quiet, "heat_vs_node_own_z": z} for g, z in node.items()})
    first = first_demotes(apply_waits(rows, Thresholds(thermal_corroborate_z=1.5)))
    assert first.to_dict() == {"alone": T + 6 * HOUR, "rises": T + 4 * HOUR, "unknown": T + 3 * HOUR}
    assert (first_demotes(apply_waits(rows, Thresholds(thermal_corroborate_z=0))) == T + 3 * HOUR).all()


def test_the_evaluation_cuts_a_thermal_wait_short_where_two_readings_agree_as_the_service_does() -> None:
    """Kept scored rows keep the two readings (`conditions.WAIT_INPUTS`): where the core's heat and the
    memory-core spread both reach 2 σ, a thermal demote stands at once (at light load it still waits)."""
    gpus = {"agree": (2.5, 2.5, 1.0), "one": (2.5, 0.5, 1.0), "idle": (2.5, 2.5, 0.2), "later": (2.5, 2.5, 1.0)}
    rows = kept_rows(8, {g: {"heat_load_share": share, "heat_excess_z": heat,
                             "mem_spread_z": [spread if g != "later" or k >= 1 else 0.0 for k in range(8)]}
                         for g, (heat, spread, share) in gpus.items()})  # fmt: skip
    first = first_demotes(apply_waits(rows, Thresholds()))
    # "idle": at light load no witness holds, its spread (2.5 σ) only shortens the 12 h wait to the
    # thermal 3 h (`light_wait`); "later": the spread agrees an hour in.
    assert first.to_dict() == {"agree": T, "one": T + 3 * HOUR, "idle": T + 3 * HOUR, "later": T + HOUR}
    assert first_demotes(apply_waits(rows, Thresholds(thermal_agree_z=0))).to_dict() == {
        "agree": T + 3 * HOUR,
        "one": T + 3 * HOUR,
        "idle": T + 3 * HOUR,
        "later": T + 3 * HOUR,
    }
    # Without the spread's shortening, the idle GPU's 12 h wait is not over in these 8 hours.
    long = apply_waits(rows, Thresholds(light_load_spread_z=0))
    assert "idle" not in set(long.loc[long["demote"], "gpu_uuid"])


def test_the_evaluation_lets_a_habitual_links_pcie_demote_wait_six_hours_as_the_service_does() -> None:
    """Kept scored rows keep the link's surprise (`conditions.WAIT_INPUTS`): a PCIe demote on a link whose
    replaying hours stand under 3 σ out of its own month waits 6 h, a surprising one 3 h."""
    rows = kept_rows(8, {g: {"replay_surprise_6h": z} for g, z in {"habit": 2.0, "new": 5.0}.items()}, "risk_pcie")
    assert first_demotes(apply_waits(rows, Thresholds())).to_dict() == {
        "habit": T + 6 * HOUR,
        "new": T + 3 * HOUR,
    }


def test_alert_runs_two_days_apart_are_two_episodes() -> None:
    run1 = [T - 5 * DAY + k * 2 * HOUR for k in range(3)]  # 3 alerts 2 h apart
    run2 = [run1[-1] + 2 * DAY, run1[-1] + 2 * DAY + 2 * HOUR]
    eps = episodes(alerts(*[("GPU-1", t) for t in run1 + run2]), "a")
    assert len(eps) == 2
    assert eps["start"].tolist() == [run1[0], run2[0]]
    assert eps["end"].tolist() == [run1[-1], run2[-1]]
    assert (eps["gpu_uuid"] == "GPU-1").all()


def test_a_gap_of_exactly_one_day_keeps_one_episode_and_gpus_are_separate() -> None:
    eps = episodes(alerts(("GPU-1", T - 3 * DAY), ("GPU-1", T - 2 * DAY), ("GPU-2", T - 2 * DAY)), "a")
    assert sorted(eps["gpu_uuid"]) == ["GPU-1", "GPU-2"]
    one = eps[eps["gpu_uuid"] == "GPU-1"].iloc[0]
    assert (one["start"], one["end"]) == (T - 3 * DAY, T - 2 * DAY)


def test_no_alerts_no_episodes() -> None:
    rows = alerts(("GPU-1", T)).assign(a=False)
    eps = episodes(rows, "a")
    assert eps.empty and list(eps.columns) == ["gpu_uuid", "start", "end"]
    assert math.isnan(precision(eps, failure(), WEEK)[0]) and precision(eps, failure(), WEEK)[1:] == (0, 0)


def test_a_false_episode_lowers_precision() -> None:
    true_run = alerts(("GPU-1", T - 3 * DAY), ("GPU-1", T - 2 * DAY))
    assert precision(episodes(true_run, "a"), failure(), WEEK) == (1.0, 1, 1)
    with_false = alerts(("GPU-1", T - 3 * DAY), ("GPU-1", T - 2 * DAY), ("GPU-2", T - 3 * DAY))
    assert precision(episodes(with_false, "a"), failure(), WEEK) == (0.5, 1, 2)


def test_episode_too_early_or_after_the_failure_is_false() -> None:
    rows = alerts(
        ("GPU-1", T - 20 * DAY),  # ends 20 days before: the failure is beyond its window
        ("GPU-1", T - 3 * DAY),  # true
        ("GPU-1", T + 2 * DAY),  # after the failure (a replacement would have a new UUID)
    )
    assert precision(episodes(rows, "a"), failure(), WEEK) == (pytest.approx(1 / 3), 1, 3)


# --- which failures gave warning, and the PR curve ------------------------------------------


def onsets(*rows: tuple[str, str, pd.Timedelta]) -> pd.DataFrame:
    """Failures at T (uuid, mode) whose precursor began `ahead` before."""
    return pd.DataFrame({"gpu_uuid": [u for u, _, _ in rows], "failed_at": T, "mode": [m for _, m, _ in rows],
                         "precursor_onset": [T - a for _, _, a in rows]})  # fmt: skip


def test_warning_is_judged_at_each_modes_lead() -> None:
    # 30 h of precursor: under a day plus the 12 h margin for ECC and thermal, enough for PCIe's hour.
    f = onsets(("GPU-1", "ecc", 30 * HOUR), ("GPU-2", "thermal", 30 * HOUR), ("GPU-3", "pcie", 30 * HOUR),
               ("GPU-4", "ecc", 36 * HOUR), ("GPU-5", "pcie", 12 * HOUR))  # fmt: skip
    assert warned_at_lead(f, DAY).tolist() == [False, False, True, True, False]


def test_the_pr_curve_counts_the_failures_that_gave_warning_beside_all() -> None:
    # GPU-1's precursor began three days ahead and its risk rose two days ahead; GPU-2's began 6 h
    # ahead, too late for a day's lead: no risk could catch it in time.
    f = onsets(("GPU-1", "ecc", 3 * DAY), ("GPU-2", "ecc", 6 * HOUR))
    cut = pd.date_range(T - 6 * DAY, T - HOUR, freq="h")
    rows = pd.concat(
        [pd.DataFrame({"gpu_uuid": "GPU-1", "cutoff": cut, "risk": np.where(cut >= T - 2 * DAY, 0.9, 0.0)}),
         pd.DataFrame({"gpu_uuid": "GPU-2", "cutoff": cut, "risk": np.where(cut >= T - 3 * HOUR, 0.9, 0.0)}),
         pd.DataFrame({"gpu_uuid": "GPU-9", "cutoff": cut, "risk": 0.0})],
        ignore_index=True,
    )  # fmt: skip
    curve = pr_curve(rows, f, f, WEEK, DAY)
    at = curve.set_index("threshold")
    assert at.loc[0.5, "recall"] == 1.0 and at.loc[0.5, "recall_all"] == 0.5 and at.loc[0.5, "precision"] == 1.0
    assert at.loc[0.95, "recall"] == 0.0
    assert curve.attrs["auc"] == pytest.approx(1.0)
    assert curve.attrs["auc_all"] == pytest.approx(0.5)


# --- the floors on an unseen fleet ----------------------------------------------------------

# Seed 11 is not a training seed (101, 102). 24 nodes x 8 GPUs x 60 days hourly with the
# failure rate at 20x field statistics (5x the training fleets') so that the test span
# holds a few dozen incidents; the same node mix as `gpuhealth simulate` and `make model`.
EVAL_FLEET = SimConfig(
    nodes=24,
    gpus_per_node=8,
    seed=11,
    random_failures=True,
    acceleration=20,
    models=parse_mix("A100=0.3,H100=0.5,H200=0.2"),
)
EVAL_DAYS = 60
# A fleet this small has ~40 incidents with precursors, so one incident moves recall by
# ~3-10 points and precision by ~2: the thresholds here are the project floors (FLOORS)
# loosened by that much, not the floors themselves (`make evaluate` checks those on a big fleet).
TOLERANT = {"recall_ecc": 0.70, "precision": 0.80, "false_demotions_per_1000_gpu_days": 2.0, "pr_auc": 0.75}


@pytest.fixture(scope="module")
def report(shipped_model: RiskModel) -> dict[str, Any]:
    frame, failures = simulate(EVAL_FLEET, EVAL_DAYS)
    t = time.perf_counter()
    rep = evaluate(shipped_model, frame, failures, every="2h")
    m, r = rep["model"], rep["rules"]
    print(
        f"\nevaluated {rep['gpus']} GPUs, {rep['gpu_days']:.0f} GPU-days in {time.perf_counter() - t:.1f} s; "
        f"failures judged {rep['failures']}\n"
        f"model: recall ecc {m['recall_ecc']:.3f} thermal {m['recall_thermal']:.3f} pcie {m['recall_pcie']:.3f} "
        f"precursor modes {m['recall_precursor_modes']:.3f}, precision {m['precision']:.3f} "
        f"({m['true_episodes']}/{m['episodes']}), false demotions/1000 GPU-days "
        f"{m['false_demotions_per_1000_gpu_days']:.2f}, PR-AUC {rep['pr_auc']:.3f}\n"
        f"rules: recall precursor modes {r['recall_precursor_modes']:.3f}, precision {r['precision']:.3f} "
        f"({r['true_episodes']}/{r['episodes']})"
    )
    return rep


def test_the_fleet_has_enough_incidents(report: dict[str, Any]) -> None:
    judged = report["failures"]
    assert judged.get("ecc", 0) >= 15
    assert judged.get("thermal", 0) + judged.get("pcie", 0) >= 8
    assert report["gpus"] >= 192


def test_recall_ecc(report: dict[str, Any]) -> None:
    assert report["model"]["recall_ecc"] >= TOLERANT["recall_ecc"]


def test_precision(report: dict[str, Any]) -> None:
    assert report["model"]["precision"] >= TOLERANT["precision"]


def test_false_demotions(report: dict[str, Any]) -> None:
    fd = report["model"]["false_demotions_per_1000_gpu_days"]
    assert 0 <= fd <= TOLERANT["false_demotions_per_1000_gpu_days"]


def test_pr_auc(report: dict[str, Any]) -> None:
    assert report["pr_auc"] >= TOLERANT["pr_auc"]


def test_model_recall_at_least_the_rule_baseline(report: dict[str, Any]) -> None:
    assert report["model"]["recall_precursor_modes"] >= report["rules"]["recall_precursor_modes"]
    # The model's alerts include the drain/RMA rules, so it catches every incident they catch, or more.
    assert report["model"]["recall_all_1h"] >= report["rules"]["recall_all_1h"]


def test_gpus_already_failed_are_left_out(report: dict[str, Any]) -> None:
    """Each failed GPU is scored for up to STALE_S on its last samples: those hours are no prediction."""
    after = report["gpu_days_after_failure"]
    assert 0 < after <= report["gpus"] * STALE_S / 86400
    assert after < 0.05 * report["gpu_days"]


def test_floors_are_checked(report: dict[str, Any]) -> None:
    floors = report["floors"]
    assert set(floors) == {*FLOORS, "beats_rule_baseline"}
    for k, floor in FLOORS.items():
        assert floors[k]["floor"] == floor
        v = floors[k]["value"]
        ok = v <= floor if k.startswith("false") else v >= floor
        assert floors[k]["ok"] == bool(ok)


PNG = b"\x89PNG\r\n\x1a\n"


def strict_json(text: str) -> Any:
    def refuse(constant: str) -> Any:
        raise ValueError(f"{constant} is not JSON")

    return json.loads(text, parse_constant=refuse)


def test_write_report(report: dict[str, Any], tmp_path: Path) -> None:
    paths = write_report(report, tmp_path / "out")
    names = {p.name for p in paths}
    assert names == {"report.json", "report.md", "pr_curve.png", "lead_times.png", "recall_by_mode.png"}
    for p in paths:
        assert p.parent == tmp_path / "out" and p.stat().st_size > 0
        if p.suffix == ".png":
            assert p.read_bytes()[:8] == PNG, p
    data = strict_json((tmp_path / "out" / "report.json").read_text())
    assert set(data["floors"]) == {*FLOORS, "beats_rule_baseline"}
    for k in FLOORS:
        assert data["floors"][k]["floor"] == FLOORS[k]
        assert data["floors"][k]["value"] == pytest.approx(report["floors"][k]["value"])
    assert data["pr_auc"] == pytest.approx(report["pr_auc"])
    assert data["pr_curve"] and {"threshold", "recall", "precision"} <= set(data["pr_curve"][0])
    assert not any(k.startswith("_") for k in data)
    md = (tmp_path / "out" / "report.md").read_text()
    assert "## Quality floors" in md and "## Model and rule baseline" in md
    for k in FLOORS:
        assert f"| {k} |" in md
    for png in ("pr_curve.png", "lead_times.png", "recall_by_mode.png"):
        assert f"]({png})" in md


def test_report_json_is_valid_when_a_measure_is_nan(report: dict[str, Any], tmp_path: Path) -> None:
    rep = copy.copy(report)
    rep["model"] = {**report["model"], "recall_pcie": float("nan")}
    rep["rules"] = {**report["rules"], "recall_pcie": np.float64("nan")}
    write_report(rep, tmp_path)
    data = strict_json((tmp_path / "report.json").read_text())
    assert data["model"]["recall_pcie"] is None


# --- what raised the alerts ---------------------------------------------------------------------------

TWO_WEEKS = 14 * 24


def waited_rows(name: str, act: Any = False, alone: Any = False, ecc: Any = 0.0, thermal: Any = 0.0) -> pd.DataFrame:
    """A GPU's hour rows over two weeks from T as `apply_waits` reads them: its ECC and thermal risk,
    and where a drain rule (`act`) and a pending remap as the only one (`alone`) fire."""
    t = pd.date_range(T, periods=TWO_WEEKS, freq="1h")
    ecc, thermal = np.broadcast_to(ecc, TWO_WEEKS), np.broadcast_to(thermal, TWO_WEEKS)
    risk = {"risk": np.maximum(ecc, thermal), "risk_ecc": ecc, "risk_thermal": thermal, "risk_pcie": 0.0}
    rules = {"rule_alert": act, "rule_act": act, "remap_alone": alone}
    return pd.DataFrame({"gpu_uuid": name, "cutoff": t, "last_seen": t, **risk, "held": False,
                         "heat_load_share": 1.0, **rules})  # fmt: skip


def test_each_alert_episode_is_told_by_what_raised_it_at_its_first_hour() -> None:
    """Four GPUs over two weeks: a healthy one drained by a pending remap alone (false), one drained by
    another rule and then failing (true), one the model demotes for heat for three days (false), and a
    quiet one. An episode that begins with the remap's drain and goes on as the probation after it (the
    ECC risk high) is the remap's; a false episode ending in the span's last week is not judged."""
    t = pd.date_range(T, periods=TWO_WEEKS, freq="1h")

    def span(a: pd.Timedelta, b: pd.Timedelta) -> np.ndarray:
        return (t >= T + a) & (t < T + b)

    remap = span(DAY, 2 * DAY)
    rows = pd.concat([
        waited_rows("GPU-r", remap, remap, ecc=np.where(span(2 * DAY, 3 * DAY), 0.95, 0.0)),
        waited_rows("GPU-d", span(3 * DAY, 4 * DAY)),
        waited_rows("GPU-t", thermal=np.where(span(DAY, 4 * DAY) | span(12 * DAY, 13 * DAY), 0.95, 0.0)),
        waited_rows("GPU-q"),
    ], ignore_index=True)  # fmt: skip
    fail = failure("other", "GPU-d", T + 4 * DAY)
    decided = apply_waits(rows, Thresholds(remap_hold_risk=0.0))  # the pending remap drains at once
    causes = alert_causes(decided)
    first = decided.assign(c=causes)[causes != ""].groupby("gpu_uuid")["c"].first().to_dict()
    assert first == {"GPU-r": "pending remap alone", "GPU-d": "other drain or RMA rule", "GPU-t": "model: thermal"}
    assert set(causes[(decided["gpu_uuid"] == "GPU-r").to_numpy()]) == {"", "pending remap alone", "probation"}
    by = Judging(fail, fail, WEEK, DAY, t[-1], 20.0).by_cause(decided)
    assert by == {
        "pending remap alone": {"episodes": 1, "false": 1, "false_per_1000_gpu_days": 50.0},
        "other drain or RMA rule": {"episodes": 1, "false": 0, "false_per_1000_gpu_days": 0.0},
        "model: thermal": {"episodes": 1, "false": 1, "false_per_1000_gpu_days": 50.0},
    }
    md = causes_markdown({"model": {"episodes_by_cause": by}})
    assert "| pending remap alone | 1 | 1 | 50.00 |" in md and "| model: thermal | 1 | 1 | 50.00 |" in md
    assert causes_markdown({"model": {"episodes_by_cause": {}}}) == ""


# --- the pending remap's drain, the other way -------------------------------------------------------


def test_the_evaluation_weighs_the_pending_remaps_drain_the_other_way() -> None:
    """A healthy GPU's pending remap (ECC risk 0.02) and a wearing memory's (0.05 until 12 h before it
    fails, then 0.8): NVIDIA's drain at once catches the failure a day and a half ahead and raises a
    false episode; the hold at 0.3 drains the wearing memory only 12 h ahead and holds the healthy one."""
    # The healthy GPU's episode ends a week before the span does: it is judged.
    t = pd.date_range(T, periods=TWO_WEEKS, freq="1h")
    fails_at = T + 5 * DAY + 12 * HOUR

    def gpu(name: str, pending: tuple[pd.Timestamp, pd.Timestamp], ecc: np.ndarray) -> pd.DataFrame:
        on = (t >= pending[0]) & (t < pending[1])
        return waited_rows(name, on, on, ecc=ecc)

    rows = pd.concat([
        gpu("GPU-h", (T + 2 * DAY, T + 4 * DAY), np.full(TWO_WEEKS, 0.02)),
        gpu("GPU-w", (T + 3 * DAY, fails_at), np.where(t >= fails_at - 12 * HOUR, 0.8, 0.05)),
        gpu("GPU-q", (T, T), np.zeros(TWO_WEEKS)),
    ], ignore_index=True)  # fmt: skip
    fail = failure("ecc", "GPU-w", fails_at)
    judging = Judging(fail, fail, WEEK, DAY, t[-1], 30.0)
    for th, other in ((Thresholds(remap_hold_risk=0.0), 0.3), (Thresholds(), 0.0)):
        decided = apply_waits(rows, th)
        measured = judging.measure(decided, "alert")
        run = measured[0]
        w = remap_hold_whatif(decided, th, judging, measured)
        assert (w["hold_risk_run"], w["hold_risk_other"]) == (th.remap_hold_risk, other)
        assert (w["pending_remap_gpus"], w["pending_remap_gpus_failed_ecc"]) == (2, 1)
        at_once, held = (run, w["other"]) if other else (w["other"], run)
        assert (at_once["recall_ecc_warned"], at_once["episodes"], at_once["true_episodes"]) == (1.0, 2, 1)
        assert (held["recall_ecc_warned"], held["episodes"], held["true_episodes"]) == (0.0, 1, 1)
        # The wearing memory's catch is the drain's: lost by the hold, gained by the drain.
        moved = (w["false_episodes_run"], w["false_episodes_other"], w["catches_lost"], w["catches_gained"])
        assert moved == ((1, 0, {"ecc": 1}, {}) if other else (0, 1, {}, {"ecc": 1}))
    md = remap_hold_markdown({"model": run, "remap_hold": w, "window_days": 7.0})
    assert "2 GPUs had a pending row remap as their only drain or RMA rule; 1 of them failed of ECC" in md
    assert "| as run: held while the ECC risk is under 0.3 | the other way: NVIDIA's drain at once |" in md
    assert "| recall ECC (24 h lead), failures that gave warning | 0.00 | 1.00 |" in md
    assert "| false alert episodes | 0 | 1 |" in md
    assert "| failures missed as run, caught the other way (at their lead) | | 1 ecc |" in md
    assert "| failures caught as run, missed the other way (at their lead) | | none |" in md
    assert "model promote" not in md and "verdict" not in w, "no fleet verdict any more (0082)"
    assert remap_hold_markdown({"model": run}) == ""
