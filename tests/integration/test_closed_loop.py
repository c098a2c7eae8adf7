"""The closed loop: a fleet's own history and failures train a model that a running `gpuhealth serve` picks up.

A store holds 40 days of a simulated 64-GPU fleet; its failures are recorded through the real
API (ECC ones as RMAs an operator confirmed). `gpuhealth train --db` learns from them on a
small simulated prior and stores a candidate; `gpuhealth model promote` judges candidates on
the holdout slice; the `gpuhealth serve` process, never restarted, scores with each newly
active model (GET /v1/model, /metrics). A candidate that is worse is refused, and says why.

The first promotion is forced: whether a model trained on 64 GPUs beats the shipped one
depends on both models, not on the loop. The rule itself is then shown both ways with
candidates whose quality relative to the active model is known by construction: one that
never raises risk (only the rules alert) is refused; one with the same heads is accepted.
"""

from __future__ import annotations

import json
import re
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from typer.testing import CliRunner

from gpuhealth.cli import app
from predictor.model import RiskModel
from simulator.fleet import SimConfig
from simulator.run import simulate
from store import Store
from tests.integration.conftest import Service, free_port, http_get, poll, start_service
from tests.service.tiny_model import silent_model

pytestmark = pytest.mark.integration

TOKEN = "closed-loop-token-0123456789"
DAY_S = 86_400
DAYS = 40
FLEET = {"nodes": 8, "gpus_per_node": 8, "seed": 11, "random_failures": True, "acceleration": 60.0,
         "mode_mix": {"ecc": 0.15, "thermal": 0.3, "pcie": 0.5, "sudden": 0.05}, "models": {"A100": 1.0}}  # fmt: skip
"""Failure-rich, so that 26 days hold at least 3 failing GPUs of every mode (the training's minimum)."""
TRAIN = ["--prior-fleets", "1", "--prior-nodes", "8", "--prior-days", "40", "--threads", "1", "--every", "6h"]
runner = CliRunner()


@contextmanager
def opened(url: str) -> Iterator[Store]:
    """The store at `url`, closed after (the test and the serve process share the SQLite file)."""
    store = Store.open(url)
    try:
        yield store
    finally:
        store.close()


def post(svc: Service, path: str, body: dict[str, Any]) -> tuple[int, Any]:
    req = urllib.request.Request(
        svc.url + path, data=json.dumps(body).encode(), method="POST",
        headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
    )  # fmt: skip
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return int(resp.status), json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return int(err.code), json.loads(err.read())


def model_card(svc: Service) -> dict[str, Any]:
    status, body = http_get(svc.url + "/v1/model")
    assert status == 200, body
    return dict(json.loads(body))


def cli(*args: str, code: int = 0) -> str:
    """Run `gpuhealth ARGS` in this process; its stdout and stderr with rich's line wrapping undone."""
    result = runner.invoke(app, list(args))
    text = result.stdout + result.stderr
    assert result.exit_code == code, f"gpuhealth {' '.join(args)} exited {result.exit_code}:\n{text}"
    return " ".join(text.split())


def scored_with(svc: Service, version: str) -> None:
    """Wait until the service loaded `version` and finished a scoring round with it."""

    def state() -> tuple[dict[str, Any], float]:
        m = re.search(r"^gpuhealth_score_runs_total (\S+)$", svc.get("/metrics"), re.M)
        return model_card(svc), float(m.group(1)) if m else 0.0

    card, runs = poll(f"serve loads model {version}", state, lambda s: s[0]["version"] == version, 60)
    assert card["source"] == "store" and card["pending_version"] is None and card["load_error"] is None
    poll("a scoring round with it", state, lambda s: s[1] > runs, 60)
    text = svc.get("/metrics")
    assert f'gpuhealth_model_info{{source="store",version="{version}"}} 1.0' in text


