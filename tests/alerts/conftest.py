"""Shared helpers for the alert tests: the repository root and the real tools."""

from __future__ import annotations

import shutil
import subprocess
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


def promtool_fails_on(promtool: str, tmp_path: Path, old: str, new: str) -> str:
    """promtool's unit tests run on the generated rules with every `old` replaced by `new` (it must be
    there): asserts they fail, returns what promtool said."""
    from alerts import build

    rules, tests = REPO_ROOT / build.RULES_PATH, REPO_ROOT / build.TESTS_PATH
    shutil.copy(tests, tmp_path / tests.name)
    text = rules.read_text()
    assert old in text, old
    (tmp_path / rules.name).write_text(text.replace(old, new))
    res = subprocess.run(
        [promtool, "test", "rules", tests.name], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert res.returncode != 0, res.stdout
    return res.stdout + res.stderr
