"""Training from the store and promote's rule, piece by piece (the loop: tests/integration/test_closed_loop.py)."""

from __future__ import annotations

import re
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from core.hourly import to_hours
from modelops.promote import PromoteError, compare, promote
from modelops.training import (
    FLEET_SET,
    TrainingError,
    TrainOptions,
    fleet_history,
    fleet_trained_until,
    split_holdout,
    store_model_file,
    train_from_store,
)
from predictor.model import ModelError
from predictor.thresholds import Thresholds
from service.scorer import Scorer
from simulator.domain import Domain
from simulator.fleet import SimConfig
from simulator.run import simulate
from store import Store
from tests.frames import T0, rows
from tests.service.tiny_model import silent_model, tiny_model


def test_fleet_history_reads_the_stored_hours_in_batches(store: Store) -> None:
    frame, _ = simulate(SimConfig(nodes=1, gpus_per_node=3, seed=2), days=1, interval_s=600)
    store.samples.ingest(frame)
    end = frame["timestamp"].max().to_pydatetime()
    store.pruner.prune_samples(end, timedelta(hours=12))  # the older raw half goes; its hours stay
    got = fleet_history(store, batch=2)
    want = to_hours(frame)
    assert got["gpu_uuid"].nunique() == 3
    assert len(got) == len(want)
    assert got["timestamp"].max() == frame["timestamp"].max()
    key = ["gpu_uuid", "timestamp"]
    a = got.astype({"gpu_uuid": str}).sort_values(key).reset_index(drop=True)
    b = want.astype({"gpu_uuid": str}).sort_values(key).reset_index(drop=True)
    assert (a["timestamp"] == b["timestamp"]).all()
    assert a["gpu_temp_c"].to_numpy() == pytest.approx(b["gpu_temp_c"].to_numpy(), rel=1e-5)


def test_the_holdout_is_the_newest_days_and_nothing_of_it_is_trained_on() -> None:
    f = rows(list(range(0, 30 * 24 * 60, 60)), gpu_temp_c=[40.0] * (30 * 24))
    at = [T0 + pd.Timedelta(days=5), T0 + pd.Timedelta(days=25)]
    fails = pd.DataFrame({"gpu_uuid": ["GPU-a", "GPU-a"], "failed_at": at, "mode": ["ecc", "pcie"]})
    train, train_fails, held = split_holdout(f, fails, 14)
    assert held is not None
    start = pd.Timestamp(held["start"])
    assert start == f["timestamp"].max() - pd.Timedelta(days=14)
    assert train["timestamp"].max() <= start and train_fails["mode"].tolist() == ["ecc"]
    assert held["failures"] == {"pcie": 1} and held["gpus"] == 1
    assert split_holdout(f, fails, 0)[2] is None


def test_training_needs_history(store: Store) -> None:
    with pytest.raises(TrainingError, match="holds no history"):
        train_from_store(store, TrainOptions(prior_fleets=0))
    frame, _ = simulate(SimConfig(nodes=1, gpus_per_node=2, seed=2), days=12)
    store.samples.ingest(frame)
    with pytest.raises(TrainingError, match=r"leaves 0\.0 days to train on after keeping the newest 14 days out"):
        train_from_store(store, TrainOptions(prior_fleets=0))
    with pytest.raises(TrainingError, match="the fleet weighs 0 and there is no prior"):
        train_from_store(store, TrainOptions(prior_fleets=0, fleet_weight=0))


def test_history_days_reads_only_the_newest_days(store: Store) -> None:
    frame, _ = simulate(SimConfig(nodes=1, gpus_per_node=2, seed=2), days=12)
    store.samples.ingest(frame)
    # 12 days stored, 4 held out: 8 left to train on, or 6 of the newest 10 (too few for a 7-day
    # label window either way, so nothing trains).
    with pytest.raises(TrainingError, match=r"leaves 8\.0 days to train on after keeping the newest 4 days out"):
        train_from_store(store, TrainOptions(prior_fleets=0, holdout_days=4))
    with pytest.raises(TrainingError, match=r"leaves 6\.0 days to train on after keeping the newest 4 days out"):
        train_from_store(store, TrainOptions(prior_fleets=0, holdout_days=4, history_days=10))
    with pytest.raises(TrainingError, match="--history-days 10 leaves nothing to train on after the 14 held-out"):
        train_from_store(store, TrainOptions(prior_fleets=0, history_days=10))


