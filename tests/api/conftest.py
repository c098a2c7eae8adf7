"""A service on a simulated fleet with two days of history, on SQLite and on a real PostgreSQL.

The fleet carries faults that are ripe by the end of the warm-up, so the first
scoring round already has GPUs to watch, demote, drain or RMA.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from api.app import ApiConfig
from collector.backends.sim import SimBackend
from core import catalog
from gpuhealth.serve import Service, build_service
from predictor.score import load_model
from service.assemble import LoopConfig, build_loops, warm_up
from simulator.fleet import FaultSpec
from store import Store
from tests.postgres import postgres_server  # noqa: F401  (session fixture)

TOKEN = "test-token-0123456789"
STEP_S = 600.0
WARMUP_STEPS = 288  # two simulated days
FAULTS = ("1:ecc:40", "5:offbus:47", "9:thermal:52", "12:pcie:53")
"""A remapping ECC fault and a GPU off the bus, both ripe before the warm-up ends; an overheating GPU and
a bad link still on their way (they fail a few hours after it)."""


@dataclass
class Fleet:
    svc: Service
    client: TestClient
    uuids: list[str]
    db: str


@pytest.fixture(scope="session")
def model():  # type: ignore[no-untyped-def]
    return load_model()


def _postgres_url(request: pytest.FixtureRequest, name: str) -> str:
    pg = request.getfixturevalue("postgres_server")
    return str(pg.create_database(name))


@pytest.fixture(scope="module", params=["sqlite", pytest.param("postgresql", marks=pytest.mark.integration)])
def fleet(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, model) -> Iterator[Fleet]:  # type: ignore[no-untyped-def]
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path_factory.mktemp('db') / 'api.db'}"
    else:
        url = _postgres_url(request, f"api_{request.module.__name__.rsplit('.', 1)[-1]}")
    store = Store.open(url)
    backend = SimBackend(
        nodes=2, gpus_per_node=8, seed=3, step_s=STEP_S, faults=[FaultSpec.parse(f) for f in FAULTS],
        start=time.time() - WARMUP_STEPS * STEP_S,
    )  # fmt: skip
    config = LoopConfig(fields=list(catalog.select("default")), interval_s=1.0, score_interval_s=3600)
    svc = build_service(build_loops(store, model, config, backend=backend), ApiConfig(token=TOKEN))
    warm_up(svc.loops, WARMUP_STEPS)
    svc.loops.scorer.run_once()
    # No lifespan: the background threads stay off so every test sees the same state.
    client = TestClient(svc.app)
    yield Fleet(svc, client, [g.uuid for g in backend.gpus()], url)
    client.close()
    store.close()


def auth(token: str = TOKEN) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def tmp_sqlite(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'x.db'}"
