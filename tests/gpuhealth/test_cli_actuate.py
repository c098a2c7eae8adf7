"""`gpuhealth actuate --once` and the actuator's flags of `serve`: a pass from the command line,
and one-line errors for wrong settings."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from store import Store
from tests.fleet_decisions import T0, set_decisions


def gpuhealth(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("GPUHEALTH_")} | (env or {})
    return subprocess.run([sys.executable, "-m", "gpuhealth.cli", *args], capture_output=True, text=True,
                          timeout=60, env=clean | {"COLUMNS": "200"})  # fmt: skip


def test_one_pass_in_dry_run_prints_and_records_the_plan(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    store = Store.open(url)
    set_decisions(store, T0, ["node-a", "node-b"], {("node-b", 1): "rma"})
    store.close()
    proc = gpuhealth("actuate", "--once", "--mode", "dry-run", "--target", "sim", "--db", url)
    assert proc.returncode == 0, proc.stderr
    assert "sim, dry-run: 2 nodes, 1 step(s)" in proc.stdout and "node-b" in proc.stdout
    assert "GPU 1 rma: row remap failure" in proc.stdout
    store = Store.open(url)
    try:
        (row,), total = store.actuation.actions()
        assert (total, row["hostname"], row["result"], row["mode"]) == (1, "node-b", "planned", "dry-run")
    finally:
        store.close()


@pytest.mark.parametrize(
    ("args", "env", "needle"),
    [
        (["actuate", "--once", "--mode", "maybe"], {}, "unknown --mode 'maybe': use dry-run or on"),
        (["actuate", "--once"], {}, "--actuate needs --actuate-target slurm, kubernetes or sim"),
        (["actuate", "--once", "--target", "nomad"], {}, "unknown --actuate-target 'nomad'"),
        (["actuate", "--once", "--target", "sim"], {"GPUHEALTH_BREAKER_MAX_NODES": "0"}, "breaker max nodes"),
        (["actuate", "--once", "--target", "sim"], {"GPUHEALTH_ACTUATE_SETTLE": "soon"}, "invalid actuator setting"),
    ],
)
def test_wrong_settings_are_one_line_errors(tmp_path: Path, args: list[str], env: dict[str, str], needle: str) -> None:
    proc = gpuhealth(*args, "--db", f"sqlite:///{tmp_path / 'e.db'}", env=env)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert len(lines) == 1 and needle in lines[0], proc.stderr


def test_the_health_check_says_why_it_cannot_ask(tmp_path: Path) -> None:
    proc = gpuhealth("slurm-healthcheck", "--service-url", "http://127.0.0.1:9", "--node", "gh-node-1")
    assert proc.returncode == 2 and "slurm-healthcheck:" in proc.stderr and "Traceback" not in proc.stderr
