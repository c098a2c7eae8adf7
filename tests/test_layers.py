"""The layer contract (import-linter, `[tool.importlinter]` in pyproject.toml) catches a wrong-way import.

`make test` runs `lint-imports` on the tree as it is; this checks that the contract has
teeth: the same tree with one wrong-way import added fails it, naming the import.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("gpuhealth", "api", "modelops", "service", "collector", "simulator", "predictor", "store", "alerts",
            "dashboards", "kernels", "actuate", "manifests", "core")  # fmt: skip
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def _copy_tree(dest: Path) -> None:
    for pkg in PACKAGES:
        shutil.copytree(ROOT / pkg, dest / pkg, ignore=shutil.ignore_patterns("__pycache__", "generated", "*.skops"))
    shutil.copy(ROOT / "pyproject.toml", dest / "pyproject.toml")


def _lint(tree: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(tree)}  # the copies shadow the installed packages
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"], cwd=tree, env=env, capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize(
    ("module", "wrong", "named"),
    [
        ("core/units.py", "import api.app", "core.units -> api.app"),  # the ground floor reaching up
        ("store/retention.py", "import predictor.policy", "store.retention -> predictor.policy"),  # sibling components
        ("service/ingest.py", "import gpuhealth.cli", "service.ingest -> gpuhealth.cli"),  # a loop importing the CLI
        ("service/replicas.py", "import modelops.training", "service.replicas -> modelops.training"),  # loop > offline
        ("manifests/build.py", "import alerts.build", "manifests.build -> alerts.build"),  # reads files, not code
    ],
)
def test_a_wrong_way_import_fails_the_contract(tmp_path: Path, module: str, wrong: str, named: str) -> None:
    assert LINT_IMPORTS.exists(), "lint-imports is not installed (pip install -e '.[dev]')"
    _copy_tree(tmp_path)
    clean = _lint(tmp_path)
    assert clean.returncode == 0, clean.stdout + clean.stderr
    path = tmp_path / module
    path.write_text(path.read_text() + f"\n{wrong}  # deliberately wrong\n")
    broken = _lint(tmp_path)
    assert broken.returncode != 0
    assert named in broken.stdout, broken.stdout