def report(failures: dict[str, int], precision: float, episodes: int, **recall: float) -> dict[str, Any]:
    model = {f"recall_{m}": recall.get(m, float("nan")) for m in ("ecc", "thermal", "pcie")}
    return {"failures": failures, "model": {**model, "precision": precision, "episodes": episodes}}


def test_compare_judges_each_measure_it_has_evidence_for() -> None:
    failures = {"ecc": 5, "thermal": 2, "pcie": 3}
    cand = report(failures, 0.80, 10, ecc=0.8, thermal=0.0, pcie=2 / 3)
    base = report(failures, 0.75, 12, ecc=1.0, thermal=1.0, pcie=2 / 3)
    by = {m.name: m for m in compare(cand, base, min_failures=3)}
    assert (
        by["recall_ecc"].worse
        and by["recall_ecc"].judged
        and (by["recall_ecc"].candidate, by["recall_ecc"].baseline) == (0.8, 1.0)
    )
    assert not by["recall_thermal"].judged and "only 2 thermal failure(s)" in by["recall_thermal"].detail
    assert by["recall_pcie"].judged and not by["recall_pcie"].worse, "equal is no worse"
    assert by["precision"].judged and not by["precision"].worse and "10 and 12 alert episodes" in by["precision"].detail
    silent = report(failures, float("nan"), 0, ecc=0.0, thermal=0.0, pcie=0.0)
    p = {m.name: m for m in compare(silent, base)}["precision"]
    assert not p.judged and "no alert episodes from the candidate" in p.detail


def test_promote_refuses_without_a_holdout_and_force_records_why(store: Store) -> None:
    data = tiny_model("x").to_bytes()
    v = store.models.put(data, {"holdout": None})["version"]
    verdict = promote(store, v)
    assert not verdict.promoted and "no holdout slice" in verdict.refusals[0]
    assert store.models.active_version() is None
    assert store.models.info(v)["card"]["promotion"]["refusals"] == verdict.refusals
    forced = promote(store, v, force=True, now=datetime(2026, 3, 1, tzinfo=UTC))
    assert forced.promoted and forced.forced and store.models.active_version() == v
    card = store.models.info(v)["card"]["promotion"]
    assert card["forced"] and card["baseline"] == "shipped default model" and card["at"].startswith("2026-03-01")
    with pytest.raises(PromoteError, match="already the active model"):
        promote(store, v)


def test_promote_refuses_when_the_slice_is_gone(store: Store) -> None:
    frame, _ = simulate(SimConfig(nodes=1, gpus_per_node=2, seed=2), days=3)
    store.samples.ingest(frame)
    old = {"days": 14, "start": "2025-01-01T00:00:00+00:00", "end": "2025-01-15T00:00:00+00:00", "gpus": 2,
           "failures": {}}  # fmt: skip
    v = store.models.put(tiny_model("y").to_bytes(), {"holdout": old})["version"]
    verdict = promote(store, v, against=None)
    assert not verdict.promoted and "no longer holds the holdout slice" in verdict.refusals[0]


def test_promote_records_no_verdict_on_a_pending_remaps_drain(store: Store) -> None:
    """64 healthy GPUs, a third with SBE bursts that each leave a weak row remapped, pending until the
    node reboots, and none fails. Promote judges the candidate and records its comparison, and nothing
    of a pending remap's drain (the fleet verdict is gone, 0082); a scoring loop with the operator's
    default thresholds holds such a remap at watch."""
    domain = replace(Domain(), sbe_burst_share=0.3, sbe_bursts_per_day=0.3, burst_remap_share=1.0)
    frame, fails = simulate(SimConfig(nodes=8, gpus_per_node=8, seed=4, domain=domain), days=24, interval_s=3600)
    assert fails.empty
    store.samples.ingest(frame)
    end = frame["timestamp"].max()
    holdout = {"days": 14, "start": (end - pd.Timedelta(days=14)).isoformat(), "end": end.isoformat(), "gpus": 64,
               "failures": {}}  # fmt: skip
    v = store.models.put(silent_model().to_bytes(), {"holdout": holdout})["version"]
    refused = promote(store, v)  # no failure in the slice and no alert: nothing is judged
    assert not refused.promoted and refused.refusals == [
        "the holdout slice judges no measure: too few failures and alerts in it"
    ]
    verdict = promote(store, v, force=True)
    assert verdict.promoted and verdict.forced
    card = store.models.info(v)["card"]
    assert {"remap_hold", "remap_hold_history"}.isdisjoint(card)
    assert {"remap_hold", "served"}.isdisjoint(card["promotion"])

    last = frame[frame["timestamp"] == end]
    pending = set(last.loc[last["row_remap_pending"] >= 1, "gpu_uuid"].astype(str))
    assert pending, "the fleet ends with a remap pending somewhere"
    records = Scorer(store, tiny_model("file"), Thresholds(), 3600).run_once(at=end.to_pydatetime())
    decided = {str(r["gpu_uuid"]): r["decision"] for r in records}
    assert {decided[u] for u in pending} == {"watch"}


