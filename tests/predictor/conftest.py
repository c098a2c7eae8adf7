"""Fixtures shared by the predictor tests: the shipped model, loaded once."""

from __future__ import annotations

import pytest

from predictor.model import RiskModel
from predictor.score import default_model_path, load_model


@pytest.fixture(scope="session")
def shipped_model() -> RiskModel:
    """predictor/models/default.skops (rebuilt by `make model`); loading takes a few seconds."""
    path = default_model_path()
    if not path.exists():
        pytest.fail(f"{path} is missing: run `make model`")
    return load_model()