def test_the_fleet_trains_and_serve_picks_up_the_promoted_model(tmp_path: Path) -> None:
    # 1. The store holds the fleet's history, ending today (serve scores the last 31 days by its clock).
    start = (time.time() // DAY_S) * DAY_S - DAYS * DAY_S
    frame, failures = simulate(SimConfig(**FLEET, start=start), DAYS)
    url = f"sqlite:///{tmp_path / 'fleet.db'}"
    with opened(url) as store:
        store.samples.ingest(frame)

    (tmp_path / "token").write_text(TOKEN + "\n")
    port = free_port()
    cmd = [sys.executable, "-m", "gpuhealth.cli", "serve", "--no-collector", "--db", url, "--listen",
           f"127.0.0.1:{port}", "--score-interval", "3s", "--token-file", str(tmp_path / "token")]  # fmt: skip
    svc = start_service("gpuhealth serve", cmd, f"http://127.0.0.1:{port}", "/readyz", tmp_path / "serve.log")
    try:
        assert model_card(svc)["source"] == "file"

        # 2. Failures through the API; an operator's confirmed RMA is recorded as kind "rma" with its mode.
        for f in failures.itertuples():
            kind = "rma" if f.mode == "ecc" else "failure"
            body = {"gpu_uuid": f.gpu_uuid, "failed_at": f.failed_at.isoformat(), "mode": f.mode, "kind": kind,
                    "hostname": f.hostname, "recorded_by": "closed-loop test"}  # fmt: skip
            status, answer = post(svc, "/v1/failures", body)
            assert status == 201, answer

        # 3. Train from the database: a new, inactive version with its holdout slice.
        out = cli("train", "--db", url, *TRAIN, "--out", str(tmp_path / "candidate.skops"))
        with opened(url) as store:
            (info,) = store.models.find()
        first = info["version"]
        assert f"stored model {first} (inactive)" in out and not info["active"]
        card = info["card"]
        held = card["holdout"]
        assert held["days"] == 14 and sum(held["failures"].values()) > 0
        assert pd.Timestamp(held["end"]) == frame["timestamp"].max()
        trained = frame[frame["timestamp"] <= pd.Timestamp(held["start"])]
        assert [s["name"] for s in card["trained_on"]["sets"]][-1] == "fleet"
        assert card["trained_on"]["fleet"]["gpus"] == trained["gpu_uuid"].nunique()
        assert card["trained_on"]["fleet"]["failures"] == {
            k: int(v)
            for k, v in failures[failures["failed_at"] <= pd.Timestamp(held["start"])]["mode"].value_counts().items()
        }
        fleet_span = card["meta"]["training_sets"][-1]["span"]
        assert pd.Timestamp(fleet_span[1]) <= pd.Timestamp(held["start"]), "the holdout was not trained on"
        assert RiskModel.load(tmp_path / "candidate.skops").meta["data_hash"] == card["meta"]["data_hash"]
        assert model_card(svc)["source"] == "file", "a stored model is not used before it is promoted"

        # 4. Promote it (forced: see the module's docstring); serve switches without a restart.
        out = cli("model", "promote", first, "--db", url, "--force")
        assert f"FORCED: model {first} is active" in out or f"promoted {first}" in out
        assert "recall_ecc" in out and "shipped default model" in out
        scored_with(svc, first)
        served = model_card(svc)
        assert pd.Timestamp(served["holdout"]["start"]) == pd.Timestamp(held["start"])
        assert served["trained_on"]["fleet"]["gpus"] == card["trained_on"]["fleet"]["gpus"]
        assert served["promotion"]["baseline"] == "shipped default model"
        assert {m["name"] for m in served["promotion"]["measures"]} == {
            "recall_ecc", "recall_thermal", "recall_pcie", "precision"}  # fmt: skip
        # No fleet verdict on a pending remap's drain any more (0082): neither in the card nor said.
        assert {"remap_hold", "remap_hold_risk"}.isdisjoint(served) and "remap_hold" not in served["promotion"]
        assert "pending remap" not in out

        # 5. A worse candidate (never raises risk: the rules alone) is refused, and says why.
        with opened(url) as store:
            active = RiskModel.from_bytes(store.models.get(first)["data"])
            worse = store.models.put(silent_model(active).to_bytes(), {**card, "promotion": None})["version"]
        out = cli("model", "promote", worse, "--db", url, code=1)
        assert f"refused: model {worse} stays inactive" in out
        assert re.search(rf"recall_\w+ \d\.\d\d is worse than the active model {first}'s \d\.\d\d", out), out
        with opened(url) as store:
            assert store.models.active_version() == first
            promo = store.models.info(worse)["card"]["promotion"]
        assert not promo["promoted"] and promo["refusals"]
        assert any(m["worse"] and m["candidate"] < m["baseline"] for m in promo["measures"])

        # 6. A candidate no worse (the same heads, another archive) is promoted by the rule, and served.
        same = RiskModel(heads=active.heads, meta={**active.meta, "note": "the same heads, stored again"})
        with opened(url) as store:
            equal = store.models.put(same.to_bytes(), {**card, "promotion": None})["version"]
        out = cli("model", "promote", equal, "--db", url)
        assert f"promoted {equal} over the active model {first}" in out and "FORCED" not in out
        scored_with(svc, equal)
        served = model_card(svc)
        assert served["promotion"]["promoted"] and not served["promotion"]["forced"]
        assert not any(m["worse"] for m in served["promotion"]["measures"])
        listing = json.loads(runner.invoke(app, ["model", "list", "--db", url, "--format", "json"]).stdout)
        assert [m["version"] for m in listing if m["active"]] == [equal]
        svc.assert_alive()
    finally:
        svc.stop()