def test_a_model_file_is_stored_as_a_candidate_judged_on_the_fleets_newest_days(store: Store, tmp_path: Path) -> None:
    frame, _ = simulate(SimConfig(nodes=1, gpus_per_node=3, seed=2), days=6, interval_s=3600)
    store.samples.ingest(frame)
    end = frame["timestamp"].max()
    gpu = str(frame["gpu_uuid"].iloc[0])
    store.labels.add_failure(gpu_uuid=gpu, failed_at=(end - pd.Timedelta(days=1)).to_pydatetime(), mode="pcie")
    store.labels.add_failure(gpu_uuid=gpu, failed_at=(end - pd.Timedelta(days=4)).to_pydatetime(), mode="ecc")
    path = tiny_model("release").save(tmp_path / "release.skops")
    added = store_model_file(store, path, holdout_days=2)
    info = store.models.info(added.info["version"])
    assert not info["active"] and store.models.active_version() is None
    card = info["card"]
    held = card["holdout"]
    assert pd.Timestamp(held["end"]) == end and pd.Timestamp(held["start"]) == end - pd.Timedelta(days=2)
    assert held["failures"] == {"pcie": 1} and held["gpus"] == 3  # the ECC failure is older than the slice
    assert card["trained_by"] == "a model file (gpuhealth model add)" and card["promotion"] is None
    assert card["source"]["file"] == "release.skops" and card["source"]["bytes"] == path.stat().st_size
    assert store.models.get(added.info["version"])["data"] == path.read_bytes()
    assert card["meta"]["tag"] == "release"
    # The same archive again: the store keeps its record and card, and says which version it is.
    with pytest.raises(TrainingError, match=rf"already stored as an inactive model, version {info['version']} .*"
                       rf"its holdout {re.escape(held['start'])}.*promote {info['version']}"):  # fmt: skip
        store_model_file(store, path, holdout_days=4)
    assert [m["version"] for m in store.models.find()] == [info["version"]]
    assert store.models.info(info["version"])["card"] == card


def test_a_model_file_that_would_not_load_or_has_nothing_to_be_judged_on_is_not_stored(
    store: Store, tmp_path: Path
) -> None:
    path = tiny_model("x").save(tmp_path / "x.skops")
    with pytest.raises(TrainingError, match="holds no history"):
        store_model_file(store, path)
    frame, _ = simulate(SimConfig(nodes=1, gpus_per_node=2, seed=2), days=3, interval_s=3600)
    store.samples.ingest(frame)
    with pytest.raises(TrainingError, match="above 0"):
        store_model_file(store, path, holdout_days=0)
    broken = tmp_path / "broken.skops"
    broken.write_bytes(b"not a model")
    with pytest.raises(ModelError, match="not a gpuhealth model file"):
        store_model_file(store, broken)
    assert store.models.find() == []


def test_a_model_trained_on_the_fleets_newest_days_is_not_judged_on_them(store: Store, tmp_path: Path) -> None:
    frame, _ = simulate(SimConfig(nodes=1, gpus_per_node=2, seed=2), days=6, interval_s=3600)
    store.samples.ingest(frame)
    end = frame["timestamp"].max()
    model = tiny_model("db")
    trained_until = end - pd.Timedelta(days=1)
    model.meta["training_sets"] = [
        {"name": "hot-aisle-1000", "span": [str(end - pd.Timedelta(days=60)), str(end)]},  # a prior fleet: any dates
        {"name": FLEET_SET, "span": [str(frame["timestamp"].min()), str(trained_until)]},
    ]
    path = model.save(tmp_path / "db.skops")
    with pytest.raises(TrainingError, match=r"trained on a fleet.s own history up to .* inside the newest 2 days"):
        store_model_file(store, path, holdout_days=2)
    assert store.models.find() == []
    assert store_model_file(store, path, holdout_days=0.5).card["holdout"]["days"] == 0.5  # after its training


