"""Shared helpers for the alert tests: the repository root and the real tools."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.conftest import require_tool

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def promtool() -> str:
    """Path of promtool (skipped locally when missing, a failure in CI)."""
    return require_tool("promtool")


@pytest.fixture(scope="session")
def amtool() -> str:
    """Path of amtool (skipped locally when missing, a failure in CI)."""
    return require_tool("amtool")
