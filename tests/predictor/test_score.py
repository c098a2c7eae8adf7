"""Scoring with the shipped model: the JSON contract, --at, stale GPUs, bad input, and the CLI."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from core import history
from core.history import HistoryError
from gpuhealth.cli import app
from predictor.model import RiskModel
from predictor.policy import DECISIONS
from predictor.score import OUTPUT_COLUMNS, score, to_records
from simulator.fleet import SimConfig
from simulator.models import parse_mix
from simulator.run import simulate

DAY = pd.Timedelta(days=1)
RISKS = ("risk", "risk_ecc", "risk_thermal", "risk_pcie")
runner = CliRunner()


@pytest.fixture(scope="module")
def fleet() -> pd.DataFrame:
    """4 nodes x 8 GPUs x 20 days, A100 and H100 nodes, with field failure rates."""
    frame, _ = simulate(
        SimConfig(nodes=4, gpus_per_node=8, seed=3, random_failures=True, models=parse_mix("A100=0.5,H100=0.5")), 20
    )
    return frame


@pytest.fixture(scope="module")
def history_file(fleet: pd.DataFrame, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return history.write(fleet, tmp_path_factory.mktemp("score") / "fleet.parquet")


def with_rows(frame: pd.DataFrame, extra: pd.DataFrame) -> pd.DataFrame:
    """The frame plus rows (new GPUs or samples), validated like a history file."""
    return history.validate(pd.concat([frame, extra], ignore_index=True), source="test")


def check_contract(records: list[dict[str, Any]]) -> None:
    assert records, "no GPU scored"
    for r in records:
        assert list(r) == OUTPUT_COLUMNS
        assert list(r) == ["gpu_uuid", "hostname", "model_name", "risk", "risk_ecc", "risk_thermal", "risk_pcie",
                           "decision", "reasons", "remedy", "remedy_when"]  # fmt: skip
        for k in ("gpu_uuid", "hostname", "model_name", "decision", "remedy", "remedy_when"):
            assert type(r[k]) is str, (k, r[k])
        for k in RISKS:
            assert r[k] is None or (type(r[k]) is float and 0.0 <= r[k] <= 1.0), (k, r[k])
        assert r["decision"] in DECISIONS
        assert r["remedy"] in ("none", "reset", "reboot", "replace") and r["remedy_when"] in ("now", "idle")
        assert set(DECISIONS) == {"ok", "watch", "demote", "drain", "rma"}
        assert type(r["reasons"]) is list and all(type(t) is str for t in r["reasons"])
    json.dumps(records, allow_nan=False)  # null, never NaN


def by_gpu(scored: pd.DataFrame) -> pd.DataFrame:
    return scored.sort_values("gpu_uuid").reset_index(drop=True)


def test_json_contract(shipped_model: RiskModel, fleet: pd.DataFrame) -> None:
    scored = score(shipped_model, fleet)
    records = to_records(scored)
    check_contract(records)
    last = fleet["timestamp"].max()
    assert (scored["cutoff"] == last).all()
    # Every GPU that reported in the last 24 h, once, riskiest first.
    recent = fleet.loc[fleet["timestamp"] > last - DAY, "gpu_uuid"].astype(str).unique()
    assert sorted(r["gpu_uuid"] for r in records) == sorted(recent)
    risks = [r["risk"] for r in records if r["risk"] is not None]
    assert risks == sorted(risks, reverse=True)
    # A full simulated history lacks nothing the model learned from.
    assert not any("scored without" in t for r in records for t in r["reasons"])


def test_at_uses_only_data_up_to_it(shipped_model: RiskModel, fleet: pd.DataFrame) -> None:
    at = fleet["timestamp"].min() + pd.Timedelta(days=12, hours=5)
    expected = score(shipped_model, fleet, at)
    assert (expected["cutoff"] == at).all()
    later = fleet["timestamp"] > at
    changed = fleet.copy()
    changed.loc[later, "gpu_temp_c"] = 99.0
    changed.loc[later, "ecc_sbe_aggregate"] += 1e6
    changed.loc[later, "ecc_dbe_aggregate"] += 50
    changed.loc[later, "xid"] = 79.0
    changed.loc[later, "pcie_link_width"] = 1.0
    some_gpu = fleet["gpu_uuid"] == fleet["gpu_uuid"].iloc[0]
    newcomer = fleet[later & some_gpu].astype({"gpu_uuid": str, "hostname": str})
    newcomer = newcomer.assign(gpu_uuid="GPU-newcomer", hostname="node-new")  # appears after `at`
    got = score(shipped_model, with_rows(changed, newcomer), at)
    # Ties in risk keep the frame's GPU order, which the category order of gpu_uuid sets: compare by GPU.
    pd.testing.assert_frame_equal(by_gpu(got), by_gpu(expected))
    pd.testing.assert_frame_equal(by_gpu(score(shipped_model, fleet[~later], at)), by_gpu(expected))


def test_stale_gpus_are_left_out(shipped_model: RiskModel, fleet: pd.DataFrame) -> None:
    at = fleet["timestamp"].min() + pd.Timedelta(days=12)
    uuids = fleet["gpu_uuid"].astype(str)
    gone, edge = uuids.iloc[0], uuids.iloc[1]
    ts = fleet["timestamp"]
    drop = ((uuids == gone) & (ts > at - pd.Timedelta(hours=30))) | (  # last sample 30 h before
        (uuids == edge) & (ts > at - DAY)  # last sample exactly 24 h before: still scored
    )
    frame = fleet[~drop]
    scored = score(shipped_model, frame, at)
    assert gone not in set(scored["gpu_uuid"])
    assert edge in set(scored["gpu_uuid"])
    last = frame[frame["timestamp"] <= at].groupby(frame["gpu_uuid"].astype(str))["timestamp"].max()
    assert sorted(scored["gpu_uuid"]) == sorted(last[last >= at - DAY].index)


def test_missing_metric_columns_still_score(shipped_model: RiskModel, fleet: pd.DataFrame) -> None:
    frame = fleet.drop(columns=["memory_temp_c", "pcie_replay_count"])
    scored = score(shipped_model, frame)
    check_contract(to_records(scored))
    assert sorted(scored["gpu_uuid"]) == sorted(score(shipped_model, fleet)["gpu_uuid"])
    note = "scored without memory_temp_c, pcie_replay_count (not in the history)"
    assert all(note in r for r in scored["reasons"])
    assert scored["risk"].notna().all()


def test_all_nan_metric_counts_as_missing(shipped_model: RiskModel, fleet: pd.DataFrame) -> None:
    frame = fleet.assign(xid=np.nan)
    assert all(any("scored without xid" in t for t in r) for r in score(shipped_model, frame)["reasons"])


def test_gpu_with_a_single_sample(shipped_model: RiskModel, fleet: pd.DataFrame) -> None:
    last = fleet[fleet["timestamp"] == fleet["timestamp"].max()].head(1).astype({"gpu_uuid": str, "hostname": str})
    frame = with_rows(fleet, last.assign(gpu_uuid="GPU-single", hostname="node-single"))
    scored = score(shipped_model, frame)
    rec = next(r for r in to_records(scored) if r["gpu_uuid"] == "GPU-single")
    assert all(rec[k] is None for k in RISKS)
    assert any("too little history to score (1 sample(s) over 0.0 h)" in t for t in rec["reasons"]), rec
    assert rec["decision"] in DECISIONS
    # The others are scored as before.
    assert scored.loc[scored["gpu_uuid"] != "GPU-single", "risk"].notna().all()


def test_unknown_gpu_model_is_scored_with_a_reason(shipped_model: RiskModel, fleet: pd.DataFrame) -> None:
    host = fleet["hostname"].astype(str).iloc[0]
    frame = fleet.astype({"model_name": str, "hostname": str})
    frame.loc[frame["hostname"] == host, "model_name"] = "NVIDIA B200"
    scored = score(shipped_model, history.validate(frame, source="test"))
    check_contract(to_records(scored))
    b200 = scored[scored["model_name"] == "NVIDIA B200"]
    assert len(b200) > 0 and b200["risk"].notna().all()
    note = "model 'NVIDIA B200' was not in the training fleets: peer comparisons use its own kind only"
    assert all(note in r for r in b200["reasons"])
    assert not any(note in r for r in scored.loc[scored["model_name"] != "NVIDIA B200", "reasons"])


def test_unknown_means_not_among_the_model_names_the_model_records(
    shipped_model: RiskModel, fleet: pd.DataFrame
) -> None:
    assert shipped_model.meta["model_names"] == ["NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3", "NVIDIA H200"]
    a100_only = RiskModel(shipped_model.heads, {**shipped_model.meta, "model_names": ["NVIDIA A100-SXM4-80GB"]})
    scored = score(a100_only, fleet)
    noted = scored["reasons"].map(lambda r: any("was not in the training fleets" in t for t in r))
    assert noted.to_numpy().tolist() == (scored["model_name"] == "NVIDIA H100 80GB HBM3").to_numpy().tolist()
    assert noted.any()


def test_a_model_file_without_model_names_calls_no_gpu_model_unknown(
    shipped_model: RiskModel, fleet: pd.DataFrame
) -> None:
    older = RiskModel(shipped_model.heads, {k: v for k, v in shipped_model.meta.items() if k != "model_names"})
    frame = fleet.astype({"model_name": str})
    frame.loc[frame["model_name"] == "NVIDIA H100 80GB HBM3", "model_name"] = "NVIDIA B200"
    scored = score(older, history.validate(frame, source="test"))
    assert not any("was not in the training fleets" in t for r in scored["reasons"] for t in r)


def test_empty_frame(shipped_model: RiskModel, fleet: pd.DataFrame) -> None:
    with pytest.raises(HistoryError, match="no rows"):
        score(shipped_model, fleet.iloc[:0])


def test_cutoff_before_all_data(shipped_model: RiskModel, fleet: pd.DataFrame) -> None:
    with pytest.raises(HistoryError, match="is before the history begins"):
        score(shipped_model, fleet, fleet["timestamp"].min() - pd.Timedelta(hours=1))


def test_cutoff_long_after_all_data(shipped_model: RiskModel, fleet: pd.DataFrame) -> None:
    with pytest.raises(HistoryError, match="no GPU has samples within 24 h"):
        score(shipped_model, fleet, fleet["timestamp"].max() + 3 * DAY)


def test_naive_at_is_utc(shipped_model: RiskModel, fleet: pd.DataFrame) -> None:
    at = fleet["timestamp"].max() - DAY
    naive = score(shipped_model, fleet, at.tz_localize(None))
    pd.testing.assert_frame_equal(naive, score(shipped_model, fleet, at))


# --- through the CLI ------------------------------------------------------------------------


def one_line_error(result: Any, needle: str) -> None:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), result.stderr
    assert needle in lines[0]


def test_cli_json(shipped_model: RiskModel, fleet: pd.DataFrame, history_file: Path) -> None:
    result = runner.invoke(app, ["score", "--history", str(history_file), "--format", "json"])
    assert result.exit_code == 0, result.output
    records = json.loads(result.stdout)
    check_contract(records)
    assert records == json.loads(json.dumps(to_records(score(shipped_model, fleet))))


def test_cli_table(
    shipped_model: RiskModel, fleet: pd.DataFrame, history_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("predictor.score.load_model", lambda path=None: shipped_model)  # loaded once already
    at = str(fleet["timestamp"].min() + pd.Timedelta(days=10))
    result = runner.invoke(app, ["score", "--history", str(history_file), "--format", "table", "--at", at])
    assert result.exit_code == 0, result.output
    for header in ("GPU", "host", "risk", "decision", "reasons"):
        assert header in result.stdout
    assert fleet["hostname"].astype(str).iloc[0] in result.stdout


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--at", "not-a-time"], "--at 'not-a-time' is not a time: use ISO 8601"),
        (["--at", "2020-01-01T00:00:00Z"], "is before the history begins"),
        (["--format", "xml"], "--format must be json or table, not 'xml'"),
    ],
)
def test_cli_bad_arguments(
    shipped_model: RiskModel,
    history_file: Path,
    monkeypatch: pytest.MonkeyPatch,
    args: list[str],
    needle: str,
) -> None:
    monkeypatch.setattr("predictor.score.load_model", lambda path=None: shipped_model)
    one_line_error(runner.invoke(app, ["score", "--history", str(history_file), *args]), needle)


def test_cli_missing_history_file(tmp_path: Path) -> None:
    one_line_error(runner.invoke(app, ["score", "--history", str(tmp_path / "nope.parquet")]), "no such file")


def test_cli_missing_model_file(history_file: Path, tmp_path: Path) -> None:
    result = runner.invoke(app, ["score", "--history", str(history_file), "--model", str(tmp_path / "m.skops")])
    one_line_error(result, "no such model file")


def test_read_history_reads_only_what_scoring_uses(shipped_model: RiskModel, history_file: Path) -> None:
    from predictor.score import SCORE_COLUMNS, read_history

    whole = history.read(history_file)
    frame = read_history(history_file)
    assert list(frame.columns) == [c for c in whole.columns if c in SCORE_COLUMNS]
    assert len(frame.columns) < len(whole.columns)
    pd.testing.assert_frame_equal(frame, whole[list(frame.columns)])
    pd.testing.assert_frame_equal(score(shipped_model, frame), score(shipped_model, whole))


def test_cutoff_slice_equals_filter_on_an_unordered_frame(shipped_model: RiskModel, fleet: pd.DataFrame) -> None:
    """score() slices a time-ordered frame at --at; any other frame is filtered, to the same result."""
    at = fleet["timestamp"].min() + pd.Timedelta(days=9, hours=7)
    shuffled = fleet.sample(frac=1.0, random_state=2).reset_index(drop=True)
    pd.testing.assert_frame_equal(by_gpu(score(shipped_model, shuffled, at)), by_gpu(score(shipped_model, fleet, at)))


def test_the_drivers_recovery_action_drains_for_its_remedy(shipped_model: RiskModel, fleet: pd.DataFrame) -> None:
    """A node reboot the driver asks for on one GPU: it is drained and its remedy is reboot now, with a
    reason line; every other decision and every risk is what it was without it."""
    plain = by_gpu(score(shipped_model, fleet.assign(recovery_action=0.0)))
    asked = fleet.copy()
    uuid = str(plain["gpu_uuid"].iat[0])
    asked["recovery_action"] = np.where(asked["gpu_uuid"] == uuid, 2.0, 0.0)
    got = by_gpu(score(shipped_model, asked))
    pd.testing.assert_frame_equal(got[["gpu_uuid", *RISKS]], plain[["gpu_uuid", *RISKS]])
    pd.testing.assert_frame_equal(got[["gpu_uuid", "decision"]].iloc[1:], plain[["gpu_uuid", "decision"]].iloc[1:])
    assert (got["decision"].iat[0], got["remedy"].iat[0], got["remedy_when"].iat[0]) == ("drain", "reboot", "now")
    assert got["reasons"].iat[0][0].startswith("driver's recovery action 2 (node reboot): drain and reboot")
    assert got["reasons"].iat[0][-1].startswith("remedy: reboot now (driver's recovery action: node reboot")


def test_a_model_loaded_beside_the_read_is_the_model(
    shipped_model: RiskModel, fleet: pd.DataFrame, tmp_path: Path
) -> None:
    from predictor.model import ModelError
    from predictor.score import load_model_soon

    loaded = load_model_soon().result(timeout=120)
    assert loaded.meta == shipped_model.meta
    pd.testing.assert_frame_equal(score(loaded, fleet), score(shipped_model, fleet), check_exact=True)
    missing = load_model_soon(tmp_path / "m.skops")
    with pytest.raises(ModelError, match="no such model file"):
        missing.result(timeout=120)
