"""GET /v1/model: the model scoring uses, where it came from, and its card."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from api.app import ApiConfig, create_app
from predictor.model import RiskModel
from predictor.thresholds import Thresholds
from service.scorer import Scorer
from simulator.fleet import SimConfig
from simulator.run import simulate
from store import Store
from tests.api.conftest import TOKEN, auth
from tests.service.tiny_model import tiny_model

AT = datetime(2026, 12, 1, 12, tzinfo=UTC)
VERDICT = {"hold": True, "risk": 0.3, "decided_by": "fleet outcomes", "reasons": ["21 GPUs drained …"],
           "evidence": {"pending_remap_gpus": 21, "failed_ecc": 3}}  # fmt: skip
"""The fleet verdict on a pending remap's drain an older promote wrote into the card (removed, 0082)."""
CARD = {
    "format": 1,
    "trained_on": {
        "sets": [
            {"name": "prior-1000", "weight": 0.5, "gpus": 256, "span": ["2026-01-01", "2026-03-01"],
             "failures": {"ecc": 9}},
            {"name": "fleet", "weight": 1.0, "gpus": 64, "span": ["2026-01-01", "2026-01-27"], "failures": {"ecc": 2}},
        ],
        "window": ["2026-01-01", "2026-03-01"], "gpus": 320, "rows": 1000, "failures": {"ecc": 11},
        "model_names": ["NVIDIA A100-SXM4-80GB"], "fleet": {"weight": 1.0, "gpus": 64}, "prior": {"fleets": 2},
    },
    "holdout": {"days": 14, "start": "2026-01-27T00:00:00+00:00", "end": "2026-02-10T00:00:00+00:00", "gpus": 64,
                "failures": {"ecc": 4}},
    "validation": {"ecc": {"average_precision": 0.5, "brier": 0.01, "positives": 3, "rows": 100}},
    "promotion": {"version": "v1", "baseline": "shipped default model", "promoted": True, "forced": False,
                  "at": "2026-12-01T12:00:00+00:00",
                  "measures": [{"name": "recall_ecc", "candidate": 1.0, "baseline": 0.75, "judged": True,
                                "worse": False, "detail": "4 ecc failures, 24 h lead"}],
                  "refusals": [], "notes": ["recall_pcie not judged: only 0 pcie failure(s)"], "slice": {},
                  "served": None, "remap_hold": VERDICT},
    "remap_hold": VERDICT,
    "remap_hold_history": [{"at": "2026-12-02T00:00:00+00:00", "slice": {}, "remap_hold": VERDICT}],
    "meta": {"sklearn_version": "1.9.1", "data_hash": "abc"},
}  # fmt: skip


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = Store.open(f"sqlite:///{tmp_path / 'model.db'}")
    frame, _ = simulate(SimConfig(nodes=1, gpus_per_node=2, seed=5), days=1, interval_s=3600)
    s.samples.ingest(frame)
    try:
        yield s
    finally:
        s.close()


@pytest.fixture(scope="module")
def file_model() -> RiskModel:
    return tiny_model("file")


def client_for(store: Store, scorer: Scorer | None, read_open: bool = True) -> TestClient:
    return TestClient(create_app(store, ApiConfig(token=TOKEN, scorer=scorer, read_open=read_open)))


def test_a_file_model_is_described_from_its_metadata(store: Store, file_model: RiskModel) -> None:
    scorer = Scorer(store, file_model, Thresholds(), 3600)
    body = client_for(store, scorer).get("/v1/model").json()
    assert (body["source"], body["version"], body["pending_version"], body["holdout"]) == ("file", None, None, None)
    assert {"remap_hold", "remap_hold_risk"}.isdisjoint(body)
    assert body["trained_on"]["sets"][0]["name"] == "history"
    assert body["validation"]["ecc"]["average_precision"] is None  # NaN in the metadata: null in JSON
    assert body["data_hash"] == "tiny-file"


def test_a_promoted_model_is_pending_until_the_loop_loads_it(store: Store, file_model: RiskModel) -> None:
    scorer = Scorer(store, file_model, Thresholds(), 3600, now=lambda: store.samples.newest_time())
    client = client_for(store, scorer)
    version = store.models.put(tiny_model("stored", seed=1).to_bytes(), CARD, created_at=AT)["version"]
    store.models.activate(version, AT)
    body = client.get("/v1/model").json()
    assert (body["source"], body["pending_version"]) == ("file", version)

    scorer.run_once()
    body = client.get("/v1/model").json()
    assert (body["source"], body["version"], body["pending_version"]) == ("store", version, None)
    assert body["activated_at"].startswith("2026-12-01T12:00") and body["loaded_at"] is not None
    assert [s["name"] for s in body["trained_on"]["sets"]] == ["prior-1000", "fleet"]
    assert body["trained_on"]["fleet"]["gpus"] == 64
    assert body["holdout"]["failures"] == {"ecc": 4}
    promo = body["promotion"]
    assert promo["measures"][0] == {"name": "recall_ecc", "candidate": 1.0, "baseline": 0.75, "judged": True,
                                    "worse": False, "detail": "4 ecc failures, 24 h lead"}  # fmt: skip
    assert promo["notes"] and body["sklearn_version"] == "1.9.1"
    # An older card's fleet verdict loads and is not shown (0082).
    assert {"remap_hold", "remap_hold_risk", "remap_hold_history"}.isdisjoint(body)
    assert {"remap_hold", "served"}.isdisjoint(promo)


def test_without_a_scoring_loop_the_store_answers(store: Store) -> None:
    client = client_for(store, None)
    r = client.get("/v1/model")
    assert r.status_code == 404 and "no stored model is active" in r.json()["detail"]
    version = store.models.put(b"archive", CARD, created_at=AT)["version"]
    store.models.activate(version, AT)
    body = client.get("/v1/model").json()
    assert (body["source"], body["version"], body["loaded_at"]) == ("store", version, None)
    assert {"remap_hold", "remap_hold_risk"}.isdisjoint(body) and "remap_hold" not in body["promotion"]
    assert (body["trained_by"], body["added_from"]) == (None, None)  # a card without them
    added = {**CARD, "trained_by": "a model file (gpuhealth model add)",
             "source": {"file": "default.skops", "sha256": "ab" * 32, "bytes": 1_600_000}}  # fmt: skip
    store.models.activate(store.models.put(b"another archive", added, created_at=AT)["version"], AT)
    body = client.get("/v1/model").json()
    assert body["trained_by"] == "a model file (gpuhealth model add)"
    assert body["added_from"] == {"file": "default.skops", "sha256": "ab" * 32, "bytes": 1_600_000}


def test_closed_reads_need_the_token(store: Store, file_model: RiskModel) -> None:
    client = client_for(store, Scorer(store, file_model, Thresholds(), 3600), read_open=False)
    assert client.get("/v1/model").status_code == 401
    assert client.get("/v1/model", headers=auth()).status_code == 200
