"""The scoring loop picks up a newly active stored model at its next round, and survives one that does not load."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from predictor import score as score_module
from predictor.model import RiskModel
from predictor.thresholds import Thresholds
from service.assemble import LoopConfig, build_loops
from service.scorer import ModelMetrics, Scorer
from simulator.fleet import SimConfig
from simulator.run import simulate
from store import Store
from tests.service.tiny_model import tiny_model

CARD = {"trained_on": {"sets": []}}


@pytest.fixture(scope="module")
def models() -> dict[str, RiskModel]:
    return {tag: tiny_model(tag, seed=i) for i, tag in enumerate(("file", "first", "second"))}


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = Store.open(f"sqlite:///{tmp_path / 'reload.db'}")
    frame, _ = simulate(SimConfig(nodes=1, gpus_per_node=2, seed=5), days=1, interval_s=3600)
    s.samples.ingest(frame)
    try:
        yield s
    finally:
        s.close()


def scorer_on(store: Store, model: RiskModel) -> Scorer:
    newest = store.samples.newest_time()
    return Scorer(store, model, Thresholds(), 3600, now=lambda: newest)  # scores as of the simulated day


def metric(scorer: Scorer, name: str, labels: dict[str, str] | None = None) -> float | None:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(ModelMetrics(scorer))
    return reg.get_sample_value(name, labels or {})


def test_without_a_stored_model_the_file_model_scores(store: Store, models: dict[str, RiskModel]) -> None:
    scorer = scorer_on(store, models["file"])
    assert scorer.run_once()
    st = scorer.model_state
    assert (st.source, st.version, st.reloads) == ("file", None, 0)
    assert scorer.model is models["file"]
    assert metric(scorer, "gpuhealth_model_info", {"source": "file", "version": ""}) == 1.0


def test_a_promoted_model_is_loaded_at_the_next_round(store: Store, models: dict[str, RiskModel]) -> None:
    scorer = scorer_on(store, models["file"])
    scorer.run_once()
    first = store.models.put(models["first"].to_bytes(), CARD)["version"]
    scorer.run_once()
    assert scorer.model_state.source == "file", "an inactive stored model is not used"

    store.models.activate(first, store.models.find()[0]["created_at"] + timedelta(minutes=1))
    records = scorer.run_once()
    st = scorer.model_state
    assert (st.source, st.version, st.reloads, st.meta["tag"]) == ("store", first, 1, "first")
    assert scorer.model.meta["tag"] == "first" and records
    scorer.run_once()
    assert scorer.model_state.reloads == 1, "the same active version is not loaded again"

    second = store.models.put(models["second"].to_bytes(), CARD)["version"]
    store.models.activate(second, store.models.info(second)["created_at"])
    scorer.run_once()
    assert (scorer.model_state.version, scorer.model.meta["tag"]) == (second, "second")
    assert metric(scorer, "gpuhealth_model_reloads_total") == 2.0
    assert metric(scorer, "gpuhealth_model_info", {"source": "store", "version": second}) == 1.0


def test_a_model_that_does_not_load_is_counted_and_the_old_one_kept(
    store: Store, models: dict[str, RiskModel], caplog: pytest.LogCaptureFixture
) -> None:
    scorer = scorer_on(store, models["file"])
    first = store.models.put(models["first"].to_bytes(), CARD)["version"]
    store.models.activate(first, store.models.info(first)["created_at"])
    scorer.run_once()
    broken = store.models.put(b"PK\x03\x04 not a skops archive", CARD)["version"]
    store.models.activate(broken, store.models.info(broken)["created_at"])
    assert scorer.run_once(), "scoring goes on"
    st = scorer.model_state
    assert (st.version, st.load_failures, st.failed_version) == (first, 1, broken)
    assert scorer.model.meta["tag"] == "first"
    assert st.last_error is not None and broken in st.last_error
    assert any(broken in r.getMessage() and r.levelname == "ERROR" for r in caplog.records)
    assert metric(scorer, "gpuhealth_model_load_failures_total") == 1.0
    scorer.run_once()
    assert scorer.model_state.load_failures == 1, "a broken version is not retried every round"

    store.models.activate(first, store.models.info(first)["created_at"])  # rolled back: nothing to load
    scorer.run_once()
    assert scorer.model_state.failed_version == broken and scorer.model_state.reloads == 1


def test_the_service_metrics_name_the_model(store: Store, models: dict[str, RiskModel]) -> None:
    loops = build_loops(store, models["file"], LoopConfig(score_interval_s=3600))
    assert loops.extra_metrics is not None
    text = loops.extra_metrics().decode()
    assert 'gpuhealth_model_info{source="file",version=""} 1.0' in text
    assert "gpuhealth_model_load_failures_total 0.0" in text


def test_the_loop_leaves_what_it_started_with_out_of_later_collections(
    store: Store, models: dict[str, RiskModel], monkeypatch: pytest.MonkeyPatch
) -> None:
    """After each round the loop asks `keep_long_lived` (which acts once per process): the imports and the
    model stay out of the full collections a round's allocations set off (decision 0090, run 8)."""
    asked = threading.Event()
    monkeypatch.setattr("service.scorer.keep_long_lived", asked.set)
    scorer = scorer_on(store, models["file"])
    scorer.start()
    try:
        assert asked.wait(60)
        assert scorer.state.runs >= 1  # asked after a round
    finally:
        scorer.stop(timeout=30)


def test_the_scorer_takes_its_lanes_from_the_settings(
    store: Store, models: dict[str, RiskModel], monkeypatch: pytest.MonkeyPatch
) -> None:
    """GPUHEALTH_SCORE_LANES reaches the scorer's rounds (`build_features`), one lane unless set."""
    from core.settings import Settings

    assert Settings().score_lanes == 1
    monkeypatch.setenv("GPUHEALTH_SCORE_LANES", "2")
    lanes = Settings().score_lanes
    loops = build_loops(store, models["file"], LoopConfig(score_interval_s=3600, score_lanes=lanes))
    asked: list[int | None] = []
    real = score_module.build_features

    def build(*args: Any, lanes: int | None = None, **kw: Any) -> Any:
        asked.append(lanes)
        return real(*args, lanes=lanes, **kw)

    monkeypatch.setattr(score_module, "build_features", build)
    assert loops.scorer.run_once(at=store.samples.newest_time())  # as of the simulated day
    assert asked == [2]
