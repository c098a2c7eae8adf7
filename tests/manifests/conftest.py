"""The committed deploy/kubernetes/, parsed once per test session."""

from __future__ import annotations

from typing import Any

import pytest

from tests.manifests.files import all_objects


@pytest.fixture(scope="session")
def objects() -> list[dict[str, Any]]:
    """Every object of deploy/kubernetes/ (the kustomization excluded)."""
    return all_objects()
