"""The downtime what-if: hand-computed GPU-hours, edge cases, flags, and its place in the evaluation report."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from core import history
from gpuhealth.cli import app
from gpuhealth.cli.offline import downtime_params
from predictor.downtime import (
    REPAIR_DEFAULT,
    Alerts,
    DowntimeParamError,
    DowntimeParams,
    Span,
    downtime_markdown,
    downtime_report,
    drained_share,
    failure_costs,
    parse_repair_times,
    parse_span,
    react,
)
from predictor.evaluate import caught, episodes, evaluate, precision, true_episodes
from predictor.evaluate_report import write_report
from predictor.model import RiskModel
from simulator.fleet import SimConfig
from simulator.run import simulate

HOUR = pd.Timedelta(hours=1)
DAY = pd.Timedelta(days=1)
WEEK = 7 * DAY
T = pd.Timestamp("2026-03-20T12:00:00Z")
MODES = ("ecc", "thermal", "pcie", "other")
runner = CliRunner()

# Round numbers so that every figure below can be checked by hand.
P = DowntimeParams(
    checkpoint_interval=2 * HOUR,  # a failure loses 1 h of the job's work
    gpus_per_job=100,
    gpus_per_node=8,
    restart_time=HOUR / 2,
    repair_unplanned={m: 10 * HOUR for m in MODES},
    repair_planned={m: 4 * HOUR for m in MODES},
    maintenance_window=DAY,
    interruptible_loss=0.5,
    field_failure_rate=0.14,
)
SPAN = Span(gpu_days=1000.0, judged_gpu_days=500.0, every=2 * HOUR)
# Under react one failure costs 100 x 1 h (lost work) + 100 x 0.5 h (restart) + 8 x 10 h (repair) = 230 GPU-h.
REACT_ONE = 230.0


def failures(*rows: tuple[str, bool, pd.Timedelta | None]) -> pd.DataFrame:
    """Per-failure frame as caught() gives it: mode, caught, first_alert_lead."""
    return pd.DataFrame(
        {
            "mode": [m for m, _, _ in rows],
            "caught": [c for _, c, _ in rows],
            "first_alert_lead": pd.to_timedelta([lead for _, _, lead in rows]),
        }
    )


def false_episodes(*spans: tuple[pd.Timestamp, pd.Timestamp]) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "start": pd.to_datetime([s for s, _ in spans], utc=True),
            "end": pd.to_datetime([e for _, e in spans], utc=True),
        }
    )


def report_for(per_failure: pd.DataFrame, eps: pd.DataFrame, span: Span = SPAN, params: DowntimeParams = P) -> Any:
    return downtime_report({"react": react(per_failure), "model": Alerts(per_failure, eps)}, span, params)


# --- hand-computed ----------------------------------------------------------------------------


def test_one_caught_one_missed_one_false_episode() -> None:
    per_failure = failures(("ecc", True, 2 * DAY), ("other", False, None))
    d = report_for(per_failure, false_episodes((T, T + 10 * HOUR)))
    r, m = d["policies"]["react"], d["policies"]["model"]
    # react: 2 x 230 GPU-h over 500 judged GPU-days
    assert r["lost_work"] == pytest.approx(2 * 100 / 500 * 1000)
    assert r["restart"] == pytest.approx(2 * 50 / 500 * 1000)
    assert r["unplanned_repair"] == pytest.approx(2 * 80 / 500 * 1000)
    assert r["unplanned"] == r["total"] == pytest.approx(920.0)
    assert r["planned"] == r["false_demotions"] == 0.0
    # model: the ECC failure (48 h lead >= a day to the next window) is drained: its job moves at the
    # window (100 GPUs x 0.5 h) and its node is repaired (8 GPUs x 4 h), both planned: 82 GPU-h;
    # the other one costs what it costs under react; the false episode lasts 10 h + one 2 h interval
    # on a node of 8 GPUs at half value: 12 x 8 x 0.5 = 48 GPU-h over 1,000 GPU-days.
    assert m["unplanned"] == pytest.approx(REACT_ONE / 500 * 1000)
    assert (m["planned_restart"], m["planned_repair"]) == (pytest.approx(100.0), pytest.approx(64.0))
    assert m["planned"] == pytest.approx(82 / 500 * 1000)
    assert m["false_demotions"] == pytest.approx(48.0)
    assert m["total"] == pytest.approx(460 + 164 + 48)
    assert (m["drained"], m["false_episodes"], m["false_episode_days"]) == (1.0, 1, 0.5)
    assert m["unplanned_by_mode"] == pytest.approx({"ecc": 0.0, "thermal": 0.0, "pcie": 0.0, "other": 460.0})
    red = d["unplanned_reduction_pct"]["model"]
    assert red["all"] == pytest.approx(50.0)
    assert (red["ecc"], red["other"]) == (pytest.approx(100.0), pytest.approx(0.0))
    assert math.isnan(red["thermal"]) and math.isnan(red["pcie"])  # no such failures: nothing to reduce
    assert d["total_reduction_pct"]["model"] == pytest.approx((1 - 672 / 920) * 100)
    assert d["failures"] == 2 and d["failures_per_1000_gpu_days"] == pytest.approx(4.0)


def test_field_rate_rescales_failure_costs_but_not_false_demotions() -> None:
    d = report_for(failures(("ecc", True, 2 * DAY), ("other", False, None)), false_episodes((T, T + 10 * HOUR)))
    f = d["at_field_rate"]
    assert f["scale"] == pytest.approx(0.14 / 4.0)
    assert f["policies"]["react"]["total"] == pytest.approx(920 * 0.035)
    assert f["policies"]["model"]["false_demotions"] == pytest.approx(48.0)
    assert f["policies"]["model"]["total"] == pytest.approx((460 + 164) * 0.035 + 48)
    assert f["total_reduction_pct"]["model"] == pytest.approx((1 - ((460 + 164) * 0.035 + 48) / (920 * 0.035)) * 100)


def test_lead_shorter_than_the_window_interval_drains_in_proportion() -> None:
    # A PCIe failure caught 6 h ahead (its mode needs 1 h): the next daily window comes first in 6 of 24 hours.
    per_failure = failures(("pcie", True, 6 * HOUR))
    assert drained_share(per_failure, DAY) == pytest.approx([0.25])
    c = failure_costs(per_failure, P).iloc[0]
    assert c["lost_work"] == pytest.approx(0.75 * 100)
    assert c["restart"] == pytest.approx(0.75 * 50)
    assert c["unplanned_repair"] == pytest.approx(0.75 * 80)
    assert c["planned_restart"] == pytest.approx(0.25 * 50)
    assert c["planned_repair"] == pytest.approx(0.25 * 32)


def test_a_failure_not_caught_is_never_drained_whatever_its_lead() -> None:
    # An ECC alert 12 h ahead is not caught at the 24 h lead ECC needs: the full react cost.
    per_failure = failures(("ecc", False, 12 * HOUR))
    assert drained_share(per_failure, HOUR) == pytest.approx([0.0])
    assert failure_costs(per_failure, P)[["lost_work", "restart", "unplanned_repair"]].sum(axis=1).iloc[0] == 230


def test_repair_times_per_mode() -> None:
    params = DowntimeParams(repair_unplanned=REPAIR_DEFAULT, gpus_per_node=8)
    c = failure_costs(failures(("pcie", False, None), ("ecc", False, None)), params)
    assert c["unplanned_repair"].tolist() == [8 * 72.0, 8 * 3.0]  # InfiniteHBD medians: PCIe 3 days, DBE 3 h


# --- who counts as caught follows the lead times -----------------------------------------------


def scored(*alerts_at: pd.Timestamp) -> pd.DataFrame:
    rows = pd.DataFrame({"gpu_uuid": "GPU-1", "cutoff": list(alerts_at), "a": True})
    return pd.concat([rows, pd.DataFrame({"gpu_uuid": ["GPU-2"], "cutoff": [T], "a": [False]})], ignore_index=True)


def test_changing_the_lead_changes_who_is_caught_and_what_it_costs() -> None:
    fails = pd.DataFrame({"gpu_uuid": ["GPU-1"], "failed_at": [T], "mode": ["ecc"]})
    rows = scored(T - 30 * HOUR)  # first alert 30 h ahead
    at_24h = caught(rows, "a", fails, WEEK, lead=DAY)
    at_48h = caught(rows, "a", fails, WEEK, lead=2 * DAY)
    assert at_24h["caught"].tolist() == [True] and at_48h["caught"].tolist() == [False]
    none = false_episodes()
    cheap = report_for(at_24h, none)["policies"]["model"]
    dear = report_for(at_48h, none)["policies"]["model"]
    assert (cheap["drained"], cheap["unplanned"]) == (1.0, 0.0)
    assert (dear["drained"], dear["unplanned"]) == (0.0, pytest.approx(REACT_ONE / 500 * 1000))


def test_an_earlier_alert_is_drained_where_a_late_one_is_not() -> None:
    fails = pd.DataFrame({"gpu_uuid": ["GPU-1"], "failed_at": [T], "mode": ["pcie"]})
    weekly = dataclasses.replace(P, maintenance_window=WEEK)
    late = report_for(caught(scored(T - 2 * HOUR), "a", fails, WEEK), false_episodes(), params=weekly)
    early = report_for(caught(scored(T - 3.5 * DAY), "a", fails, WEEK), false_episodes(), params=weekly)
    assert late["policies"]["model"]["drained"] == pytest.approx(2 / 168)
    assert early["policies"]["model"]["drained"] == pytest.approx(0.5)
    assert early["policies"]["model"]["unplanned"] < late["policies"]["model"]["unplanned"]


# --- edges ---------------------------------------------------------------------------------------


def test_no_failures() -> None:
    empty = pd.DataFrame({"mode": pd.Series([], dtype=object), "caught": pd.Series([], dtype=object),
                          "first_alert_lead": pd.Series([], dtype=object)})  # fmt: skip  # as from an empty fleet
    d = report_for(empty, false_episodes((T, T)))
    assert d["failures"] == 0 and d["failures_per_1000_gpu_days"] == 0.0
    assert d["policies"]["react"]["total"] == 0.0
    assert d["policies"]["model"]["unplanned"] == 0.0
    assert d["policies"]["model"]["false_demotions"] == pytest.approx(2 * 8 * 0.5)  # one interval
    assert math.isnan(d["unplanned_reduction_pct"]["model"]["all"])
    assert math.isnan(d["at_field_rate"]["scale"]) and math.isnan(d["at_field_rate"]["policies"]["model"]["total"])
    assert "n/a" in downtime_markdown(d)


def test_no_episodes_cost_nothing() -> None:
    d = report_for(failures(("thermal", True, 3 * DAY)), false_episodes())
    m = d["policies"]["model"]
    assert (m["false_demotions"], m["false_episodes"], m["false_episode_days"]) == (0.0, 0, 0.0)
    assert d["unplanned_reduction_pct"]["model"]["thermal"] == pytest.approx(100.0)


def test_zero_gpu_days_is_an_error() -> None:
    with pytest.raises(ValueError, match="no GPU-days"):
        report_for(failures(("ecc", True, DAY)), false_episodes(), span=Span(0.0, 0.0, HOUR))


def test_nothing_judged_gives_nan_rates() -> None:
    # A span shorter than the window judges no failure: failure costs have no exposure to be a rate of.
    d = report_for(failures(), false_episodes(), span=Span(10.0, 0.0, HOUR))
    assert math.isnan(d["policies"]["react"]["unplanned"]) and d["policies"]["model"]["false_demotions"] == 0.0


def test_policies_must_judge_the_same_failures() -> None:
    one, two = failures(("ecc", True, DAY)), failures(("ecc", True, DAY), ("pcie", False, None))
    with pytest.raises(ValueError, match="same failures"):
        downtime_report({"react": react(one), "model": Alerts(two, false_episodes())}, SPAN, P)
    with pytest.raises(ValueError, match="baseline"):
        downtime_report({"model": Alerts(two, false_episodes())}, SPAN, P)


def test_unknown_mode_is_an_error() -> None:
    with pytest.raises(ValueError, match="no repair time"):
        failure_costs(failures(("psu", False, None)), P)


# --- predict never exceeds react in unplanned downtime ------------------------------------------


def test_predict_never_exceeds_react_in_unplanned_downtime() -> None:
    rng = np.random.default_rng(0)
    for _ in range(50):
        n = int(rng.integers(0, 12))
        per_failure = failures(
            *(
                (str(rng.choice(MODES)), bool(rng.random() < 0.6),
                 None if rng.random() < 0.3 else pd.Timedelta(hours=float(rng.uniform(-5, 200))))
                for _ in range(n)
            )
        )  # fmt: skip
        params = DowntimeParams(
            checkpoint_interval=pd.Timedelta(hours=float(rng.uniform(0, 5))),
            gpus_per_job=int(rng.integers(1, 20000)),
            maintenance_window=pd.Timedelta(hours=float(rng.uniform(0.1, 400))),
            repair_unplanned={m: pd.Timedelta(hours=float(rng.uniform(0, 500))) for m in MODES},
        )
        d = report_for(per_failure, false_episodes(), params=params)
        r, m = d["policies"]["react"], d["policies"]["model"]
        assert m["unplanned"] <= r["unplanned"] + 1e-9
        for mode in MODES:
            assert m["unplanned_by_mode"][mode] <= r["unplanned_by_mode"][mode] + 1e-9
        assert 0.0 <= m["drained"] <= per_failure["caught"].sum()


# --- parameters and flags ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "name"),
    [
        ({"gpus_per_job": 0}, "gpus_per_job"),
        ({"gpus_per_node": -8}, "gpus_per_node"),
        ({"gpus_per_job": True}, "gpus_per_job"),
        ({"checkpoint_interval": -HOUR}, "checkpoint_interval"),
        ({"restart_time": pd.NaT}, "restart_time"),
        ({"maintenance_window": pd.Timedelta(0)}, "maintenance_window"),
        ({"interruptible_loss": -0.1}, "interruptible_loss"),
        ({"interruptible_loss": float("nan")}, "interruptible_loss"),
        ({"field_failure_rate": -1.0}, "field_failure_rate"),
        ({"repair_unplanned": {"ecc": HOUR}}, "repair_unplanned"),
        ({"repair_planned": {**REPAIR_DEFAULT, "pcie": -HOUR}}, "repair_planned[pcie]"),
    ],
)
def test_params_out_of_range_are_refused(change: dict[str, Any], name: str) -> None:
    with pytest.raises(DowntimeParamError) as e:
        DowntimeParams(**change)
    assert e.value.name == name


def test_params_as_dict_is_json() -> None:
    d = DowntimeParams().as_dict()
    assert json.loads(json.dumps(d)) == d
    assert d["repair_unplanned_hours"] == {"ecc": 3.0, "thermal": 3.0, "pcie": 72.0, "other": 3.0}


def test_parse_repair_times_and_spans() -> None:
    assert parse_repair_times("6h") == {m: 6 * HOUR for m in MODES}
    assert parse_repair_times("ecc=1h, PCIe=2d") == {**REPAIR_DEFAULT, "ecc": HOUR, "pcie": 2 * DAY}
    assert parse_span("0") == parse_span("0s") == pd.Timedelta(0)
    assert parse_span("90m") == 1.5 * HOUR
    with pytest.raises(ValueError, match="MODE=DURATION"):
        parse_repair_times("psu=1h")
    with pytest.raises(ValueError, match="negative"):
        parse_repair_times("ecc=-1h")
    with pytest.raises(ValueError, match="invalid duration"):
        parse_span("soon")


FLAG_DEFAULTS = {
    "checkpoint_interval": "1h", "gpus_per_job": 1024, "gpus_per_node": 8,
    "repair_unplanned": "ecc=3h,thermal=3h,pcie=3d,other=3h", "repair_planned": "ecc=3h,thermal=3h,pcie=3d,other=3h",
    "maintenance_window": "24h", "restart_time": "15m", "interruptible_loss": 0.5, "field_failure_rate": 0.14,
}  # fmt: skip


def test_flag_defaults_are_the_documented_defaults() -> None:
    import inspect

    from gpuhealth.cli.offline import evaluate as evaluate_command

    sig = inspect.signature(evaluate_command).parameters
    assert {k: sig[k].default for k in FLAG_DEFAULTS} == FLAG_DEFAULTS
    assert downtime_params(**FLAG_DEFAULTS) == DowntimeParams()


def one_line_error(result: Any, needle: str) -> None:
    assert result.exit_code == 2, result.output
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), result.stderr
    assert needle in lines[0], lines[0]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--gpus-per-job", "-1"], "--gpus-per-job: must be a whole number of GPUs >= 1, got -1"),
        (["--gpus-per-node", "0"], "--gpus-per-node: must be a whole number of GPUs >= 1, got 0"),
        (["--checkpoint-interval", "-1h"], "--checkpoint-interval: must not be negative, got '-1h'"),
        (["--restart-time", "-5m"], "--restart-time: must not be negative"),
        (["--maintenance-window", "0"], "--maintenance-window: must be positive"),
        (["--repair-unplanned", "ecc=-3h"], "--repair-unplanned: must not be negative"),
        (["--repair-planned", "gpu=3h"], "--repair-planned: 'gpu=3h': use MODE=DURATION"),
        (["--interruptible-loss", "-0.5"], "--interruptible-loss: must be a share in 0..1, got -0.5"),
        (["--interruptible-loss", "1.5"], "--interruptible-loss: must be a share in 0..1"),
        (["--field-failure-rate", "-0.1"], "--field-failure-rate: must be >= 0"),
    ],
)
def test_cli_refuses_bad_downtime_flags(tmp_path: Path, args: list[str], needle: str) -> None:
    # Checked before anything is read: the files need not exist.
    base = ["evaluate", "--history", str(tmp_path / "h.parquet"), "--failures", str(tmp_path / "f.csv")]
    one_line_error(runner.invoke(app, [*base, "--out", str(tmp_path / "out"), *args]), needle)


# --- inside the evaluation ---------------------------------------------------------------------


def test_true_episodes_agree_with_precision() -> None:
    rows = pd.DataFrame(
        {"gpu_uuid": ["GPU-1", "GPU-1", "GPU-2", "GPU-1"], "cutoff": [T - 20 * DAY, T - 3 * DAY, T - 3 * DAY, T + DAY],
         "a": True}
    )  # fmt: skip
    eps = episodes(rows, "a")
    fails = pd.DataFrame({"gpu_uuid": ["GPU-1"], "failed_at": [T], "mode": ["ecc"]})
    truth = true_episodes(eps, fails, WEEK)
    assert truth.tolist() == [False, True, False, False]
    assert precision(eps, fails, WEEK) == (0.25, 1, 4)


@pytest.fixture(scope="module")
def small_fleet() -> tuple[pd.DataFrame, pd.DataFrame]:
    """2 nodes x 8 GPUs x 30 days at 40x the field failure rate: a handful of failures, in seconds."""
    return simulate(SimConfig(nodes=2, gpus_per_node=8, seed=5, random_failures=True, acceleration=40), 30)


def test_evaluate_reports_downtime_for_react_rules_and_model(
    shipped_model: RiskModel, small_fleet: tuple[pd.DataFrame, pd.DataFrame], tmp_path: Path
) -> None:
    frame, fails = small_fleet
    rep = evaluate(shipped_model, frame, fails, every="6h", downtime=DowntimeParams())
    d = rep["downtime"]
    assert list(d["policies"]) == ["react", "rules", "model"]
    n = sum(rep["failures"].values())
    assert d["failures"] == n > 0
    # False alerts count over the GPU-days whose alerts the history can judge (a window
    # before its end); failures over those after the first window.
    assert 0 < d["gpu_days"] < rep["gpu_days"] and 0 < d["judged_gpu_days"] < rep["gpu_days"]
    for name in ("rules", "model"):
        p = d["policies"][name]
        assert p["unplanned"] <= d["policies"]["react"]["unplanned"]
        assert p["drained"] <= n
    # The model's false episodes are those evaluate() counts: all episodes less the true ones.
    assert d["policies"]["model"]["false_episodes"] == rep["model"]["episodes"] - rep["model"]["true_episodes"]
    assert "downtime" not in evaluate(shipped_model, frame, fails, every="6h")

    paths = write_report(rep, tmp_path)
    assert {p.name for p in paths} >= {"downtime.png", "report.md", "report.json"}
    assert (tmp_path / "downtime.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    md = (tmp_path / "report.md").read_text()
    assert "## What it is worth: downtime" in md and "![downtime by cause](downtime.png)" in md
    data = json.loads((tmp_path / "report.json").read_text(), parse_constant=lambda c: pytest.fail(f"{c} in JSON"))
    assert data["downtime"]["policies"]["model"]["total"] == pytest.approx(d["policies"]["model"]["total"])
    assert data["downtime"]["params"] == DowntimeParams().as_dict()
    # At real precursor shares: the model's own recall on failures that warned a day ahead, and remediate.
    field = data["downtime"]["field"]
    assert len(field["rows"]) == 6 and 0 <= field["skills"]["model"]["recall"] <= 1
    assert all(r["policies"]["remediate"] < r["policies"]["react"] for r in field["rows"])
    assert "## At real precursor shares: react, rules, model, remediate" in md and "67 %" in md


def test_cli_passes_the_flags_into_report_json(
    shipped_model: RiskModel,
    small_fleet: tuple[pd.DataFrame, pd.DataFrame],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    frame, fails = small_fleet
    monkeypatch.setattr("predictor.score.load_model", lambda path=None: shipped_model)  # loaded once already
    h = history.write(frame, tmp_path / "fleet.parquet")
    f = tmp_path / "failures.csv"
    history.write_failures(fails, f)
    result = runner.invoke(
        app,
        ["evaluate", "--history", str(h), "--failures", str(f), "--out", str(tmp_path / "out"), "--every", "6h",
         "--gpus-per-job", "64", "--checkpoint-interval", "30m", "--repair-unplanned", "pcie=5d",
         "--maintenance-window", "1w", "--interruptible-loss", "0.25"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    prm = json.loads((tmp_path / "out" / "report.json").read_text())["downtime"]["params"]
    assert (prm["gpus_per_job"], prm["checkpoint_interval_hours"], prm["maintenance_window_hours"]) == (64, 0.5, 168)
    assert prm["repair_unplanned_hours"] == {"ecc": 3.0, "thermal": 3.0, "pcie": 120.0, "other": 3.0}
    assert prm["interruptible_loss"] == 0.25
    assert (tmp_path / "out" / "downtime.png").exists()