def test_promote_on_a_fleet_younger_than_its_holdout_refuses_and_force_activates(store: Store) -> None:
    """The slice's scoring starts a week before a 14-day holdout; a 4-day fleet has no GPU there to score."""
    frame, _ = simulate(SimConfig(nodes=1, gpus_per_node=2, seed=2), days=4, interval_s=3600)
    store.samples.ingest(frame)
    end = frame["timestamp"].max()
    holdout = {"days": 14, "start": (end - pd.Timedelta(days=14)).isoformat(), "end": end.isoformat(), "gpus": 2,
               "failures": {}}  # fmt: skip
    v = store.models.put(tiny_model("young").to_bytes(), {"holdout": holdout})["version"]
    verdict = promote(store, v)
    assert not verdict.promoted and len(verdict.refusals) == 1
    assert re.search(r"cannot be scored on this fleet's history: no GPU has samples .* \(data begins ",
                     verdict.refusals[0]), verdict.refusals  # fmt: skip
    assert store.models.info(v)["card"]["promotion"]["refusals"] == verdict.refusals
    forced = promote(store, v, force=True)
    assert forced.promoted and forced.forced and store.models.active_version() == v


MALFORMED_SETS = [
    ([1, 2], "training_sets[0] is an int, not an object"),
    ([{"name": FLEET_SET, "span": ["2026-01-01", "2026-01-08"]}, "x"], "training_sets[1] is a str, not an object"),
    ("fleet", "training_sets is a str, not a list"),
    ({"name": FLEET_SET}, "training_sets is a dict, not a list"),
    ([{"name": FLEET_SET, "span": "2026-01-01..2026-01-08"}], "training_sets[0].span is not a list of two times"),
    ([{"name": FLEET_SET, "span": ["2026-01-01", "soon"]}], "training_sets[0].span[1] 'soon' is not a time"),
    ([{"name": FLEET_SET, "span": ["2026-01-01", None]}], "training_sets[0].span[1] None is not a time"),
    ([{"name": FLEET_SET, "span": ["2026-01-01", {"y": 1}]}], "training_sets[0].span[1] {'y': 1} is not a time"),
]


@pytest.mark.parametrize(("sets", "needle"), MALFORMED_SETS)
def test_malformed_training_sets_are_an_error_naming_the_field(sets: Any, needle: str) -> None:
    with pytest.raises(TrainingError) as e:
        fleet_trained_until({"training_sets": sets})
    assert "the model's metadata is malformed: " + needle in str(e.value)


def test_training_sets_as_train_writes_them_and_naive_times() -> None:
    assert fleet_trained_until({}) is None and fleet_trained_until({"training_sets": None}) is None
    prior = {"name": "hot-aisle-1000", "span": ["2026-01-01 00:00:00+00:00", "2026-03-01 00:00:00+00:00"]}
    assert fleet_trained_until({"training_sets": [prior]}) is None
    fleet = {"name": FLEET_SET, "span": ["2026-01-01 00:00:00+00:00", "2026-02-01 06:00:00+00:00"]}
    assert fleet_trained_until({"training_sets": [prior, fleet]}) == pd.Timestamp("2026-02-01 06:00", tz="UTC")
    naive = {"name": FLEET_SET, "span": ["2026-01-01", "2026-02-01"]}  # UTC, as every time the store holds
    assert fleet_trained_until({"training_sets": [naive]}) == pd.Timestamp("2026-02-01", tz="UTC")


def test_a_model_file_with_malformed_training_sets_is_not_stored(store: Store, tmp_path: Path) -> None:
    model = tiny_model("odd")
    model.meta["training_sets"] = [1, 2]
    path = model.save(tmp_path / "odd.skops")
    with pytest.raises(TrainingError, match=r"odd\.skops: the model's metadata is malformed: training_sets\[0\]"):
        store_model_file(store, path)  # said before "holds no history": it is the file that is wrong
    assert store.models.find() == []
