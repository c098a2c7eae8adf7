"""The `store` fixture: every store test runs on SQLite (a temp file) and on a real PostgreSQL."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from core import history
from simulator.fleet import SimConfig
from simulator.run import simulate
from store import Store
from tests.postgres import PostgresServer, postgres_server  # noqa: F401  (session fixture)

TEMPLATE = "gpuhealth_template"
T0 = datetime(2026, 1, 5, tzinfo=UTC)
_names = itertools.count()


@pytest.fixture(scope="session")
def pg_template(postgres_server: PostgresServer) -> PostgresServer:  # noqa: F811
    """The session's server with a migrated template database (each test copies it: fast and fresh)."""
    Store.open(postgres_server.create_database(TEMPLATE)).close()
    return postgres_server


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.integration)])
def backend(request: pytest.FixtureRequest) -> str:
    """Which database the test runs on."""
    return str(request.param)


@pytest.fixture
def store_url(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[str]:
    """URL of an empty, migrated database of the backend under test."""
    if backend == "sqlite":
        yield f"sqlite:///{tmp_path / 'gpuhealth.db'}"
        return
    server: PostgresServer = request.getfixturevalue("pg_template")
    name = f"t{next(_names)}"
    url = server.create_database(name, template=TEMPLATE)
    try:
        yield url
    finally:
        if server.running():
            server.drop_database(name)


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    """An open Store on a fresh database (SQLite file or PostgreSQL database)."""
    s = Store.open(store_url)
    try:
        yield s
    finally:
        s.close()


@pytest.fixture(scope="session")
def sim_history() -> pd.DataFrame:
    """A small simulated fleet: 2 nodes x 2 GPUs, 12 hours at 10-minute steps, with NaNs."""
    frame, _ = simulate(SimConfig(nodes=2, gpus_per_node=2, seed=3), days=0.5, interval_s=600)
    frame = frame.copy()
    frame.loc[frame.index[::7], "power_w"] = np.nan  # NaN must come back as NaN
    return history.validate(frame)


def frame(rows: list[dict[str, object]]) -> pd.DataFrame:
    """A history frame from a few hand-written rows (identity defaults filled in)."""
    base = {"hostname": "node-a", "gpu_index": 0, "model_name": "NVIDIA H100 80GB HBM3"}
    return pd.DataFrame([base | r for r in rows])
