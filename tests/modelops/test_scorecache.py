"""Kept models and scored rows of the cross-domain evaluation (`--scores`): read back only while
nothing they depend on changed, judged under the current waits, made again when damaged."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from modelops import crossdomain, scorecache
from modelops.crossdomain import Plan, _summary, evaluate_on
from modelops.scorecache import ScoreCache
from predictor.evaluate import Scored
from predictor.model import RiskModel
from predictor.score import load_model
from predictor.thresholds import Thresholds
from tests.service.tiny_model import tiny_model

PLAN = Plan(families=("temperate",), test_nodes=6, test_days=40, test_acceleration=40, test_seeds=(31,))
"""A small held-out fleet with failures enough to judge (21, of which 7 ECC or thermal)."""
LONG = Thresholds(
    demote_for_s=48 * 3600,
    ecc_demote_for_s=48 * 3600,
    pcie_demote_for_s=48 * 3600,
    thermal_agree_z=0,
    thermal_spread_z=0,
    thermal_agree_vs_node_z=0,
)
"""Waits of two days, none cut short: the demotes of this fleet come later or not at all."""


@pytest.fixture(scope="module")
def model() -> RiskModel:
    return load_model()


def _same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Two reports alike in everything the cross-domain table shows (NaN equal to NaN)."""
    return json.dumps(_summary(a), sort_keys=True, default=str) == json.dumps(_summary(b), sort_keys=True, default=str)


def _no_scoring(*_a: Any, **_k: Any) -> Scored:
    raise AssertionError("scored again although the rows were kept")


def test_kept_rows_are_read_back_and_judged_under_the_current_waits(
    model: RiskModel, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    said: list[str] = []
    cache = ScoreCache(tmp_path, said.append)
    fresh = evaluate_on(model, PLAN, "unseen", seed=31)
    first = evaluate_on(model, PLAN, "unseen", seed=31, cache=cache)
    assert _same(first, fresh)
    [kept] = tmp_path.glob("scored-unseen-31-*.parquet")
    assert fresh["model"]["episodes"] > 0  # the fleet has alerts to judge

    monkeypatch.setattr(crossdomain, "score_rows", _no_scoring)
    again = evaluate_on(model, PLAN, "unseen", seed=31, cache=cache)
    assert _same(again, fresh)
    assert any(m.startswith("kept scores scored-unseen-31-") for m in said)
    # Other waits: the kept rows are decided again, exactly as scoring afresh under them.
    replayed = evaluate_on(model, PLAN, "unseen", seed=31, thresholds=LONG, cache=cache)
    monkeypatch.undo()
    long = evaluate_on(model, PLAN, "unseen", seed=31, thresholds=LONG)
    assert _same(replayed, long)
    assert not _same(long, fresh)  # the waits matter on this fleet, so the replay is tested
    assert list(tmp_path.glob("scored-*.parquet")) == [kept]


def test_a_damaged_file_is_scored_again(model: RiskModel, tmp_path: Path) -> None:
    said: list[str] = []
    cache = ScoreCache(tmp_path, said.append)
    fresh = evaluate_on(model, PLAN, "unseen", seed=31, cache=cache)
    [kept] = tmp_path.glob("scored-*.parquet")
    kept.write_bytes(b"PAR1 not really")
    again = evaluate_on(model, PLAN, "unseen", seed=31, cache=cache)
    assert _same(again, fresh)
    assert any("unreadable" in m and "scoring again" in m for m in said)
    assert kept.stat().st_size > 1000  # written again, whole


def test_new_code_or_other_thresholds_make_new_files(
    model: RiskModel, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = ScoreCache(tmp_path)
    calls: list[int] = []
    rows: list[Scored] = []

    def score() -> Scored:
        # Scored once: what is tested is when the cache asks for scores, not the scores.
        calls.append(1)
        if not rows:
            rows.append(crossdomain.score_rows(model, frame, *span, "1h", Thresholds(), failures=failures))
        return rows[0]

    frame, failures = crossdomain.held_out_fleet(PLAN, "unseen", 31)
    span = (crossdomain.span_start(frame), frame["timestamp"].max())
    cache.scored(model, PLAN, "unseen", 31, Thresholds(), score)
    cache.scored(model, PLAN, "unseen", 31, Thresholds(demote_for_s=0), score)  # waits: not in the key
    assert len(calls) == 1
    cache.scored(model, PLAN, "unseen", 31, Thresholds(0.3, 0.8), score)  # the holds' threshold is
    assert len(calls) == 2
    stressed = replace(PLAN, test_burst_remap_share=0.3)  # another fleet: healthy remaps in it
    cache.scored(model, stressed, "unseen", 31, Thresholds(), score)
    assert len(calls) == 3
    monkeypatch.setattr(scorecache, "code_hash", lambda: "edited")
    cache.scored(model, PLAN, "unseen", 31, Thresholds(), score)
    assert len(calls) == 4
    assert len(list(tmp_path.glob("scored-unseen-31-*.parquet"))) == 4


def test_a_trained_model_is_kept_and_read_back(tmp_path: Path) -> None:
    trained: list[RiskModel] = []

    def train() -> RiskModel:
        trained.append(tiny_model("left-out"))
        return trained[-1]

    cache = ScoreCache(tmp_path)
    first = cache.model(PLAN, "temperate", train)
    second = cache.model(PLAN, "temperate", train)
    assert len(trained) == 1
    assert scorecache.model_key(second) == scorecache.model_key(first)  # its metadata, NaN included
    cache.model(PLAN, "hot-aisle", train)  # another family left out: another model
    other_plan = Plan(families=("temperate",), fleets_per_family=1)
    cache.model(other_plan, "temperate", train)  # other training fleets: another model
    assert len(trained) == 3
    # Only the held-out fleets differ: the training fleets, and so the model, are the same.
    cache.model(Plan(families=("temperate",), test_seeds=(917,)), "temperate", train)
    assert len(trained) == 3
    cache.model(replace(PLAN, model_seed=1), "temperate", train)  # the same fleets, another seed
    assert len(trained) == 4
    [path] = tmp_path.glob("model-without-hot-aisle-*.skops")
    path.write_bytes(b"not a model")
    cache.model(PLAN, "hot-aisle", train)
    assert len(trained) == 5
